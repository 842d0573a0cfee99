"""The revalidation queue: which blocks are due, marking them stale, and the requests
that ask their sensors to check again (queued, sent, answered, retried).

A request is one row of ``revalidations`` per binding; at most one is open per
binding (``INSERT OR IGNORE`` on a partial unique index), so concurrent readers and
the sweep share one check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memwarden.memory._clock import from_ts
from memwarden.memory._codec import binding_from_row, evidence_record, evidence_row
from memwarden.memory._dependencies import propagate_dependencies
from memwarden.memory._ids import new_id
from memwarden.memory._model import (
    RevalidationReason,
    RevalidationRequest,
    StaleReason,
)
from memwarden.memory._results import DueBlock, StateChange
from memwarden.memory._sql import (
    EVIDENCE_SELECT,
    EVIDENCE_UPDATE,
    REVALIDATION_INSERT,
    load_record,
    select_in,
)
from memwarden.memory.policy import mark_stale

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "Revalidations",
    "due_requests",
    "open_requests",
    "request_rows",
    "stale_records",
]


class Revalidations:
    """Due blocks, staleness and the revalidation requests."""

    def __init__(self, db: Database, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy

    async def due_for_revalidation(
        self, *, limit: int = 1000, now: float | None = None
    ) -> list[DueBlock]:
        """Fresh or unverified blocks whose window has run out, oldest first (index range scan)."""
        at = self.clock.time() if now is None else now
        async with self.db.read() as conn:
            rows = await conn.execute_fetchall(
                "SELECT id, stale_at, state, volatility, reliability FROM blocks"
                " WHERE stale_at <= ? AND state IN ('fresh', 'unverified')"
                " ORDER BY stale_at LIMIT ?",
                (at, max(0, limit)),
            )
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
        (reason ``dependency``); their state changes are appended to ``dependents``.
        """
        now = self.clock.time()
        cfg = self.policy
        deadline = cfg.staleness.revalidation_timeout.total_seconds()
        ids = list(dict.fromkeys(block_ids))

        async def job(conn: aiosqlite.Connection) -> list[str]:
            changed = stale_records(await select_in(conn, EVIDENCE_SELECT, ids), now, reason)
            await conn.executemany(EVIDENCE_UPDATE, [evidence_row(r) for r in changed])
            if request and changed:
                bindings = await select_in(
                    conn,
                    "SELECT k.id, g.sensor, g.subject FROM bindings g"
                    " JOIN blocks k ON k.rid = g.block_rid WHERE g.quarantine IS NULL"
                    " AND g.block_rid IN ",
                    [r.rid for r in changed],
                )
                await conn.executemany(
                    REVALIDATION_INSERT,
                    request_rows(bindings, reason.value, now, deadline, send_at or {}),
                )
            if changed:
                fallen = await propagate_dependencies(
                    conn, [r.id for r in changed], now=now, cfg=cfg
                )
                if dependents is not None:
                    dependents.extend(fallen)
            return [r.id for r in changed]

        return await self.db.write(job)

    async def due_revalidations(
        self, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """Pending revalidation requests whose send time has come, oldest first."""
        at = self.clock.time() if now is None else now
        async with (
            self.db.read() as conn,
            conn.execute(
                "SELECT r.id, r.block_id, r.sensor, r.subject, r.reason, r.created_at,"
                " r.deadline_s, r.attempts, g.selector FROM revalidations r"
                " JOIN blocks k ON k.id = r.block_id"
                " JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor"
                " AND g.subject = r.subject AND g.quarantine IS NULL"
                " WHERE r.status = 'pending' AND r.send_at <= ? ORDER BY r.send_at LIMIT ?",
                (at, limit),
            ) as cur,
        ):
            rows = await cur.fetchall()
        return due_requests(rows, at)

    async def set_revalidation_status(
        self, request_ids: Sequence[str], status: str, *, outcome: str | None = None
    ) -> None:
        """Mark requests ``sent``, ``done``, ``failed`` or ``expired``."""
        now = self.clock.time()
        final = status != "sent"

        async def job(conn: aiosqlite.Connection) -> None:
            await conn.executemany(
                "UPDATE revalidations SET status = ?, attempts = attempts + ?,"
                " finished_at = CASE WHEN ? THEN ? ELSE finished_at END,"
                " outcome = coalesce(?, outcome) WHERE id = ?",
                [(status, int(not final), final, now, outcome, r) for r in request_ids],
            )

        await self.db.write(job)

    async def answered_requests(self, request_ids: Sequence[str]) -> set[str]:
        """Which of these requests an event has answered (status ``done``)."""
        ids = list(dict.fromkeys(request_ids))
        if not ids:
            return set()
        async with self.db.read() as conn:
            rows = await select_in(
                conn, "SELECT id FROM revalidations WHERE status = 'done' AND id IN ", ids
            )
        return {row[0] for row in rows}

    async def put_back_revalidation(self, request_id: str, *, send_at: float) -> bool:
        """A sent request that was not run (its binding's check is still running):
        pending again, sent at ``send_at``. False if it was answered meanwhile."""

        async def job(conn: aiosqlite.Connection) -> bool:
            cur = await conn.execute(
                "UPDATE revalidations SET status = 'pending', send_at = ?"
                " WHERE id = ? AND status = 'sent'",
                (send_at, request_id),
            )
            return bool(cur.rowcount)

        return await self.db.write(job)

    async def requeue_sent_revalidations(self, *, node: str | None = None) -> int:
        """Requests left ``sent`` by a daemon that died before the answer: pending again;
        with ``node``, only those that node claimed.

        Call at start, before the scheduler runs; returns how many were requeued.
        """
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> int:
            cur = await conn.execute(
                "UPDATE revalidations SET status = 'pending', send_at = ? WHERE status = 'sent'"
                " AND (? IS NULL OR node = ?)",
                (now, node, node),
            )
            return int(cur.rowcount)

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
        now = self.clock.time()
        timeout_s = self.policy.staleness.revalidation_timeout.total_seconds()

        async def job(conn: aiosqlite.Connection) -> list[str]:
            rec = await load_record(conn, block_id)
            async with conn.execute(
                "SELECT ?, sensor, subject FROM bindings"
                " WHERE block_rid = ? AND quarantine IS NULL",
                (block_id, rec.rid),
            ) as cur:
                bindings = await cur.fetchall()
            rows = request_rows(bindings, reason.value, now, timeout_s, send_at or now)
            await conn.executemany(REVALIDATION_INSERT, rows)
            if reason == RevalidationReason.MANUAL:
                # Someone asked for a check now: a soft refutation's retry waiting for
                # its interval goes now. Reads (on_read) do not: they would turn a
                # retry interval into an immediate re-check again.
                await conn.execute(
                    "UPDATE revalidations SET send_at = ? WHERE block_id = ?"
                    " AND status = 'pending' AND send_at > ?",
                    (now, block_id, now),
                )
            async with conn.execute(
                "SELECT id FROM revalidations WHERE block_id = ? AND status IN ('pending','sent')"
                " ORDER BY id",
                (block_id,),
            ) as cur:
                return [r[0] for r in await cur.fetchall()]

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

        async def job(conn: aiosqlite.Connection) -> dict[str, list[tuple[str, float]]]:
            bindings = await select_in(
                conn,
                "SELECT k.id, g.sensor, g.subject FROM bindings g"
                " JOIN blocks k ON k.rid = g.block_rid WHERE k.id IN ",
                ids,
            )
            await conn.executemany(
                REVALIDATION_INSERT, request_rows(bindings, reason.value, now, timeout_s)
            )
            return open_requests(
                ids,
                await select_in(
                    conn,
                    "SELECT id, block_id, send_at FROM revalidations"
                    " WHERE status IN ('pending', 'sent') AND block_id IN ",
                    ids,
                ),
            )

        return await self.db.write(job)


# ------------------------------------------------------------------ shared by the backends
# The rules of the queue without SQL: the PostgreSQL store's PgRevalidations (memory/pg/
# _revalidation.py) reads and writes the same rows and runs these on them.


def stale_records(
    rows: Iterable[Iterable[Any]], now: float, reason: StaleReason
) -> list[BlockRecord]:
    """The blocks (their evidence rows, ``EVIDENCE_COLUMNS``) that go stale now for
    ``reason``, marked so, in rid order (every backend changes them in one order)."""
    changed = []
    for row in sorted((tuple(r) for r in rows), key=lambda r: r[0]):
        rec = evidence_record(row)
        if mark_stale(rec, now, reason):
            changed.append(rec)
    return changed


def request_rows(
    bindings: Iterable[Iterable[Any]],
    reason: str,
    now: float,
    timeout_s: float,
    send_at: Mapping[str, float] | float | None = None,
) -> list[tuple[Any, ...]]:
    """The ``REVALIDATION_INSERT`` rows asking for a check of each binding (block id,
    sensor, subject), sorted so every backend hands out the ids in one order. Sent at
    ``send_at`` (per block id when a mapping; ``now`` when missing)."""
    rows = []
    for block_id, sensor, subject in sorted(tuple(r) for r in bindings):
        at = send_at.get(block_id, now) if isinstance(send_at, Mapping) else send_at or now
        rows.append((new_id(), block_id, sensor, subject, reason, now, at, timeout_s))
    return rows


def due_requests(rows: Iterable[Iterable[Any]], at: float) -> list[RevalidationRequest]:
    """Requests from the rows of the due query (id, block id, sensor, subject, reason,
    created_at, deadline_s, attempts, selector), each once, as sent at ``at``."""
    out = []
    seen = set()
    for row in rows:
        rid, block_id, sensor, subject, reason, created, deadline_s, attempts, sel = row
        if rid in seen:
            continue
        seen.add(rid)
        out.append(
            RevalidationRequest(
                id=rid,
                block_id=block_id,
                sensor=sensor,
                subject=subject,
                binding=binding_from_row(sensor, subject, sel),
                reason=RevalidationReason(reason),
                created_at=from_ts(at),
                deadline=from_ts(at + deadline_s),
                attempts=attempts,
                queued_at=from_ts(created),
            )
        )
    return out


def open_requests(
    block_ids: Sequence[str], rows: Iterable[Iterable[Any]]
) -> dict[str, list[tuple[str, float]]]:
    """Per block (every one asked about), its open requests ``(id, send_at)`` by id,
    from rows of (request id, block id, send_at)."""
    out: dict[str, list[tuple[str, float]]] = {b: [] for b in block_ids}
    for rid, block_id, send_at in sorted(tuple(r) for r in rows):
        out[block_id].append((rid, send_at))
    return out
