"""The revalidation queue on PostgreSQL: :class:`PgRevalidations`, the due blocks, the
staleness sweep's marking and the requests that ask sensors to check again.

The same contract as :class:`~memwarden.memory._revalidation.Revalidations` on SQLite,
with its rules shared: which blocks go stale (:func:`stale_records`), the request rows
and the order their ids are handed out in (:func:`request_rows`), what a due request
says (:func:`due_requests`), a block's open requests (:func:`open_requests`), the
dependents pulled stale (:func:`~memwarden.memory.pg._apply.propagate_dependencies`, on
:func:`~memwarden.memory._dependencies.stale_dependents`). Only the SQL differs: arrays instead
of chunked ``IN`` lists, ``ON CONFLICT DO NOTHING`` on the partial unique index
``revalidations_open`` for SQLite's ``INSERT OR IGNORE`` (at most one open request per
binding, also between two nodes writing at once: the second waits for the first's commit
and inserts nothing), the sweep's blocks read ``FOR UPDATE`` (two sweeps at once change
each block once).

The sweep's read (:meth:`PgRevalidations.due_for_revalidation`) is an index range scan
of ``blocks_due``, the partial index on ``stale_at`` of the fresh and unverified blocks;
``tests/pg/test_revalidation_contract.py`` checks the plan and ``python -m benchmarks
pg_sweep`` its latency over a million blocks.

PostgreSQL text cannot hold NUL: an id with one names no row here, as on SQLite (it is
left out of the statements instead of making the server refuse them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwarden.errors import NotFoundError
from memwarden.memory._codec import EVIDENCE_COLUMNS, evidence_row
from memwarden.memory._model import RevalidationReason, RevalidationRequest, StaleReason
from memwarden.memory._results import DueBlock, StateChange
from memwarden.memory._revalidation import (
    due_requests,
    open_requests,
    request_rows,
    stale_records,
)
from memwarden.memory._sql import EVIDENCE_UPDATE, REVALIDATION_INSERT
from memwarden.memory.pg._apply import pg_sql, propagate_dependencies, record_falls
from memwarden.memory.pg._serving import claim_due, requeue_own

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = ["DUE_SQL", "PgRevalidations", "without_nul"]

# The sweep's read. Ties in stale_at go by rid, as SQLite's index gives them (its entries
# of one key are in rowid order): the same blocks, in the same order, on both backends.
DUE_SQL = (
    "SELECT id, stale_at, state, volatility, reliability FROM blocks"
    " WHERE stale_at <= $1 AND state IN ('fresh', 'unverified')"
    " ORDER BY stale_at, rid LIMIT $2"
)
_EVIDENCE = ", ".join(f"k.{c}" for c in EVIDENCE_COLUMNS)
_ID, _STATE = EVIDENCE_COLUMNS.index("id"), EVIDENCE_COLUMNS.index("state")
_BINDINGS_OF_RIDS = (
    "SELECT k.id, g.sensor, g.subject FROM bindings g"
    " JOIN blocks k ON k.rid = g.block_rid WHERE g.quarantine IS NULL"
    " AND g.block_rid = ANY($1::bigint[])"
)
_DUE_REQUESTS = (
    "SELECT r.id, r.block_id, r.sensor, r.subject, r.reason, r.created_at,"
    " r.deadline_s, r.attempts, g.selector FROM revalidations r"
    " JOIN blocks k ON k.id = r.block_id"
    " JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor"
    " AND g.subject = r.subject AND g.quarantine IS NULL"
    " WHERE r.status = 'pending' AND r.send_at <= $1 ORDER BY r.send_at, r.id, g.id LIMIT $2"
)
# The requests a node just claimed (memory.pg._serving.claim_due), as _DUE_REQUESTS reads.
_CLAIMED_REQUESTS = (
    "SELECT r.id, r.block_id, r.sensor, r.subject, r.reason, r.created_at,"
    " r.deadline_s, r.attempts - 1, g.selector FROM revalidations r"
    " JOIN blocks k ON k.id = r.block_id"
    " JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor"
    " AND g.subject = r.subject AND g.quarantine IS NULL AND g.served_by = $2"
    " WHERE r.id = ANY($1::text[]) ORDER BY r.send_at, r.id, g.id"
)
# SQLite runs one UPDATE per id given, so an id given twice is counted twice.
_SET_STATUS = (
    "UPDATE revalidations r SET status = $2, attempts = r.attempts + v.n * $3,"
    " finished_at = CASE WHEN $4 THEN $5 ELSE r.finished_at END,"
    " outcome = coalesce($6, r.outcome)"
    " FROM (SELECT u.id, count(*) AS n FROM unnest($1::text[]) AS u(id) GROUP BY u.id) AS v"
    " WHERE r.id = v.id"
)
_INSERT = pg_sql(REVALIDATION_INSERT)


def without_nul(values: Iterable[str]) -> list[str]:
    """``values`` without the ones PostgreSQL text cannot hold (NUL): such an id names no
    row, here as on SQLite."""
    return [v for v in values if "\x00" not in v]


def _count(status: str) -> int:
    """The row count of an ``UPDATE`` command status (``"UPDATE 3"``)."""
    return int(status.rsplit(" ", 1)[-1])


class PgRevalidations:
    """Due blocks, staleness and the revalidation requests, on a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy

    async def due_for_revalidation(
        self, *, limit: int = 1000, now: float | None = None
    ) -> list[DueBlock]:
        """Fresh or unverified blocks whose window has run out, oldest first (index range scan)."""
        at = self.clock.time() if now is None else now
        async with self.db.read() as conn:
            rows = await conn.fetch(DUE_SQL, at, max(0, limit))
        return list(map(DueBlock._make, rows))

    async def mark_stale(
        self,
        block_ids: Sequence[str],
        *,
        reason: StaleReason = StaleReason.EXPIRED,
        request: bool = True,
        send_at: Mapping[str, float] | None = None,
        dependents: list[StateChange] | None = None,
    ) -> list[str]:
        """Mark blocks stale (the sweep) and queue one revalidation request per binding.

        Returns the ids that actually changed state. Their dependents go stale too
        (reason ``dependency``); their state changes are appended to ``dependents``
        (every node also reads them from ``block_falls``).
        """
        now = self.clock.time()
        cfg = self.policy
        deadline = cfg.staleness.revalidation_timeout.total_seconds()
        ids = without_nul(dict.fromkeys(block_ids))

        async def job(conn: PgConnection) -> list[str]:
            rows = await conn.fetch(
                f"SELECT {_EVIDENCE} FROM blocks k WHERE k.id = ANY($1::text[])"
                " ORDER BY k.rid FOR UPDATE",
                ids,
            )
            before = {r[_ID]: r[_STATE] for r in rows}
            changed = stale_records(rows, now, reason)
            if not changed:
                return []
            # No effects row says so: every node's session notices read it here.
            falls = [(r.id, before[r.id], r.state, r.reliability) for r in changed]
            await record_falls(conn, falls, reason=reason.value, now=now)
            await conn.executemany(pg_sql(EVIDENCE_UPDATE), [evidence_row(r) for r in changed])
            if request:
                bindings = await conn.fetch(_BINDINGS_OF_RIDS, [r.rid for r in changed])
                requests = request_rows(bindings, reason.value, now, deadline, send_at or {})
                if requests:
                    await conn.executemany(_INSERT, requests)
            fallen = await propagate_dependencies(conn, [r.id for r in changed], now=now, cfg=cfg)
            if dependents is not None:
                dependents.extend(fallen)
            return [r.id for r in changed]

        if not ids:
            return []
        return await self.db.write(job, weight=max(1, len(ids)))

    async def due_revalidations(
        self, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """Pending revalidation requests whose send time has come, oldest first."""
        at = self.clock.time() if now is None else now
        async with self.db.read() as conn:
            # SQLite reads a negative LIMIT as none.
            rows = await conn.fetch(_DUE_REQUESTS, at, None if limit < 0 else limit)
        return due_requests(rows, at)

    async def claim_revalidations(
        self, node: str, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """This node's due requests (those whose binding it serves), oldest first, marked
        ``sent`` by it in the same transaction (``FOR UPDATE SKIP LOCKED``: two claimers
        never take one request)."""
        at = self.clock.time() if now is None else now

        async def job(conn: PgConnection) -> list[Any]:
            ids = await claim_due(conn, node, now=at, limit=limit)
            return list(await conn.fetch(_CLAIMED_REQUESTS, ids, node)) if ids else []

        if "\x00" in node:
            return []
        return due_requests(await self.db.write(job), at)

    async def set_revalidation_status(
        self, request_ids: Sequence[str], status: str, *, outcome: str | None = None
    ) -> None:
        """Mark requests ``sent``, ``done``, ``failed`` or ``expired``."""
        now = self.clock.time()
        final = status != "sent"
        ids = without_nul(request_ids)

        async def job(conn: PgConnection) -> None:
            await conn.execute(_SET_STATUS, ids, status, int(not final), final, now, outcome)

        if ids:
            await self.db.write(job, weight=max(1, len(ids)))

    async def answered_requests(self, request_ids: Sequence[str]) -> set[str]:
        """Which of these requests an event has answered (status ``done``), on any node."""
        ids = without_nul(dict.fromkeys(request_ids))
        if not ids:
            return set()
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT id FROM revalidations WHERE status = 'done' AND id = ANY($1::text[])",
                ids,
            )
        return {row[0] for row in rows}

    async def put_back_revalidation(self, request_id: str, *, send_at: float) -> bool:
        """A sent request that was not run (its binding's check is still running):
        pending again, sent at ``send_at``. False if it was answered meanwhile."""
        if not without_nul([request_id]):
            return False

        async def job(conn: PgConnection) -> bool:
            done = await conn.execute(
                "UPDATE revalidations SET status = 'pending', send_at = $1"
                " WHERE id = $2 AND status = 'sent'",
                send_at,
                request_id,
            )
            return _count(done) > 0

        return await self.db.write(job)

    async def requeue_sent_revalidations(self, *, node: str | None = None) -> int:
        """Requests left ``sent`` by a daemon that died before the answer: pending again;
        with ``node``, only those that node claimed (a node restarting on a shared
        database; the leader requeues dead nodes' claims).

        Call at start, before the scheduler runs; returns how many were requeued.
        """
        now = self.clock.time()

        async def job(conn: PgConnection) -> int:
            if node is not None:
                return await requeue_own(conn, node, now=now)
            return _count(
                await conn.execute(
                    "UPDATE revalidations SET status = 'pending', send_at = $1"
                    " WHERE status = 'sent'",
                    now,
                )
            )

        return await self.db.write(job)

    async def request_revalidation(
        self,
        block_id: str,
        *,
        reason: RevalidationReason = RevalidationReason.MANUAL,
        send_at: float | None = None,
    ) -> list[str]:
        """Queue a check of every binding of a block now; returns the request ids queued.

        A binding that already has an open request keeps it (one check per binding);
        a ``manual`` request also brings a waiting retry forward to now.
        """
        if not without_nul([block_id]):
            raise NotFoundError("block", block_id)
        now = self.clock.time()
        timeout_s = self.policy.staleness.revalidation_timeout.total_seconds()

        async def job(conn: PgConnection) -> list[str]:
            rid = await conn.fetchval("SELECT rid FROM blocks WHERE id = $1", block_id)
            if rid is None:
                raise NotFoundError("block", block_id)
            bindings = await conn.fetch(
                "SELECT $2::text, sensor, subject FROM bindings"
                " WHERE block_rid = $1 AND quarantine IS NULL",
                rid,
                block_id,
            )
            rows = request_rows(bindings, reason.value, now, timeout_s, send_at or now)
            if rows:
                await conn.executemany(_INSERT, rows)
            if reason == RevalidationReason.MANUAL:
                # Someone asked for a check now: a soft refutation's retry waiting for
                # its interval goes now (reads, on_read, do not: see the SQLite store).
                await conn.execute(
                    "UPDATE revalidations SET send_at = $1 WHERE block_id = $2"
                    " AND status = 'pending' AND send_at > $1",
                    now,
                    block_id,
                )
            found = await conn.fetch(
                "SELECT id FROM revalidations WHERE block_id = $1"
                " AND status IN ('pending', 'sent') ORDER BY id",
                block_id,
            )
            return [str(r[0]) for r in found]

        return await self.db.write(job)

    async def request_checks(
        self, block_ids: Sequence[str], *, reason: RevalidationReason
    ) -> dict[str, list[tuple[str, float]]]:
        """Queue a check of every binding of each block, in one transaction.

        A binding with an open request keeps it (concurrent readers share one check).
        Returns, per block, its open requests as ``(request id, send_at)``: a request
        whose ``send_at`` is in the future is a retry that waits its interval.
        """
        now = self.clock.time()
        timeout_s = self.policy.staleness.revalidation_timeout.total_seconds()
        ids = list(dict.fromkeys(block_ids))
        keys = without_nul(ids)

        async def job(conn: PgConnection) -> dict[str, list[tuple[str, float]]]:
            bindings = await conn.fetch(
                "SELECT k.id, g.sensor, g.subject FROM bindings g"
                " JOIN blocks k ON k.rid = g.block_rid WHERE k.id = ANY($1::text[])",
                keys,
            )
            rows = request_rows(bindings, reason.value, now, timeout_s)
            if rows:
                await conn.executemany(_INSERT, rows)
            found = await conn.fetch(
                "SELECT id, block_id, send_at FROM revalidations"
                " WHERE status IN ('pending', 'sent') AND block_id = ANY($1::text[])",
                keys,
            )
            return open_requests(ids, found)

        if not keys:
            return open_requests(ids, [])
        return await self.db.write(job, weight=max(1, len(keys)))
