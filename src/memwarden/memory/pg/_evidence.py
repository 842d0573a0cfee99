"""Evidence behind a block on PostgreSQL: :class:`PgEvidence`, a read's receipt, what we
believed at a past time (``as_of``) and why a block stands where it does (``explain``).

The same contract as :class:`~memwarden.memory._evidence.Evidence` and
:func:`~memwarden.memory._explain.explain` on SQLite: this module reads the same rows
(arrays instead of ``IN`` lists, ``$n`` parameters) and hands them to the SQLite
modules' own rules (:func:`~memwarden.memory._evidence.receipts`,
:func:`~memwarden.memory._evidence.error_streak`,
:func:`~memwarden.memory._evidence.belief`,
:func:`~memwarden.memory._explain.explanation`), so both backends answer alike
(``tests/pg/test_evidence_contract.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwarden.errors import NotFoundError
from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._evidence import belief, error_streak, receipts
from memwarden.memory._explain import EXPLAIN_EVENT_LIMIT, explanation
from memwarden.memory.pg._reads import PgReads
from memwarden.memory.pg._revalidation import without_nul

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._results import Explanation, FactEvidence
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.policy import PolicyConfig

__all__ = ["PgEvidence"]

_BLOCK_SELECT = f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks WHERE id = $1"


class PgEvidence:
    """Receipts, as-of reads and explanations of blocks, on a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy

    async def receipts_for(self, block_ids: Sequence[str]) -> dict[str, FactEvidence]:
        """What a receipt needs about each block, in one read: its error streak, its open
        checks and the confirmation behind its current validation."""
        ids = without_nul(dict.fromkeys(block_ids))
        if not ids:
            return {}
        async with self.db.read() as conn:
            out = receipts(
                await conn.fetch(
                    "SELECT id, consecutive_errors FROM blocks WHERE id = ANY($1::text[])", ids
                ),
                await conn.fetch(  # open checks some sensor can answer
                    "SELECT r.block_id, r.send_at FROM revalidations r"
                    " JOIN blocks k ON k.id = r.block_id"
                    " JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor"
                    " AND g.subject = r.subject"
                    " WHERE r.status IN ('pending', 'sent') AND r.block_id = ANY($1::text[])",
                    ids,
                ),
                await conn.fetch(
                    "SELECT k.id, e.sensor, e.observed_at, e.observed, e.message, e.seq"
                    " FROM blocks k JOIN effects f ON f.block_rid = k.rid"
                    " JOIN events e ON e.seq = f.event_seq"
                    " WHERE e.outcome = 'confirmed' AND e.observed_at = k.validated_at"
                    " AND k.id = ANY($1::text[])",
                    ids,
                ),
                await conn.fetch(
                    "SELECT k.id, e.sensor, e.outcome, e.observed, e.message, f.state_after"
                    " FROM blocks k JOIN effects f ON f.block_rid = k.rid"
                    " AND f.event_seq = (SELECT max(event_seq) FROM effects"
                    " WHERE block_rid = k.rid)"
                    " JOIN events e ON e.seq = f.event_seq WHERE k.id = ANY($1::text[])",
                    ids,
                ),
            )
            for block_id in [b for b, ev in out.items() if ev.consecutive_errors]:
                rows = await conn.fetch(
                    "SELECT e.observed_at, e.message FROM effects f"
                    " JOIN events e ON e.seq = f.event_seq"
                    " WHERE f.block_rid = (SELECT rid FROM blocks WHERE id = $1)"
                    " AND e.outcome = 'error' ORDER BY f.event_seq DESC LIMIT $2",
                    block_id,
                    out[block_id].consecutive_errors,
                )
                error_streak(out[block_id], rows)
        return out

    async def believed_at(self, block_id: str, at: float) -> dict[str, Any]:
        """What we believed about a block at ``at``: its content version, state,
        reliability, validation and the last evidence committed before then (rebuilt
        from the event log, the block's history and the audit log, as on SQLite)."""
        if not without_nul([block_id]):
            raise NotFoundError("block", block_id)
        async with self.db.read() as conn:
            row = await conn.fetchrow(
                "SELECT rid, created_at, version, title, content, tags, validity_window_s,"
                " reliability FROM blocks WHERE id = $1",
                block_id,
            )
            if row is None:
                raise NotFoundError("block", block_id)
            history = await conn.fetch(
                "SELECT version, title, content, tags, replaced_at FROM block_history"
                " WHERE block_id = $1 ORDER BY version",
                block_id,
            )
            effects = await conn.fetch(
                "SELECT e.sensor, e.outcome, e.observed_at, e.received_at, e.message,"
                " e.observed, e.validity_window_s, f.state_after, f.reliability_before,"
                " f.reliability_after, f.detail FROM effects f"
                " JOIN events e ON e.seq = f.event_seq WHERE f.block_rid = $1"
                " ORDER BY e.seq",
                row[0],
            )
            archive = await conn.fetch(
                "SELECT at, action FROM audit WHERE block_id = $1"
                " AND action IN ('archive', 'restore') AND at <= $2 ORDER BY id",
                block_id,
                at,
            )
        return belief(
            block_id,
            at,
            tuple(row),
            history=[tuple(r) for r in history],
            effects=[tuple(r) for r in effects],
            archive=[tuple(r) for r in archive],
        )

    async def explain(self, block_id: str) -> Explanation:
        """Why a block stands where it does: state, reliability, retention, rank, promotion."""
        if not without_nul([block_id]):
            raise NotFoundError("block", block_id)
        now = self.clock.time()
        async with self.db.read() as conn:
            row = await conn.fetchrow(_BLOCK_SELECT, block_id)
            if row is None:
                raise NotFoundError("block", block_id)
            rec = record_from_row(tuple(row))
            times = [
                float(r[0])
                for r in await conn.fetch(
                    "SELECT at FROM accesses WHERE block_id = $1 ORDER BY at", block_id
                )
            ]
            sessions = int(
                await conn.fetchval("SELECT count(*) FROM sessions WHERE block_id = $1", block_id)
            )
        reads = PgReads(self.db, self.clock, self.policy)
        events = await reads.events_for(block_id, limit=EXPLAIN_EVENT_LIMIT)
        return explanation(rec, now, times=times, sessions=sessions, events=events, cfg=self.policy)
