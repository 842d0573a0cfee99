"""``memwarden``: run the daemon, check its config, and work with a store.

Data commands print human-readable tables by default and JSON with ``--json``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from memwarden import __version__
from memwarden.errors import ConfigError, MemwardenError, NotFoundError, ValidationInputError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from memwarden.memory import Block
    from memwarden.memory._store import Store

app = typer.Typer(
    name="memwarden",
    help="Keeps an AI agent's memory true: knowledge blocks checked by sensors.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Work with the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")

out = Console()
err = Console(stderr=True)

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML configuration file.", exists=False)
]
DbOpt = Annotated[
    Path | None,
    typer.Option(
        "--db", help="The SQLite database (default: <home>/memwarden.db).", envvar="MEMWARDEN_DB"
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def main() -> None:
    """Entry point of the console script."""
    app()


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        out.print(f"memwarden {__version__}")
        raise typer.Exit


# ---------------------------------------------------------------------- daemon


@app.command()
def run(config: ConfigOpt = None) -> None:
    """Run the daemon in the foreground (stop with SIGTERM or Ctrl-C)."""
    from memwarden.daemon import Daemon, configure_logging, load_settings  # noqa: PLC0415

    try:
        settings = load_settings(config)
    except ConfigError as e:
        for problem in e.problems:
            err.print(problem, highlight=False, soft_wrap=True)
        raise _fail(str(e)) from None
    configure_logging(settings.log_level, settings.log_format)
    daemon = Daemon(settings, config_file=config, install_signal_handlers=True)
    try:
        asyncio.run(daemon.run())
    except* MemwardenError as group:
        for failure in group.exceptions:
            err.print(f"[red]error:[/red] {failure}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


@config_app.command("check")
def config_check(
    file: Annotated[Path, typer.Argument(help="The TOML file to check.")],
) -> None:
    """Check a configuration file; print every problem with its path."""
    from memwarden.daemon import load_settings  # noqa: PLC0415
    from memwarden.plugins import Registry  # noqa: PLC0415

    try:
        settings = load_settings(file)
    except ConfigError as e:
        for problem in e.problems:
            out.print(problem, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    registry = Registry.from_entry_points(allow=settings.plugin_allowlist)
    problems = []
    for name, conf in settings.sensors.items():
        kind = conf.kind or name
        try:
            info = registry.get(kind)
        except MemwardenError as e:
            problems.append(f"sensors.{name}.kind: {e}")
            continue
        from pydantic import ValidationError  # noqa: PLC0415

        try:
            info.cls.Config.model_validate(conf.options)
        except ValidationError as e:
            for item in e.errors():
                loc = ".".join(str(p) for p in item["loc"])
                msg = "unknown setting" if item["type"] == "extra_forbidden" else item["msg"]
                problems.append(f"sensors.{name}.{loc}: {msg}")
    if problems:
        for problem in problems:
            out.print(problem, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    out.print(f"{file}: ok ({len(settings.sensors)} sensor(s))", highlight=False)


@app.command()
def sensors(json_out: JsonOpt = False) -> None:
    """List the sensor plugins installed, with their distribution and version."""
    from memwarden.daemon import load_settings  # noqa: PLC0415
    from memwarden.plugins import Registry  # noqa: PLC0415

    try:
        allow = load_settings().plugin_allowlist
    except ConfigError:
        allow = None
    registry = Registry.from_entry_points(allow=allow)
    rows = [
        {
            "kind": p.kind,
            "distribution": p.distribution,
            "version": p.version,
            "entry_point": p.entry_point,
            "status": "ok",
        }
        for p in registry.plugins.values()
    ] + [
        {"kind": k, "distribution": "", "version": "", "entry_point": "", "status": str(e)}
        for k, e in registry.failures.items()
    ]
    if json_out:
        _print_json(rows)
        return
    table = Table("kind", "distribution", "version", "status")
    for r in rows:
        table.add_row(r["kind"], r["distribution"], r["version"], r["status"])
    out.print(table)


# ---------------------------------------------------------------------- store commands


def _db_path(db: Path | None) -> Path:
    if db is not None:
        return db
    from memwarden.daemon import load_settings  # noqa: PLC0415

    try:
        return load_settings().db_path
    except ConfigError as e:
        raise _fail(str(e)) from None


def _with_store(db: Path | None, fn: Callable[[Store], Awaitable[Any]]) -> Any:
    from memwarden.daemon import configure_logging  # noqa: PLC0415
    from memwarden.memory._store import Store  # noqa: PLC0415

    configure_logging("warning", "console", stream=sys.stderr)

    async def go() -> Any:
        async with Store(_db_path(db)) as store:
            return await fn(store)

    try:
        return asyncio.run(go())
    except ValidationInputError as e:
        for field, message in e.errors:
            err.print(f"{field or 'input'}: {message}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except NotFoundError as e:
        raise _fail(str(e)) from None
    except MemwardenError as e:
        raise _fail(str(e)) from None


def _age(when: datetime | None) -> str:
    if when is None:
        return "never"
    seconds = (datetime.now(UTC) - when).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _block_table(blocks: list[Block]) -> Table:
    table = Table("id", "state", "r", "validated", "title / content")
    for b in blocks:
        text = b.title or b.content
        table.add_row(
            b.id[:13],
            b.state.value,
            f"{b.validation.reliability:.2f}",
            _age(b.validation.validated_at),
            text[:80],
        )
    return table


@app.command()
def add(
    content: Annotated[str, typer.Argument(help="The fact to remember.")],
    title: Annotated[str, typer.Option(help="A short title.")] = "",
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="A tag (repeat).")] = None,
    info_type: Annotated[
        str | None, typer.Option(help="static|semi_static|dynamic|ephemeral")
    ] = None,
    volatility: Annotated[str | None, typer.Option(help="low|medium|high|ephemeral")] = None,
    reliability: Annotated[float | None, typer.Option(help="Initial reliability 0..1.")] = None,
    source: Annotated[str, typer.Option(help="Who asserts it (agent, user, ...).")] = "agent",
    bind: Annotated[
        list[str] | None,
        typer.Option("--bind", "-b", help='A binding as JSON: \'{"sensor":"fs","path":"a.yaml"}\''),
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Store a block."""
    payload: dict[str, Any] = {
        "content": content,
        "title": title,
        "tags": tag or [],
        "source": source,
    }
    optional = {"info_type": info_type, "volatility": volatility, "reliability": reliability}
    payload.update({k: v for k, v in optional.items() if v is not None})
    try:
        payload["bindings"] = [json.loads(b) for b in bind or []]
    except json.JSONDecodeError as e:
        raise _fail(f"--bind: not JSON: {e}", 2) from None
    block = _with_store(db, lambda s: s.add(payload, actor="cli"))
    if json_out:
        _print_json(block.model_dump(mode="json"))
    else:
        out.print(
            f"added {block.id} ({block.state.value}, reliability "
            f"{block.validation.reliability:.2f})",
            highlight=False,
        )


@app.command()
def get(
    block_id: Annotated[str, typer.Argument(help="The block id.")],
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one block."""
    block = _with_store(db, lambda s: s.get(block_id))
    if json_out:
        _print_json(block.model_dump(mode="json"))
        return
    v = block.validation
    out.print(f"[bold]{block.title or block.id}[/bold]", highlight=False)
    out.print(block.content, highlight=False, soft_wrap=True)
    out.print(
        f"state {block.state.value}"
        + (f" ({', '.join(r.value for r in block.stale_reasons)})" if block.stale_reasons else "")
        + f" · reliability {v.reliability:.2f} · validated {_age(v.validated_at)}"
        + (f" by {v.validated_by}" if v.validated_by else "")
        + f" · {block.info_type.value}/{block.volatility.value} · {block.tier.value}",
        highlight=False,
    )
    for b in block.bindings:
        out.print(f"  bound to {b.sensor}: {b.subject}", highlight=False)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to look for.")],
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
    refuted: Annotated[bool, typer.Option("--refuted", help="Include refuted blocks.")] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Search, ranked by relevance x freshness x reliability x retention."""
    hits = _with_store(db, lambda s: s.search(query, limit=limit, include_refuted=refuted))
    if json_out:
        _print_json([h.as_dict() for h in hits])
        return
    if not hits:
        out.print("no results")
        return
    table = Table("score", "id", "state", "r", "text", "warnings")
    for h in hits:
        b = h.block
        table.add_row(
            f"{h.score:.3g}",
            b.id[:13],
            b.state.value,
            f"{b.validation.reliability:.2f}",
            (b.title or b.content)[:60],
            "; ".join(h.warnings),
        )
    out.print(table)


@app.command()
def stale(
    limit: Annotated[int, typer.Option(min=1, max=10000)] = 100,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What is stale now, and why."""
    blocks = _with_store(db, lambda s: s.list_blocks({"state": "stale", "limit": limit}))
    if json_out:
        _print_json(
            [
                {
                    "id": b.id,
                    "title": b.title,
                    "stale_reasons": [r.value for r in b.stale_reasons],
                    "stale_at": b.stale_at,
                    "reliability": b.validation.reliability,
                }
                for b in blocks
            ]
        )
        return
    if not blocks:
        out.print("nothing is stale")
        return
    out.print(_block_table(blocks))


@app.command()
def events(
    block_id: Annotated[str, typer.Argument(help="The block id.")],
    limit: Annotated[int, typer.Option(min=1, max=10000)] = 50,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """A block's validation history, newest first."""

    async def go(s: Store) -> Any:
        await s.get(block_id)  # a clear error for an unknown id
        return await s.events_for(block_id, limit=limit)

    records = _with_store(db, go)
    if json_out:
        _print_json([r.as_dict() for r in records])
        return
    if not records:
        out.print("no events yet")
        return
    table = Table("observed", "sensor", "outcome", "state", "reliability", "message")
    for r in records:
        d = r.as_dict()
        eff = d["effect"] or {}
        table.add_row(
            d["observed_at"][:19],
            r.sensor,
            r.outcome,
            " → ".join(eff.get("state", [])),
            " → ".join(f"{x:.2f}" for x in eff.get("reliability", [])),
            r.message[:60],
        )
    out.print(table)
