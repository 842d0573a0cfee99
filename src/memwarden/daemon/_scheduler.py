"""The scheduler: staleness sweep, revalidation dispatch and the periodic passes.

The sweep is an index range scan over ``stale_at``; what it finds is marked stale and
gets one revalidation request per binding. After downtime the overdue requests are
spread over ``rules.staleness.spread_window`` (no storm) and every tick sends at most
``rules.staleness.max_requests_per_tick``. Each request goes to the sensor that owns
the binding; its outcome comes back through the bus like any other event. A request
whose binding's check is still running is put back and waits a doubling delay before
it is sent again (``memory.policy.put_back_in``). A request is never sent once a look
at its binding answered it: the store closes it when it applies a poll's confirmation
or refutation observed after it was made, and a polling sensor answers one it has
looked at since (``RevalidationRequest.queued_at``) without checking again. Every pass
waits on the daemon's clock (``memory.sleep_on``), the clock the polling sensors' own
timelines wait on too; when each kind of check happens is in ``docs/RULES.md``
("Who checks when").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from memwarden.daemon._freshness import CheckStats
from memwarden.errors import MemwardenError
from memwarden.memory import SERIES_STEP_S, RetentionConfig, sleep_on
from memwarden.memory.policy import plan_revalidations, put_back_in

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
    from datetime import timedelta

    from memwarden.daemon._bus import Bus
    from memwarden.daemon._config import SchedulerSettings
    from memwarden.memory import RetentionReport, RevalidationRequest, StateChange, Store
    from memwarden.plugins import SensorRunner

__all__ = ["AlwaysLeader", "Leadership", "RemoteRoute", "Scheduler"]

log = structlog.get_logger("memwarden.scheduler")
ALIVE_KEY = "last_alive_at"


# A loop whose ticks keep failing (the database away, a node cut off) waits longer after
# each failure in a row: twice its interval, four times, ... up to this, or its own
# interval when that is longer; the first tick that succeeds brings the interval back.
RETRY_CAP_S = 60.0


def retry_delay(interval_s: float, failures: int) -> float:
    """How long a loop waits before its next tick after ``failures`` failed in a row."""
    if failures <= 0:
        return interval_s
    return min(interval_s * 2.0 ** min(failures, 32), max(interval_s, RETRY_CAP_S))


class RemoteRoute(Protocol):
    """Where requests for sensors that run elsewhere go (the MQTT bridge)."""

    def sensors(self) -> Collection[str]:
        """The remote sensors' names."""
        ...

    async def send(self, request: RevalidationRequest) -> None:
        """Hand a request over; its answer comes back through the bus as an event."""
        ...


class Leadership(Protocol):
    """Whether this node runs the singleton passes (docs/SCALE.md, "Singleton jobs and
    leader election"): on PostgreSQL ``memwarden.cluster.Leader`` (a lease), on SQLite
    :class:`AlwaysLeader`."""

    async def elected(self) -> object:
        """Return once this node leads."""
        ...

    async def deposed(self) -> None:
        """Return once this node does not lead (at once while it does not)."""
        ...


class AlwaysLeader:
    """One daemon on its own store (SQLite): it always leads."""

    async def elected(self) -> object:
        return self

    async def deposed(self) -> None:
        await asyncio.Event().wait()  # never


class Scheduler:
    """Owns the periodic work; each ``*_once`` method is one tick, for tests too.

    The passes over the whole memory (the sweep, decay, heuristics, consolidation,
    compaction, retention, the series, the daemon's own passes) run only while
    ``leadership`` says this node leads, are cancelled when it is deposed and start again
    at its next election; the dispatch of this node's checks and its heartbeat always run.
    """

    def __init__(
        self,
        *,
        store: Store,
        bus: Bus,
        runners: Callable[[], Mapping[str, SensorRunner]],
        settings: SchedulerSettings,
        down_since: float | None = None,
        remote: RemoteRoute | None = None,
        on_stale: Callable[[dict[str, str], list[StateChange]], None] | None = None,
        passes: Sequence[tuple[str, timedelta, Callable[[], Awaitable[Any]]]] = (),
        retention: RetentionConfig | None = None,
        leadership: Leadership | None = None,
        claim: bool = False,
    ) -> None:
        self.store = store
        # Several nodes (PostgreSQL): this node claims its own due checks, marked sent as
        # they are taken (``Store.claim_revalidations``), instead of reading them all.
        self._claim = claim
        self.leadership: Leadership = leadership or AlwaysLeader()
        self.bus = bus
        self._runners = runners
        self._remote = remote
        self.settings = settings
        self.down_since = down_since
        # Told {block id: state before} of what the sweep marked, and the state changes of
        # the dependents that fell with them.
        self._on_stale = on_stale
        self._passes = list(passes)  # the daemon's own periodic passes (binding proposals)
        self.retention = retention or RetentionConfig()
        self.retention_removed: dict[str, int] = {}  # kind -> count, since start
        self.swept = 0
        self.dispatched = 0
        self.unroutable = 0
        self.put_back = 0  # requests put back because their binding's check was running
        self._inflight: set[asyncio.Task[Any]] = set()
        self.sent_at: dict[str, float] = {}  # request id -> when it went out (for latency)
        self.sent_binding: dict[str, tuple[str, str]] = {}  # remote request id -> binding
        self.stats = CheckStats()  # per binding: recent check durations, last check
        self._tasks: asyncio.TaskGroup | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._stopped = False
        self._dispatching = asyncio.Lock()

    # ------------------------------------------------------------------ ticks

    async def sweep_once(self) -> int:
        """Mark what expired as stale and plan its revalidation; returns how many."""
        now = self.store.clock.time()
        restarting = self.down_since is not None
        limit = self.settings.sweep_batch * (50 if restarting else 1)
        due = await self.store.due_for_revalidation(limit=limit, now=now)
        if not due:
            self.down_since = None
            return 0
        plan = plan_revalidations(
            [(d.id, d.stale_at) for d in due],
            now=now,
            down_since=self.down_since,
            cfg=self.store.policy,
        )
        dependents: list[StateChange] = []
        changed = await self.store.mark_stale(
            [d.id for d in due], send_at=dict(plan), dependents=dependents
        )
        if len(due) < limit:
            self.down_since = None  # the backlog from the downtime is planned
        self.swept += len(changed)
        if changed and self._on_stale is not None:
            before = {d.id: d.state for d in due}
            swept = {block_id: before.get(block_id, "fresh") for block_id in changed}
            self._on_stale(swept, dependents)
        if changed:
            log.info("blocks_went_stale", count=len(changed), restarting=restarting)
        return len(changed)

    async def dispatch_once(self) -> int:
        """Send the revalidation requests whose time has come to their sensors.

        At most ``rules.staleness.max_requests_per_tick`` per call. Calls never overlap
        (the dispatch loop and a read-through from the API may both ask), so a request
        is sent once.
        """
        async with self._dispatching:
            if self._stopped:
                return 0
            limit = self.store.policy.staleness.max_requests_per_tick
            if self._claim:
                requests = await self.store.claim_revalidations(limit=limit)
            else:
                requests = await self.store.due_revalidations(limit=limit)
            if not requests:
                return 0
            runners = self._runners()
            route = self._remote
            remote_names = route.sensors() if route is not None else ()
            sent = [r for r in requests if r.sensor in runners]
            remote = [r for r in requests if r.sensor not in runners and r.sensor in remote_names]
            unroutable = [
                r.id for r in requests if r.sensor not in runners and r.sensor not in remote_names
            ]
            if sent or remote:
                # Marked sent before the checks start: an answer can only come after.
                if not self._claim:  # a claim marked them already
                    await self.store.set_revalidation_status([r.id for r in sent + remote], "sent")
                now = self.store.clock.time()
                if len(self.sent_at) > 100_000:  # unanswered ones: forget the oldest half
                    for key in list(self.sent_at)[:50_000]:
                        del self.sent_at[key]
                        self.sent_binding.pop(key, None)
                self.sent_at.update((r.id, now) for r in sent + remote)
                self.sent_binding.update((r.id, (r.sensor, r.subject)) for r in remote)
                for req in sent:
                    self._spawn(self._check(runners[req.sensor], req))
                if route is not None:
                    for req in remote:  # over MQTT: the answer comes back as an event
                        await route.send(req)
            if unroutable:
                self.unroutable += len(unroutable)
                await self.store.set_revalidation_status(
                    unroutable, "failed", outcome="no such sensor configured"
                )
            self.dispatched += len(sent) + len(remote)
            return len(sent) + len(remote)

    async def _check(self, runner: SensorRunner, req: RevalidationRequest) -> None:
        try:
            loop = asyncio.get_running_loop()
            began, sent = loop.time(), self.store.clock.time()
            events = await runner.revalidate(req)
            # Timed: what a read waiting for this check would wait. Not an answer observed
            # before it was sent (a polling sensor answering with a poll taken since the
            # request was made): no check ran, and its nil time would make a slow binding
            # look quick to reads.
            if events is not None and not (
                events and all(ev.observed_at.timestamp() < sent for ev in events)
            ):
                self.stats.finished(req.sensor, req.subject, loop.time() - began)
            if events is None:
                # This binding is still being checked: not overlapped, and not lost either:
                # back to pending, sent again once the running check has likely ended (a
                # doubling wait, not every tick).
                wait = put_back_in(
                    req.attempts,
                    dispatch_s=self.settings.dispatch_interval.total_seconds(),
                    cap_s=self.store.policy.evidence.retry_max.total_seconds(),
                )
                await self.store.put_back_revalidation(
                    req.id, send_at=self.store.clock.time() + wait
                )
                self.put_back += 1
            elif not events:
                # The sensor answered through ctx.emit (or had nothing to say): done.
                await self.store.set_revalidation_status(
                    [req.id], "done", outcome="no event returned"
                )
            for ev in events or ():
                await self.bus.put(runner.name, ev)
        except Exception as err:  # a closed bus at shutdown, a store error: never fatal
            log.error(
                "revalidation_failed",
                request_id=req.id,
                sensor=runner.name,
                error=f"{type(err).__name__}: {err}",
                exc_info=not isinstance(err, MemwardenError),
            )

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._tasks is None:
            raise MemwardenError("the scheduler is not running")
        task = self._tasks.create_task(coro, name="scheduler.revalidate")
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def retention_once(self) -> RetentionReport:
        """One retention pass (``[retention]``); logs and counts what it removed."""
        report = await self.store.enforce_retention(self.retention)
        for kind, n in report.removed.items():
            self.retention_removed[kind] = self.retention_removed.get(kind, 0) + n
        if any(report.removed.values()):
            log.info("retention_done", **report.as_dict(), purged_ids=report.purged_ids)
        else:
            log.debug("retention_done", **report.as_dict())
        return report

    async def series_once(self) -> int:
        """Sample the console's time series (one row per 5 minutes per metric; rows
        older than 14 days dropped); returns the rows written."""
        return await self.store.record_series()

    async def heartbeat_once(self) -> None:
        """Remember that we are alive, so the next start knows how long we were down."""
        await self.store.set_meta(ALIVE_KEY, repr(self.store.clock.time()))

    # ------------------------------------------------------------------ loops

    async def run(self) -> None:
        """Run every loop until cancelled (or :meth:`stop`ped)."""
        s = self.settings
        async with asyncio.TaskGroup() as tg:
            self._tasks = tg
            # (name, interval, tick, first tick at once, on the leader only)
            loops: list[tuple[str, float, Callable[[], Awaitable[Any]], bool, bool]] = [
                ("sweep", s.sweep_interval.total_seconds(), self.sweep_once, True, True),
                ("dispatch", s.dispatch_interval.total_seconds(), self.dispatch_once, True, False),
                (
                    "heartbeat",
                    s.heartbeat_interval.total_seconds(),
                    self.heartbeat_once,
                    True,
                    False,
                ),
            ]
            passes: list[tuple[str, timedelta, Callable[[], Awaitable[Any]]]] = [
                ("decay", s.decay_interval, self.store.decay_cycle),
                ("heuristics", s.heuristic_interval, self.store.heuristic_cycle),
                ("consolidation", s.consolidation_interval, self.store.consolidate),
            ]
            loops.append(("series", SERIES_STEP_S, self.series_once, True, True))
            if self.store.compaction.enabled:
                passes.append(("compaction", s.compaction_interval, self.store.compact_events))
            passes.extend(self._passes)
            if self.retention.active:  # nothing configured: nothing is ever removed
                passes.append(("retention", self.retention.interval, self.retention_once))
            loops.extend(
                (name, every.total_seconds(), fn, False, True) for name, every, fn in passes
            )
            for name, interval_s, fn, first, singleton in loops:
                if not self._stopped:
                    loop = (
                        self._while_leader(interval_s, fn, first=first, name=name)
                        if singleton
                        else self._every(interval_s, fn, first=first)
                    )
                    self._loops.append(tg.create_task(loop, name=f"scheduler.{name}"))

    async def _every(
        self, interval_s: float, fn: Callable[[], Awaitable[Any]], *, first: bool = True
    ) -> None:
        if not first:
            await sleep_on(self.store.clock, interval_s)
        failures = 0
        while True:
            try:
                await fn()
                failures = 0
            except Exception as err:  # one failed tick never stops the daemon
                failures += 1
                log.error(
                    "scheduler_tick_failed",
                    task=getattr(fn, "__name__", "?"),
                    error=f"{type(err).__name__}: {err}",
                    failures=failures,
                    retry_in_s=retry_delay(interval_s, failures),
                    exc_info=not isinstance(err, MemwardenError),
                )
            await sleep_on(self.store.clock, retry_delay(interval_s, failures))

    async def _while_leader(
        self,
        interval_s: float,
        fn: Callable[[], Awaitable[Any]],
        *,
        first: bool = True,
        name: str = "",
    ) -> None:
        """:meth:`_every` from each election until the deposition (then cancelled); each
        tick is logged (debug ``singleton_pass``, with the lease's epoch when it has one)."""
        while True:
            term = await self.leadership.elected()
            epoch = getattr(term, "epoch", None)

            async def tick(epoch: int | None = epoch) -> Any:
                log.debug("singleton_pass", task=name, epoch=epoch)
                return await fn()

            tick.__name__ = getattr(fn, "__name__", name)
            ticks = asyncio.ensure_future(self._every(interval_s, tick, first=first))
            deposed = asyncio.ensure_future(self.leadership.deposed())
            try:
                await asyncio.wait({ticks, deposed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (ticks, deposed):
                    task.cancel()
                await asyncio.gather(ticks, deposed, return_exceptions=True)

    def stop(self) -> None:
        """Start no more sweeps, dispatches or passes; checks in flight go on."""
        self._stopped = True
        for task in self._loops:
            task.cancel()

    async def wait_idle(self) -> None:
        """Wait for the revalidations in flight (for shutdown and tests)."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def cancel_checks(self) -> int:
        """Cancel the revalidations in flight; returns how many there were."""
        tasks = list(self._inflight)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)
