"""One owner of checks: a polling sensor's answers close the revalidation queue's requests,
so the scheduler never sends a check that a poll has just made (docs/RULES.md, "Who
checks when"). All on the test kit's clock: polls run when the test moves it."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from memwarden.plugins import (
    BoundSubject,
    Observation,
    PollingBinding,
    PollingConfig,
    PollingSensor,
)
from memwarden.plugins.testing import FakeClock

if TYPE_CHECKING:
    from memwarden.daemon import Daemon

SLOW_LOOPS = {"sweep_interval": "1h", "dispatch_interval": "1h", "heartbeat_interval": "1h"}
GAUGE = {"interval": "60s", "jitter": 0, "confirm_every": "30m"}


class GaugeConfig(PollingConfig):
    pass


class GaugeBinding(PollingBinding):
    name: str
    equals: int | None = None

    def subject_of(self) -> str:
        return self.name


class Gauge(PollingSensor[GaugeConfig, GaugeBinding]):
    """Reads ``WORLD[name]``: confirmed when it equals ``equals``, else refuted;
    ``"down"`` is an error."""

    kind: ClassVar[str] = "gauge"
    Config: ClassVar[type[GaugeConfig]] = GaugeConfig
    Binding: ClassVar[type[GaugeBinding]] = GaugeBinding
    WORLD: ClassVar[dict[str, Any]] = {}

    async def check(self, bound: BoundSubject[GaugeBinding]) -> Observation:
        value = self.WORLD.get(bound.selector.name)
        if value == "down":
            return Observation.error("source unreachable")
        if value == bound.selector.equals:
            return Observation.confirmed(observed=value)
        return Observation.refuted(observed=value)


def _gauge(daemon: Daemon) -> Gauge:
    sensor = daemon.runners["gauge"].sensor
    assert isinstance(sensor, Gauge)
    return sensor


async def _polled_fact(running_daemon, make_settings, eventually, **block: Any):
    """A daemon with the gauge (polls every 60 s) and one fact it confirmed at once."""
    Gauge.WORLD.clear()
    Gauge.WORLD["load"] = 1
    clock = FakeClock()
    settings = make_settings(sensors={"gauge": GAUGE}, scheduler=SLOW_LOOPS)
    daemon = (await running_daemon(settings, sensors={"gauge": Gauge}, clock=clock)).daemon
    added = await daemon.add_block(
        {"content": "load is 1", "bindings": [{"sensor": "gauge", "name": "load", "equals": 1}]}
        | block
    )

    async def fresh() -> bool:
        return (await daemon.store.get(added.id)).state == "fresh"

    await eventually(fresh)
    gauge = _gauge(daemon)
    await eventually(lambda: clock.sleepers >= 4)  # the poll asleep, and the loops
    return daemon, clock, gauge, added.id


async def _poll_once(clock: FakeClock, gauge: Gauge, eventually) -> None:
    """Move the clock one interval and wait for that poll to have run."""
    checks = gauge.poll_counters.checks
    clock.advance(60)
    await eventually(lambda: gauge.poll_counters.checks == checks + 1)


async def test_a_queued_request_is_not_sent_after_a_poll_answered_it(
    running_daemon, make_settings, eventually
):
    """A request waiting in the queue whose binding a poll then answers (here the poll
    renews the block, window 2 min) is closed by that poll's event: the dispatcher sends
    nothing and the sensor checks nothing more."""
    daemon, clock, gauge, block_id = await _polled_fact(
        running_daemon, make_settings, eventually, validity_window="2m"
    )
    [request_id] = await daemon.store.request_revalidation(block_id)
    assert [r.id for r in await daemon.store.due_revalidations()] == [request_id]
    await _poll_once(clock, gauge, eventually)  # half the window: a confirmation is due

    async def closed() -> bool:
        return await daemon.store.due_revalidations() == []

    await eventually(closed)
    checks = gauge.poll_counters.checks
    assert await daemon.scheduler.dispatch_once() == 0
    await daemon.scheduler.wait_idle()
    assert gauge.poll_counters.checks == checks
    assert gauge.poll_counters.revalidations == 0


async def test_an_erroring_poll_leaves_the_request_to_be_sent(
    running_daemon, make_settings, eventually
):
    """A poll that could not check (an error) answers nothing: the request is still
    sent, and the sensor checks again for it."""
    daemon, clock, gauge, block_id = await _polled_fact(running_daemon, make_settings, eventually)
    [request_id] = await daemon.store.request_revalidation(block_id)
    Gauge.WORLD["load"] = "down"
    await _poll_once(clock, gauge, eventually)  # an error: emitted, it changed

    async def error_applied() -> bool:
        events = await daemon.store.events_for(block_id)
        return events[0].outcome == "error"

    await eventually(error_applied)
    assert [r.id for r in await daemon.store.due_revalidations()] == [request_id]
    assert await daemon.scheduler.dispatch_once() == 1
    await daemon.scheduler.wait_idle()
    assert gauge.poll_counters.revalidations == 1


async def test_a_retry_due_after_silent_polls_is_answered_by_the_last_one(
    running_daemon, make_settings, eventually
):
    """A soft refutation's retry waits 5 min; the polls in between see the same
    refutation and emit nothing. When the retry is sent, the sensor answers it with its
    latest poll's look instead of checking again, and that look counts as the re-check."""
    daemon, clock, gauge, block_id = await _polled_fact(running_daemon, make_settings, eventually)
    Gauge.WORLD["load"] = 2
    await _poll_once(clock, gauge, eventually)  # refuted: emitted, a retry queued

    async def retry_queued() -> bool:
        return (await daemon.store.get(block_id)).state == "stale"

    await eventually(retry_queued)
    assert await daemon.store.due_revalidations() == []  # it waits its interval
    for _ in range(5):  # five silent polls: the same refutation, nothing emitted
        await _poll_once(clock, gauge, eventually)
    assert gauge.poll_counters.unchanged == 5
    polled_at = clock.time()
    clock.advance(1)  # the next tick, a second after the last poll
    checks = gauge.poll_counters.checks
    assert await daemon.scheduler.dispatch_once() == 1  # the retry's time has come
    await daemon.scheduler.wait_idle()
    counters = gauge.poll_counters
    assert (counters.checks, counters.revalidations, counters.answered_by_poll) == (checks, 0, 1)
    # No check ran, so none was timed: a read's notion of a quick binding is untouched.
    assert daemon.scheduler.stats.median_s("gauge", "load") is None

    async def second_refutation() -> bool:
        events = await daemon.store.events_for(block_id)
        return [e.outcome for e in events[:2]] == ["refuted", "refuted"]

    await eventually(second_refutation)
    [latest, *_] = await daemon.store.events_for(block_id)
    assert latest.observed_at == polled_at  # the last poll's look


async def test_an_edited_window_reaches_the_polling_sensor(
    running_daemon, make_settings, eventually
):
    """A block's validity window edited (here through its volatility) is handed to its
    sensor at once: the poll renews the block by its new window, not the old one."""
    daemon, _, gauge, block_id = await _polled_fact(
        running_daemon, make_settings, eventually, volatility="medium"
    )
    assert [b.validity_window for b in gauge.ctx.bindings] == [timedelta(days=7)]
    await daemon.edit_block(block_id, {"volatility": "ephemeral"}, actor="test")
    await eventually(
        lambda: [b.validity_window for b in gauge.ctx.bindings] == [timedelta(minutes=10)]
    )
