"""The event bus: bounded per source, fair between sources, validated at the boundary.

Each source (a sensor instance, the HTTP API, the MQTT bridge) has its own bounded
queue, so a sensor that floods only waits on itself while the others keep emitting.
One consumer drains the queues round-robin into :meth:`Store.apply_events`, which
commits in groups. A bad event is counted, logged once per kind and dead-lettered with
the reason — never applied, never fatal.

Every event passes the privacy policy (``screen``) before it is queued or applied: what
is stored is the redacted event; one a privacy rule rejects is dead-lettered with the
reason and without its payload, and every other dead letter's payload is redacted
(``scrub``) before it is stored (docs/PRIVACY.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from pydantic import ValidationError

from memwarden.errors import StorageError, ValidationInputError
from memwarden.memory import ApplyResult, ValidationEvent

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence

    from memwarden.memory import Store

    # (source, events) -> each event as it may be stored, or why it may not be
    Screen = Callable[
        [str, Sequence[ValidationEvent]],
        Awaitable[list[ValidationEvent | ValidationInputError]],
    ]

__all__ = ["Bus", "Ingest"]

log = structlog.get_logger("memwarden.bus")


class _Ingested(Protocol):
    @property
    def result(self) -> ApplyResult | None: ...
    @property
    def spooled(self) -> bool: ...


class Ingest(Protocol):
    """The store's ingestion with a node's spool in front (on PostgreSQL:
    ``memwarden.cluster.SpoolingIngest``): the store's result, or ``spooled``."""

    async def apply_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> _Ingested: ...


class Bus:
    """Carries events from sources to the store (through ``ingest`` when given)."""

    def __init__(
        self,
        store: Store,
        *,
        queue_per_source: int = 1000,
        batch_max: int = 2000,
        on_applied: Callable[[ApplyResult], Awaitable[None] | None] | None = None,
        screen: Screen | None = None,
        scrub: Callable[[str], str] | None = None,
        ingest: Ingest | None = None,
    ) -> None:
        self._store = store
        self._ingest = ingest
        self.spooled = 0  # events kept in the node's spool (the database away)
        self._screen = screen
        self._scrub = scrub  # a dead letter's payload as it may be stored
        self._queue_size = queue_per_source
        self._batch_max = batch_max
        self._queues: dict[str, asyncio.Queue[ValidationEvent]] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._on_applied = on_applied
        self.accepted = 0
        self.duplicates = 0
        self.by_source: Counter[str] = Counter()
        self.by_outcome: Counter[tuple[str, str]] = Counter()
        self.rejected: Counter[str] = Counter()
        self._logged_kinds: set[str] = set()

    # ------------------------------------------------------------------ intake

    async def put(self, source: str, event: ValidationEvent) -> None:
        """Queue an event from ``source``; waits while that source's queue is full."""
        if self._closed:
            raise StorageError("the bus is closed: the daemon is shutting down")
        if event.sensor != source and not source.startswith("remote:"):
            await self.reject(
                source,
                "sensor_mismatch",
                f"event says sensor {event.sensor!r} but came from {source!r}",
                event.model_dump_json(),
            )
            return
        if self._screen is not None:
            (screened,) = await self._screen(source, [event])
            if isinstance(screened, ValidationInputError):
                await self._withheld(source, event, screened)
                return
            event = screened
        queue = self._queues.get(source)
        if queue is None:
            queue = self._queues[source] = asyncio.Queue(self._queue_size)
        self._idle.clear()
        await queue.put(event)
        self._wake.set()

    async def submit(
        self, source: str, payloads: Iterable[Any], *, bound_only: bool = False
    ) -> ApplyResult:
        """Validate raw payloads and apply them now; returns after the commit.

        The path for remote events (HTTP, MQTT) that must be acknowledged only once
        stored. Invalid payloads are dead-lettered and reported in ``rejected``. With
        ``bound_only`` an event naming a block not bound to its sensor is rejected too
        (see :meth:`Store.apply_events`).
        """
        events: list[ValidationEvent] = []
        positions: list[int] = []
        rejected: list[tuple[str, str]] = []
        for i, payload in enumerate(payloads):
            try:
                positions.append(i)
                events.append(
                    payload
                    if isinstance(payload, ValidationEvent)
                    else ValidationEvent.model_validate(payload)
                )
            except ValidationError as err:
                positions.pop()
                reason = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'event'}: {e['msg']}"
                    for e in err.errors()
                )
                await self.reject(source, "invalid_event", reason, repr(payload)[:65536])
                rejected.append((str(i), reason))
        if self._screen is not None and events:
            kept: list[ValidationEvent] = []
            screened_all = await self._screen(source, events)
            for i, event, screened in zip(positions, events, screened_all, strict=True):
                if isinstance(screened, ValidationInputError):
                    await self._withheld(source, event, screened)
                    rejected.append((str(i), _reason(screened)))
                else:
                    kept.append(screened)
            events = kept
        result = await self._store_events(events, bound_only=bound_only)
        if result is None:  # in the spool: applied (and counted) once delivered
            result = ApplyResult(spooled=len(events))
            result.rejected.extend(rejected)
            return result
        self._count(source, result)
        if self._on_applied is not None and events:
            maybe = self._on_applied(result)
            if maybe is not None:
                await maybe
        for ev in events:
            self.by_outcome[(ev.sensor, ev.outcome.value)] += 1
        result.rejected.extend(rejected)
        return result

    async def _store_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> ApplyResult | None:
        """The store's result, or None when the events went to the spool."""
        if not events:
            return ApplyResult()
        if self._ingest is None:
            if bound_only:
                return await self._store.apply_events(events, bound_only=True)
            return await self._store.apply_events(events)
        answer = await self._ingest.apply_events(events, bound_only=bound_only)
        if answer.spooled or answer.result is None:
            self.spooled += len(events)
            return None
        return answer.result

    async def delivered(self, result: ApplyResult) -> None:
        """A batch from the spool was committed: counted and told like any other."""
        self._count(None, result)
        if self._on_applied is not None:
            maybe = self._on_applied(result)
            if maybe is not None:
                await maybe

    async def reject(self, source: str, kind: str, reason: str, payload: str | bytes) -> None:
        """Count, log (once per kind and source) and dead-letter a bad input."""
        self.rejected[kind] += 1
        key = f"{source}:{kind}"
        if key not in self._logged_kinds:
            self._logged_kinds.add(key)
            log.warning("event_rejected", source=source, kind=kind, reason=reason[:500])
        if self._scrub is not None and kind != "privacy_rejected":
            text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
            payload = self._scrub(text)
        with contextlib.suppress(StorageError):
            await self._store.dead_letter(
                source=source, reason=f"{kind}: {reason}", payload=payload
            )

    async def _withheld(
        self, source: str, event: ValidationEvent, err: ValidationInputError
    ) -> None:
        """Dead-letter an event the privacy policy refuses, keeping none of its values."""
        kept = event.model_dump_json(include={"event_id", "sensor", "subject", "outcome"})
        await self.reject(source, "privacy_rejected", _reason(err), kept)

    # ------------------------------------------------------------------ consumer

    async def run(self) -> None:
        """Drain the queues into the store until cancelled."""
        while True:
            await self._wake.wait()
            batch, taken = self._take()
            if not batch:
                self._wake.clear()
                if all(q.empty() for q in self._queues.values()):
                    self._idle.set()
                continue
            await self._apply(batch)
            for queue, n in taken:
                for _ in range(n):
                    queue.task_done()

    def _take(self) -> tuple[list[ValidationEvent], list[tuple[asyncio.Queue[Any], int]]]:
        batch: list[ValidationEvent] = []
        taken = []
        sources = [q for q in self._queues.values() if not q.empty()]
        share = max(1, self._batch_max // max(1, len(sources)))
        for queue in sources:
            n = 0
            while n < share and not queue.empty():
                batch.append(queue.get_nowait())
                n += 1
            taken.append((queue, n))
        return batch, taken

    async def _apply(self, batch: list[ValidationEvent]) -> None:
        delay = 0.05
        while True:
            try:
                result = await self._store_events(batch)
            except ValidationInputError as err:
                # Never dropped silently: each event is dead-lettered with the reason.
                for ev in batch:
                    await self.reject(ev.sensor, "store_rejected", str(err), ev.model_dump_json())
                return
            except StorageError as err:
                # Keep the events: they were taken from sensors but not yet committed.
                log.error("event_batch_failed", error=str(err), events=len(batch), retry_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            break
        if result is None:  # spooled: counted when delivered
            return
        for ev in batch:
            self.by_source[ev.sensor] += 1
            self.by_outcome[(ev.sensor, ev.outcome.value)] += 1
        self._count(None, result)
        if self._on_applied is not None:
            try:
                maybe = self._on_applied(result)
                if maybe is not None:
                    await maybe
            except Exception as err:  # the events are committed; a listener never stops the bus
                log.error("on_applied_failed", error=f"{type(err).__name__}: {err}", exc_info=err)

    def _count(self, source: str | None, result: ApplyResult) -> None:
        self.accepted += result.accepted
        self.duplicates += result.duplicates
        if source is not None:
            self.by_source[source] += result.accepted
        if result.rejected:
            self.rejected["store_rejected"] += len(result.rejected)

    # ------------------------------------------------------------------ shutdown

    @property
    def pending(self) -> int:
        return sum(q.qsize() for q in self._queues.values())

    async def drain(self) -> None:
        """Wait until everything queued so far is committed."""
        for queue in list(self._queues.values()):
            await queue.join()

    def close(self) -> None:
        """Stop taking new events (what is queued still drains)."""
        self._closed = True


def _reason(err: ValidationInputError) -> str:
    return "; ".join(f"{f}: {m}" for f, m in err.errors)
