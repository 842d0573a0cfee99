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
  changed**, plus an unchanged observation again every ``confirm_every`` (and at least
  every half its own ``validity_window``); an unchanged confirmation also at least
  every half of the block's window (``BoundSubject.validity_window``), polling early
  for it when the interval is longer, so a block it answers for never expires while
  nothing changes (only a confirmation renews: an error keeps its backoff);
- answers the daemon's revalidation requests with the same ``check``, and counts one as
  the binding's check: its next poll is an interval after it; a request that a poll
  has answered since it was made (a look taken after ``queued_at``, within one
  interval, not an error) is answered with that look, without checking again
  (``answered_by_poll``);
- checks at once what a sensor's own watcher says may have changed
  (:meth:`PollingSensor.check_soon`), polling staying the safety net;
- never runs two checks of one subject at once: a poll or a revalidation that finds one
  running waits for it (counted in ``waited``), and a poll that a check begun after it
  fell due has answered is not run again;
- answers every block bound with the very same binding with one check (``shared``);
- turns a crashing or overlong check (``check_timeout``) into an ``error`` observation,
  never a refutation, and counts everything in :attr:`PollingSensor.poll_counters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import Field, JsonValue, model_validator

from memwarden.errors import ValidationInputError
from memwarden.memory import Binding, Duration, Outcome, format_duration, from_ts
from memwarden.memory.policy import next_check_in
from memwarden.plugins._capabilities import DryRun
from memwarden.plugins._contract import PLUGIN_API, BaseBinding, BaseSensorConfig, BoundSubject
from memwarden.plugins._guard import Crash, guarded

if TYPE_CHECKING:
    from memwarden.memory import RevalidationRequest, ValidationEvent
    from memwarden.plugins._contract import SensorContext

__all__ = [
    "HARD_MIN_INTERVAL",
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

    #: A sensor whose checks carry their own deadline (it overrides ``timeout_of``) names
    #: that key here: ``check_timeout`` would do nothing, so setting it is refused.
    deadline_key: ClassVar[str | None] = None

    @model_validator(mode="after")
    def _sane_intervals(self) -> PollingConfig:
        if self.deadline_key and "check_timeout" in self.model_fields_set:
            msg = (
                f"check_timeout: not used by this sensor, whose checks' deadline is "
                f"{self.deadline_key}; set {self.deadline_key} instead"
            )
            raise ValueError(msg)
        for name in ("min_interval", "backoff_max", "confirm_every", "check_timeout"):
            value = getattr(self, name)
            if value < HARD_MIN_INTERVAL:
                msg = (
                    f"{name}: {format_duration(value)} is too short "
                    f"(at least {format_duration(HARD_MIN_INTERVAL)})"
                )
                raise ValueError(msg)
        if self.interval < self.min_interval:
            msg = (
                f"interval: {format_duration(self.interval)} is below min_interval "
                f"({format_duration(self.min_interval)})"
            )
            raise ValueError(msg)
        return self


class PollingBinding(BaseBinding):
    """Base for a polling sensor's binding: an optional per-binding ``interval``."""

    interval: Duration | None = Field(
        default=None, description="How often this binding is checked (default: the sensor's)."
    )


@dataclass(frozen=True, slots=True)
class Observation:
    """What one check saw; the base turns it into an event for the bound block.

    ``compare``, when set, is what "changed" compares instead of ``observed`` (leave out
    what differs on every check, such as a latency, so an unchanged answer stays quiet).
    """

    outcome: Outcome | str
    message: str = ""
    observed: JsonValue = None
    reliability: float | None = None
    validity_window: timedelta | None = None
    observed_at: datetime | None = None
    compare: JsonValue = None

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
        """What "changed" compares: the outcome and the observed value (or ``compare``),
        not the message."""
        seen = self.observed if self.compare is None else self.compare
        return (str(Outcome(self.outcome)), json.dumps(seen, sort_keys=True, default=str))


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
    answered_by_poll: int = 0  # requests answered with a look taken since they were made
    shared: int = 0  # observations handed to another block with the very same binding

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


ConfigT = TypeVar("ConfigT", bound=PollingConfig)
BindingT = TypeVar("BindingT", bound=BaseBinding)


@dataclass(slots=True)
class _Slot:
    """When one binding is checked next: the one time that polls, revalidations and a
    watcher's :meth:`PollingSensor.check_soon` all move."""

    bound: BoundSubject[Any]
    due_at: float  # clock time
    sleeping: asyncio.Task[None] | None = None  # the poll task, while it sleeps
    woken: bool = False
    answered_at: float = float("-inf")  # when the latest check answering for it began
    seen: Observation | None = None  # what that check saw ...
    seen_at: float = float("-inf")  # ... and when (its observation's time)

    def saw(self, obs: Observation, now: float) -> None:
        """A check answering for this binding ended at ``now`` and saw ``obs``."""
        self.seen = obs
        self.seen_at = obs.observed_at.timestamp() if obs.observed_at is not None else now

    def wake(self) -> None:
        """Interrupt the poll's sleep (like ``asyncio.timeout``: a cancellation the sleeper
        takes back), so it looks at ``due_at`` again."""
        if self.sleeping is not None and not self.woken:
            self.woken = True
            self.sleeping.cancel()


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
        self._slots: dict[tuple[str, Any], _Slot] = {}
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

    async def on_bindings(self, bindings: list[BoundSubject[BindingT]]) -> None:
        """The bindings changed (called by ``run`` after the base took them): a sensor
        that watches for changes itself updates what it watches here."""

    def check_soon(self, subject: str) -> int:
        """Check every binding of ``subject`` now rather than at its next interval: for a
        sensor whose own watcher saw something change. Returns how many were due."""
        now = self.ctx.clock.time()
        n = 0
        for slot in self._slots.values():
            if slot.bound.subject == subject:
                slot.due_at = min(slot.due_at, now)
                slot.answered_at = float("-inf")  # what was seen before may be outdated
                slot.seen, slot.seen_at = None, float("-inf")
                slot.wake()
                n += 1
        return n

    def interval_of(self, bound: BoundSubject[BindingT]) -> timedelta:
        """The binding's ``interval`` if it has one (never below ``min_interval``), else
        the sensor's."""
        own = getattr(bound.selector, "interval", None)
        if isinstance(own, timedelta):
            return max(own, self.config.min_interval)
        return self.config.interval

    def timeout_of(self, bound: BoundSubject[BindingT]) -> timedelta:  # noqa: ARG002 - a hook
        """One check's deadline (default ``check_timeout``); a sensor whose checks have
        their own deadlines returns a little more than those."""
        return self.config.check_timeout

    # ------------------------------------------------------------------ the contract

    async def setup(self, ctx: SensorContext[BindingT]) -> None:
        self._ctx = ctx
        await self.on_setup(ctx)

    async def run(self, ctx: SensorContext[BindingT]) -> None:
        ctx.ready()
        try:
            while True:
                bindings = await ctx.wait_bindings_changed()
                self._reconcile(ctx, bindings)
                await self.on_bindings(bindings)
        finally:
            await self._cancel_all()

    async def revalidate(
        self, request: RevalidationRequest, ctx: SensorContext[BindingT]
    ) -> ValidationEvent:
        try:  # a binding stored before today's rules: refused, never checked
            selector = ctx.parse_binding(request.binding)
        except ValidationInputError as err:
            return ctx.event(
                request.subject,
                Outcome.ERROR,
                message=f"binding refused: {err}"[:1000],
                block_id=request.block_id,
                request_id=request.id,
            )
        bound = BoundSubject(request.block_id, request.binding, selector)
        async with self._lock(bound.subject):
            slot = self._slots.get((bound.block_id, bound.binding))
            seen = self._answered_since(slot, request, ctx.clock.time())
            if seen is None:
                self.poll_counters.revalidations += 1
                began = ctx.clock.time()
                obs = await self._checked(bound)
        now = ctx.clock.time()
        if seen is not None and slot is not None:  # a poll looked since the request was made
            self.poll_counters.answered_by_poll += 1
            # Emitted now, as seen then: the next confirmation is paced from the look.
            self._seen[bound.block_id] = _Seen(seen.key(), slot.seen_at)
            self._renew_by(slot, seen)
            return self._event(ctx, bound, seen, request_id=request.id)
        event = self._event(ctx, bound, obs, request_id=request.id)
        self._seen[bound.block_id] = _Seen(obs.key(), now)
        slot = self._slots.get((bound.block_id, bound.binding))
        if slot is not None:  # this was the binding's check: the next poll is due later
            slot.due_at = max(slot.due_at, now + self._delay(self.interval_of(bound), 0))
            slot.answered_at = max(slot.answered_at, began)
            slot.saw(obs, now)
            self._renew_by(slot, obs)
        return event

    def _answered_since(
        self, slot: _Slot | None, request: RevalidationRequest, now: float
    ) -> Observation | None:
        """The binding's latest look when it answers ``request``: taken after the request
        was made (``queued_at``; unknown, as over MQTT, never answers), at most one
        interval ago, and a confirmation or refutation (an error checked nothing)."""
        if slot is None or slot.seen is None or request.queued_at is None:
            return None
        seen, at = slot.seen, slot.seen_at
        if at <= request.queued_at.timestamp():
            return None
        if now - at > self.interval_of(slot.bound).total_seconds():
            return None
        if Outcome(seen.outcome) not in (Outcome.CONFIRMED, Outcome.REFUTED):
            return None
        return seen if seen.observed_at is not None else replace(seen, observed_at=from_ts(at))

    async def dry_run(self, selector: BindingT) -> DryRun:
        """Check a selector once now (binding suggestions' dry run): the same ``check``
        under its deadline, never overlapping another check of the subject; nothing is
        emitted or remembered."""
        ctx = self.ctx
        raw = {"sensor": ctx.name, **selector.model_dump(mode="json", exclude_unset=True)}
        binding = Binding.model_validate(raw)
        bound = BoundSubject("dry-run", binding, selector)
        async with self._lock(bound.subject):
            obs = await self._checked(bound)
        return DryRun(str(Outcome(obs.outcome)), obs.observed, obs.message)

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
            self._slots.pop(key, None)
            if key[0] not in {k[0] for k in wanted}:
                self._seen.pop(key[0], None)
        for key, bound in wanted.items():
            task = self._tasks.get(key)
            if task is None or task.done():
                slot = self._slots[key] = _Slot(bound, ctx.clock.time())
                self._tasks[key] = asyncio.get_running_loop().create_task(
                    self._poll(ctx, slot), name=f"sensor[{ctx.name}].poll[{bound.block_id}]"
                )

    async def _cancel_all(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._slots.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _poll(self, ctx: SensorContext[BindingT], slot: _Slot) -> None:
        bound = slot.bound
        failures = 0
        while True:
            await self._until_due(ctx, slot)
            due = slot.due_at
            lock = self._lock(bound.subject)
            if lock.locked():
                # Another block's check (or a revalidation) of this subject is running:
                # wait for it, never run beside it. Several claims about one subject are
                # checked one after another, not an interval apart.
                self.poll_counters.waited += 1
            async with lock:
                if slot.answered_at >= due and slot.due_at > ctx.clock.time():
                    continue  # a check begun since we fell due answered for us
                began = ctx.clock.time()
                obs = await self._checked(bound)
            failures = failures + 1 if Outcome(obs.outcome) == Outcome.ERROR else 0
            now = ctx.clock.time()
            # One check answers every block with the very same binding (several blocks
            # naming one runtime check, one URL with the same expectations): all their
            # times move before anything is emitted, so none of them checks again.
            answered = [slot, *self._twins(slot)]
            for each in answered:
                each.answered_at = max(each.answered_at, began)
                each.saw(obs, now)
                wait = self._delay(self.interval_of(each.bound), failures)
                each.due_at = now + wait if each is slot else max(each.due_at, now + wait)
            self.poll_counters.shared += len(answered) - 1
            for each in answered:
                event = self._if_due(ctx, each.bound, obs)
                if event is not None:
                    await ctx.emit(event)
            for each in answered:
                self._renew_by(each, obs)

    def _renew_by(self, slot: _Slot, obs: Observation) -> None:
        """Bring the slot's next check forward to when its block's confirmation falls due
        (half its window after the last event), so it is renewed before it expires. Only
        after a confirmation: nothing else renews it, and an error keeps its backoff."""
        seen = self._seen.get(slot.bound.block_id)
        if seen is None or Outcome(obs.outcome) != Outcome.CONFIRMED:
            return
        if self._half_window(slot.bound, obs) is not None:
            slot.due_at = min(slot.due_at, seen.emitted_at + self._confirm_every(slot.bound, obs))

    def _twins(self, slot: _Slot) -> list[_Slot]:
        """The other blocks' slots whose binding is the very same as this one's."""
        return [
            other
            for other in self._slots.values()
            if other is not slot and other.bound.binding == slot.bound.binding
        ]

    @staticmethod
    async def _until_due(ctx: SensorContext[Any], slot: _Slot) -> None:
        """Sleep on the daemon's clock until ``slot.due_at``, which may move meanwhile (a
        revalidation puts it later, :meth:`check_soon` now)."""
        task = asyncio.current_task()
        while (left := slot.due_at - ctx.clock.time()) > 0:
            slot.sleeping, slot.woken = task, False
            try:
                await ctx.sleep(left)
            except asyncio.CancelledError:
                # Ours (slot.wake) is taken back; any other cancellation goes on.
                if not slot.woken or task is None or task.uncancel() > 0:
                    raise
            finally:
                slot.sleeping = None

    def _delay(self, interval: timedelta, failures: int) -> float:
        jitter = self.config.jitter
        return next_check_in(
            interval.total_seconds(),
            failures,
            backoff_max_s=self.config.backoff_max.total_seconds(),
            spread=self.rng.uniform(1.0 - jitter, 1.0 + jitter),
        )

    async def _checked(self, bound: BoundSubject[BindingT]) -> Observation:
        """``check`` under its deadline; a crash or a timeout is an ``error``."""
        self.poll_counters.checks += 1
        timeout = self.timeout_of(bound)
        obs = await guarded(self.check(bound), timeout_s=timeout.total_seconds())
        if isinstance(obs, Crash):  # a crash or a timeout is an error outcome
            if obs.timed_out:
                self.poll_counters.timeouts += 1
                obs = Observation.error(f"check timed out after {timeout.total_seconds():g}s")
            else:
                self.poll_counters.crashes += 1
                obs = Observation.error(obs.describe())
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
        elif now >= seen.emitted_at + self._confirm_every(bound, obs):
            self.poll_counters.confirmations += 1
        else:
            self.poll_counters.unchanged += 1
            return None
        self._seen[bound.block_id] = _Seen(key, now)
        return self._event(ctx, bound, obs)

    def _confirm_every(self, bound: BoundSubject[Any], obs: Observation) -> float:
        """How long after its last event an unchanged observation is emitted again."""
        every = self.config.confirm_every.total_seconds()
        half = self._half_window(bound, obs)
        return every if half is None else min(every, half)

    @staticmethod
    def _half_window(bound: BoundSubject[Any], obs: Observation) -> float | None:
        """Half the shortest of the block's and the observation's validity windows. The
        block's counts for a confirmation only: that is what renews it (a refutation, a
        change or an error renews nothing, and keeps its pace and its backoff)."""
        block = bound.validity_window if Outcome(obs.outcome) == Outcome.CONFIRMED else None
        windows = [w for w in (block, obs.validity_window) if w is not None]
        return min(windows).total_seconds() / 2 if windows else None

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
