"""What every ``memwarden`` command shares: the consoles, the common options, the daemon
this invocation talks to, running a data command (:func:`call`) and failing cleanly
(:func:`fail`).

The command modules (``_app``, ``_review``) import this one and never each other, so the
package's imports form no cycle (``tests/cli/test_import_graph.py`` checks).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memwarden.errors import ConfigError, MemwardenError, ValidationInputError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from memwarden.client import AsyncClient
    from memwarden.daemon import PrivacyDoors
    from memwarden.memory import Store

__all__ = [
    "DbOpt",
    "JsonOpt",
    "call",
    "client",
    "config_file",
    "database_here",
    "err",
    "fail",
    "id_table",
    "out",
    "print_json",
    "privacy_for",
    "target",
]

out = Console()
err = Console(stderr=True)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Work on this database directly instead of the running daemon: a SQLite file,"
        " sqlite:///path or a postgresql:// URL (writes pass the privacy policy of"
        " ./memwarden.toml and the state dir: the file's, or the settings' home for"
        " PostgreSQL).",
        envvar="MEMWARDEN_DB",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

# The daemon this invocation talks to, from the global options (None: find it).
target: dict[str, str | None] = {"home": None, "url": None}


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on stderr; the exit to raise (``raise fail(...)``)."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (what ``--json`` prints)."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def client() -> AsyncClient:
    """A client for the daemon the global options (``--home``, ``--url``) name."""
    from memwarden.client import AsyncClient

    return AsyncClient(target["url"], home=target["home"])


def config_file(given: Path | None) -> Path | None:
    """The file `run` uses: ``--config``, else ``memwarden.toml`` in the current directory."""
    from memwarden.cli._init import CONFIG_NAME

    if given is not None:
        return given
    here = Path(CONFIG_NAME)
    return here if here.is_file() else None


def database_here() -> Path:
    """The database `run` would use here: ./memwarden.toml's (relative to the file), else
    the one in the state dir the CLI talks to (--home, MEMWARDEN_HOME, ./.memwarden, ...)."""
    from memwarden.client import find_home
    from memwarden.daemon import load_settings

    file = config_file(None)
    if file is None:
        return find_home(target["home"]).path / "memwarden.db"
    overrides: dict[str, Any] = {}
    if target["home"]:
        overrides["home"] = Path(target["home"]).absolute()
    try:
        settings = load_settings(file, **overrides)
    except ConfigError as e:
        for problem in e.problems:
            err.print(problem, markup=False, highlight=False, soft_wrap=True)
        raise fail(str(e)) from None
    if settings.store.postgresql:  # backup and migrate read a SQLite file
        from memwarden.memory import shown_location

        shown = shown_location(settings.database)
        raise fail(
            f"the configured store is on PostgreSQL ({shown}), not a SQLite file: pass --db"
            " FILE (back up a PostgreSQL store with pg_dump: docs/DEPLOY.md)"
        )
    db = settings.db_path
    return db if db.is_absolute() else file.absolute().parent / db


def call(
    db: str | Path | None,
    *,
    api: Callable[[AsyncClient], Awaitable[Any]],
    local: Callable[[Store], Awaitable[Any]],
    create: bool = False,
) -> Any:
    """Run a data command against the running daemon, or a database file with ``--db``
    (which must exist unless ``create``: only `add` and `import` start a new one).

    Input errors exit 2 naming each field; any other memwarden error exits 1 with its
    message; never a traceback.
    """
    from memwarden.daemon import configure_logging
    from memwarden.memory import Store

    configure_logging("warning", "console", stream="stderr")
    where = _db_location(db)
    if isinstance(where, Path) and not create and not where.is_file():
        raise fail(f"--db {where}: no such database file")

    async def go() -> Any:
        if where is not None:
            async with Store(where) as store:
                return await local(store)
        async with client() as c:
            return await api(c)

    try:
        return asyncio.run(go())
    except ValidationInputError as e:
        for field, message in e.errors:
            err.print(f"{field or 'input'}: {message}", highlight=False, soft_wrap=True)
        if any("no sensor named" in m for _, m in e.errors):
            err.print("(`memwarden sensors` shows which sensors run)", highlight=False)
        raise typer.Exit(2) from None
    except MemwardenError as e:
        raise fail(str(e)) from None


def _db_location(db: str | Path | None) -> Path | str | None:
    """``--db`` as the store names it: a file's path or a PostgreSQL URL (exit 2 if bad)."""
    from memwarden.memory import store_location

    if db is None:
        return None
    try:
        return store_location(db)
    except ConfigError as e:
        raise fail(f"--db: {e}", 2) from None


def privacy_for(db: str | Path | None) -> PrivacyDoors:
    """The privacy doors a write with ``--db`` passes, as the daemon's would: the policy of
    ./memwarden.toml (or the defaults and ``MEMWARDEN_`` variables), overridden by one a
    ``PUT /v1/privacy`` kept in the database's state dir, and that dir's key
    (:func:`memwarden.daemon.privacy_for_database`). A configuration that does not load
    is an error: nothing is written without the policy. Only for ``--db`` (``call()``
    runs ``local`` only with it): without, the daemon's doors apply."""
    if db is None:
        raise MemwardenError("the local privacy doors need --db (else the daemon's apply)")
    from memwarden.daemon import load_settings, privacy_for_database

    file = Path("memwarden.toml")  # what `memwarden run` reads here (cli._init.CONFIG_NAME)
    config = file if file.is_file() else None
    overrides: dict[str, Any] = {"home": Path(target["home"]).absolute()} if target["home"] else {}
    settings = load_settings(config, **overrides)
    if config is not None:  # relative paths in the file are relative to it, as for `run`
        base = config.absolute().parent
        update: dict[str, Any] = {}
        if not settings.home.is_absolute():
            update["home"] = base / settings.home
        if settings.store.path is not None and not settings.store.path.is_absolute():
            update["store"] = settings.store.model_copy(update={"path": base / settings.store.path})
        settings = settings.model_copy(update=update) if update else settings
    where = _db_location(db)
    if not isinstance(where, Path):  # PostgreSQL: the settings' state dir holds the key
        return privacy_for_database(settings.db_path, settings)
    return privacy_for_database(where, settings)


def id_table(ids: list[str], *columns: str) -> Table:
    """A table whose first column shows ids whole, however narrow the terminal: an id
    cut short would not be accepted back."""
    table = Table()
    table.add_column("id", no_wrap=True, min_width=max((len(i) for i in ids), default=2))
    for column in columns:
        table.add_column(column)
    return table
