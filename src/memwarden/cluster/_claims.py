"""Revalidation requests addressed to a node, claimed with ``FOR UPDATE SKIP LOCKED``.

The leader's sweep queues one request per binding, addressed to the node that serves the
binding (``node``). Each node claims its own requests whose send time has come, in one
statement: the rows are picked ``FOR UPDATE SKIP LOCKED`` and marked ``claimed`` by the
claimer, so two claimers (two nodes, or two ticks of one node) never take one request
twice and never wait for each other. A claimed request ends ``done``, ``failed`` or
``expired`` (:func:`finish_revalidations`), or goes back to ``pending`` when its claimer
died (:func:`requeue_claims`). At most one request is open per binding (a partial unique
index): queueing one that is already open does nothing, as on SQLite
(``memory/_revalidation.py``).

Times are POSIX seconds from the caller's clock, as everywhere in the store. The table
is ``cluster_revalidations`` (``_ddl``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memwarden.cluster._ddl import translated
from memwarden.cluster._leader import check_name
from memwarden.errors import ValidationInputError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.cluster._ddl import Executor

__all__ = [
    "ClaimedRevalidation",
    "NewRevalidation",
    "claim_revalidations",
    "enqueue_revalidations",
    "finish_revalidations",
    "requeue_claims",
]

MAX_CLAIM = 1000
_FINAL = frozenset({"done", "failed", "expired"})

_INSERT = """
INSERT INTO cluster_revalidations
    (id, node, block_id, sensor, subject, reason, created_at, send_at, deadline_s)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::float8[], $8::float8[], $9::float8[])
ON CONFLICT DO NOTHING
RETURNING id
"""
_CLAIM = """
WITH picked AS (
    SELECT id FROM cluster_revalidations
    WHERE node = $1 AND status = 'pending' AND send_at <= $2
    ORDER BY send_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE cluster_revalidations r
SET status = 'claimed', claimed_by = $4, claimed_at = $2, attempts = r.attempts + 1
FROM picked WHERE r.id = picked.id
RETURNING r.id, r.node, r.block_id, r.sensor, r.subject, r.reason, r.created_at,
          r.send_at, r.deadline_s, r.attempts
"""
_FINISH = """
UPDATE cluster_revalidations
SET status = $2, finished_at = $3, outcome = coalesce($4, outcome)
WHERE id = ANY($1::text[]) AND status IN ('pending', 'claimed')
"""


@dataclass(frozen=True, slots=True)
class NewRevalidation:
    """A request to queue: check ``(sensor, subject)`` of ``block_id`` on ``node``."""

    id: str
    node: str
    block_id: str
    sensor: str
    subject: str
    reason: str
    created_at: float
    send_at: float
    deadline_s: float


_NEW_FIELDS = tuple(NewRevalidation.__dataclass_fields__)  # the INSERT's column order


@dataclass(frozen=True, slots=True)
class ClaimedRevalidation(NewRevalidation):
    """A request this node claimed; ``attempts`` counts this claim."""

    attempts: int


async def enqueue_revalidations(conn: Executor, requests: Sequence[NewRevalidation]) -> list[str]:
    """Queue requests; a binding with an open request keeps it. The ids queued."""
    for r in requests:
        check_name(r.node, "node")
    if not requests:
        return []
    # One array per column: one statement, whatever the number of requests.
    columns = [[getattr(r, name) for r in requests] for name in _NEW_FIELDS]
    with translated("cannot queue revalidation requests"):
        rows = await conn.fetch(_INSERT, *columns)
    return [str(row[0]) for row in rows]


async def claim_revalidations(
    conn: Executor, node: str, *, claimer: str, limit: int, now: float
) -> list[ClaimedRevalidation]:
    """Claim up to ``limit`` of ``node``'s pending requests due at ``now``, oldest first.

    One statement (``FOR UPDATE SKIP LOCKED``): safe to call from several connections
    and processes at once; no request is returned to two callers.
    """
    check_name(node, "node")
    if not 0 < limit <= MAX_CLAIM:
        raise ValidationInputError([("limit", f"{limit!r} is not in 1..{MAX_CLAIM}")])
    with translated(f"cannot claim revalidation requests for node {node!r}"):
        rows = await conn.fetch(_CLAIM, node, now, limit, claimer)
    out = [
        ClaimedRevalidation(
            id=row[0],
            node=row[1],
            block_id=row[2],
            sensor=row[3],
            subject=row[4],
            reason=row[5],
            created_at=row[6],
            send_at=row[7],
            deadline_s=row[8],
            attempts=row[9],
        )
        for row in rows
    ]
    out.sort(key=lambda r: (r.send_at, r.id))  # UPDATE … RETURNING keeps no order
    return out


async def finish_revalidations(
    conn: Executor,
    request_ids: Sequence[str],
    status: str,
    *,
    now: float,
    outcome: str | None = None,
) -> int:
    """Close open requests as ``done``, ``failed`` or ``expired``; how many were open."""
    if status not in _FINAL:
        raise ValidationInputError([("status", f"{status!r} is not one of {sorted(_FINAL)}")])
    if not request_ids:
        return 0
    with translated("cannot finish revalidation requests"):
        done = await conn.execute(_FINISH, list(request_ids), status, now, outcome)
    return int(done.rsplit(" ", 1)[-1])


async def requeue_claims(
    conn: Executor,
    *,
    now: float,
    claimer: str | None = None,
    claimed_before: float | None = None,
) -> int:
    """Claimed requests back to ``pending`` (sent at ``now``): those of ``claimer`` (a
    node restarting requeues only its own), or those claimed before ``claimed_before``
    (the leader, for claimers that died). At least one of the two must be given."""
    if claimer is None and claimed_before is None:
        raise ValidationInputError([("claimer", "give a claimer or claimed_before")])
    with translated("cannot requeue claimed revalidation requests"):
        done = await conn.execute(
            "UPDATE cluster_revalidations SET status = 'pending', send_at = $1,"
            " claimed_by = NULL, claimed_at = NULL WHERE status = 'claimed'"
            " AND ($2::text IS NULL OR claimed_by = $2)"
            " AND ($3::float8 IS NULL OR claimed_at < $3)",
            now,
            claimer,
            claimed_before,
        )
    return int(done.rsplit(" ", 1)[-1])
