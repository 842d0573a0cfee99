"""The revalidation queue: which blocks are due, marking them stale, and the requests
that ask their sensors to check again (queued, sent, answered, retried).

A request is one row of ``revalidations`` per binding; at most one is open per
binding (``INSERT OR IGNORE`` on a partial unique index), so concurrent readers and
the sweep share one check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwarden.memory._apply import propagate_dependencies
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import binding_from_row, evidence_record, evidence_row
from memwarden.memory._ids import new_id
from memwarden.memory._model import (
    RevalidationReason,
    RevalidationRequest,
    StaleReason,
)
from memwarden.memory._results import DueBlock
from memwarden.memory._sql import (
    EVIDENCE_SELECT,
    EVIDENCE_UPDATE,
    REVALIDATION_INSERT,
    load_record,
    select_in,
)
from memwarden.memory.policy import mark_stale

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory.policy import PolicyConfig

__all__ = ["Revalidations"]


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
    ) -> list[str]:
        """Mark blocks stale (the sweep) and queue one revalidation request per binding.

        Returns the ids that actually changed state.
        """
        now = self.clock.time()
        cfg = self.policy
        deadline = cfg.staleness.revalidation_timeout.total_seconds()
        ids = list(dict.fromkeys(block_ids))

        async def job(conn: aiosqlite.Connection) -> list[str]:
            rows = await select_in(conn, EVIDENCE_SELECT, ids)
            changed = []
            for row in rows:
                rec = evidence_record(row)
                if mark_stale(rec, now, reason):
                    changed.append(rec)
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
                    [
                        (
                            new_id(),
                            b,
                            s,
                            subj,
                            reason.value,
                            now,
                            (send_at or {}).get(b, now),
                            deadline,
                        )
                        for b, s, subj in bindings
                    ],
                )
            if changed:
                await propagate_dependencies(conn, [r.id for r in changed], now=now, cfg=cfg)
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
        out = []
        seen = set()
        for rid, block_id, sensor, subject, reason, created, deadline_s, attempts, sel in rows:
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

    async def requeue_sent_revalidations(self) -> int:
        """Requests left ``sent`` by a daemon that died before the answer: pending again.

        Call at start, before the scheduler runs; returns how many were requeued.
        """
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> int:
            cur = await conn.execute(
                "UPDATE revalidations SET status = 'pending', send_at = ? WHERE status = 'sent'",
                (now,),
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
                "SELECT sensor, subject FROM bindings WHERE block_rid = ? AND quarantine IS NULL",
                (rec.rid,),
            ) as cur:
                bindings = await cur.fetchall()
            rows = [
                (new_id(), block_id, sensor, subject, reason.value, now, send_at or now, timeout_s)
                for sensor, subject in bindings
            ]
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
                "SELECT id FROM revalidations WHERE block_id = ? AND status IN ('pending','sent')",
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
                REVALIDATION_INSERT,
                [
                    (new_id(), b, sensor, subject, reason.value, now, now, timeout_s)
                    for b, sensor, subject in bindings
                ],
            )
            out: dict[str, list[tuple[str, float]]] = {b: [] for b in ids}
            for rid, block_id, send_at in await select_in(
                conn,
                "SELECT id, block_id, send_at FROM revalidations"
                " WHERE status IN ('pending', 'sent') AND block_id IN ",
                ids,
            ):
                out[block_id].append((rid, send_at))
            return out

        return await self.db.write(job)
