"""Singleton passes on the leader only (docs/SCALE.md, "Singleton jobs and leader
election"): the sweep, the series and the periodic passes run while the scheduler's
``Leadership`` says this node leads, are cancelled at its deposition (one in flight
too) and start again at the next election; the dispatch and the heartbeat always run.
On SQLite the scheduler always leads. And the ``[cluster]`` settings."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from tests.support import eventually

from memwarden.cluster import Leader, check_name
from memwarden.daemon import load_settings
from memwarden.daemon._config import ClusterSettings, SchedulerSettings, default_node_name
from memwarden.daemon._scheduler import AlwaysLeader, Leadership, Scheduler, retry_delay
from memwarden.errors import ConfigError, StorageError
from memwarden.memory import Store
from memwarden.plugins.testing import FakeClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path


class FakeLeadership:
    """Leads when the test says so."""

    def __init__(self) -> None:
        self._leading = asyncio.Event()
        self._following = asyncio.Event()
        self._following.set()

    async def elected(self) -> object:
        await self._leading.wait()
        return self

    async def deposed(self) -> None:
        await self._following.wait()

    def elect(self) -> None:
        self._following.clear()
        self._leading.set()

    def depose(self) -> None:
        self._leading.clear()
        self._following.set()


class Counts:
    def __init__(self) -> None:
        self.ticks: dict[str, int] = {}
        self.cancelled = 0
        self.hold: asyncio.Event | None = None  # the pass waits on it while set here
        self.holding = asyncio.Event()

    def counter(self, name: str) -> Callable[[], object]:
        async def tick() -> None:
            self.ticks[name] = self.ticks.get(name, 0) + 1
            if name == "pass" and self.hold is not None:
                self.holding.set()
                try:
                    await self.hold.wait()
                except asyncio.CancelledError:
                    self.cancelled += 1
                    raise

        return tick


@pytest.fixture
async def running(
    tmp_path: Path,
) -> AsyncIterator[tuple[Scheduler, FakeLeadership, Counts, FakeClock]]:
    clock = FakeClock()
    leadership = FakeLeadership()
    counts = Counts()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        scheduler = Scheduler(
            store=store,
            bus=None,  # type: ignore[arg-type] - nothing is dispatched here
            runners=dict,
            settings=SchedulerSettings(
                sweep_interval=timedelta(minutes=1),
                dispatch_interval=timedelta(minutes=1),
                heartbeat_interval=timedelta(minutes=1),
                decay_interval=timedelta(days=9),
                heuristic_interval=timedelta(days=9),
                consolidation_interval=timedelta(days=9),
                compaction_interval=timedelta(days=9),
            ),
            passes=[("pass", timedelta(minutes=1), counts.counter("pass"))],
            leadership=leadership,
        )
        for name in ("sweep", "series", "dispatch", "heartbeat"):
            setattr(scheduler, f"{name}_once", counts.counter(name))
        task = asyncio.create_task(scheduler.run())
        try:
            yield scheduler, leadership, counts, clock
        finally:
            scheduler.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_singleton_passes_run_only_while_leader(running) -> None:
    """A follower dispatches and heartbeats but never sweeps or runs a pass; elected, it
    does; deposed, they stop (the pass in flight is cancelled) and no tick comes until
    the next election."""
    _, leadership, counts, clock = running
    await eventually(lambda: counts.ticks.get("heartbeat") == 1 and counts.ticks.get("dispatch"))
    await eventually(lambda: clock.sleepers == 2, what="dispatch and heartbeat asleep")
    for _ in range(3):
        clock.advance(timedelta(minutes=1))
        await eventually(lambda: clock.sleepers == 2 and counts.ticks["heartbeat"] >= 2)
    assert "sweep" not in counts.ticks
    assert "series" not in counts.ticks
    assert "pass" not in counts.ticks

    leadership.elect()
    await eventually(lambda: counts.ticks.get("sweep") == 1 and counts.ticks.get("series") == 1)
    # dispatch, heartbeat and the singletons: sweep, series, decay, heuristics,
    # consolidation, compaction and the daemon's pass
    await eventually(lambda: clock.sleepers == 9, what="every loop asleep")
    counts.hold = asyncio.Event()
    clock.advance(timedelta(minutes=1))
    await asyncio.wait_for(counts.holding.wait(), 10)  # the pass runs, and waits
    assert counts.ticks["pass"] == 1
    await eventually(lambda: counts.ticks["sweep"] == 2)

    leadership.depose()
    await eventually(lambda: counts.cancelled == 1, what="the pass in flight cancelled")
    await eventually(lambda: clock.sleepers == 2, what="only dispatch and heartbeat left")
    before = dict(counts.ticks)
    for _ in range(3):
        clock.advance(timedelta(minutes=1))
        await eventually(lambda: clock.sleepers == 2)
    assert counts.ticks["sweep"] == before["sweep"]
    assert counts.ticks["pass"] == before["pass"]
    assert counts.ticks["heartbeat"] > before["heartbeat"]

    counts.hold = None
    leadership.elect()  # the next term starts the passes again
    await eventually(lambda: counts.ticks["sweep"] == before["sweep"] + 1)


async def test_sqlite_always_leads() -> None:
    """The default leadership: elected at once, never deposed."""
    lead: Leadership = AlwaysLeader()
    await asyncio.wait_for(lead.elected(), 1)
    deposed = asyncio.ensure_future(lead.deposed())
    done, _ = await asyncio.wait({deposed}, timeout=0.05)
    assert not done
    deposed.cancel()


def test_cluster_leader_is_a_leadership() -> None:
    """memwarden.cluster.Leader has the port's shape (the daemon cannot import it)."""
    lead: Leadership = Leader("postgresql://x@127.0.0.1/db", node="n1")
    assert callable(lead.elected)
    assert callable(lead.deposed)


def test_cluster_settings_node_names() -> None:
    """A node name as SCALE.md says (the same rule as memwarden.cluster.check_name);
    hostile ones are refused with the setting's path."""
    for good in ("build-1", "dev.anna", "ci_7", "0", "a" * 63):
        assert ClusterSettings(node=good).node == good
    for bad in ("", "Build-1", "-x", ".x", "a" * 64, "ä", "a b", "a\x00b", "a/b", "x;drop"):
        with pytest.raises(ValueError, match="not a valid node name"):
            ClusterSettings(node=bad)
    with pytest.raises(ConfigError) as refused:
        load_settings(None, env={}, cluster={"node": "Nope!"})
    assert any(p.startswith("cluster.node:") for p in refused.value.problems), (
        refused.value.problems
    )
    for name in ("build-1", "-x", "a" * 64, "Build"):
        try:
            check_name(name)
        except ConfigError:
            agrees = False
        else:
            agrees = True
        try:
            ClusterSettings(node=name)
        except ValueError:
            assert not agrees, name
        else:
            assert agrees, name


def test_default_node_name_from_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for host, node in (
        ("build-1", "build-1"),
        ("My_Host.Example.COM", "my_host.example.com"),
        ("hôte", "h-te"),
        ("-lead", "lead"),
        ("---", "node"),
        ("x" * 80, "x" * 63),
    ):
        monkeypatch.setattr("socket.gethostname", lambda host=host: host)
        assert default_node_name() == node
        assert ClusterSettings().node == node


def test_cluster_lease_times() -> None:
    """The defaults of SCALE.md; a renewal plus the safety margin must fit in the TTL."""
    s = ClusterSettings(node="n")
    assert [
        d.total_seconds() for d in (s.lease_ttl, s.lease_renew, s.lease_poll, s.lease_safety)
    ] == [
        6.0,
        2.0,
        1.0,
        0.5,
    ]
    assert s.spool_max_unsent == 100_000
    with pytest.raises(ValueError, match="must be below"):
        ClusterSettings(node="n", lease_ttl=timedelta(seconds=2), lease_renew=timedelta(seconds=2))
    with pytest.raises(ValueError, match="positive"):
        ClusterSettings(node="n", lease_poll=timedelta(0))
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        ClusterSettings(node="n", spool_max_unsent=0)


async def test_failing_ticks_back_off_up_to_a_minute_and_recover(tmp_path: Path) -> None:
    """A loop whose ticks keep failing (the node cut off from the database) waits twice
    as long after each failure in a row, up to 60 s (or its own interval when longer),
    not its 1 s interval every time; the first tick that succeeds brings the interval
    back."""
    clock = FakeClock()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        scheduler = Scheduler(
            store=store,
            bus=None,  # type: ignore[arg-type] - nothing is dispatched here
            runners=dict,
            settings=SchedulerSettings(),
        )
        start = clock.time()
        ticks: list[float] = []
        failing = True

        async def tick() -> None:
            ticks.append(clock.time() - start)
            if failing:
                raise StorageError("storage unavailable: connection refused")

        loop = asyncio.create_task(scheduler._every(1.0, tick))
        try:
            for _ in range(300):  # five minutes, a second at a time
                await eventually(lambda: clock.sleepers == 1, what="the loop asleep")
                clock.advance(1)
            await eventually(lambda: clock.sleepers == 1, what="the loop asleep")
            assert ticks == [0, 2, 6, 14, 30, 62, 122, 182, 242]  # not 300 failures
            failing = False
            clock.advance(2)  # the next try (at 242 + 60) succeeds: the database is back
            await eventually(lambda: len(ticks) == 10 and clock.sleepers == 1)
            for _ in range(3):
                clock.advance(1)  # back to the loop's own interval
                await eventually(lambda: clock.sleepers == 1 and len(ticks) >= 11)
            assert ticks[9:] == [302, 303, 304, 305]
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    assert [retry_delay(3600, n) for n in (0, 1, 5)] == [3600, 3600, 3600]  # never shorter
    assert [retry_delay(10, n) for n in (0, 1, 2, 3, 99)] == [10, 20, 40, 60, 60]
