"""Event application: append validation events to the log and apply them to every block
they reach, in one writer job.

:class:`EventLog` is the entry point (:meth:`EventLog.apply_events`); the job routes a
batch to its blocks (:class:`~memwarden.memory._eventbatch._EventBatch`), runs the rules
(:func:`~memwarden.memory.policy.apply_event`) event by event in observation order,
writes events, effects and the blocks' evidence in key order, and lets stale or refuted
blocks pull their dependents stale
(:func:`~memwarden.memory._dependencies.propagate_dependencies`). Rejected input goes to
the dead letters, which stay bounded.

The job itself, the route read, the rules and the writes, is
:mod:`~memwarden.memory._eventbatch`'s (with how answers close requests); the
dependents' fall is :mod:`~memwarden.memory._dependencies`'.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memwarden.memory._results import ApplyResult
from memwarden.memory._sql import select_in_now

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterable, Mapping, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._compaction import CompactionConfig
    from memwarden.memory._database import Database
    from memwarden.memory._model import ValidationEvent
    from memwarden.memory._writer import ThreadRun
    from memwarden.memory.policy import PolicyConfig

from memwarden.memory._eventbatch import (
    _BOUND_SELECT,
    PendingEvidence,
    _drop_duplicates,
    _EventBatch,
    _Prepared,
    _Reads,
)

__all__ = ["EventLog"]

_MAX_FUTURE_SKEW_S = 300.0  # an observation this far ahead of our clock is rejected

_ERASED_SELECT = "SELECT block_id FROM erasures WHERE block_id IN "
_DEAD_LETTER_INSERT = (
    "INSERT INTO dead_letters (received_at, source, reason, payload) VALUES (?,?,?,?)"
)
# ids grow by one per row, so keeping the newest N is one range delete on the primary key
_DEAD_LETTERS_CAP = "DELETE FROM dead_letters WHERE id <= (SELECT max(id) FROM dead_letters) - ?"


class EventLog:
    """Appends events and applies them; keeps rejected input as dead letters."""

    def __init__(
        self, db: Database, clock: Clock, policy: PolicyConfig, compaction: CompactionConfig
    ) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        self.compaction = compaction

    @staticmethod
    def _prepare(ev: ValidationEvent) -> _Prepared:
        return (
            ev.event_id,
            ev.sensor,
            ev.subject,
            ev.outcome.value,
            ev.observed_at.timestamp(),
            ev.reliability,
            ev.validity_window.total_seconds() if ev.validity_window is not None else None,
            ev.request_id,
            ev.block_id,
            ev.message,
            None if ev.observed is None else json.dumps(ev.observed, separators=(",", ":")),
            ev.agent,
            ev.seq,
        )

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
        now = self.clock.time()
        prepared, rejected, direct = split_events(events, now, bound_only=bound_only)
        cfg = self.policy
        cap = self._dead_letters_cap()

        def run(conn: sqlite3.Connection, thread_run: ThreadRun) -> ApplyResult:
            erased = _drop_erased(conn, prepared)
            if direct:
                _reject_unbound(conn, prepared, rejected, direct)
            pending = thread_run.part(PendingEvidence)
            result = _apply_job(conn, prepared, rejected, now, cfg=cfg, pending=pending)
            result.erased = erased
            if rejected and cap is not None:
                conn.execute(_DEAD_LETTERS_CAP, (cap,))
            return result

        # The whole job (reads, rules, writes) on the writer's thread in one go: no
        # hand-off between threads per statement, nor per batch of events; the blocks'
        # evidence is written once for the run of such jobs (_eventbatch's note).
        return await self.db.write_on_thread(run, weight=len(prepared))

    def _dead_letters_cap(self) -> int | None:
        cfg = self.compaction
        return cfg.dead_letters_max_rows if cfg.enabled else None

    async def cap_dead_letters(self, conn: aiosqlite.Connection) -> None:
        """Keep at most ``compaction.dead_letters_max_rows`` dead letters, at every insert:
        a flood of rejected input is bounded at once, not at the next compaction pass."""
        cap = self._dead_letters_cap()
        if cap is not None:
            await conn.execute(_DEAD_LETTERS_CAP, (cap,))

    async def dead_letter(self, *, source: str, reason: str, payload: str | bytes) -> None:
        """Keep a rejected input with the reason (never applied)."""
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> None:
            await conn.execute(_DEAD_LETTER_INSERT, (now, source, reason, text[:65536]))
            await self.cap_dead_letters(conn)

        await self.db.write(job)


def split_events(
    events: Sequence[ValidationEvent], now: float, *, bound_only: bool
) -> tuple[list[_Prepared], list[tuple[str, str, str]], dict[str, str]]:
    """Events as plain values, in observation order; those from the future rejected
    (event id, reason, payload); with ``bound_only``, the payloads of the events naming a
    block (by event id), whose binding the job checks."""
    prepared: list[_Prepared] = []
    rejected: list[tuple[str, str, str]] = []
    direct: dict[str, str] = {}  # event id -> payload, for the bound_only check
    limit = now + _MAX_FUTURE_SKEW_S
    for ev in events:
        p = EventLog._prepare(ev)  # noqa: SLF001 - the class's own preparation
        if p[4] > limit:
            rejected.append((p[0], "observed_at is in the future", ev.model_dump_json()))
        else:
            prepared.append(p)
            if bound_only and ev.block_id is not None:
                direct[ev.event_id] = ev.model_dump_json()
    prepared.sort(key=lambda p: p[4])  # apply in observation order
    return prepared, rejected, direct


def _apply_job(
    conn: sqlite3.Connection,
    prepared: list[_Prepared],
    rejected: list[tuple[str, str, str]],
    now: float,
    *,
    cfg: PolicyConfig,
    pending: PendingEvidence,
) -> ApplyResult:
    """The writer job behind :meth:`EventLog.apply_events`, run on the writer's thread;
    the blocks' evidence it changes is left in ``pending`` for its run's end."""
    result = ApplyResult(rejected=[(event_id, reason) for event_id, reason, _ in rejected])
    if rejected:
        conn.executemany(
            _DEAD_LETTER_INSERT,
            [(now, "events", reason, payload) for _, reason, payload in rejected],
        )
    if not prepared:
        return result
    reads = _Reads.fetch(conn, prepared)
    batch = _drop_duplicates(prepared, reads.existing, result)
    if batch:
        applied = _EventBatch(now, cfg, result, pending)
        applied.route(reads)
        applied.run(conn, batch, reads.first_seq)
    return result


def _drop_erased(conn: sqlite3.Connection, prepared: list[_Prepared]) -> int:
    """Drop the events naming an erased block (a sensor that had not heard yet, an
    agent's queue): what they observed must not come back into the store, not even as a
    dead letter. Returns how many went."""
    named = list({p[8] for p in prepared if p[8] is not None})
    if not named:
        return 0
    erased = {r[0] for r in select_in_now(conn, _ERASED_SELECT, named)}
    if not erased:
        return 0
    before = len(prepared)
    prepared[:] = [p for p in prepared if p[8] not in erased]
    return before - len(prepared)


def _reject_unbound(
    conn: sqlite3.Connection,
    prepared: list[_Prepared],
    rejected: list[tuple[str, str, str]],
    payloads: Mapping[str, str],
) -> None:
    """Move the events whose ``block_id`` has no binding for their sensor to ``rejected``."""
    bound = select_in_now(conn, _BOUND_SELECT, named_blocks(prepared, payloads))
    move_unbound(prepared, rejected, payloads, bound)


def named_blocks(prepared: list[_Prepared], payloads: Mapping[str, str]) -> list[str]:
    """The blocks the events in ``payloads`` name by ``block_id``."""
    return list({p[8] for p in prepared if p[0] in payloads and p[8] is not None})


def move_unbound(
    prepared: list[_Prepared],
    rejected: list[tuple[str, str, str]],
    payloads: Mapping[str, str],
    bound: Iterable[Iterable[Any]],
) -> None:
    """Move the events in ``payloads`` whose block has no binding for their sensor (the
    ``(block id, sensor)`` pairs in ``bound``) from ``prepared`` to ``rejected``, whatever
    the backend that read ``bound``."""
    pairs = {tuple(r)[:2] for r in bound}
    keep = []
    for p in prepared:
        if p[0] in payloads and (p[8], p[1]) not in pairs:
            reason = f"block_id: block {p[8]!r} has no binding for sensor {p[1]!r}"
            rejected.append((p[0], reason, payloads[p[0]]))
        else:
            keep.append(p)
    prepared[:] = keep
