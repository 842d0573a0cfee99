"""Running a sensor under supervision: restart with backoff, deadlines, counters.

Each sensor instance gets one :class:`SensorRunner`, whose :meth:`~SensorRunner.supervise`
task owns the sensor's life: ``setup`` (per its startup policy), ``run`` (restarted with
capped full-jitter backoff after a crash, marked ``failed`` after a crash loop) and
``teardown``. ``revalidate`` calls run under a deadline that is never shortened; a check
still running for the same subject when the next is due is skipped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.errors import PluginError
from memwarden.memory import Outcome, ValidationEvent
from memwarden.plugins._contract import StartupPolicy
from memwarden.plugins._guard import Crash, describe, guarded

if TYPE_CHECKING:
    from memwarden.memory import RevalidationRequest
    from memwarden.plugins._contract import Sensor, SensorContext

__all__ = ["Backoff", "SensorCounters", "SensorRunner"]

log = structlog.get_logger("memwarden.plugins")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with full jitter (AWS architecture blog)."""

    base_s: float = 1.0
    cap_s: float = 60.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        ceiling = min(self.cap_s, self.base_s * (2 ** min(attempt, 32)))
        return (rng or random).uniform(0.0, ceiling)


@dataclass(slots=True)
class SensorCounters:
    """What a sensor has done, for ``GET /v1/sensors``, health and metrics."""

    events: int = 0
    errors: int = 0
    restarts: int = 0
    timeouts: int = 0
    skipped: int = 0
    revalidations: int = 0
    last_success: float | None = None
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def count(self, event: ValidationEvent, now: float) -> None:
        """Count an event's outcome: an ``error`` (the source could not be checked, an
        endpoint down) is an error of this sensor, anything else a success."""
        if event.outcome == Outcome.ERROR:
            self.errors += 1
            self.last_error = event.message or "check failed"
        else:
            self.last_success = now


class SensorRunner:
    """Supervises one sensor instance.

    ``status`` is one of ``starting``, ``running``, ``backoff`` (waiting to set up or
    restart), ``failed`` (crash loop, or setup failed under policy ``error``),
    ``disabled`` (setup failed under policy ``ignore``) and ``stopped``.
    """

    def __init__(
        self,
        *,
        name: str,
        kind: str,
        sensor: Sensor[Any],
        ctx: SensorContext[Any],
        startup: StartupPolicy = StartupPolicy.RETRY,
        revalidate_timeout_s: float | None = None,
        setup_timeout_s: float = 30.0,
        teardown_timeout_s: float = 10.0,
        backoff: Backoff | None = None,
        crash_loop_restarts: int = 5,
        crash_loop_window_s: float = 300.0,
        healthy_after_s: float = 60.0,
    ) -> None:
        self.name = name
        self.kind = kind
        self.sensor = sensor
        self.ctx = ctx
        self.startup = startup
        self.revalidate_timeout_s = revalidate_timeout_s
        self.setup_timeout_s = setup_timeout_s
        self.teardown_timeout_s = teardown_timeout_s
        self.backoff = backoff or Backoff()
        self.crash_loop_restarts = crash_loop_restarts
        self.crash_loop_window_s = crash_loop_window_s
        self.healthy_after_s = healthy_after_s
        self.counters = SensorCounters()
        self._status = "starting"
        self.status_since = ctx.clock.time()  # when the status last changed (clock time)
        self.log = log.bind(sensor=name, kind=kind)
        self._stop = asyncio.Event()
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._crashes: deque[float] = deque()
        self._inflight: set[tuple[str, str]] = set()  # (subject, block id) being checked
        self._set_up = False
        self._ran_once = False  # the startup policy governs only the first start

    # ------------------------------------------------------------------ lifecycle

    @property
    def status(self) -> str:
        return self._status

    @status.setter
    def status(self, value: str) -> None:
        if value != self._status:
            self._status = value
            self.status_since = self.ctx.clock.time()

    async def started(self) -> None:
        """Wait until the first setup attempt settled (raises under policy ``error``)."""
        await asyncio.shield(self._started)

    @property
    def available(self) -> bool:
        return self.status == "running"

    def stop(self) -> None:
        """Ask the supervised task to finish (it tears the sensor down)."""
        self._stop.set()

    async def supervise(self) -> None:
        """The sensor's task: setup, run, restart with backoff, teardown at the end."""
        loop = asyncio.get_running_loop()
        attempt = 0
        try:
            while not self._stop.is_set():
                if not await self._setup(attempt):
                    if self.status in ("failed", "disabled"):
                        return
                    attempt += 1
                    if self._ran_once and self._crash_loop(loop.time()):
                        self._fail("crash loop")
                        return
                    await self._pause(self.backoff.delay(attempt))
                    continue
                self._ran_once = True
                self.status = "running"
                self._settle_start()
                began = loop.time()
                crashed = await self._run_once()
                if not crashed:
                    return
                if loop.time() - began >= self.healthy_after_s:
                    attempt = 0
                if self._crash_loop(loop.time()):
                    self._fail("crash loop")
                    return
                attempt += 1
                self.counters.restarts += 1
                self.status = "backoff"
                await self._teardown()
                delay = self.backoff.delay(attempt)
                self.log.warning("sensor_restarting", attempt=attempt, delay_s=round(delay, 3))
                await self._pause(delay)
        finally:
            self._settle_start()
            await self._teardown()
            if self.status not in ("failed", "disabled"):
                self.status = "stopped"

    def _fail(self, reason: str) -> None:
        self.status = "failed"
        self.log.error("sensor_failed", reason=reason, restarts=self.counters.restarts)

    async def _setup(self, attempt: int) -> bool:
        if self._set_up:
            return True
        crash = await guarded(self.sensor.setup(self.ctx), timeout_s=self.setup_timeout_s)
        if isinstance(crash, Crash):  # the startup policy decides what it means
            self.counters.errors += 1
            self.counters.last_error = f"setup: {crash.describe()}"
            await self._teardown(force=True)
            self.log.error("sensor_setup_failed", error=self.counters.last_error, attempt=attempt)
            if self._ran_once:
                # A restart that cannot set up is one more crash, whatever the policy.
                self.status = "backoff"
                return False
            if self.startup == StartupPolicy.ERROR:
                self.status = "failed"
                if not self._started.done():
                    self._started.set_exception(
                        PluginError(
                            f"sensor {self.name!r} failed to start: {self.counters.last_error}",
                            plugin=self.name,
                        )
                    )
                return False
            if self.startup == StartupPolicy.IGNORE:
                self.status = "disabled"
                self._settle_start()
                return False
            self.status = "backoff"
            self._settle_start()
            return False
        self._set_up = True
        return True

    async def _run_once(self) -> bool:
        """Run the sensor; True if it crashed, False if it finished or we are stopping."""
        # Whatever the last run consumed, a new run sees its bindings on the first wait.
        self.ctx.touch_bindings()
        run = asyncio.get_running_loop().create_task(
            self.sensor.run(self.ctx), name=f"sensor[{self.name}].run"
        )
        stop = asyncio.get_running_loop().create_task(
            self._stop.wait(), name=f"sensor[{self.name}].stop"
        )
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not run.done():
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await run
        if self._stop.is_set() or run.cancelled():
            return False  # stopping: whatever the cancelled run raised is not a crash
        err = run.exception()
        if err is None:
            self.log.info("sensor_run_finished")
            await self._stop.wait()
            return False
        self.counters.errors += 1
        self.counters.last_error = f"run: {describe(err)}"
        self.log.error("sensor_crashed", error=self.counters.last_error, exc_info=err)
        return True

    def _crash_loop(self, now: float) -> bool:
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > self.crash_loop_window_s:
            self._crashes.popleft()
        return len(self._crashes) > self.crash_loop_restarts

    async def _pause(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=delay)

    async def _teardown(self, *, force: bool = False) -> None:
        if not self._set_up and not force:
            return
        self._set_up = False
        crash = await guarded(self.sensor.teardown(), timeout_s=self.teardown_timeout_s)
        if isinstance(crash, Crash):  # logged, never fatal
            self.log.warning("sensor_teardown_failed", error=crash.describe())

    def _settle_start(self) -> None:
        if not self._started.done():
            self._started.set_result(None)

    # ------------------------------------------------------------------ revalidation

    def busy(self, subject: str, block_id: str = "") -> bool:
        return (subject, block_id) in self._inflight

    async def revalidate(self, request: RevalidationRequest) -> list[ValidationEvent] | None:
        """Check one subject under its deadline; the events to apply.

        The deadline is the sensor's configured ``revalidate_timeout_s`` if it has one,
        else the request's own (``rules.staleness.revalidation_timeout``); nothing else
        shortens it. A timeout or a crash becomes an ``error`` event (never a
        refutation) without a ``block_id``, so it reaches every block bound to the
        subject. Every event returned without a ``request_id`` gets the request's ``id``.
        Returns ``None`` when a check of the same subject for the same block is still
        running: this one is skipped (and counted), not overlapped. An empty list means
        the sensor answered through ``ctx.emit`` instead.
        """
        subject = request.subject
        key = (subject, request.block_id)  # answers can be per block (two URLs expectations)
        if key in self._inflight:
            self.counters.skipped += 1
            self.log.info("revalidate_skipped", subject=subject, request_id=request.id)
            return None
        if not self.available:
            return [self._error(request, f"sensor {self.name!r} is {self.status}")]
        timeout_s = (
            self.revalidate_timeout_s
            if self.revalidate_timeout_s is not None
            else request.timeout.total_seconds()
        )
        self._inflight.add(key)
        self.counters.revalidations += 1
        try:
            result = await guarded(self.sensor.revalidate(request, self.ctx), timeout_s=timeout_s)
        finally:
            self._inflight.discard(key)
        if isinstance(result, Crash) and result.timed_out:
            self.counters.timeouts += 1
            self.counters.errors += 1  # the source did not answer: an error that shows
            self.counters.last_error = f"revalidate: timed out after {timeout_s:g}s"
            self.log.warning("revalidate_timed_out", subject=subject, timeout_s=timeout_s)
            return [self._error(request, f"check timed out after {timeout_s:g}s")]
        if isinstance(result, Crash):  # a crashing check is an error outcome
            self.counters.errors += 1
            self.counters.last_error = f"revalidate: {result.describe()}"
            self.log.warning("revalidate_failed", subject=subject, error=self.counters.last_error)
            return [self._error(request, self.counters.last_error)]
        if result is None:
            events: list[ValidationEvent] = []
        elif isinstance(result, ValidationEvent):
            events = [result]
        else:
            events = list(result)
        out = [
            ev if ev.request_id is not None else ev.model_copy(update={"request_id": request.id})
            for ev in events
        ]
        now = self.ctx.clock.time()
        for ev in out:
            self.counters.count(ev, now)
        return out

    def _error(self, request: RevalidationRequest, message: str) -> ValidationEvent:
        return self.ctx.event(
            request.subject, Outcome.ERROR, message=message, request_id=request.id
        )
