"""Which node serves each binding, on SQLite (docs/SCALE.md, "Node-scoped bindings").

One daemon on its own file is the only node: it serves every binding, whatever its
``nodes`` say (there is no other node to check them; a host renamed keeps its bindings
checked). :func:`serve_all` makes ``served_by`` this node's name where it is not, each
change an ``audit`` row of the block (action ``serve``, detail ``{"sensor", "subject",
"from", "to"}``), as the leader's pass on PostgreSQL does (``memory.pg._serving``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["serve_all"]


async def serve_all(conn: aiosqlite.Connection, node: str, *, now: float, actor: str) -> int:
    """Every binding served by ``node`` (in the caller's transaction); how many changed."""
    async with conn.execute(
        "SELECT g.id, k.id, g.sensor, g.subject, g.served_by FROM bindings g"
        " JOIN blocks k ON k.rid = g.block_rid WHERE g.served_by IS NOT ? ORDER BY g.id",
        (node,),
    ) as cur:
        rows = list(await cur.fetchall())
    if not rows:
        return 0
    await conn.executemany(
        "UPDATE bindings SET served_by = ? WHERE id = ?", [(node, r[0]) for r in rows]
    )
    await conn.executemany(
        "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, 'serve', ?, ?)",
        [
            (
                now,
                actor,
                r[1],
                json.dumps(
                    {"sensor": r[2], "subject": r[3], "from": r[4], "to": node},
                    ensure_ascii=False,
                ),
            )
            for r in rows
        ],
    )
    return len(rows)
