"""The scheduler: staleness sweep, revalidation dispatch and the periodic passes.

The sweep is an index range scan over ``stale_at``; what it finds is marked stale and
gets one revalidation request per binding. After downtime the overdue requests are
spread over ``rules.staleness.spread_window`` (no storm) and every tick sends at most
``rules.staleness.max_requests_per_tick``. Each request goes to the sensor that owns
the binding; its outcome comes back through the bus like any other event.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.errors import MemwardenError
from memwarden.memory.policy import plan_revalidations

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from memwarden.daemon._bus import Bus
    from memwarden.daemon._config import SchedulerSettings
    from memwarden.memory import RevalidationRequest
    from memwarden.memory._store import Store
    from memwarden.plugins import SensorRunner

__all__ = ["Scheduler"]

log = structlog.get_logger("memwarden.scheduler")
ALIVE_KEY = "last_alive_at"


class Scheduler:
    """Owns the periodic work; each ``*_once`` method is one tick, for tests too."""

    def __init__(
        self,
        *,
        store: Store,
        bus: Bus,
        runners: Callable[[], Mapping[str, SensorRunner]],
        settings: SchedulerSettings,
        down_since: float | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self._runners = runners
        self.settings = settings
        self.down_since = down_since
        self.swept = 0
        self.dispatched = 0
        self.unroutable = 0
        self._inflight: set[asyncio.Task[Any]] = set()
        self.sent_at: dict[str, float] = {}  # request id -> when it went out (for latency)
        self._tasks: asyncio.TaskGroup | None = None

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
        changed = await self.store.mark_stale([d.id for d in due], send_at=dict(plan))
        if len(due) < limit:
            self.down_since = None  # the backlog from the downtime is planned
        self.swept += len(changed)
        if changed:
            log.info("blocks_went_stale", count=len(changed), restarting=restarting)
        return len(changed)

    async def dispatch_once(self) -> int:
        """Send the revalidation requests whose time has come to their sensors."""
        limit = self.store.policy.staleness.max_requests_per_tick
        requests = await self.store.due_revalidations(limit=limit)
        if not requests:
            return 0
        runners = self._runners()
        sent, unroutable = [], []
        for req in requests:
            runner = runners.get(req.sensor)
            if runner is None:
                unroutable.append(req.id)
                continue
            sent.append(req.id)
            self._spawn(self._check(runner, req))
        if sent:
            await self.store.set_revalidation_status(sent, "sent")
            now = self.store.clock.time()
            if len(self.sent_at) > 100_000:  # unanswered ones: forget the oldest half
                for key in list(self.sent_at)[:50_000]:
                    del self.sent_at[key]
            self.sent_at.update((rid, now) for rid in sent)
        if unroutable:
            self.unroutable += len(unroutable)
            await self.store.set_revalidation_status(
                unroutable, "failed", outcome="no such sensor configured"
            )
        self.dispatched += len(sent)
        return len(sent)

    async def _check(self, runner: SensorRunner, req: RevalidationRequest) -> None:
        events = await runner.revalidate(req)
        for ev in events:
            await self.bus.put(runner.name, ev)
        if not events:  # skipped: a check of the subject is still running
            await self.store.set_revalidation_status([req.id], "pending")

    def _spawn(self, coro: Awaitable[None]) -> None:
        if self._tasks is None:
            raise MemwardenError("the scheduler is not running")
        task: asyncio.Task[None] = self._tasks.create_task(
            coro,  # type: ignore[arg-type]
            name="scheduler.revalidate",
        )
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def heartbeat_once(self) -> None:
        """Remember that we are alive, so the next start knows how long we were down."""
        await self.store.set_meta(ALIVE_KEY, repr(self.store.clock.time()))

    # ------------------------------------------------------------------ loops

    async def run(self) -> None:
        """Run every loop until cancelled."""
        s = self.settings
        async with asyncio.TaskGroup() as tg:
            self._tasks = tg
            tg.create_task(
                self._every(s.sweep_interval.total_seconds(), self.sweep_once),
                name="scheduler.sweep",
            )
            tg.create_task(
                self._every(s.dispatch_interval.total_seconds(), self.dispatch_once),
                name="scheduler.dispatch",
            )
            tg.create_task(
                self._every(s.heartbeat_interval.total_seconds(), self.heartbeat_once),
                name="scheduler.heartbeat",
            )
            for name, interval, method in (
                ("decay", s.decay_interval, "decay_cycle"),
                ("heuristics", s.heuristic_interval, "heuristic_cycle"),
                ("consolidation", s.consolidation_interval, "consolidate"),
            ):
                fn = getattr(self.store, method, None)
                if fn is not None:
                    tg.create_task(
                        self._every(interval.total_seconds(), fn, first=False),
                        name=f"scheduler.{name}",
                    )

    async def _every(
        self, interval_s: float, fn: Callable[[], Awaitable[Any]], *, first: bool = True
    ) -> None:
        if not first:
            await asyncio.sleep(interval_s)
        while True:
            try:
                await fn()
            except MemwardenError as err:
                log.error(
                    "scheduler_tick_failed", task=getattr(fn, "__name__", "?"), error=str(err)
                )
            await asyncio.sleep(interval_s)

    async def wait_idle(self) -> None:
        """Wait for the revalidations in flight (for shutdown and tests)."""
        while self._inflight:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self._inflight), return_exceptions=True)
