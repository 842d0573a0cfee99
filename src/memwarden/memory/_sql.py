"""Plain SQL helpers the store's parts share: chunked ``IN`` lists, the common
statements, and loading, saving and describing a block on a connection.

Every function here takes the connection it runs on (a reader's or the writer's
inside a job); none owns a connection or a transaction.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, TypeVar, cast

from memwarden.errors import NotFoundError
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    EVIDENCE_COLUMNS,
    EVIDENCE_UPDATE_COLUMNS,
    binding_from_row,
    record_from_row,
    record_to_row,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Awaitable, Callable, Iterable, Sequence

    import aiosqlite

    from memwarden.memory._model import Binding
    from memwarden.memory._record import BlockRecord

__all__ = [
    "BLOCK_SELECT",
    "EVIDENCE_SELECT",
    "EVIDENCE_UPDATE",
    "REVALIDATION_INSERT",
    "bindings_of",
    "chunks",
    "depends_of",
    "executemany",
    "in_thread",
    "load_record",
    "namespace_clause",
    "one_row",
    "placeholders",
    "rid_ranges",
    "save_record",
    "select_in",
    "select_in_now",
    "split_range",
]

T = TypeVar("T")

_IN_CHUNK = 500  # host parameters per IN (...) list
MAX_NAMESPACES = 64  # an agent's namespaces: one IN list, never chunked


def one_row(row: T | None, what: str) -> T:
    """The row of a query that always yields one (an aggregate, a row written just
    before in the same transaction); none is a bug, raised with ``what`` was read."""
    if row is None:
        raise RuntimeError(f"no row for {what}, where the query always yields one")
    return row


def namespace_clause(
    namespaces: Sequence[str] | None, *, column: str = "namespace"
) -> tuple[str, list[str]]:
    """`` AND <column> IN (?, ...)`` and its values for a caller's namespaces; nothing
    for ``None`` (every namespace). An empty list matches no block."""
    if namespaces is None:
        return "", []
    if not namespaces:
        return " AND 0", []
    if len(namespaces) > MAX_NAMESPACES:
        message = f"at most {MAX_NAMESPACES} namespaces, not {len(namespaces)}"
        raise ValueError(message)
    return f" AND {column} IN {placeholders(len(namespaces))}", list(namespaces)


EVIDENCE_SELECT = f"SELECT {', '.join(EVIDENCE_COLUMNS)} FROM blocks WHERE id IN "
EVIDENCE_UPDATE = (
    "UPDATE blocks SET " + ", ".join(f"{c} = ?" for c in EVIDENCE_UPDATE_COLUMNS) + " WHERE rid = ?"
)
BLOCK_SELECT = f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks"
REVALIDATION_INSERT = (
    "INSERT OR IGNORE INTO revalidations (id, block_id, sensor, subject, reason,"
    " created_at, send_at, deadline_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def placeholders(n: int) -> str:
    return "(" + ",".join("?" * n) + ")"


def chunks(items: Sequence[Any], size: int = _IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


async def in_thread(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn(sqlite3 connection)`` run on ``conn``'s own thread, in order with the statements
    queued before it: one hand-off between threads for the whole of ``fn``.

    Each ``await conn.execute(...)`` is a trip to the connection's thread and back; on a
    busy machine each waits for the scheduler twice, which costs more than a small
    statement. A job of many statements (an event batch) runs here at once instead.
    (aiosqlite has no public name for this; ``_execute`` and ``_conn`` are what its own
    methods use, and tests/memory cover every caller.)
    """
    execute, raw = conn._execute, conn._conn  # noqa: SLF001 - aiosqlite's own way in, see above
    run = cast("Callable[..., Awaitable[T]]", execute)
    return await run(fn, raw)


def select_in_now(
    conn: sqlite3.Connection, sql_prefix: str, keys: Sequence[Any], suffix: str = ""
) -> list[Any]:
    """Run ``sql_prefix (?, ?, ...) suffix`` over ``keys`` in chunks, on this thread."""
    rows: list[Any] = []
    for chunk in chunks(keys):
        rows.extend(conn.execute(sql_prefix + placeholders(len(chunk)) + suffix, chunk))
    return rows


async def select_in(
    conn: aiosqlite.Connection, sql_prefix: str, keys: Sequence[Any], suffix: str = ""
) -> list[sqlite3.Row]:
    """Run ``sql_prefix (?, ?, ...) suffix`` over ``keys`` in chunks; all rows, fetched
    in one trip to the connection's thread."""
    if not keys:
        return []
    return await in_thread(conn, lambda c: select_in_now(c, sql_prefix, keys, suffix))


async def executemany(conn: aiosqlite.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        await conn.executemany(sql, rows)


async def load_record(conn: aiosqlite.Connection, block_id: str) -> BlockRecord:
    async with conn.execute(BLOCK_SELECT + " WHERE id = ?", (block_id,)) as cur:
        row = await cur.fetchone()
    if row is None:
        raise NotFoundError("block", block_id)
    return record_from_row(row)


async def save_record(conn: aiosqlite.Connection, rec: BlockRecord) -> None:
    cols = [c for c in BLOCK_COLUMNS if c not in ("id", "rid")]
    values = dict(zip(BLOCK_COLUMNS, record_to_row(rec), strict=True))
    await conn.execute(
        "UPDATE blocks SET " + ", ".join(f"{c} = ?" for c in cols) + " WHERE rid = ?",
        (*(values[c] for c in cols), rec.rid),
    )


async def bindings_of(
    conn: aiosqlite.Connection, block_ids: Sequence[str]
) -> dict[str, list[Binding]]:
    out: dict[str, list[Binding]] = defaultdict(list)
    if not block_ids:
        return out
    rows = await select_in(
        conn,
        "SELECT k.id, g.sensor, g.subject, g.selector, g.nodes, g.served_by FROM bindings g"
        " JOIN blocks k ON k.rid = g.block_rid WHERE k.id IN ",
        list(block_ids),
        " ORDER BY g.id",
    )
    for block_id, *binding in rows:
        out[block_id].append(binding_from_row(*binding))
    return out


async def depends_of(conn: aiosqlite.Connection, rids: Sequence[int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    if rids:
        for rid, dep in await select_in(
            conn,
            "SELECT block_rid, depends_on FROM dependencies WHERE block_rid IN ",
            list(rids),
            " ORDER BY depends_on",
        ):
            out[rid].append(dep)
    return out


async def rid_ranges(conn: aiosqlite.Connection, chunk_rows: int) -> list[tuple[int, int]]:
    """Consecutive ``(lo, hi)`` ranges of ``chunk_rows`` rids covering every block now."""
    async with conn.execute("SELECT min(rid), max(rid) FROM blocks") as cur:
        row = await cur.fetchone()
    if row is None or row[0] is None:
        return []
    return split_range(int(row[0]), int(row[1]), chunk_rows)


def split_range(lo: int, hi: int, chunk_rows: int) -> list[tuple[int, int]]:
    """Consecutive ``(lo, hi)`` ranges of ``chunk_rows`` rids from ``lo`` to ``hi``."""
    step = max(1, chunk_rows)
    return [(start, min(hi, start + step - 1)) for start in range(lo, hi + 1, step)]
