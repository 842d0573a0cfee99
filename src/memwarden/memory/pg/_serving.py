"""Which node serves each binding, on PostgreSQL (docs/SCALE.md, "Node-scoped bindings").

The leader's pass (:func:`assign_servers`, every few seconds): each binding is served by
the first node of its ``nodes`` list that is alive (its heartbeat in ``cluster_nodes``
younger than :data:`ALIVE_S`, by the database's clock); a binding of ``["*"]`` keeps its
node while that one is alive, else goes to the live node first by name. A binding whose
nodes are all gone is served by none (``served_by`` NULL): no node's events reach it and
no node is sent its checks until one comes back. Each change is an ``audit`` row of the
block (action ``serve``, detail ``{"sensor", "subject", "from", "to"}``), in the same
transaction.

In the same pass the checks claimed by a node that is no longer alive (``sent`` with
``node`` naming it, or no node: claimed before nodes were recorded) go back to
``pending``: the node now serving the binding claims them at its next dispatch.

A node's dispatch claims its own due checks (:func:`claim_due`): those whose binding it
serves, picked ``FOR UPDATE SKIP LOCKED`` and marked ``sent`` with its name in one
statement, so two nodes (or two ticks) never take one request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = [
    "ALIVE_S",
    "SERVE_CHUNK",
    "PgServing",
    "ServeChange",
    "alive_nodes",
    "assign_servers",
    "binding_ranges",
    "claim_due",
    "requeue_dead",
    "requeue_own",
    "served_fingerprint",
]

ALIVE_S = 30.0  # as memwarden.cluster.ALIVE_S: a heartbeat younger than this is alive
SERVE_CHUNK = 5_000  # bindings per transaction of a full serving pass

# The live nodes (by the database's clock).
_ALIVE = """
SELECT node FROM cluster_nodes
WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - make_interval(secs => $1)
ORDER BY node
"""
# Each binding's wanted server among the live nodes ($1), for the bindings the pass
# looks at ({where}); only those that change are written. ``nodes`` is a JSON list
# (validated on the way in, imports too; the LIKE guards the cast all the same).
_ASSIGN = """
WITH wanted AS (
    SELECT g.id, g.served_by AS before,
        CASE WHEN g.nodes = '["*"]' THEN
            CASE WHEN g.served_by = ANY($1::text[]) THEN g.served_by
                 ELSE (SELECT min(n) FROM unnest($1::text[]) AS n) END
        WHEN g.nodes LIKE '[%]' THEN (
            SELECT t.n FROM jsonb_array_elements_text(g.nodes::jsonb) WITH ORDINALITY AS t(n, i)
            WHERE t.n = ANY($1::text[]) ORDER BY t.i LIMIT 1)
        END AS after
    FROM bindings g WHERE {where}
)
UPDATE bindings g SET served_by = w.after FROM wanted w
WHERE g.id = w.id AND w.after IS DISTINCT FROM w.before
RETURNING g.block_rid, g.sensor, g.subject, w.before, w.after
"""
ASSIGN_RANGE = _ASSIGN.format(where="g.id BETWEEN $2 AND $3")
# While the live nodes are those of the previous pass only the bindings served by no
# one can change (new ones not led by the node that stored them, lists edited, those
# whose nodes are all gone): the index ``bindings_served`` finds them.
ASSIGN_UNSERVED = _ASSIGN.format(where="g.served_by IS NULL")
_REQUEUE_DEAD = """
UPDATE revalidations SET status = 'pending', send_at = $2
WHERE status = 'sent' AND (node IS NULL OR NOT node = ANY($1::text[]))
"""
_AUDIT = """
INSERT INTO audit (at, actor, action, block_id, detail)
SELECT $1, $2, 'serve', k.id, d.detail
FROM unnest($3::bigint[], $4::text[]) AS d(rid, detail) JOIN blocks k ON k.rid = d.rid
"""
# A node's due checks: the pending requests whose time has come and whose binding it
# serves, oldest first, taken and marked sent in one statement (SKIP LOCKED: another
# claimer's rows are passed over, never waited for nor taken twice).
CLAIM_SQL = """
WITH picked AS (
    SELECT r.id FROM revalidations r
    JOIN blocks k ON k.id = r.block_id
    JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor AND g.subject = r.subject
        AND g.quarantine IS NULL AND g.served_by = $3
    WHERE r.status = 'pending' AND r.send_at <= $1
    ORDER BY r.send_at, r.id LIMIT $2
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE revalidations r SET status = 'sent', node = $3, attempts = r.attempts + 1
FROM picked WHERE r.id = picked.id
RETURNING r.id
"""


@dataclass(frozen=True)
class ServeChange:
    """One binding whose serving node changed."""

    block_rid: int
    sensor: str
    subject: str
    before: str | None
    after: str | None


class PgServing:
    """The leader's serving pass (:meth:`memwarden.memory.Store.keep_servers`) on one
    database; it remembers the live nodes of its previous pass."""

    def __init__(self, db: PgDatabase, *, chunk: int = SERVE_CHUNK) -> None:
        self.db = db
        self.chunk = chunk
        self._served_among: list[str] | None = None  # the live nodes at the last pass

    async def keep(self, *, now: float, actor: str) -> tuple[int, int]:
        """Every binding when the live nodes differ from the previous pass's (or on the
        first), in ranges of ids, one writer transaction each (the writer is never held
        long); else only those served by no one. Then the checks claimed by dead nodes.
        Returns (bindings moved, checks requeued)."""
        db = self.db
        async with db.read() as conn:
            alive = await alive_nodes(conn)
            if alive is None:  # no node registered here: nothing to serve by
                return 0, 0
            full = alive != self._served_among
            ranges: list[tuple[int, int] | None] = (
                list(await binding_ranges(conn, self.chunk)) if full else [None]
            )
        moved = 0
        for ids in ranges:

            async def job(conn: PgConnection, ids: tuple[int, int] | None = ids) -> int:
                changes = await assign_servers(conn, alive, now=now, actor=actor, ids=ids)
                return len(changes)

            moved += await db.write(job)

        async def requeue(conn: PgConnection) -> int:
            return await requeue_dead(conn, alive, now=now)

        requeued = await db.write(requeue)
        self._served_among = alive
        return moved, requeued


async def alive_nodes(conn: PgConnection, alive_s: float = ALIVE_S) -> list[str] | None:
    """The nodes alive now (heartbeat younger than ``alive_s``, not stopped), by name;
    None when no node ever registered (no ``cluster_nodes``: no daemon ran here)."""
    if await conn.fetchval("SELECT to_regclass('cluster_nodes')") is None:
        return None
    return [r[0] for r in await conn.fetch(_ALIVE, alive_s)]


async def binding_ranges(conn: PgConnection, chunk: int) -> list[tuple[int, int]]:
    """Consecutive ``(lo, hi)`` ranges of ``chunk`` binding ids covering every binding."""
    row = await conn.fetchrow("SELECT min(id), max(id) FROM bindings")
    if row is None or row[0] is None:
        return []
    lo, hi = int(row[0]), int(row[1])
    return [(a, min(a + chunk - 1, hi)) for a in range(lo, hi + 1, chunk)]


async def assign_servers(
    conn: PgConnection,
    alive: Sequence[str],
    *,
    now: float,
    actor: str,
    ids: tuple[int, int] | None = None,
) -> list[ServeChange]:
    """Part of the leader's pass (in the caller's transaction): the bindings with ids in
    ``ids`` (None: those served by no one) served by the node they should be among
    ``alive``, each change audited."""
    if ids is None:
        rows = await conn.fetch(ASSIGN_UNSERVED, list(alive))
    else:
        rows = await conn.fetch(ASSIGN_RANGE, list(alive), ids[0], ids[1])
    changes = [ServeChange(*r) for r in rows]
    if changes:
        details = [
            json.dumps(
                {"sensor": c.sensor, "subject": c.subject, "from": c.before, "to": c.after},
                ensure_ascii=False,
            )
            for c in changes
        ]
        await conn.execute(_AUDIT, now, actor, [c.block_rid for c in changes], details)
    return changes


async def requeue_dead(conn: PgConnection, alive: Sequence[str], *, now: float) -> int:
    """The checks claimed by nodes not in ``alive`` (or by no known node) pending again."""
    return _count(await conn.execute(_REQUEUE_DEAD, list(alive), now))


async def claim_due(conn: PgConnection, node: str, *, now: float, limit: int) -> list[str]:
    """Claim ``node``'s due checks (marked ``sent`` by it); their ids, oldest first."""
    rows = await conn.fetch(CLAIM_SQL, now, None if limit < 0 else limit, node)
    return [r[0] for r in rows]


async def requeue_own(conn: PgConnection, node: str, *, now: float) -> int:
    """A restarting node's own claims (``sent`` by ``node``) pending again; how many."""
    return _count(
        await conn.execute(
            "UPDATE revalidations SET status = 'pending', send_at = $1"
            " WHERE status = 'sent' AND node = $2",
            now,
            node,
        )
    )


def _count(status: Any) -> int:
    return int(str(status).rsplit(" ", 1)[-1])


async def served_fingerprint(conn: PgConnection, node: str) -> tuple[int, int]:
    """What changes when the set of bindings ``node`` serves changes (the count and the
    sum of their ids; the index ``bindings_served``): a node's sensors learn their
    bindings again when it moves."""
    row = await conn.fetchrow(
        "SELECT count(*), coalesce(sum(id), 0) FROM bindings WHERE served_by = $1", node
    )
    return (0, 0) if row is None else (int(row[0]), int(row[1]))
