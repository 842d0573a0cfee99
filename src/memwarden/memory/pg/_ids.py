"""Numbers from the identity columns' sequences, for writes that must know a row's number
before inserting it (a block's rid names its bindings; an event's seq its effects).

Several writers (nodes) may take numbers at once: each call gets its own, in increasing
order, but not necessarily contiguous (another writer's may fall in between), and a
rolled-back transaction spends the numbers it took (a gap in the log, never a reuse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memwarden.memory.pg._types import PgConnection

__all__ = ["allocate"]

# table -> column: the identities handed out before inserting (the names are fixed here,
# never a caller's text, as they go into the statement).
_IDENTITIES = {("blocks", "rid"), ("events", "seq")}


async def allocate(conn: PgConnection, table: str, column: str, n: int) -> list[int]:
    """``n`` new numbers of ``table.column``'s identity, increasing."""
    if (table, column) not in _IDENTITIES:
        raise ValueError(f"no identity allocation for {table}.{column}")
    if n <= 0:
        return []
    rows = await conn.fetch(
        f"SELECT nextval(pg_get_serial_sequence('{table}', '{column}'))"
        " FROM generate_series(1, $1::int)",
        n,
    )
    return sorted(int(r[0]) for r in rows)
