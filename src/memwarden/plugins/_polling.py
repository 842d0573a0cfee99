"""A polling sensor whose loop the daemon owns: a plugin implements one ``check``.

Most sensors look at something every so often: a variable, a repository, an endpoint.
:class:`PollingSensor` runs that loop for them — on the injected clock (``ctx.sleep``),
one task per bound block — and a plugin only declares how often (``interval`` in its
config and, optionally, per binding) and implements::

    async def check(self, bound: BoundSubject[MyBinding]) -> Observation: ...

The base then

- checks each new binding at once, and again every interval (times ``1 ± jitter``);
  after an ``error`` it waits longer each time (``interval * 2^n``, capped at
  ``backoff_max``) until a check works again;
- emits per block (``block_id`` set) **only when the outcome or the observed value
  changed**, plus a confirmation of an unchanged observation every ``confirm_every``
  (and at least every half ``validity_window`` when the observation has one) so
  validity windows are renewed;
- answers the daemon's revalidation requests with the same ``check``;
- never runs two checks of one subject at once: a poll or a revalidation that finds one
  running waits for it (counted in ``waited``);
- turns a crashing or overlong check (``check_timeout``) into an ``error`` observation,
  never a refutation, and counts everything in :attr:`PollingSensor.poll_counters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import Field, JsonValue, model_validator

from memwarden.memory import Duration, Outcome
from memwarden.plugins._contract import PLUGIN_API, BaseBinding, BaseSensorConfig, BoundSubject

if TYPE_CHECKING:
    from memwarden.memory import RevalidationRequest, ValidationEvent
    from memwarden.plugins._contract import SensorContext

__all__ = [
    "Observation",
    "PollCounters",
    "PollingBinding",
    "PollingConfig",
    "PollingSensor",
]

#: The shortest interval anything may poll at, whatever a config says.
HARD_MIN_INTERVAL = timedelta(milliseconds=10)


class PollingConfig(BaseSensorConfig):
    """The settings every polling sensor has; derive your ``Config`` from it."""

    interval: Duration = Field(
        default=timedelta(seconds=60), description="How often each binding is checked."
    )
    min_interval: Duration = Field(
        default=timedelta(seconds=1),
        description="The shortest interval a binding may ask for (at least 10ms).",
    )
    jitter: float = Field(
        default=0.1, ge=0.0, le=0.5, description="Each wait is the interval times 1 ± this."
    )
    backoff_max: Duration = Field(
        default=timedelta(minutes=10),
        description="After errors the wait doubles per failed check, up to this.",
    )
    confirm_every: Duration = Field(
        default=timedelta(minutes=30),
        description="An unchanged observation is emitted again this often.",
    )
    check_timeout: Duration = Field(
        default=timedelta(seconds=30), description="One check's deadline (then: error)."
    )

    @model_validator(mode="after")
    def _sane_intervals(self) -> PollingConfig:
        for name in ("interval", "min_interval", "backoff_max", "confirm_every", "check_timeout"):
            if getattr(self, name) < HARD_MIN_INTERVAL:
                msg = f"{name}: must be at least 10ms"
                raise ValueError(msg)
        if self.interval < self.min_interval:
            msg = "interval: must not be shorter than min_interval"
            raise ValueError(msg)
        return self


class PollingBinding(BaseBinding):
    """Base for a polling sensor's binding: an optional per-binding ``interval``."""

    interval: Duration | None = Field(
        default=None, description="How often this binding is checked (default: the sensor's)."
    )


@dataclass(frozen=True, slots=True)
class Observation:
    """What one check saw; the base turns it into an event for the bound block."""

    outcome: Outcome | str
    message: str = ""
    observed: JsonValue = None
    reliability: float | None = None
    validity_window: timedelta | None = None
    observed_at: datetime | None = None

    @classmethod
    def confirmed(cls, message: str = "", **kw: Any) -> Observation:
        return cls(Outcome.CONFIRMED, message, **kw)

    @classmethod
    def refuted(cls, message: str = "", **kw: Any) -> Observation:
        return cls(Outcome.REFUTED, message, **kw)

    @classmethod
    def changed(cls, message: str = "", **kw: Any) -> Observation:
        return cls(Outcome.CHANGED, message, **kw)

    @classmethod
    def error(cls, message: str, **kw: Any) -> Observation:
        """Could not check: never a refutation."""
        return cls(Outcome.ERROR, message, **kw)

    def key(self) -> tuple[str, str]:
        """What "changed" compares: the outcome and the observed value (not the message)."""
        return (str(Outcome(self.outcome)), json.dumps(self.observed, sort_keys=True, default=str))


@dataclass(slots=True)
class PollCounters:
    """What the polling loop did (``sensor.poll_counters``)."""

    checks: int = 0  # checks run (polls and revalidations)
    changes: int = 0  # emitted because the observation changed (or was the first)
    confirmations: int = 0  # an unchanged observation emitted again (confirm_every)
    unchanged: int = 0  # polls that saw nothing new and emitted nothing
    errors: int = 0  # checks that ended in an error (including crashes and timeouts)
    crashes: int = 0  # checks that raised
    timeouts: int = 0  # checks that outlived check_timeout
    waited: int = 0  # polls that waited for a running check of the same subject
    revalidations: int = 0  # checks run for a revalidation request

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


ConfigT = TypeVar("ConfigT", bound=PollingConfig)
BindingT = TypeVar("BindingT", bound=BaseBinding)


@dataclass(slots=True)
class _Seen:
    key: tuple[str, str]
    emitted_at: float  # clock time of the last event emitted for the block


class PollingSensor(Generic[ConfigT, BindingT]):
    """A sensor whose loop is run for it: subclass, set ``kind``/``Config``/``Binding``,
    implement :meth:`check`. Override :meth:`on_setup` / :meth:`on_teardown` to acquire
    and release resources (``setup``/``teardown`` are the base's)."""

    api_version: ClassVar[int] = PLUGIN_API
    kind: ClassVar[str]
    Config: ClassVar[type[PollingConfig]]
    Binding: ClassVar[type[BaseBinding]]

    def __init__(self, config: ConfigT) -> None:
        self.config: ConfigT = config
        self.poll_counters = PollCounters()
        self.rng = random.Random()  # noqa: S311 - spreading polls, not secrets
        self._ctx: SensorContext[BindingT] | None = None
        self._tasks: dict[tuple[str, Any], asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._seen: dict[str, _Seen] = {}

    # ------------------------------------------------------------------ for subclasses

    async def check(self, bound: BoundSubject[BindingT]) -> Observation:
        """Look at the world for one bound block; return what was seen."""
        raise NotImplementedError

    def selector(self, bound: BoundSubject[BindingT]) -> BindingT:
        """``bound.selector`` (typed ``BindingT`` already; kept for older callers)."""
        return bound.selector

    @property
    def ctx(self) -> SensorContext[BindingT]:
        """The context given to ``setup`` (raises before it)."""
        if self._ctx is None:
            raise RuntimeError(f"sensor {type(self).__name__} is not set up")
        return self._ctx

    async def on_setup(self, ctx: SensorContext[BindingT]) -> None:
        """Acquire resources (called by ``setup``)."""

    async def on_teardown(self) -> None:
        """Release them (called by ``teardown``; must cope with a partial ``on_setup``)."""

    def interval_of(self, bound: BoundSubject[BindingT]) -> timedelta:
        """The binding's ``interval`` if it has one (never below ``min_interval``), else
        the sensor's."""
        own = getattr(bound.selector, "interval", None)
        if isinstance(own, timedelta):
            return max(own, self.config.min_interval)
        return self.config.interval

    # ------------------------------------------------------------------ the contract

    async def setup(self, ctx: SensorContext[BindingT]) -> None:
        self._ctx = ctx
        await self.on_setup(ctx)

    async def run(self, ctx: SensorContext[BindingT]) -> None:
        ctx.ready()
        try:
            while True:
                self._reconcile(ctx, await ctx.wait_bindings_changed())
        finally:
            await self._cancel_all()

    async def revalidate(
        self, request: RevalidationRequest, ctx: SensorContext[BindingT]
    ) -> ValidationEvent:
        bound = BoundSubject(request.block_id, request.binding, ctx.parse_binding(request.binding))
        self.poll_counters.revalidations += 1
        async with self._lock(bound.subject):
            obs = await self._checked(bound)
        event = self._event(ctx, bound, obs, request_id=request.id)
        self._seen[bound.block_id] = _Seen(obs.key(), ctx.clock.time())
        return event

    async def teardown(self) -> None:
        await self._cancel_all()
        self._seen.clear()
        try:
            await self.on_teardown()
        finally:
            self._ctx = None

    # ------------------------------------------------------------------ the loop

    def _reconcile(
        self, ctx: SensorContext[BindingT], bindings: list[BoundSubject[BindingT]]
    ) -> None:
        wanted = {(b.block_id, b.binding): b for b in bindings}
        for key in [k for k in self._tasks if k not in wanted]:
            self._tasks.pop(key).cancel()
            if key[0] not in {k[0] for k in wanted}:
                self._seen.pop(key[0], None)
        for key, bound in wanted.items():
            task = self._tasks.get(key)
            if task is None or task.done():
                self._tasks[key] = asyncio.get_running_loop().create_task(
                    self._poll(ctx, bound), name=f"sensor[{ctx.name}].poll[{bound.block_id}]"
                )

    async def _cancel_all(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _poll(self, ctx: SensorContext[BindingT], bound: BoundSubject[BindingT]) -> None:
        failures = 0
        while True:
            lock = self._lock(bound.subject)
            if lock.locked():
                # Another block's check (or a revalidation) of this subject is running:
                # wait for it, never run beside it. Several claims about one subject are
                # checked one after another, not an interval apart.
                self.poll_counters.waited += 1
            async with lock:
                obs = await self._checked(bound)
            failures = failures + 1 if Outcome(obs.outcome) == Outcome.ERROR else 0
            event = self._if_due(ctx, bound, obs)
            if event is not None:
                await ctx.emit(event)
            await ctx.sleep(self._delay(self.interval_of(bound), failures))

    def _delay(self, interval: timedelta, failures: int) -> float:
        base = interval.total_seconds()
        if failures:
            base = min(base * 2 ** min(failures, 32), self.config.backoff_max.total_seconds())
        jitter = self.config.jitter
        return base * self.rng.uniform(1.0 - jitter, 1.0 + jitter)

    async def _checked(self, bound: BoundSubject[BindingT]) -> Observation:
        """``check`` under its deadline; a crash or a timeout is an ``error``."""
        self.poll_counters.checks += 1
        timeout = self.config.check_timeout
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                obs = await self.check(bound)
        except TimeoutError:
            self.poll_counters.timeouts += 1
            obs = Observation.error(f"check timed out after {timeout.total_seconds():g}s")
        except Exception as err:  # noqa: BLE001 - a crashing check is an error outcome
            self.poll_counters.crashes += 1
            text = str(err)
            obs = Observation.error(f"{type(err).__name__}: {text}" if text else type(err).__name__)
        if Outcome(obs.outcome) == Outcome.ERROR:
            self.poll_counters.errors += 1
        return obs

    def _if_due(
        self, ctx: SensorContext[BindingT], bound: BoundSubject[BindingT], obs: Observation
    ) -> ValidationEvent | None:
        """The event to emit for a poll's observation, or None when nothing is new."""
        now = ctx.clock.time()
        key = obs.key()
        seen = self._seen.get(bound.block_id)
        if seen is None or seen.key != key:
            self.poll_counters.changes += 1
        elif now - seen.emitted_at >= self._confirm_every(obs):
            self.poll_counters.confirmations += 1
        else:
            self.poll_counters.unchanged += 1
            return None
        self._seen[bound.block_id] = _Seen(key, now)
        return self._event(ctx, bound, obs)

    def _confirm_every(self, obs: Observation) -> float:
        every = self.config.confirm_every.total_seconds()
        if obs.validity_window is not None:
            every = min(every, obs.validity_window.total_seconds() / 2)
        return every

    def _event(
        self,
        ctx: SensorContext[BindingT],
        bound: BoundSubject[BindingT],
        obs: Observation,
        *,
        request_id: str | None = None,
    ) -> ValidationEvent:
        return ctx.event(
            bound.subject,
            obs.outcome,
            observed=obs.observed,
            message=obs.message,
            reliability=obs.reliability,
            validity_window=obs.validity_window,
            observed_at=obs.observed_at,
            block_id=bound.block_id,
            request_id=request_id,
        )

    def _lock(self, subject: str) -> asyncio.Lock:
        return self._locks.setdefault(subject, asyncio.Lock())
