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
    from memwarden.memory.pg._types import PgConnection

__all__ = [
    "ALIVE_S",
    "ServeChange",
    "assign_servers",
    "claim_due",
    "requeue_own",
    "served_fingerprint",
]

ALIVE_S = 30.0  # as memwarden.cluster.ALIVE_S: a heartbeat younger than this is alive

# The live nodes, then each binding's wanted server; only the bindings that change are
# written. ``nodes`` is a JSON list (validated on the way in; a row that is not JSON
# would fail the whole pass, so the cast is guarded).
_ASSIGN = """
WITH alive AS (
    SELECT node FROM cluster_nodes
    WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - make_interval(secs => $1)
), wanted AS (
    SELECT g.id, g.served_by AS before,
        CASE WHEN g.nodes = '["*"]' THEN
            CASE WHEN g.served_by IN (SELECT node FROM alive) THEN g.served_by
                 ELSE (SELECT min(node) FROM alive) END
        WHEN g.nodes LIKE '[%]' THEN (
            SELECT t.n FROM jsonb_array_elements_text(g.nodes::jsonb) WITH ORDINALITY AS t(n, i)
            WHERE t.n IN (SELECT node FROM alive) ORDER BY t.i LIMIT 1)
        END AS after
    FROM bindings g
)
UPDATE bindings g SET served_by = w.after FROM wanted w
WHERE g.id = w.id AND w.after IS DISTINCT FROM w.before
RETURNING g.block_rid, g.sensor, g.subject, w.before, w.after
"""
_REQUEUE_DEAD = """
UPDATE revalidations SET status = 'pending', send_at = $2
WHERE status = 'sent' AND (node IS NULL OR node NOT IN (
    SELECT node FROM cluster_nodes
    WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - make_interval(secs => $1)))
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


async def assign_servers(
    conn: PgConnection, *, now: float, actor: str, alive_s: float = ALIVE_S
) -> tuple[list[ServeChange], int]:
    """The leader's pass (in the caller's transaction): every binding served by the node
    it should be, each change audited; the checks claimed by dead nodes requeued.
    Returns the changes and how many checks were requeued."""
    rows = await conn.fetch(_ASSIGN, alive_s)
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
    requeued = _count(await conn.execute(_REQUEUE_DEAD, alive_s, now))
    return changes, requeued


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
