"""Test helpers for sensor authors: run a sensor the way the daemon does, and look.

:class:`SensorHarness` builds a sensor from its class, its config and its bindings, runs
it under the real :class:`~memwarden.plugins.SensorRunner` (so setup policies, restarts
with backoff, deadlines and skipped checks all apply) against a temporary store on a
fake clock, and records every event the sensor emits::

    from memwarden.plugins.testing import FakeClock, SensorHarness

    async def test_confirms(tmp_path):
        async with SensorHarness(
            MySensor,
            config={"allow": ["APP_*"]},
            bindings=[{"var": "APP_MODE", "equals": "prod"}],
            clock=FakeClock(),
            tmp_path=tmp_path,
        ) as h:
            await h.wait_ready()
            [event] = await h.wait_for_events(1)
            assert event.outcome == "confirmed"
            [answer] = await h.revalidate("APP_MODE")

Waiting is event-driven and bounded by a deadline: no sleeps. The harness clock
(:class:`FakeClock`) moves only when the test moves it (``h.advance(60)``), except for
one millisecond after each emitted event, so two events in a row never share an
``observed_at`` (the store ignores an observation not newer than the last one; such
ignored events are listed in ``h.ignored`` with the reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import structlog
from pydantic import ValidationError

from memwarden.errors import ConfigError, PluginError, ValidationInputError
from memwarden.memory import (
    Binding,
    Outcome,
    RevalidationReason,
    RevalidationRequest,
    Store,
    ValidationEvent,
    from_ts,
)
from memwarden.memory import FakeClock as _StoreFakeClock
from memwarden.plugins._bindings import check_binding
from memwarden.plugins._capabilities import NeedsReviews
from memwarden.plugins._contract import BoundSubject, SensorContext, StartupPolicy
from memwarden.plugins._registry import validate_sensor_class
from memwarden.plugins._review_queue import StoreReviewQueue
from memwarden.plugins._supervisor import Backoff, SensorCounters, SensorRunner

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime, timedelta
    from types import TracebackType

    from memwarden.memory import Block, Clock

__all__ = ["FakeClock", "SensorHarness"]

#: How far the harness moves its clock after each emitted event (see ``emit_tick_s``).
EMIT_TICK_S = 0.001


class FakeClock(_StoreFakeClock):
    """A clock that moves only when told to, and wakes what sleeps on it.

    ``ctx.sleep(s)`` (and so the polling base's waits) sleeps on this clock: it returns
    when :meth:`advance` or :meth:`set` moved the time past its deadline, not when real
    time passed. ``sleepers`` says how many are waiting.
    """

    def __init__(self, start: datetime | float = 1_767_225_600.0) -> None:  # 2026-01-01Z
        super().__init__(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def sleep(self, seconds: float) -> None:
        """Return once the clock was moved ``seconds`` past now (at once if <= 0)."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.time() + seconds, next(self._order), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many ``sleep`` calls are waiting."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    def advance(self, delta: timedelta | float) -> float:
        now = super().advance(delta)
        self._wake()
        return now

    def set(self, when: datetime | float) -> None:
        super().set(when)
        self._wake()

    def _wake(self) -> None:
        now = self.time()
        while self._sleepers and self._sleepers[0][0] <= now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)


class SensorHarness:
    """Run one sensor against a temporary store and collect what it emits.

    ``config`` is the sensor's ``[sensors.<name>]`` table (validated by its ``Config``);
    ``bindings`` are raw bindings without ``sensor`` (the harness fills it in), each
    stored on a block of its own. ``startup`` defaults to ``error`` so a failing setup
    fails the ``async with``; the restart backoff defaults to milliseconds.

    ``name`` is the sensor's name (as in ``[sensors.<name>]``); it defaults to the class's
    ``kind``. The class is checked as the daemon checks a plugin at load (a version-1
    class runs through the shim, with its ``DeprecationWarning``). A
    :class:`~memwarden.plugins.NeedsReviews` sensor is handed a review queue over the
    harness's store, as the daemon hands it one over its own.

    ``volatility`` is the volatility of the blocks the harness stores (default: a new
    block's default); each binding's ``validity_window`` is its window, as the daemon
    fills it in.
    """

    def __init__(
        self,
        sensor_cls: type[Any],
        *,
        config: Mapping[str, Any] | None = None,
        bindings: Iterable[Mapping[str, Any] | Binding] = (),
        name: str | None = None,
        clock: Clock | None = None,
        tmp_path: str | Path | None = None,
        startup: StartupPolicy | str = StartupPolicy.ERROR,
        revalidate_timeout_s: float | None = 5.0,
        setup_timeout_s: float = 5.0,
        teardown_timeout_s: float = 5.0,
        backoff: Backoff | None = None,
        crash_loop_restarts: int = 5,
        crash_loop_window_s: float = 300.0,
        healthy_after_s: float = 60.0,
        emit_tick_s: float = EMIT_TICK_S,
        volatility: str | None = None,
    ) -> None:
        kind = str(getattr(sensor_cls, "kind", "") or name or "sensor")
        self.name = name or kind
        self.sensor_cls = validate_sensor_class(kind, sensor_cls)
        self.clock: Clock = clock if clock is not None else FakeClock()
        self.emitted: list[ValidationEvent] = []
        """Every event the sensor handed to ``ctx.emit``, in order."""
        self.rejected: list[tuple[ValidationEvent, str]] = []
        """Events the daemon would dead-letter, with the reason (wrong ``sensor`` ...)."""
        self.ignored: list[tuple[ValidationEvent, str]] = []
        """Events stored but ignored by a block, with the reason: ``outdated`` (observed
        no later than the block's last validation), ``archived``."""
        self._emit_tick_s = emit_tick_s
        self._volatility = volatility
        self._config = dict(config or {})
        self._initial = list(bindings)
        self._tmp_path = Path(tmp_path) if tmp_path is not None else None
        self._runner_kwargs: dict[str, Any] = {
            "startup": StartupPolicy(startup),
            "revalidate_timeout_s": revalidate_timeout_s,
            "setup_timeout_s": setup_timeout_s,
            "teardown_timeout_s": teardown_timeout_s,
            "backoff": backoff or Backoff(base_s=0.001, cap_s=0.01),
            "crash_loop_restarts": crash_loop_restarts,
            "crash_loop_window_s": crash_loop_window_s,
            "healthy_after_s": healthy_after_s,
        }
        self._stack = contextlib.AsyncExitStack()
        self._store: Store | None = None
        self._runner: SensorRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self._blocks: dict[Binding, str] = {}
        self._windows: dict[str, timedelta] = {}
        self._news = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    async def _start(self) -> None:
        try:
            config = self.sensor_cls.Config.model_validate(self._config)
        except ValidationError as err:
            problems = [
                ".".join(["sensors", self.name, *(str(p) for p in e["loc"])])
                + (": unknown setting" if e["type"] == "extra_forbidden" else f": {e['msg']}")
                for e in err.errors()
            ]
            raise ConfigError("; ".join(problems), problems=problems) from None
        if self._tmp_path is None:
            self._tmp_path = Path(self._stack.enter_context(tempfile.TemporaryDirectory()))
        root = self._tmp_path
        state_dir = root / "sensors" / self.name
        state_dir.mkdir(parents=True, exist_ok=True)
        self._store = await self._stack.enter_async_context(
            Store(root / "harness.db", clock=self.clock)
        )
        ctx: SensorContext[Any] = SensorContext(
            name=self.name,
            binding_model=self.sensor_cls.Binding,
            clock=self.clock,
            log=structlog.get_logger("memwarden.sensor").bind(sensor=self.name),
            state_dir=state_dir,
            emit=self._emit,
        )
        sensor = self.sensor_cls(config)
        if isinstance(sensor, NeedsReviews):
            sensor.use_reviews(StoreReviewQueue(self.store))
        self._runner = SensorRunner(
            name=self.name,
            kind=str(getattr(self.sensor_cls, "kind", "") or self.name),
            sensor=sensor,
            ctx=ctx,
            **self._runner_kwargs,
        )
        await self.set_bindings(self._initial)
        self._task = asyncio.get_running_loop().create_task(
            self._runner.supervise(), name=f"sensor[{self.name}]"
        )
        self._task.add_done_callback(lambda _: self._news.set())
        self._stack.push_async_callback(self._stop)
        await self._runner.started()

    async def _stop(self) -> None:
        if self._runner is not None:
            self._runner.stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    # ------------------------------------------------------------------ what tests look at

    @property
    def runner(self) -> SensorRunner:
        """The supervisor running the sensor."""
        if self._runner is None:
            raise RuntimeError("use the harness as `async with SensorHarness(...) as h`")
        return self._runner

    @property
    def ctx(self) -> SensorContext[Any]:
        """The context the sensor was given."""
        return self.runner.ctx

    @property
    def sensor(self) -> Any:
        """The sensor instance."""
        return self.runner.sensor

    @property
    def store(self) -> Store:
        """The temporary store the emitted events are applied to."""
        if self._store is None:
            raise RuntimeError("use the harness as `async with SensorHarness(...) as h`")
        return self._store

    @property
    def status(self) -> str:
        """``running``, ``backoff``, ``failed``, ``disabled`` ... (see SensorRunner)."""
        return self.runner.status

    @property
    def counters(self) -> SensorCounters:
        """Restarts, timeouts, skipped checks, errors ... as the daemon counts them."""
        return self.runner.counters

    @property
    def bindings(self) -> list[BoundSubject[Any]]:
        """The bindings the sensor holds now (each with its block id, the binding with its
        subject filled in, and the selector parsed by the sensor's model)."""
        return self.ctx.bindings

    async def block(self, subject: str | None = None, *, block_id: str | None = None) -> Block:
        """The block bound to ``subject`` (or the block ``block_id``), as stored now."""
        return await self.store.get(self._bound(subject, block_id).block_id)

    def advance(self, seconds: timedelta | float) -> float:
        """Move the harness clock (waking what sleeps on it); returns the new time."""
        advance = getattr(self.clock, "advance", None)
        if not callable(advance):
            raise TypeError(f"the harness clock {type(self.clock).__name__} cannot advance")
        now = float(advance(seconds))
        self._news.set()
        return now

    # ------------------------------------------------------------------ waiting

    async def wait_ready(self, *, timeout_s: float = 5.0) -> None:
        """Wait until the sensor calls ``ctx.ready()``; fail fast if it stopped."""
        ready = asyncio.get_running_loop().create_task(self.ctx.wait_ready())
        try:
            async with asyncio.timeout(timeout_s):
                while not ready.done():
                    self._check_alive("ready")
                    self._news.clear()
                    news = asyncio.get_running_loop().create_task(self._news.wait())
                    try:
                        await asyncio.wait({ready, news}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        news.cancel()
        except TimeoutError:
            raise TimeoutError(
                f"sensor {self.name!r} did not call ctx.ready() within {timeout_s:g}s "
                f"(status {self.status}, last error {self.counters.last_error})"
            ) from None
        finally:
            ready.cancel()

    async def wait_for_events(self, n: int, *, timeout_s: float = 5.0) -> list[ValidationEvent]:
        """Wait until at least ``n`` events were emitted in total; returns the first ``n``."""
        try:
            async with asyncio.timeout(timeout_s):
                while len(self.emitted) < n:
                    self._check_alive(f"{n} events")
                    self._news.clear()
                    await self._news.wait()
        except TimeoutError:
            raise TimeoutError(
                f"sensor {self.name!r} emitted {len(self.emitted)} of {n} events within "
                f"{timeout_s:g}s (status {self.status}, last error {self.counters.last_error})"
            ) from None
        return self.emitted[:n]

    async def wait_outcome(
        self,
        outcome: Outcome | str,
        *,
        subject: str | None = None,
        block_id: str | None = None,
        since: int | None = None,
        timeout_s: float = 5.0,
    ) -> ValidationEvent:
        """Wait for an emitted event with ``outcome`` (for ``subject`` / ``block_id`` if
        given). Only events emitted after the call count, unless ``since`` (an index in
        :attr:`emitted`, e.g. ``0``) says where to start looking."""
        want = Outcome(outcome)
        start = len(self.emitted) if since is None else since

        def match(ev: ValidationEvent) -> bool:
            return (
                ev.outcome == want
                and (subject is None or ev.subject == subject)
                and (block_id is None or ev.block_id in (None, block_id))
            )

        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    for ev in self.emitted[start:]:
                        if match(ev):
                            return ev
                    self._check_alive(f"a {want} event")
                    self._news.clear()
                    await self._news.wait()
        except TimeoutError:
            seen = ", ".join(str(e.outcome) for e in self.emitted[start:]) or "none"
            raise TimeoutError(
                f"sensor {self.name!r} emitted no {want} event within {timeout_s:g}s "
                f"(emitted meanwhile: {seen}; status {self.status})"
            ) from None

    async def wait_state(
        self,
        block: Block | BoundSubject[Any] | str,
        state: str,
        *,
        timeout_s: float = 5.0,
    ) -> Block:
        """Wait until the block (a Block, a BoundSubject, a block id or a subject) is in
        ``state`` (``fresh``, ``refuted`` ...) as the store sees it; returns it."""
        block_id = self._block_id_of(block)
        current = await self.store.get(block_id)
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    # Clear before reading: news that lands while the read awaits
                    # must wake the wait below, not be cleared after the fact.
                    self._news.clear()
                    current = await self.store.get(block_id)
                    if str(current.state) == state:
                        break
                    self._check_alive(f"block {block_id} to be {state}")
                    await self._news.wait()
        except TimeoutError:
            raise TimeoutError(
                f"block {block_id} is {current.state}, not {state}, after {timeout_s:g}s "
                f"(ignored events: {[r for _, r in self.ignored]}, status {self.status})"
            ) from None
        return current

    def _block_id_of(self, block: Block | BoundSubject[Any] | str) -> str:
        if isinstance(block, BoundSubject):
            return block.block_id
        if isinstance(block, str):
            if block in self._blocks.values():
                return block
            return self._bound(block).block_id
        return str(block.id)

    def _check_alive(self, waiting_for: str) -> None:
        if self._task is not None and self._task.done():
            raise PluginError(
                f"sensor {self.name!r} stopped ({self.status}) while waiting for "
                f"{waiting_for}: {self.counters.last_error}",
                plugin=self.name,
            )

    # ------------------------------------------------------------------ acting

    async def revalidate(
        self,
        subject: str | None = None,
        *,
        block_id: str | None = None,
        reason: RevalidationReason | str = RevalidationReason.MANUAL,
        attempts: int = 0,
        queued_at: float | None = None,
    ) -> list[ValidationEvent]:
        """Ask the sensor to check ``subject`` (or the block ``block_id``: needed when
        several blocks are bound to one subject) now, as the scheduler would.
        ``queued_at`` (clock time, default now) is when the request was made: a request
        that waited in the queue may be answered by a poll taken since.

        Returns the events to apply: the sensor's answer, an ``error`` event on a timeout
        or a crash, ``[]`` when skipped (a check of the subject is still running) or when
        the sensor answered through ``ctx.emit``. They are applied to the store too.
        """
        bound = self._bound(subject, block_id)
        now = self.clock.time()
        timeout = self.runner.revalidate_timeout_s or 30.0  # the deadline the check gets
        request = RevalidationRequest(
            block_id=bound.block_id,
            sensor=self.name,
            subject=bound.subject,
            binding=bound.binding,
            reason=RevalidationReason(reason),
            created_at=from_ts(now),
            deadline=from_ts(now + timeout),
            attempts=attempts,
            queued_at=from_ts(now if queued_at is None else queued_at),
        )
        events = await self.runner.revalidate(request) or []
        for event in events:
            await self._apply(event)
        return events

    async def set_bindings(
        self, bindings: Iterable[Mapping[str, Any] | Binding]
    ) -> list[BoundSubject[Any]]:
        """Replace the sensor's bindings (validated as the daemon does) and wake it.

        Raises :class:`ValidationInputError` naming the binding and the field for one the
        sensor's ``Binding`` model or its ``validate_binding`` hook refuses.
        """
        runner = self.runner
        parsed: list[tuple[Binding, Any]] = []
        errors: list[tuple[str, str]] = []
        for i, raw in enumerate(bindings):
            try:
                binding, selector = self._parse(raw, runner)
            except ValidationInputError as err:
                errors.extend(
                    (f"bindings.{i}.{f}" if f else f"bindings.{i}", m) for f, m in err.errors
                )
                continue
            parsed.append((binding, selector))
        if errors:
            raise ValidationInputError(errors)
        keep = {b for b, _ in parsed}
        for binding in [b for b in self._blocks if b not in keep]:
            gone = self._blocks.pop(binding)
            self._windows.pop(gone, None)
            await self.store.delete(gone, actor="harness")
        bound = []
        for binding, selector in parsed:
            if binding not in self._blocks:
                new: dict[str, Any] = {
                    "content": f"bound to {self.name}: {binding.subject}",
                    "bindings": [binding],
                }
                if self._volatility is not None:
                    new["volatility"] = self._volatility
                block = await self.store.add(new, actor="harness")
                self._blocks[binding] = block.id
                self._windows[block.id] = block.validation.validity_window  # as the daemon
            block_id = self._blocks[binding]
            bound.append(
                BoundSubject(block_id, binding, selector, validity_window=self._windows[block_id])
            )
        self.ctx.set_bindings(bound)
        return bound

    def _parse(self, raw: Mapping[str, Any] | Binding, runner: SensorRunner) -> tuple[Binding, Any]:
        data = raw.model_dump() if isinstance(raw, Binding) else dict(raw)
        data.setdefault("sensor", self.name)
        try:
            binding = Binding.model_validate(data)
        except ValidationError as err:
            raise ValidationInputError(
                [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.errors()]
            ) from None
        return check_binding(runner.sensor, runner.ctx, binding)

    def _bound(self, subject: str | None, block_id: str | None = None) -> BoundSubject[Any]:
        if (subject is None) == (block_id is None):
            raise TypeError("name either a subject or a block_id")
        if block_id is not None:
            for bound in self.ctx.bindings:
                if bound.block_id == block_id:
                    return bound
            known = ", ".join(b.block_id for b in self.ctx.bindings) or "none"
            raise LookupError(f"no binding for block {block_id!r} (bound: {known})")
        matches = [b for b in self.ctx.bindings if b.subject == subject]
        if len(matches) > 1:
            ids = ", ".join(b.block_id for b in matches)
            raise LookupError(
                f"{len(matches)} blocks are bound to subject {subject!r} ({ids}): "
                "name one with block_id="
            )
        if matches:
            return matches[0]
        known = ", ".join(repr(b.subject) for b in self.ctx.bindings) or "none"
        raise LookupError(f"no binding for subject {subject!r} (bound: {known})")

    # ------------------------------------------------------------------ the emit path

    async def _emit(self, event: ValidationEvent) -> None:
        if await self._apply(event):
            self.emitted.append(event)
            self._news.set()
        # The next event must not share this one's observed_at, or the store would
        # ignore it as outdated: move the fake clock on a little.
        advance = getattr(self.clock, "advance", None)
        if self._emit_tick_s > 0 and callable(advance):
            advance(self._emit_tick_s)

    async def _apply(self, event: ValidationEvent) -> bool:
        """What the bus does: refuse an event naming another sensor, store the rest."""
        if event.sensor != self.name:
            reason = f"event says sensor {event.sensor!r} but came from {self.name!r}"
            self.rejected.append((event, reason))
            return False
        result = await self.store.apply_events([event])
        for _, reason in result.rejected:
            self.rejected.append((event, reason))
        await self._note_ignored(event)
        self._news.set()
        return True

    async def _note_ignored(self, event: ValidationEvent) -> None:
        """List the event in :attr:`ignored` if a block it reached ignored it."""
        targets = (
            [event.block_id]
            if event.block_id is not None
            else [b.block_id for b in self.ctx.bindings if b.subject == event.subject]
        )
        for block_id in targets:
            with contextlib.suppress(LookupError):
                for record in await self.store.events_for(block_id, limit=20):
                    if record.event_id == event.event_id:
                        reason = (record.detail or {}).get("ignored")
                        if reason:
                            self.ignored.append((event, f"block {block_id}: {reason}"))
                        break
