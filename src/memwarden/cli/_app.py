"""``memwarden``: run the daemon, check its config, and work with a store.

Data commands print human-readable tables by default and JSON with ``--json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table

from memwarden import __version__
from memwarden.cli._common import (
    DbOpt,
    JsonOpt,
    call,
    client,
    config_file,
    database_here,
    err,
    fail,
    id_table,
    out,
    print_json,
    privacy_for,
    target,
)
from memwarden.cli._forget import forget
from memwarden.cli._migrate import migrate
from memwarden.cli._review import open_console, review_app
from memwarden.errors import (
    AddressInUseError,
    ConfigError,
    MemwardenError,
    ValidationInputError,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from memwarden.client import AsyncClient, Endpoint
    from memwarden.memory import Binding, Block, Store

app = typer.Typer(
    name="memwarden",
    help="Keeps an AI agent's memory true: knowledge blocks checked by sensors.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Work with the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(review_app, name="review")
app.command("open")(open_console)
app.command()(forget)
app.command()(migrate)

# sysexits.h EX_CONFIG: a configuration error; the systemd unit does not restart on it.
EX_CONFIG = 78
# sysexits.h EX_TEMPFAIL: try again later (the API's address is in use by another process).
EX_TEMPFAIL = 75

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML configuration file.", exists=False)
]


def main() -> None:
    """Entry point of the console script."""
    app()


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
    home: Annotated[
        str | None,
        typer.Option(
            "--home",
            help="The daemon's state dir. Default: MEMWARDEN_HOME, else ./.memwarden here or "
            "in a parent directory, else the user state dir.",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="The daemon's URL (http://host:port or unix:/path); default: the state "
            "dir's api.json.",
            envvar="MEMWARDEN_URL",
        ),
    ] = None,
) -> None:
    target["home"] = home
    target["url"] = url
    if version:
        out.print(f"memwarden {__version__}")
        raise typer.Exit


# ---------------------------------------------------------------------- daemon


def _print_config_problems(file: Path) -> None:
    from memwarden.daemon import config_problems
    from memwarden.plugins import Registry

    _, problems = config_problems(file, lambda allow: Registry.from_entry_points(allow=allow))
    for problem in problems:
        err.print(problem, markup=False, highlight=False, soft_wrap=True)


@app.command()
def run(config: ConfigOpt = None) -> None:
    """Run the daemon in the foreground (stop with SIGTERM or Ctrl-C).

    The configuration is --config, else ./memwarden.toml (`memwarden init` writes one).
    The daemon works in its config file's directory: relative paths in the file (home,
    fs roots, project_root, the test command) are relative to that file.
    """
    from memwarden.daemon import Daemon, configure_logging, load_settings

    file = config_file(config)
    overrides: dict[str, Any] = {"home": Path(target["home"]).absolute()} if target["home"] else {}
    try:
        settings = load_settings(file, **overrides)
    except ConfigError as e:
        if file is not None and file.is_file():
            _print_config_problems(file)
        else:
            for problem in e.problems:
                err.print(problem, markup=False, highlight=False, soft_wrap=True)
        raise fail(str(e), EX_CONFIG) from None
    configure_logging(settings.log_level, settings.log_format, stream="stderr")
    if file is not None:
        file = file.absolute()
        os.chdir(file.parent)
        if not settings.home.is_absolute():  # shown in logs and status: say where it is
            settings = settings.model_copy(update={"home": file.parent / settings.home})
    daemon = Daemon(settings, config_file=file, install_signal_handlers=True)
    try:
        asyncio.run(daemon.run())
    except* MemwardenError as group:
        for failure in group.exceptions:
            err.print(f"[red]error:[/red] {escape(str(failure))}", highlight=False, soft_wrap=True)
        if all(isinstance(f, AddressInUseError) for f in group.exceptions):
            raise typer.Exit(EX_TEMPFAIL) from None
        config_only = all(isinstance(f, ConfigError) for f in group.exceptions)
        raise typer.Exit(EX_CONFIG if config_only else 1) from None


@app.command()
def mcp() -> None:
    """Serve MCP over stdio for agents (talks to the running daemon)."""
    from memwarden.mcp import run_stdio

    run_stdio(home=target["home"], url=target["url"])


# LSB's "program is not running" (what `systemctl status` answers for a stopped unit).
EX_NOT_RUNNING = 3


@app.command()
def status(json_out: JsonOpt = False) -> None:
    """Which daemon this directory talks to (state dir, URL) and whether it is up.

    Exits 0 when the daemon answers with this token, 3 when it is not running, 1 otherwise.
    """
    from memwarden.client import Client, DaemonNotRunningError, find_home

    home = find_home(target["home"])
    info: dict[str, Any] = {
        "home": str(home.path),
        "found_by": home.found_by,
        "url": None,
        "up": False,
        "version": None,
        "sensors": None,
        "search": None,
        "error": None,
    }
    code = 1
    try:
        with Client(target["url"], home=target["home"], timeout=5.0) as client:
            info["url"] = client.endpoint.shown or None
            info["sensors"] = [
                {"name": s["name"], "status": s.get("status")} for s in client.sensors()
            ]
            info["version"] = client.healthz().get("version")
            info["search"] = client.health().get("search")
            info["up"] = True
            code = 0
    except DaemonNotRunningError as e:
        info["error"] = str(e)
        code = EX_NOT_RUNNING
    except MemwardenError as e:  # a refused token, a daemon that answers oddly
        info["error"] = str(e)
    if json_out:
        print_json(info)
        raise typer.Exit(code)
    out.print(
        f"home     {info['home']} (found by {info['found_by']})", highlight=False, soft_wrap=True
    )
    out.print(f"url      {info['url'] or '-'}", highlight=False, soft_wrap=True)
    if info["up"]:
        running = [s["name"] for s in info["sensors"] or [] if s["status"] == "running"]
        out.print(
            f"daemon   up (memwarden {info['version']}); sensors running: "
            f"{', '.join(running) or 'none'}",
            highlight=False,
            soft_wrap=True,
        )
        search = info["search"]
        if search and search.get("embedder"):
            out.print(
                f"search   {search['embedder']}: {search['vectors']} vectors, "
                f"{search['embedding_backlog']} blocks waiting for one",
                highlight=False,
                soft_wrap=True,
            )
        elif search:
            out.print("search   keyword only (no embedder)", highlight=False, soft_wrap=True)
    else:
        out.print(f"daemon   down: {info['error']}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command()
def demo(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Run unattended, no pauses.")] = False,
    keep: Annotated[bool, typer.Option(help="Keep the throw-away workspace.")] = False,
) -> None:
    """A guided tour: facts refuted, going stale, revalidated and confirmed, live."""
    from memwarden.daemon import configure_logging
    from memwarden.demo import run_demo

    configure_logging("error", "console", stream=sys.stderr)
    raise typer.Exit(
        run_demo(unattended=yes, keep=keep, say=lambda line: out.print(line, highlight=False))
    )


@config_app.command("check")
def config_check(
    file: Annotated[
        Path | None,
        typer.Argument(help="The TOML file to check. Default: the one `run` would use."),
    ] = None,
) -> None:
    """Check a configuration file; print every problem with its path, in one pass."""
    from memwarden.daemon import config_problems, configure_logging
    from memwarden.plugins import Registry

    configure_logging("warning", "console", stream="stderr")  # stdout is the report
    path = config_file(file)
    if path is None:
        raise fail(
            "no memwarden.toml here: give a file (memwarden config check FILE) or write one "
            "with `memwarden init`"
        )
    path = path.absolute()
    with contextlib.chdir(path.parent):  # relative paths in it are relative to it, as in `run`
        settings, problems = config_problems(
            path, lambda allow: Registry.from_entry_points(allow=allow)
        )
    if problems or settings is None:  # no problems means it loaded
        for problem in problems or [f"{path}: the configuration did not load"]:
            out.print(problem, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    out.print(f"{path}: ok ({len(settings.sensors)} sensor(s))", highlight=False, soft_wrap=True)


@app.command()
def init(
    directory: Annotated[
        Path, typer.Argument(help="The project directory (default: here).")
    ] = Path(),
    python: Annotated[
        str | None,
        typer.Option(
            help="The project's Python for its tests (default: .venv/bin/python or "
            "venv/bin/python if there, else python3)."
        ),
    ] = None,
) -> None:
    """Write a commented memwarden.toml for a project (never overwrites one)."""
    from memwarden.cli._init import (
        CONFIG_NAME,
        detect_pytest,
        is_git_work_tree,
        render_config,
    )

    if not directory.is_dir():
        raise fail(f"{directory}: not a directory")
    target = directory / CONFIG_NAME
    if target.exists():
        raise fail(f"{target} exists; not overwriting it (edit it, or remove it first)")
    text = render_config(directory, python=python)
    try:
        with target.open("x", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        raise fail(f"{target}: {e.strerror or e}") from None
    project = detect_pytest(directory)
    sensors = (
        "fs, "
        + ("tests (code_test), " if project else "")
        + ("git, " if is_git_work_tree(directory) else "")
        + "http, review"
    )
    out.print(f"wrote {target}: sensors {sensors}", highlight=False, soft_wrap=True)
    out.print(
        "next: `memwarden run` in that directory (state in .memwarden/, keep it out of "
        "version control), then `memwarden status`",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def sensors(json_out: JsonOpt = False) -> None:
    """The sensor plugins installed, and which the daemon runs (or failed to start)."""
    from memwarden.daemon import configure_logging, load_settings
    from memwarden.plugins import PluginInfo, Registry

    configure_logging("error", "console", stream="stderr")  # failures are in the listing
    try:
        allow = load_settings().plugin_allowlist
    except ConfigError:
        allow = None
    registry = Registry.from_entry_points(allow=allow)
    listed = [(p, "ok") for p in registry.plugins.values()] + [
        (registry.failed_origins.get(k) or PluginInfo(k, type(None)), str(e))
        for k, e in registry.failures.items()
    ]

    async def ask() -> tuple[str, list[dict[str, Any]]] | None:
        try:
            async with client() as c:
                where = c.endpoint.uds or c.endpoint.url
                return where, await c.sensors()
        except MemwardenError:
            return None

    daemon = asyncio.run(ask())
    configured = daemon[1] if daemon else []
    rows: list[dict[str, Any]] = [
        {
            "kind": p.kind,
            "distribution": p.distribution,
            "version": p.version,
            "entry_point": p.entry_point,
            "status": status,
            "instances": [
                {k: c[k] for k in ("name", "status", "error") if k in c}
                for c in configured
                if (c.get("kind") or c["name"]) == p.kind
            ],
        }
        for p, status in listed
    ]
    kinds = {p.kind for p, _ in listed}
    orphans = [c for c in configured if (c.get("kind") or c["name"]) not in kinds]
    if json_out:
        print_json(rows)
        return
    table = Table("kind", "distribution", "version", "installed", "daemon runs it as")
    for r in rows:
        runs = ", ".join(_instance(i) for i in r["instances"])
        table.add_row(r["kind"], r["distribution"], r["version"], r["status"], runs or "-")
    for c in orphans:  # remote sensors, or configured kinds not installed here
        table.add_row(c.get("kind") or "?", "", "", "-", _instance(c))
    out.print(table)
    if daemon is None:
        out.print("daemon: not running (or not found): only installed plugins are shown")
        return
    running = sum(1 for c in configured if c.get("status") == "running")
    out.print(
        f"daemon at {daemon[0]}: {running} of {len(configured)} configured sensor(s) running"
        " (GET /v1/sensors or MCP memory_sensors: what a binding to each may name)",
        highlight=False,
        soft_wrap=True,
    )


def _instance(row: dict[str, Any]) -> str:
    status = row.get("status", "?")
    error = f": {row['error']}" if row.get("error") else ""
    return f"{row['name']} ({status}{error})"


# ---------------------------------------------------------------------- store commands


def _age(when: datetime | None) -> str:
    if when is None:
        return "never"
    seconds = (datetime.now(UTC) - when).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _block_table(blocks: list[Block]) -> Table:
    table = id_table(
        [b.short_id or b.id for b in blocks], "state", "r", "validated", "title / content"
    )
    for b in blocks:
        text = b.title or b.content
        table.add_row(
            b.short_id or b.id,
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
    dedupe: Annotated[
        bool,
        typer.Option(
            "--dedupe/--no-dedupe",
            help="Return the live block that already says this (casefolded, whitespace "
            "collapsed) instead of storing it twice.",
        ),
    ] = True,
    auto_bind: Annotated[
        bool,
        typer.Option(
            "--auto-bind",
            help="Bind it to the best binding the daemon finds whose check confirms it now "
            "([suggest] auto_min_confidence; docs/SUGGESTIONS.md).",
        ),
    ] = False,
    suggest_: Annotated[
        bool,
        typer.Option("--suggest", help="Store it unbound and print the bindings found."),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the id: id=$(memwarden add ... -q)")
    ] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Store a block (--auto-bind: and let memwarden find its binding)."""
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
        raise fail(f"--bind: not JSON: {e}", 2) from None
    mode = _bind_mode(auto_bind=auto_bind, suggest=suggest_, db=db, bindings=bool(bind))
    if mode is not None:
        _add_and_bind(payload, mode, dedupe=dedupe, quiet=quiet, json_out=json_out)
        return

    async def local(s: Store) -> Block:
        from memwarden.memory import NewBlock, validate_input

        # The door the API's add passes (source agent), with the daemon's policy and key.
        block = await privacy_for(db).new_block(validate_input(NewBlock, payload), "agent")
        return await s.add(block, actor="cli", dedupe=dedupe)

    block = call(
        db,
        api=lambda c: c.add(payload, dedupe=dedupe),
        local=local,
        create=True,  # the first fact may start a database file
    )
    if json_out:
        print_json(block.model_dump(mode="json"))
    elif quiet:
        sys.stdout.write(f"{block.short_id or block.id}\n")
    elif block.duplicate_of is not None:
        out.print(
            f"already stored as {block.short_id or block.id} ({block.state.value}, "
            f"reliability {block.validation.reliability:.2f}); nothing added "
            "(--no-dedupe stores it again)",
            highlight=False,
        )
    else:
        out.print(
            f"added {block.short_id or block.id} ({block.state.value}, reliability "
            f"{block.validation.reliability:.2f})",
            highlight=False,
        )


def _bind_mode(
    *, auto_bind: bool, suggest: bool, db: str | None, bindings: bool
) -> Literal["auto", "suggest"] | None:
    if not (auto_bind or suggest):
        return None
    if auto_bind and suggest:
        raise fail("--auto-bind and --suggest: choose one", 2)
    flag = "--auto-bind" if auto_bind else "--suggest"
    if bindings:
        raise fail(f"{flag} and --bind: give a binding or let memwarden find one, not both", 2)
    if db is not None:
        raise fail(f"{flag} needs the running daemon (its sensors find the binding), not --db", 2)
    return "auto" if auto_bind else "suggest"


def _add_and_bind(
    payload: dict[str, Any],
    mode: Literal["auto", "suggest"],
    *,
    dedupe: bool,
    quiet: bool,
    json_out: bool,
) -> None:
    async def local(_: Store) -> Any:  # not reached: _bind_mode refuses --db
        raise MemwardenError("binding suggestions need the running daemon")

    added = call(None, api=lambda c: c.add_with_bind(payload, mode, dedupe=dedupe), local=local)
    block, found = added["block"], added["bind"]
    if json_out:
        print_json({**block.model_dump(mode="json"), "bind": found})
        return
    shown = block.short_id or block.id
    if quiet:
        sys.stdout.write(f"{shown}\n")
        return
    if block.duplicate_of is not None:
        out.print(f"already stored as {shown}; nothing added or bound", highlight=False)
        return
    out.print(
        f"added {shown} ({block.state.value}, reliability {block.validation.reliability:.2f})",
        highlight=False,
    )
    if found is None:
        return
    chosen = found["chosen"]
    if chosen is not None:
        out.print(
            f"bound: {escape(json.dumps(chosen['binding']))}", highlight=False, soft_wrap=True
        )
    out.print(escape(found["why"]), highlight=False, soft_wrap=True)
    _print_suggestions([] if chosen is not None else found["suggestions"], found["contradicts"])


@app.command()
def get(
    block_id: Annotated[str, typer.Argument(help="The block id.")],
    db: DbOpt = None,
    json_out: JsonOpt = False,
    max_age: Annotated[
        str | None, typer.Option("--max-age", help="Re-check first if validated longer ago: 30s.")
    ] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Check it now if quick.")] = False,
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", help="What was believed then (ISO 8601, e.g. 2026-11-23T22:00Z)."),
    ] = None,
) -> None:
    """Show one block, with its verdict (verified, checking, stale, unreachable, ...)."""
    if as_of is not None:
        _believed(block_id, as_of, db=db, json_out=json_out)
        return
    receipt: dict[str, Any] = {}
    reached: list[Endpoint] = []  # the daemon's address, for the block's console URL

    async def read(c: AsyncClient) -> Block:
        from memwarden.memory import Block

        reached.append(c.endpoint)
        data = dict(await c.read(block_id, max_age=max_age, fresh=fresh))
        receipt.update(data.pop("receipt", None) or {})
        return Block.model_validate(data)

    async def local(s: Store) -> Block:
        return await s.get(await s.resolve_id(block_id))

    block = call(db, api=read, local=local)
    if json_out:
        print_json({**block.model_dump(mode="json"), **({"receipt": receipt} if receipt else {})})
        return
    if receipt:
        why = f" ({receipt['why']})" if receipt.get("why") else ""
        now = " · checked now" if receipt.get("checked_now") else ""
        out.print(f"[bold]{receipt['verdict'].upper()}[/bold]{why}{now}", highlight=False)
    v = block.validation
    out.print(f"[bold]{block.title or block.id}[/bold]  {block.id}", highlight=False)
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
        out.print(f"  bound to {b.sensor}: {b.subject}{_served(b)}", highlight=False)
    page = reached[0].console_url(block.id) if reached else None
    if page:
        out.print(
            f"console: {page}  (sign in: memwarden open {block.id})",
            highlight=False,
            soft_wrap=True,
        )


def _believed(block_id: str, as_of: str, *, db: str | None, json_out: bool) -> None:
    reached: list[Endpoint] = []  # the daemon's address, for the block's console URL

    async def api(c: AsyncClient) -> Mapping[str, Any]:
        reached.append(c.endpoint)
        return await c.believed_at(block_id, as_of)

    async def local(s: Store) -> dict[str, Any]:
        from datetime import datetime

        from memwarden.memory import to_ts

        try:
            at = to_ts(datetime.fromisoformat(as_of.strip()))
        except ValueError:
            raise ValidationInputError(
                [("as_of", f"{as_of!r} is not an ISO 8601 time, e.g. 2026-11-23T22:00:00Z")]
            ) from None
        return await s.believed_at(await s.resolve_id(block_id), at)

    then = call(db, api=api, local=local)
    if json_out:
        print_json(then)
        return
    out.print(f"as of {then['as_of']} (version {then['version']})", highlight=False)
    out.print(then["content"], highlight=False, soft_wrap=True)
    by = f" by {then['validated_by']}" if then.get("validated_by") else ""
    out.print(
        f"state {then['state']} · reliability {then['reliability']:.2f}"
        f" · validated {then.get('validated_at') or 'never'}{by}",
        highlight=False,
    )
    ev = then.get("last_evidence")
    if ev:
        out.print(
            f"last evidence: {ev['outcome']} by {ev['sensor']}, observed {ev['observed_at']},"
            f" committed {ev['committed_at']}",
            highlight=False,
        )
    page = reached[0].console_url(then["block_id"]) if reached else None
    if page:
        out.print(
            f"console: {page}  (sign in: memwarden open {then['block_id']})",
            highlight=False,
            soft_wrap=True,
        )


class SearchModeOpt(enum.StrEnum):
    """``memwarden search --mode``."""

    keyword = "keyword"
    vector = "vector"
    hybrid = "hybrid"


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to look for.")],
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
    refuted: Annotated[bool, typer.Option("--refuted", help="Include refuted blocks.")] = False,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Revalidate stale results before answering.")
    ] = False,
    session: Annotated[str | None, typer.Option(help="Session id (feeds promotion).")] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    max_age: Annotated[
        str | None,
        typer.Option("--max-age", help="Re-check results validated longer ago (30s) if quick."),
    ] = None,
    mode: Annotated[
        SearchModeOpt | None,
        typer.Option(
            "--mode",
            help="keyword, vector or hybrid (default: hybrid when the daemon has an "
            "embedder, else keyword; with --db: keyword only).",
        ),
    ] = None,
) -> None:
    """Search, ranked by relevance x freshness x reliability x retention."""

    async def local(s: Store) -> Any:
        hits = await s.search(
            query,
            limit=limit,
            include_refuted=refuted,
            mode=mode.value if mode is not None else None,
        )
        results = [h.as_dict() for h in hits]
        short = await s.short_ids([h.block.id for h in hits])
        for r in results:
            r["block"]["short_id"] = short.get(r["block"]["id"])
        return {
            "query": query,
            "results": results,
            "checked": [],
            "timed_out": [],
        }

    reached: list[Endpoint] = []  # the daemon's address, for the console URLs

    async def api(c: AsyncClient) -> Any:
        reached.append(c.endpoint)
        return await c.search(
            query,
            limit=limit,
            fresh=fresh,
            session=session,
            include_refuted=refuted,
            max_age=max_age,
            mode=mode.value if mode is not None else None,
        )

    answer = call(db, api=api, local=local)
    if json_out:
        print_json(answer)
        return
    hidden = answer.get("hidden_refuted", 0)
    hidden_line = f"{hidden} refuted fact{'s' if hidden != 1 else ''} hidden (--refuted to show)"
    if not answer["results"]:
        out.print("no results" + (f"; {hidden_line}" if hidden else ""), highlight=False)
        return
    table = id_table(
        [h["block"].get("short_id") or h["block"]["id"] for h in answer["results"]],
        "score",
        "state",
        "r",
        "text",
        "warnings",
    )
    for h in answer["results"]:
        b = h["block"]
        table.add_row(
            b.get("short_id") or b["id"],
            f"{h['score']:.3g}",
            (h.get("receipt") or {}).get("verdict", b["state"]),
            f"{b['validation']['reliability']:.2f}",
            (b["title"] or b["content"])[:60],
            "; ".join(h["warnings"]),
        )
    out.print(table)
    pages = [
        (b.get("short_id") or b["id"], reached[0].console_url(b["id"]) if reached else None)
        for b in (h["block"] for h in answer["results"])
    ]
    if any(url for _, url in pages):
        out.print("console (sign in: memwarden open ID):", highlight=False)
        for shown, url in pages:
            if url:
                out.print(f"  {shown}  {url}", highlight=False, soft_wrap=True)
    if hidden:
        out.print(hidden_line, highlight=False)
    if answer["checked"] or answer["timed_out"]:
        out.print(
            f"checked now: {len(answer['checked'])}, no answer in time: {len(answer['timed_out'])}",
            highlight=False,
        )


@app.command()
def reembed(db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Queue every block for a new vector (after changing [search] embedder); the
    daemon's embedding task works through them in the background."""

    async def local(s: Store) -> Any:
        return {"queued": await s.reembed(), "embedder": None}

    answer = call(db, api=lambda c: c.reembed(), local=local)
    if json_out:
        print_json(answer)
        return
    model = answer.get("embedder") or "the embedder the daemon runs with next"
    out.print(f"{answer['queued']} blocks queued for {model}", highlight=False)


@app.command("list")
def list_blocks(
    state: Annotated[
        str | None, typer.Option(help="fresh|unverified|stale|refuted|archived")
    ] = None,
    tag: Annotated[str | None, typer.Option("--tag", "-t", help="Blocks with this tag.")] = None,
    sensor: Annotated[str | None, typer.Option(help="Blocks bound to this sensor.")] = None,
    tier: Annotated[str | None, typer.Option(help="short_term|long_term|core")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Blocks per page.")] = 50,
    after: Annotated[
        str | None, typer.Option(help="Start after this id (the 'next page' hint).")
    ] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="Every page, not just one.")] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List blocks (oldest first), filtered by state, tag, sensor or tier, a page at a time."""
    filters: dict[str, Any] = {"state": state, "tag": tag, "sensor": sensor, "tier": tier}

    async def local(s: Store) -> Any:
        flt = {k: v for k, v in filters.items() if v is not None}
        return await _pages(lambda cursor: s.list_blocks({**flt, "after": cursor, "limit": limit}))

    async def api(c: AsyncClient) -> Any:
        async def page(cursor: str | None) -> list[Block]:
            data = await c.list_blocks(**filters, after=cursor, limit=limit)
            blocks: list[Block] = data["blocks"]
            return blocks

        return await _pages(page)

    async def _pages(fetch: Callable[[str | None], Awaitable[list[Block]]]) -> Any:
        cursor = after
        shown: list[Block] = []
        while True:
            page = await fetch(cursor)
            shown.extend(page)
            cursor = page[-1].id if len(page) == limit else None
            if cursor is None or not all_pages:
                return shown, cursor

    blocks, more = call(db, api=api, local=local)
    if json_out:
        print_json({"blocks": [b.model_dump(mode="json") for b in blocks], "next": more})
        return
    if not blocks:
        out.print("no blocks" + (" match" if any(filters.values()) else ""))
        return
    out.print(_block_table(blocks))
    if more:
        out.print(f"more: memwarden list --after {more} (or --all)", highlight=False)


@app.command()
def stale(
    limit: Annotated[int, typer.Option(min=1, max=10000)] = 100,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What is stale now, and why."""
    blocks = call(
        db,
        api=lambda c: c.stale(limit),
        local=lambda s: s.list_blocks({"state": "stale", "limit": limit}),
    )
    if json_out:
        print_json(
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

    async def local(s: Store) -> Any:
        full = await s.resolve_id(block_id)  # a clear error for an unknown id
        return [r.as_dict() for r in await s.events_for(full, limit=limit)]

    records = call(db, api=lambda c: c.events(block_id, limit), local=local)
    if json_out:
        print_json(records)
        return
    if not records:
        out.print("no events yet")
        return
    table = Table("observed", "sensor", "outcome", "state", "reliability", "message")
    for d in records:
        eff = d["effect"] or {}
        table.add_row(
            d["observed_at"][:19],
            d["sensor"],
            d["outcome"]
            + (
                f" x{d['run']['count']} since {d['run']['first_observed_at'][:19]}"
                if d.get("run")
                else ""
            ),
            " → ".join(eff.get("state", [])),
            " → ".join(f"{x:.2f}" for x in eff.get("reliability", [])),
            d["message"][:60],
        )
    out.print(table)


@app.command()
def explain(
    block_id: Annotated[str, typer.Argument(help="The block id.")],
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Why a block has its state, reliability, retention and rank."""

    async def local(s: Store) -> Any:
        return await s.explain(await s.resolve_id(block_id))

    data = call(db, api=lambda c: c.explain(block_id), local=local)
    if json_out:
        print_json(data)
        return
    out.print_json(json.dumps(data, default=str))


@app.command()
def suggest(
    block_id: Annotated[str, typer.Argument(help="The block id.")],
    limit: Annotated[int, typer.Option(min=1, max=50, help="At most this many.")] = 5,
    json_out: JsonOpt = False,
) -> None:
    """Bindings that could check a block, found in the sensors' files and dry-run now
    (needs the daemon); bind one with `memwarden bind ID --binding '{json}'`, or the best
    one with `memwarden bind ID --auto`."""

    async def api(c: AsyncClient) -> Any:
        block = await c.get(block_id)
        return await c.suggest_bindings(block.content, title=block.title, limit=limit)

    async def local(_: Store) -> Any:
        raise MemwardenError("suggest needs the running daemon: its fs sensors hold the index")

    data = call(None, api=api, local=local)
    if json_out:
        print_json(data)
        return
    _print_suggestions(data["suggestions"], data["contradicts"])
    if not data["suggestions"] and not data["contradicts"]:
        out.print("no binding found (docs/SUGGESTIONS.md says what is matched)")


@app.command()
def bind(
    block_id: Annotated[str, typer.Argument(help="The block id.")],
    auto: Annotated[
        bool,
        typer.Option(
            "--auto",
            help="Bind it to the best suggestion whose check confirms it now "
            "([suggest] auto_min_confidence; docs/SUGGESTIONS.md).",
        ),
    ] = False,
    binding: Annotated[
        list[str] | None,
        typer.Option(
            "--binding",
            "-b",
            help="Its bindings instead of the ones it has, as JSON (repeat): "
            '\'{"sensor":"fs","path":"a.yaml","key":"/k","equals":1}\'',
        ),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove every binding.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Bind a stored block: --auto (memwarden finds the binding), --binding (replace its
    bindings with these) or --clear. It is unverified until its sensor checks it."""
    flags = (("--auto", auto), ("--binding", bool(binding)), ("--clear", clear))
    given = [name for name, on in flags if on]
    if len(given) != 1:
        raise fail("give one of --auto, --binding or --clear", 2)
    bindings: list[Any] = []
    for i, text in enumerate(binding or []):
        try:
            bindings.append(json.loads(text))
        except json.JSONDecodeError as e:
            raise fail(f"--binding {i + 1}: not JSON: {e}", 2) from None

    async def local(_: Store) -> Any:
        raise MemwardenError("bind needs the running daemon: its sensors check the binding")

    if auto:
        added = call(None, api=lambda c: c.auto_bind(block_id), local=local)
        block, found = added["block"], added["bind"]
        if json_out:
            print_json({**block.model_dump(mode="json"), "bind": found})
            return
        if found is not None and found["chosen"] is not None:
            out.print(
                f"bound {block.short_id or block.id}: "
                f"{escape(json.dumps(found['chosen']['binding']))}",
                highlight=False,
                soft_wrap=True,
            )
        if found is not None:
            out.print(escape(found["why"]), highlight=False, soft_wrap=True)
            if found["chosen"] is None:
                _print_suggestions(found["suggestions"], found["contradicts"])
        return
    block = call(None, api=lambda c: c.bind(block_id, bindings), local=local)
    if json_out:
        print_json(block.model_dump(mode="json"))
        return
    shown = block.short_id or block.id
    if not block.bindings:
        out.print(f"{shown}: no bindings ({block.state.value})", highlight=False)
    for b in block.bindings:
        shown_binding = escape(json.dumps(b.model_dump(mode="json")))
        out.print(f"bound {shown}: {shown_binding}", highlight=False, soft_wrap=True)
    if block.bindings and block.state.value == "unverified":
        out.print("unverified until its sensor checks it", highlight=False)


def _served(binding: Binding) -> str:
    """`` · nodes a, b · served by a`` (docs/SCALE.md), when the store says."""
    if binding.nodes is None:
        return ""
    return f" · nodes {', '.join(binding.nodes)} · served by {binding.served_by or 'none'}"


def _print_suggestions(
    suggestions: Sequence[Mapping[str, Any]], contradicts: Sequence[Mapping[str, Any]]
) -> None:
    """Each binding found (confidence first) and each contradiction, with why."""
    for s in suggestions:
        out.print(
            f"{s['confidence']:.2f}  {escape(json.dumps(s['binding']))}",
            highlight=False,
            soft_wrap=True,
        )
        out.print(f"      {escape(s['why'])}", highlight=False, soft_wrap=True)
    for s in contradicts:
        out.print(
            f"contradicted  {escape(json.dumps(s['binding']))}", highlight=False, soft_wrap=True
        )
        out.print(f"      {escape(s['why'])}", highlight=False, soft_wrap=True)


@app.command()
def revalidate(
    block_id: Annotated[str, typer.Argument(help="The block id.")],
    wait: Annotated[str, typer.Option(help="Wait this long for the outcome (2s, 1m).")] = "5s",
    json_out: JsonOpt = False,
) -> None:
    """Ask a block's sensors to check it now (needs the daemon)."""

    async def local(_: Store) -> Any:
        raise MemwardenError("revalidate needs the running daemon: its sensors do the checking")

    data = call(None, api=lambda c: c.revalidate(block_id, wait=wait), local=local)
    if json_out:
        print_json(data)
        return
    block = data["block"]
    out.print(
        f"requested {len(data['requested'])}, answered {len(data['answered'])}, "
        f"no answer in time {len(data['timed_out'])}; now {block['state']} "
        f"(reliability {block['validation']['reliability']:.2f})",
        highlight=False,
    )


@app.command()
def health(json_out: JsonOpt = False) -> None:
    """The daemon's 0-100 health score and its warnings."""

    async def local(_: Store) -> Any:
        raise MemwardenError("health needs the running daemon")

    data = call(None, api=lambda c: c.health(), local=local)
    if json_out:
        print_json(data)
        return
    out.print(f"health {data.get('score', '?')}/100 ({data.get('status', '?')})", highlight=False)
    for w in data.get("warnings", []):
        out.print(f"  [{w['severity']}] {w['category']}: {w['message']}", highlight=False)
    counts = data.get("counts", {})
    out.print(f"{counts.get('blocks', 0)} blocks: {counts.get('by_state', {})}", highlight=False)
    coverage = data.get("coverage")
    if coverage is not None:
        out.print(_coverage_line("checkable", coverage), highlight=False, markup=False)
        for by in ("by_source", "by_tier"):
            parts = [_coverage_line(k, v, short=True) for k, v in coverage[by].items()]
            if parts:
                out.print(f"  {by.replace('_', ' ')}: {', '.join(parts)}", markup=False)
    for q in data.get("quarantined_bindings", []):
        out.print(
            f"  quarantined: {q['sensor']} binding of block {q['block_id']}: {q['rule']}",
            highlight=False,
            markup=False,
        )


def _coverage_line(name: str, part: Mapping[str, Any], *, short: bool = False) -> str:
    """``checkable 60% (3 of 5 live facts have a binding whose sensor runs)``."""
    share = "-" if part["share"] is None else f"{part['share']:.0%}"
    if short:
        return f"{name} {share} ({part['checkable']}/{part['live']})"
    return (
        f"{name} {share} ({part['checkable']} of {part['live']} live facts have a binding "
        "whose sensor runs)"
    )


@app.command()
def tail(
    since: Annotated[
        int | None, typer.Option(help="Start after this event seq (0: from the start).")
    ] = None,
    count: Annotated[int, typer.Option(help="Stop after this many events (0: follow).")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Follow validation events live, as sensors report them."""

    from memwarden.client import DaemonNotRunningError

    async def api(c: AsyncClient) -> int:
        after = since or 0
        if since is None:  # from now: skip what is already in the log
            latest = await c.follow(0, wait="0s", limit=1000)
            while len(latest) == 1000:
                latest = await c.follow(latest[-1]["seq"], wait="0s", limit=1000)
            after = latest[-1]["seq"] if latest else 0
        shown = 0
        while True:
            try:
                batch = await c.follow(after, wait="10s")
            except DaemonNotRunningError:  # it stopped while we followed: the end of the stream
                err.print("the daemon stopped: end of the event stream", highlight=False)
                return shown
            for ev in batch:
                after = ev["seq"]
                shown += 1
                if json_out:
                    sys.stdout.write(json.dumps(ev) + "\n")
                    sys.stdout.flush()
                else:
                    changes = (
                        ", ".join(
                            f"{e.get('short_id') or e['block_id'] or '?'} "
                            f"{e['state'][0]}→{e['state'][1]}"
                            for e in ev["effects"]
                        )
                        or "no block"
                    )
                    out.print(
                        f"{ev['observed_at'][:19]} {ev['sensor']:<10} {ev['outcome']:<9} "
                        f"{ev['subject'][:40]:<40} {changes}",
                        highlight=False,
                    )
                if count and shown >= count:
                    return shown

    async def local(_: Store) -> int:
        raise MemwardenError("tail follows the running daemon")

    with contextlib.suppress(KeyboardInterrupt):
        call(None, api=api, local=local)


_IMPORT_BATCH_BYTES = 512 * 1024  # under the API's default body limit (1 MiB)


@app.command("export")
def export_blocks(
    file: Annotated[Path, typer.Argument(help="JSONL file to write ('-' for stdout).")],
    db: DbOpt = None,
) -> None:
    """Export every block, whole: ids, bindings, state, validation and history.

    Works against the running daemon (or a database file with --db); `import` reads the
    file back, here or into another memwarden.
    """

    async def pages(fetch: Callable[[str | None], Awaitable[list[dict[str, Any]]]]) -> Any:
        rows: list[dict[str, Any]] = []
        after = None
        while True:
            page = await fetch(after)
            rows.extend(page)
            if not page:
                return rows
            after = page[-1]["id"]

    async def local(s: Store) -> Any:
        return await pages(lambda after: s.export_blocks(after=after, limit=500))

    async def api(c: AsyncClient) -> Any:
        return await pages(lambda after: c.export(after=after, limit=200))

    rows = call(db, api=api, local=local)
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    if str(file) == "-":
        sys.stdout.write(text)
        return
    try:
        file.write_text(text, encoding="utf-8")
    except OSError as e:
        raise fail(f"{file}: cannot write: {e.strerror or e}") from None
    err.print(f"exported {len(rows)} block(s) to {file}", highlight=False, soft_wrap=True)


def _read_jsonl(file: Path) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"{file}: no such file") from None
    except IsADirectoryError:
        raise fail(f"{file}: is a directory, not a JSONL file") from None
    except UnicodeDecodeError:
        raise fail(f"{file}: not UTF-8 text (a JSONL file, as `export` writes)", 2) from None
    except OSError as e:
        raise fail(f"{file}: cannot read: {e.strerror or e}") from None
    rows: list[dict[str, Any]] = []
    # Lines end at "\n" only: str.splitlines() would also cut at U+2028, U+0085, a form
    # feed ... which JSON strings may hold unescaped (export writes ensure_ascii=False).
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise fail(f"{file}:{n}: not JSON: {e}", 2) from None
        if not isinstance(row, dict):
            raise fail(f"{file}:{n}: not a JSON object (one block per line)", 2)
        rows.append(row)
    return rows


def _batches(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = [[]]
    size = 0
    for row in rows:
        n = len(json.dumps(row, ensure_ascii=False).encode())
        if out[-1] and size + n > _IMPORT_BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(row)
        size += n
    return [b for b in out if b]


@app.command("import")
def import_blocks(
    file: Annotated[Path, typer.Argument(help="JSONL file (as `export` writes; '-': stdin).")],
    db: DbOpt = None,
) -> None:
    """Import blocks: whole blocks from `export` (idempotent by id: blocks already here are
    left unchanged), or new blocks, one JSON object per line."""
    from rich.progress import track

    rows = _read_jsonl(file)
    batches = _batches(rows)
    totals = {"added": 0, "existing": 0, "created": 0, "quarantined": 0}

    async def local(s: Store) -> Any:
        doors = privacy_for(db)  # the import door of the daemon, its policy and key
        for batch in track(batches, description="importing", console=err, transient=True):
            exported, plain = await doors.import_rows(batch)
            report = await s.import_blocks(exported)
            totals["added"] += len(report.added)
            totals["existing"] += len(report.existing)
            if plain:
                totals["created"] += len(await s.add_many(plain, actor="import"))

    async def api(c: AsyncClient) -> Any:
        for batch in track(batches, description="importing", console=err, transient=True):
            answer = await c.import_blocks(batch)
            for key in totals:
                totals[key] += int(answer.get(key, 0))

    call(db, api=api, local=local, create=True)
    line = f"imported {totals['added']} block(s), {totals['existing']} already here (unchanged)"
    if totals["created"]:
        line += f", {totals['created']} new block(s) created"
    if totals["quarantined"]:
        line += f"; {totals['quarantined']} binding(s) quarantined (see `memwarden health`)"
    err.print(line, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------- backup


@app.command()
def backup(
    dest: Annotated[
        Path,
        typer.Argument(help="The copy to write: a file, or a directory for a timestamped one."),
    ],
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            help="The live database (default: from the settings, <home>/memwarden.db).",
            envvar="MEMWARDEN_DB",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace DEST if it exists.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Copy the database while the daemon keeps running, then check the copy's integrity."""
    from rich.progress import Progress

    from memwarden.memory import backup_database

    if db is None:
        db = database_here()
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("backing up", total=None)
        try:
            result = backup_database(
                db,
                dest,
                force=force,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
        except MemwardenError as e:
            raise fail(str(e)) from None
    if json_out:
        print_json(result.as_dict())
        return
    out.print(
        f"backed up {result.source} to {result.path}: {result.size_bytes:,} bytes "
        f"({result.size_bytes / 2**20:.1f} MiB, {result.pages} pages), "
        f"integrity {result.integrity}, {result.elapsed_s:.1f} s",
        highlight=False,
        soft_wrap=True,
    )


# ---------------------------------------------------------------------- remote mode


@app.command()
def agent(
    config: Annotated[
        Path,
        typer.Option("--config", "-c", help="TOML file with the mqtt, agent and sensors.* tables."),
    ],
) -> None:
    """Run sensors on this host for a daemon elsewhere (remote mode, over MQTT).

    Events go to the broker from a durable local queue; bindings and revalidation
    requests come from the daemon. Stop with SIGTERM or Ctrl-C.
    """
    from memwarden.agent import Agent
    from memwarden.daemon import configure_logging, load_settings

    try:
        settings = load_settings(config)
        runner = Agent(settings, install_signal_handlers=True)
    except ConfigError as e:
        for problem in e.problems:
            err.print(problem, markup=False, highlight=False, soft_wrap=True)
        raise fail(str(e)) from None
    configure_logging(settings.log_level, settings.log_format, stream="stderr")
    try:
        asyncio.run(runner.run())
    except* MemwardenError as group:
        for failure in group.exceptions:
            err.print(f"[red]error:[/red] {escape(str(failure))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
