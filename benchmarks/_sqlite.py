"""Raw stdlib ``sqlite3`` connections set up like the store's, on the store's schema."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from memwarden.memory._schema import MIGRATIONS, SCHEMA_VERSION, split_statements

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path

__all__ = ["checkpoint", "connect", "create_schema", "query_plan", "remove", "traced_reads"]

# The store's PRAGMAs (Database._configure), so the baseline pays for the same settings.
_PRAGMAS = (
    "PRAGMA busy_timeout = 10000",
    "PRAGMA foreign_keys = ON",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA cache_size = -65536",
    "PRAGMA mmap_size = 268435456",
    "PRAGMA temp_store = MEMORY",
)


def connect(path: Path) -> sqlite3.Connection:
    """A raw connection in autocommit mode (transactions are explicit) with the PRAGMAs."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in _PRAGMAS:
        conn.execute(pragma)
    return conn


def checkpoint(path: Path) -> None:
    """Fold the WAL into the database file, so the file alone is the whole database."""
    conn = connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def remove(path: Path) -> None:
    """Delete a database with its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def create_schema(conn: sqlite3.Connection) -> None:
    """Apply every migration, as :func:`memwarden.memory._migrate.migrate` would."""
    conn.execute("BEGIN IMMEDIATE")
    for script in MIGRATIONS:
        for statement in split_statements(script):
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.execute("COMMIT")


def query_plan(conn: sqlite3.Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> str:
    """``EXPLAIN QUERY PLAN`` as an indented tree."""
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    depth: dict[int, int] = {0: -1}
    lines = []
    for node, parent, _unused, detail in rows:
        depth[node] = depth.get(parent, -1) + 1
        lines.append("  " * depth[node] + detail)
    return "\n".join(lines)


async def traced_reads(store: Any, call: Callable[[], Awaitable[Any]]) -> list[str]:
    """The SELECT/WITH statements the store's read connections run during ``call()``.

    Uses private attributes of the store's database; an empty list if it changes shape. The
    statements come expanded (parameters inlined), ready for ``EXPLAIN QUERY PLAN``.
    """
    statements: list[str] = []
    db = getattr(store, "db", None)
    readers = list(getattr(db, "_all_readers", []))
    inline = getattr(db, "_inline", None)  # the loop's own connection, for small reads
    for reader in readers:
        await reader.set_trace_callback(statements.append)
    if isinstance(inline, sqlite3.Connection):
        inline.set_trace_callback(statements.append)
    try:
        await call()
    finally:
        for reader in readers:
            await reader.set_trace_callback(None)
        if isinstance(inline, sqlite3.Connection):
            inline.set_trace_callback(None)
    return [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
