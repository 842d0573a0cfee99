"""The store's upkeep: the maintenance passes, quarantine, compaction, explanations and
health, transfer, the MQTT outbox, binding proposals and the human review queue (a
group of :class:`~memwarden.memory.Store`'s methods, see
:mod:`memwarden.memory._store_base`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from memwarden.errors import ValidationInputError
from memwarden.memory import (
    _compaction,
    _explain,
    _maintenance,
    _outbox,
    _promotion,
    _proposals,
    _quarantine,
    _reviews,
    _transfer,
)
from memwarden.memory._store_base import _StoreBase

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

    import aiosqlite

    from memwarden.memory._model import Binding, ValidationEvent
    from memwarden.memory._results import ApplyResult, Explanation
    from memwarden.memory.policy import HealthReport


__all__: list[str] = []


class _Upkeep(_StoreBase):
    """The maintenance passes, quarantine, compaction, explanations and health, transfer, the
    MQTT outbox, binding proposals and the human review queue."""

    # ------------------------------------------------------------------ maintenance
    # The passes live in _promotion.py, _maintenance.py and _explain.py; these methods
    # are their public face.

    async def record_access(
        self, block_ids: Sequence[str], *, session: str | None = None
    ) -> list[str]:
        """Count a retrieval of each block (in ``session``); returns the ids made core.
        A session id holding a NUL is refused (:class:`ValidationInputError`) on both
        backends: PostgreSQL text cannot store one."""
        if session is not None and "\x00" in session:
            raise ValidationInputError([("session", "must not contain a NUL character")])
        if self._misc is not None:
            return await self._misc.record_access(
                block_ids, session=session, score_log=self.score_log
            )
        return await _promotion.record_accesses(
            self.db, self.clock, self.policy, block_ids, session=session, score_log=self.score_log
        )

    async def decay_cycle(self, *, chunk_rows: int | None = None) -> _maintenance.DecayReport:
        """Recompute retention set-based and archive what decayed below the threshold."""
        if self._pg is not None:
            return await self._pg.maintenance.decay_cycle(chunk_rows=chunk_rows)
        return await _maintenance.decay_cycle(
            self.db, self.clock, self.policy, chunk_rows=chunk_rows
        )

    async def heuristic_cycle(self, *, chunk_rows: int | None = None) -> dict[str, Any]:
        """The self-tuning rules' self-tuning pass over the blocks read since the previous one."""
        if self._pg is not None:
            return await self._pg.maintenance.heuristic_cycle(chunk_rows=chunk_rows)
        return await _maintenance.heuristic_cycle(
            self.db, self.policy, chunk_rows=chunk_rows, now=self.clock.time()
        )

    async def consolidate(self, *, limit: int | None = None) -> _promotion.ConsolidationReport:
        """The consolidation pass: score short_term blocks, promote the ones that pass."""
        if self._pg is not None:
            return await self._pg.maintenance.consolidate(limit=limit)
        return await _promotion.consolidate(
            self.db, self.clock, self.policy, limit=limit, score_log=self.score_log
        )

    # ------------------------------------------------------------------ quarantine
    # Implemented in _quarantine.py; these methods are its public face.

    async def stored_bindings(self, sensors: Sequence[str]) -> list[_quarantine.StoredBinding]:
        """Every stored binding of these sensors, raw (quarantined ones included)."""
        if self._pg is not None:
            return await self._pg.quarantine.stored_bindings(sensors)
        return await _quarantine.stored_bindings(self.db, sensors)

    async def quarantined_bindings(self) -> list[_quarantine.StoredBinding]:
        """The bindings quarantined because today's rules refuse them."""
        if self._pg is not None:
            return await self._pg.quarantine.quarantined_bindings()
        return await _quarantine.quarantined(self.db)

    async def set_quarantine(
        self,
        failing: Sequence[tuple[_quarantine.StoredBinding, str]],
        released: Sequence[int] = (),
    ) -> int:
        """Quarantine ``(binding, rule)`` pairs (an error event each), release others."""
        if self._pg is not None:
            return await self._pg.quarantine.set_quarantine(failing, released)
        return await _quarantine.set_quarantine(
            self.db, self.clock, failing, released, apply=self._store.apply_events
        )

    async def compact_events(
        self, cfg: _compaction.CompactionConfig | None = None
    ) -> _compaction.CompactionReport:
        """Compact old runs of identical outcomes in the event log; prune dead letters."""
        if self._pg is not None:
            return await self._pg.maintenance.compact_events(cfg or self.compaction)
        return await _compaction.compact(self.db, self.clock, cfg or self.compaction)

    async def explain(self, block_id: str) -> Explanation:
        """Why a block stands where it does: state, reliability, retention, rank, promotion."""
        if self._pg is not None:
            return await self._pg.evidence.explain(block_id)
        return await _explain.explain(self.db, self.clock, self.policy, block_id)

    async def health(
        self,
        *,
        failing_sensors: Iterable[str] = (),
        sensors_total: int = 0,
        namespaces: Sequence[str] | None = None,
    ) -> HealthReport:
        """The 0-100 health score and its warnings, from aggregate queries (over the
        blocks of ``namespaces`` only, when given)."""
        if self._misc is not None:
            return await self._misc.health(
                failing_sensors=failing_sensors,
                sensors_total=sensors_total,
                namespaces=namespaces,
            )
        return await _explain.health(
            self.db,
            self.clock,
            self.policy,
            failing_sensors=failing_sensors,
            sensors_total=sensors_total,
            namespaces=namespaces,
        )

    # ------------------------------------------------------------------ helpers

    # ------------------------------------------------------------------ transfer
    # Implemented in _transfer.py; these methods are its public face.

    async def export_blocks(
        self, *, after: str | None = None, limit: int = 500
    ) -> list[dict[str, Any]]:
        """A page of whole blocks (by id, after ``after``) as export objects: record,
        bindings, dependencies, validation history and earlier versions."""
        if self._pg is not None:
            return await self._pg.transfer.export_blocks(after=after, limit=limit)
        blocks = await self._store.list_blocks({"after": after, "limit": limit})
        async with self.db.read() as conn:
            return await _transfer.export_rows(conn, [b.model_dump(mode="json") for b in blocks])

    async def import_blocks(
        self,
        rows: Sequence[Mapping[str, Any]],
        *,
        quarantine: Mapping[tuple[int, int], str] | None = None,
        actor: str = "import",
    ) -> _transfer.ImportReport:
        """Store export objects whose block ids are new, as they were (state, validation,
        history); blocks already here are left unchanged. All or nothing per call."""
        if self._pg is not None:
            added = await self._pg.transfer.import_blocks(rows, quarantine=quarantine, actor=actor)
            self._queued()
            return added
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> _transfer.ImportReport:
            report = await _transfer.import_rows(conn, rows, quarantine=quarantine, now=now)
            if report.added:
                await conn.execute(
                    "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?,?,?,?,?)",
                    (now, actor, "import", None, json.dumps({"blocks": len(report.added)})),
                )
            return report

        report = await self.db.write(job, weight=max(1, len(rows)))
        self._queued()
        return report

    # ------------------------------------------------------------------ MQTT outbox
    # Implemented in _outbox.py; these methods are its public face.

    async def outbox_put(
        self, messages: Sequence[tuple[str, bytes, int, bool]], *, max_rows: int
    ) -> int:
        """Keep ``(topic, payload, qos, retain)`` messages to publish later; returns how many
        of the oldest were dropped to stay within ``max_rows``."""
        if self._misc is not None:
            return await self._misc.outbox_put(messages, max_rows=max_rows)
        return await _outbox.put(self.db, self.clock, messages, max_rows=max_rows)

    async def outbox_peek(self, *, limit: int = 500) -> list[_outbox.OutboxMessage]:
        """The oldest messages waiting to be published."""
        if self._misc is not None:
            return await self._misc.outbox_peek(limit=limit)
        return await _outbox.peek(self.db, limit=limit)

    async def outbox_delete(self, ids: Sequence[int]) -> None:
        """Forget messages that were published."""
        if self._misc is not None:
            await self._misc.outbox_delete(ids)
            return
        await _outbox.delete(self.db, ids)

    async def outbox_stats(self) -> _outbox.OutboxStats:
        """How many messages wait, and how many were ever dropped because the outbox was full."""
        if self._misc is not None:
            return await self._misc.outbox_stats()
        return await _outbox.stats(self.db)

    async def agent_high_water(self, agents: Sequence[str]) -> dict[str, int]:
        """The highest ``seq`` stored for each remote agent run (absent when none)."""
        if self._misc is not None:
            return await self._misc.agent_high_water(agents)
        return await _outbox.agent_high_water(self.db, agents)

    # ------------------------------------------------------------------ proposals
    # Implemented in _proposals.py; these methods are its public face.

    async def add_proposals(self, proposals: Iterable[_proposals.NewProposal]) -> int:
        """Store the proposals not made before (a rejected one is not made again)."""
        if self._pg is not None:
            return await self._pg.proposals.add_proposals(proposals)
        return await _proposals.add_proposals(self.db, self.clock, proposals)

    async def list_proposals(
        self,
        *,
        status: _proposals.ProposalStatus | Literal["all"] = "pending",
        block_id: str | None = None,
        limit: int = 100,
        namespaces: Sequence[str] | None = None,
    ) -> list[_proposals.Proposal]:
        """Proposals of a status (and block; of ``namespaces``' blocks), oldest first."""
        if self._pg is not None:
            return await self._pg.proposals.list_proposals(
                status=status, block_id=block_id, limit=limit, namespaces=namespaces
            )
        return await _proposals.list_proposals(
            self.db, status=status, block_id=block_id, limit=limit, namespaces=namespaces
        )

    async def get_proposal(self, proposal_id: str) -> _proposals.Proposal:
        if self._pg is not None:
            return await self._pg.proposals.get_proposal(proposal_id)
        return await _proposals.get(self.db, proposal_id)

    async def decide_proposal(
        self,
        proposal_id: str,
        *,
        accept: bool,
        actor: str,
        binding: Binding | None = None,
    ) -> _proposals.Proposal:
        """Accept (apply it; ``binding``: a binding proposal as its sensor validated it) or
        reject a pending proposal."""
        if self._pg is not None:
            return await self._pg.proposals.decide_proposal(
                proposal_id, accept=accept, actor=actor, binding=binding
            )
        return await _proposals.decide(
            self.db, self.clock, proposal_id, accept=accept, actor=actor, binding=binding
        )

    async def retire_proposals(self) -> int:
        """Pending proposals that no longer apply (the block bound since, archived or
        refuted) become ``obsolete``; how many."""
        if self._pg is not None:
            return await self._pg.proposals.retire_proposals()
        return await _proposals.retire(self.db, self.clock)

    async def unbound_live(
        self, *, after_rid: int = 0, limit: int = 100
    ) -> list[tuple[int, str, str, str, str]]:
        """Live blocks without a binding, by rid: ``(rid, id, title, content, namespace)``."""
        if self._pg is not None:
            return await self._pg.proposals.unbound_live(after_rid=after_rid, limit=limit)
        return await _proposals.unbound_live(self.db, after_rid=after_rid, limit=limit)

    async def bound_to(
        self,
        subjects: Iterable[tuple[str, str]],
        *,
        per_subject: int = 3,
        namespace: str | None = None,
    ) -> dict[tuple[str, str], list[str]]:
        """The live blocks bound to each ``(sensor, subject)`` (of ``namespace`` only)."""
        if self._pg is not None:
            return await self._pg.proposals.bound_to(
                subjects, per_subject=per_subject, namespace=namespace
            )
        return await _proposals.bound_to(
            self.db, subjects, per_subject=per_subject, namespace=namespace
        )

    # ------------------------------------------------------------------ human review queue
    # Implemented in _reviews.py; these methods are its public face.

    async def list_reviews(
        self, *, status: str = "pending", limit: int = 100, namespaces: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Review items (``pending``, ``decided`` or ``all``), each with its block's summary
        (of ``namespaces``' blocks only, when given)."""
        if self._pg is not None:
            return await self._pg.reviews.list_reviews(
                status=status, limit=limit, namespaces=namespaces
            )
        return await _reviews.list_reviews(
            self._store, status=status, limit=limit, namespaces=namespaces
        )

    async def get_review(self, review_id: str, *, events: int = 10) -> dict[str, Any]:
        """One review item with its block and the block's last events (the evidence)."""
        if self._pg is not None:
            return await self._pg.reviews.get_review(review_id, events=events)
        return await _reviews.get_review(self._store, review_id, events=events)

    async def decide_review(
        self,
        review_id: str,
        decision: str,
        *,
        reviewer: str,
        comment: str = "",
        new_content: str | None = None,
        sensor: str = "review",
        apply: Callable[[Sequence[ValidationEvent]], Awaitable[ApplyResult]] | None = None,
    ) -> dict[str, Any]:
        """Confirm, reject or edit (``new_content``) a review item, recording who decided.
        The decision's event goes through ``apply`` (the daemon's bus; by default
        :meth:`apply_events`) while the item is still open."""
        if self._pg is not None:
            return await self._pg.reviews.decide_review(
                review_id,
                decision,
                reviewer=reviewer,
                comment=comment,
                new_content=new_content,
                sensor=sensor,
                apply=apply,
            )
        return await _reviews.decide_review(
            self._store,
            review_id,
            decision,
            reviewer=reviewer,
            comment=comment,
            new_content=new_content,
            sensor=sensor,
            apply=apply,
        )

    async def queue_review(self, block_id: str, *, reason: str) -> _reviews.Review:
        """Put a block in the review queue with a reason; the open item if it already
        has one (what a review sensor queues)."""
        if self._pg is not None:
            return await self._pg.reviews.queue_review(block_id, reason=reason)
        return await _reviews.queue_review(self._store, block_id, reason=reason)

    async def escalation_candidates(
        self,
        *,
        block_ids: Sequence[str],
        below: float,
        now: float,
        unbound_low_volatility: bool = True,
        limit: int = 500,
    ) -> list[tuple[str, str]]:
        """Blocks a human should look at, with the reason, that have no open item yet
        (:func:`memwarden.memory._reviews.escalation_candidates`)."""
        if self._pg is not None:
            return await self._pg.reviews.escalation_candidates(
                block_ids=block_ids,
                below=below,
                now=now,
                unbound_low_volatility=unbound_low_volatility,
                limit=limit,
            )
        return await _reviews.escalation_candidates(
            self._store,
            block_ids=block_ids,
            below=below,
            now=now,
            unbound_low_volatility=unbound_low_volatility,
            limit=limit,
        )
