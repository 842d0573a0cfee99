"""``memwarden migrate --to postgresql://…``: copy a SQLite store into PostgreSQL.

The work is :func:`memwarden.memory.pg.copy_to_postgres` (verified, resumable; its module
docstring says how). This command finds the source (``--db``, else the database `run`
would use here), shows progress on a terminal, prints what was copied table by table, and
turns every failure into one ``error:`` line and a non-zero exit. Interrupted (Ctrl-C, a
lost connection), it says so: the same command resumes.
"""

# No ``from __future__ import annotations``: typer reads the options' annotations at
# run time, so what they name (Path) is imported for real.

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from memwarden.cli._common import JsonOpt, database_here, err, fail, out, print_json
from memwarden.errors import MemwardenError

__all__ = ["migrate"]

# What the shell reports for a process ended by SIGINT.
EX_INTERRUPTED = 130


def migrate(
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="The PostgreSQL database to copy into: postgresql://user@host:port/database "
            "(an empty database, or one this command copied into and was interrupted). Put "
            "the password in PGPASSWORD or ~/.pgpass rather than in the URL: a command line "
            "is visible to every user of the machine.",
        ),
    ],
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            help="The SQLite store to copy (default: the one `run` would use here). Only "
            "read, never changed.",
            envvar="MEMWARDEN_DB",
        ),
    ] = None,
    chunk_rows: Annotated[
        int, typer.Option("--chunk-rows", min=1, help="Rows per transaction.")
    ] = 5000,
    timeout_s: Annotated[
        float, typer.Option("--connect-timeout", min=0.1, help="Seconds to wait for the server.")
    ] = 10.0,
    json_out: JsonOpt = False,
) -> None:
    """Copy a SQLite store into PostgreSQL, then verify every table.

    Every table that carries state is copied row for row; the search index is rebuilt.

    Each table is verified: row count and a checksum computed alike on both sides.

    Interrupted, the same command resumes where it stopped.

    The source is read in one snapshot (with the daemon running: the moment it began).

    Then ``[store] url = "postgresql://…"`` runs the daemon on the copy (docs/SCALE.md,
    "What is built"; docs/DEPLOY.md).
    """
    from rich.progress import Progress

    from memwarden.daemon import configure_logging

    configure_logging("warning", "console", stream="stderr")
    try:
        from memwarden.memory.pg import copy_to_postgres
    except ImportError as e:
        raise fail(
            f"the PostgreSQL backend needs the postgres extra ({e.name} is missing): "
            "pip install 'memwarden[postgres]'"
        ) from None
    source = db if db is not None else database_here()
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("copying", total=None)

        def progress(table: str, rows: int) -> None:
            bar.update(task, advance=rows, description=f"copying {table}")

        try:
            report = asyncio.run(
                copy_to_postgres(
                    source,
                    to,
                    chunk_rows=chunk_rows,
                    connect_timeout_s=timeout_s,
                    progress=progress,
                )
            )
        except KeyboardInterrupt:
            raise fail(
                "interrupted: what was copied is kept; run the same command to resume",
                EX_INTERRUPTED,
            ) from None
        except MemwardenError as e:
            raise fail(str(e)) from None
    answer: dict[str, Any] = report.as_dict()
    if json_out:
        print_json(answer)
        return
    from rich.table import Table

    table = Table("table", "rows", "copied now", "checksum (both sides)")
    for t in report.tables:
        table.add_row(t.name, f"{t.rows:,}", f"{t.copied:,}", t.checksum)
    out.print(table)
    out.print(
        f"{'resumed and ' if report.resumed else ''}copied {report.source} to {report.target}: "
        f"{report.rows:,} rows in {len(report.tables)} tables, {report.copied:,} copied by this "
        f"run, every table verified ({report.elapsed_s:.1f} s)",
        highlight=False,
        soft_wrap=True,
    )
    if report.absent:
        out.print(
            f"not in the source (a later memwarden's tables, left empty): "
            f"{', '.join(report.absent)}",
            highlight=False,
            soft_wrap=True,
        )
    out.print(
        "rebuilt, not copied: the full-text index (a generated column in PostgreSQL). "
        "The daemon runs on it with [store] url (docs/DEPLOY.md, docs/SCALE.md).",
        highlight=False,
        soft_wrap=True,
    )
