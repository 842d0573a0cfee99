"""The store's writes: blocks, erasure, settings, events, staleness and revalidation,
and the evidence behind a fact (a group of :class:`~memwarden.memory.Store`'s methods,
see :mod:`memwarden.memory._store_base`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from memwarden.memory import _erasure, _retention
from memwarden.memory._model import RevalidationReason, StaleReason
from memwarden.memory._revalidation import Revalidations
from memwarden.memory._serving import serve_all
from memwarden.memory._store_base import _StoreBase

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from memwarden.memory._apply import EventLog
    from memwarden.memory._model import Block, NewBlock, RevalidationRequest, ValidationEvent
    from memwarden.memory._reads import Reads
    from memwarden.memory._results import (
        ApplyResult,
        BlockPatch,
        DueBlock,
        FactEvidence,
        StateChange,
    )


__all__: list[str] = []


class _Writes(_StoreBase):
    """Blocks, erasure, settings, events, staleness and revalidation, and the evidence
    behind a fact."""

    # ------------------------------------------------------------------ blocks: writes

    async def add(
        self, new: NewBlock | Mapping[str, Any], *, actor: str = "agent", dedupe: bool = False
    ) -> Block:
        """Store a block (with its bindings); returns it as stored.

        With ``dedupe``, a block whose normalised content (casefolded, whitespace
        collapsed) equals a live (not archived) block's is not stored again: that block
        is returned, with ``duplicate_of`` set to its id.
        """
        duplicates: set[str] = set()
        ids = await self._store.add_many([new], actor=actor, dedupe=dedupe, duplicates=duplicates)
        block = await self._store.get(ids[0])
        if ids[0] in duplicates:
            block = block.model_copy(update={"duplicate_of": ids[0]})
        return block

    async def add_many(
        self,
        news: Sequence[NewBlock | Mapping[str, Any]],
        *,
        actor: str = "agent",
        dedupe: bool = False,
        duplicates: set[str] | None = None,
    ) -> list[str]:
        """Store many blocks in one transaction; returns their ids in order.

        With ``dedupe``, a block whose normalised content equals a live block's (or an
        earlier one's in the same call) is not stored: its place in the answer holds the
        existing id, which is also added to ``duplicates``.
        """
        ids = await self._blocks.add_many(news, actor=actor, dedupe=dedupe, duplicates=duplicates)
        self._queued()
        return ids

    async def update(
        self,
        block_id: str,
        patch: BlockPatch | Mapping[str, Any],
        *,
        actor: str = "agent",
        expected_version: int | None = None,
    ) -> Block:
        """Edit a block. A new text (title, content, tags) or new bindings are a new
        ``version``: the old one is kept in history, the block is unverified again, and a
        new text demotes it from core. With ``expected_version`` the edit applies only to
        that version (else :class:`VersionConflictError`, nothing changed)."""
        await self._blocks.update(block_id, patch, actor=actor, expected_version=expected_version)
        self._queued()
        return await self._store.get(block_id)

    async def archive(self, block_id: str, *, reason: str, actor: str = "agent") -> Block:
        """Move a block to cold storage (out of search) with a reason."""
        await self._blocks.archive(block_id, reason=reason, actor=actor)
        return await self._store.get(block_id)

    async def restore(self, block_id: str, *, actor: str = "agent") -> Block:
        """Bring an archived block back; it returns unverified until a sensor confirms it."""
        await self._blocks.restore(block_id, actor=actor)
        return await self._store.get(block_id)

    async def delete(self, block_id: str, *, actor: str = "agent", reason: str = "") -> None:
        """Delete a block for good. The event log and an audit row keep the trace."""
        await self._blocks.delete(block_id, actor=actor, reason=reason)

    async def request_review(self, block_id: str, *, reason: str) -> dict[str, Any]:
        """Put a block in the human review queue (one open item per block)."""
        return await self._blocks.request_review(block_id, reason=reason)

    # ------------------------------------------------------------------ erasure
    # Implemented in _erasure.py; these methods are its public face.

    async def erasure_targets(
        self,
        *,
        ids: Sequence[str] = (),
        tag: str | None = None,
        query: str | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> list[_erasure.ErasureTarget]:
        """The blocks an erasure by full ``ids``, ``tag`` or ``query`` (words; archived
        blocks included) would take: what a dry run lists. An unknown id (or one of a
        namespace not in ``namespaces``, when given) is :class:`NotFoundError`."""
        if self._pg is not None:
            return await self._pg.erasure.erasure_targets(
                ids=ids, tag=tag, query=query, namespaces=namespaces
            )
        return await _erasure.select_targets(
            self.db, ids=ids, tag=tag, query=query, namespaces=namespaces
        )

    async def visible_ids(self, block_ids: Sequence[str], namespaces: Sequence[str]) -> list[str]:
        """Those of ``block_ids`` that are blocks of ``namespaces``."""
        if self._pg is not None:
            return await self._pg.erasure.visible_ids(block_ids, namespaces)
        return await cast("Reads", self._reads).visible_ids(block_ids, namespaces)

    async def erase(
        self, block_ids: Sequence[str], *, actor: str, reason: str = "", vacuum: bool = False
    ) -> _erasure.ErasureReport:
        """Remove these blocks' content from everywhere the store keeps it (see
        :mod:`~memwarden.memory._erasure`): rows, history, bindings, the search index,
        the events that reached them, reviews, the score log, the outbox; a tombstone per
        block stays. Then the WAL is checkpointed and truncated (after a ``VACUUM`` of
        the whole file, with ``vacuum``). All or nothing: an unknown id changes nothing.
        On PostgreSQL, ``vacuum`` is ``VACUUM (FULL, ANALYZE)`` of the tables it touched
        (:mod:`~memwarden.memory.pg._erasure`).
        """
        if self._pg is not None:
            return await self._pg.erasure.erase(
                block_ids, actor=actor, reason=reason, vacuum=vacuum
            )
        report = await _erasure.erase(self.db, self.clock, block_ids, actor=actor, reason=reason)
        if self.vectors is not None:  # the rows went with the blocks (cascade); memory too
            await self.vectors.prune()
        score_log = self.score_log
        if score_log is not None:
            report.score_log_lines = await asyncio.to_thread(score_log.drop_blocks, report.erased)
        answer = await _erasure.checkpoint(self.path, vacuum=vacuum)
        report.vacuumed = vacuum
        report.wal_checkpoint = answer
        report.wal_truncated = answer["busy"] == 0
        return report

    async def enforce_retention(
        self, cfg: _retention.RetentionConfig
    ) -> _retention.RetentionReport:
        """One retention pass (``[retention]``): archive, purge, drop old events and score
        lines as configured; nothing when nothing is (see :mod:`~memwarden.memory._retention`)."""
        if self._pg is not None:
            return await self._pg.erasure.enforce_retention(cfg)
        return await _retention.enforce(self._store, cfg)

    async def erasures(
        self, *, block_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The erasure log (tombstones: id, when, who, why, rows removed), newest first."""
        if self._pg is not None:
            return await self._pg.erasure.erasures(block_id=block_id, limit=limit)
        return await _erasure.tombstones(self.db, block_id=block_id, limit=limit)

    async def get_meta(self, key: str) -> str | None:
        """A small fact the daemon keeps about itself."""
        return await self._reads.get_meta(key)

    async def set_meta(self, key: str, value: str) -> None:
        await self._blocks.set_meta(key, value)

    # ------------------------------------------------------------------ events

    async def apply_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> ApplyResult:
        """Append events to the log and apply them to every block they reach, atomically.

        Returns once the transaction committed. Duplicates (same ``event_id``) are stored
        once; an observation from the future is rejected (dead-lettered), not applied.
        With ``bound_only`` (events from outside), an event naming a ``block_id`` whose
        block has no binding for the event's sensor is rejected too, in the same
        transaction that applies the others.
        """
        return await self._events.apply_events(events, bound_only=bound_only)

    async def dead_letter(self, *, source: str, reason: str, payload: str | bytes) -> None:
        """Keep a rejected input with the reason (never applied)."""
        if self._misc is not None:
            await self._misc.dead_letter(source=source, reason=reason, payload=payload)
            return
        await cast("EventLog", self._events).dead_letter(
            source=source, reason=reason, payload=payload
        )

    # ------------------------------------------------------------------ staleness

    async def due_for_revalidation(
        self, *, limit: int = 1000, now: float | None = None
    ) -> list[DueBlock]:
        """Fresh or unverified blocks whose window has run out, oldest first (index range scan)."""
        return await self._revalidations.due_for_revalidation(limit=limit, now=now)

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
        return await self._revalidations.mark_stale(
            block_ids, reason=reason, request=request, send_at=send_at, dependents=dependents
        )

    async def due_revalidations(
        self, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """Pending revalidation requests whose send time has come, oldest first."""
        return await self._revalidations.due_revalidations(limit=limit, now=now)

    async def set_revalidation_status(
        self, request_ids: Sequence[str], status: str, *, outcome: str | None = None
    ) -> None:
        """Mark requests ``sent``, ``done``, ``failed`` or ``expired``."""
        await self._revalidations.set_revalidation_status(request_ids, status, outcome=outcome)

    async def answered_requests(self, request_ids: Sequence[str]) -> set[str]:
        """Which of these revalidation requests an event has answered (status ``done``),
        whichever node applied it."""
        return await self._revalidations.answered_requests(request_ids)

    async def put_back_revalidation(self, request_id: str, *, send_at: float) -> bool:
        """A sent request that was not run (its binding's check is still running):
        pending again, sent at ``send_at``. False if it was answered meanwhile."""
        return await self._revalidations.put_back_revalidation(request_id, send_at=send_at)

    async def requeue_sent_revalidations(self, *, node: str | None = None) -> int:
        """Requests left ``sent`` by a daemon that died before the answer: pending again;
        with ``node``, only those that node claimed (a node of several restarting).

        Call at start, before the scheduler runs; returns how many were requeued.
        """
        return await self._revalidations.requeue_sent_revalidations(node=node)

    async def claim_revalidations(
        self, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """This node's due requests, marked ``sent`` as they are taken: on PostgreSQL
        those whose binding this store's :attr:`node` serves, claimed ``FOR UPDATE SKIP
        LOCKED`` (docs/SCALE.md); on SQLite (one node) every due request."""
        revalidations = self._revalidations
        if isinstance(revalidations, Revalidations):
            due = await revalidations.due_revalidations(limit=limit, now=now)
            await revalidations.set_revalidation_status([r.id for r in due], "sent")
            return due
        return await revalidations.claim_revalidations(self.node, limit=limit, now=now)

    async def keep_servers(self) -> tuple[int, int]:
        """Who serves each binding (docs/SCALE.md, "Node-scoped bindings"): on SQLite this
        node serves all; on PostgreSQL (the leader's pass) the first live node of each
        binding's list, and the checks claimed by dead nodes go back to pending. Each
        change is audited. Returns (bindings moved, checks requeued)."""
        now = self.clock.time()
        actor = f"node:{self.node}"
        if self._pg is None:
            node = self.node

            async def job(conn: Any) -> int:
                return await serve_all(conn, node, now=now, actor=actor)

            return await self.db.write(job), 0
        return await self._pg.serving.keep(now=now, actor=actor)

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
        return await self._revalidations.request_revalidation(
            block_id, reason=reason, send_at=send_at
        )

    async def request_checks(
        self, block_ids: Sequence[str], *, reason: RevalidationReason
    ) -> dict[str, list[tuple[str, float]]]:
        """Queue a check of every binding of each block, in one transaction.

        A binding with an open request keeps it (concurrent readers share one check).
        Returns, per block, its open requests as ``(request id, send_at)``: a request
        whose ``send_at`` is in the future is a retry that waits its interval.
        """
        return await self._revalidations.request_checks(block_ids, reason=reason)

    # ------------------------------------------------------------------ evidence

    async def receipts_for(self, block_ids: Sequence[str]) -> dict[str, FactEvidence]:
        """What a receipt needs about each block, in one read: its error streak, its open
        checks and the confirmation behind its current validation."""
        return await self._evidence.receipts_for(block_ids)

    async def believed_at(self, block_id: str, at: float) -> dict[str, Any]:
        """What we believed about a block at ``at``: its content version, state,
        reliability, validation and the last evidence committed before then.

        Rebuilt from the append-only event log (events and their effects, in commit
        order), the block's history of edits (``block_history``) and the audit log
        (archive, restore). Bi-temporal as far as the evidence goes: each piece of
        evidence says when the world was observed (``observed_at``) and when we learned
        it (``committed_at``); ``at`` is compared with the latter.
        """
        return await self._evidence.believed_at(block_id, at)
