"""The polling base: a plugin implements check(); the loop, change detection, periodic
confirmation, backoff, revalidation and overlap rules are the base's. All on the
harness's fake clock: time moves only when a test moves it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from pydantic import ValidationError

from memwarden.plugins import (
    BoundSubject,
    ConfigError,
    Observation,
    Outcome,
    PollingBinding,
    PollingConfig,
    PollingSensor,
)
from memwarden.plugins.testing import FakeClock, SensorHarness

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path


class GaugeConfig(PollingConfig):
    pass


class GaugeBinding(PollingBinding):
    name: str
    equals: int | None = None

    def subject_of(self) -> str:
        return self.name


class Gauge(PollingSensor[GaugeConfig, GaugeBinding]):
    """Reads ``world[name]``; confirmed when it equals ``equals``. ``"boom"`` raises,
    ``"down"`` is an error, ``"hang"`` never answers, ``gate`` holds checks."""

    kind: ClassVar[str] = "gauge"
    Config: ClassVar[type[GaugeConfig]] = GaugeConfig
    Binding: ClassVar[type[GaugeBinding]] = GaugeBinding

    def __init__(self, config: GaugeConfig) -> None:
        super().__init__(config)
        self.world: dict[str, Any] = {}
        self.gate: asyncio.Event | None = None
        self.running: dict[str, int] = {}
        self.max_running: dict[str, int] = {}
        self.window: timedelta | None = None

    async def check(self, bound: BoundSubject) -> Observation:
        sel = self.selector(bound)
        self.running[sel.name] = self.running.get(sel.name, 0) + 1
        self.max_running[sel.name] = max(self.max_running.get(sel.name, 0), self.running[sel.name])
        try:
            if self.gate is not None:
                await self.gate.wait()
            value = self.world.get(sel.name)
            if value == "boom":
                raise OSError("sensor wire cut")
            if value == "hang":
                await asyncio.Event().wait()
            if value == "down":
                return Observation.error("source unreachable")
            if value == sel.equals:
                return Observation.confirmed(
                    f"{sel.name} is {value}", observed=value, validity_window=self.window
                )
            return Observation.refuted(f"{sel.name} is {value}", observed=value)
        finally:
            self.running[sel.name] -= 1


BASE = {"interval": "60s", "jitter": 0, "confirm_every": "30m"}


def harness(tmp_path: Path, bindings: list[dict[str, Any]], **config: Any) -> SensorHarness:
    return SensorHarness(
        Gauge,
        config={**BASE, **config},
        bindings=bindings,
        clock=FakeClock(),
        tmp_path=tmp_path,
    )


async def test_checks_at_once_and_emits_per_block(tmp_path: Path) -> None:
    """Each binding is checked at start; its event names its block (answers differ per block)."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}, {"name": "t", "equals": 2}]) as h:
        h.sensor.world["t"] = 1
        events = await h.wait_for_events(2)
        ids = {b.selector.equals: b.block_id for b in h.bindings}
        by_block = {e.block_id: e.outcome for e in events}
        assert by_block == {ids[1]: Outcome.CONFIRMED, ids[2]: Outcome.REFUTED}


async def test_unchanged_emits_nothing_a_change_emits_once(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """Polls that see the same outcome and value emit nothing; a change is emitted once."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        h.sensor.world["t"] = 1
        await h.wait_for_events(1)
        for n in (2, 3):
            h.advance(60)
            await eventually(lambda n=n: h.sensor.poll_counters.checks == n)
        assert len(h.emitted) == 1
        assert h.sensor.poll_counters.unchanged == 2

        h.sensor.world["t"] = 5
        h.advance(60)
        refuted = await h.wait_outcome("refuted")
        assert refuted.observed == 5
        assert refuted.block_id == h.bindings[0].block_id
        assert h.ignored == []  # the harness clock moved on: the second event counted
        h.advance(60)
        await eventually(lambda: h.sensor.poll_counters.checks == 5)
        assert len(h.emitted) == 2
        assert h.sensor.poll_counters.changes == 2


async def test_waits_on_the_injected_clock(tmp_path: Path) -> None:
    """Nothing is polled again until the clock has moved a whole interval."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        await h.wait_for_events(1)
        h.advance(59)
        for _ in range(20):
            await asyncio.sleep(0)
        assert h.sensor.poll_counters.checks == 1
        assert h.clock.sleepers == 1  # type: ignore[attr-defined]


async def test_unchanged_observation_is_confirmed_periodically(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """An unchanged observation is emitted again every confirm_every, renewing freshness."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}], confirm_every="3m") as h:
        h.sensor.world["t"] = 1
        await h.wait_for_events(1)
        for n in (2, 3):
            h.advance(60)
            await eventually(lambda n=n: h.sensor.poll_counters.checks == n)
        assert len(h.emitted) == 1
        h.advance(60)  # 3 minutes since the last emit
        [_, again] = await h.wait_for_events(2)
        assert again.outcome == Outcome.CONFIRMED
        assert h.sensor.poll_counters.confirmations == 1


async def test_validity_window_brings_confirmation_forward(tmp_path: Path) -> None:
    """An observation valid for 2 minutes is confirmed again within half of that."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}], confirm_every="1h") as h:
        h.sensor.world["t"] = 1
        h.sensor.window = timedelta(minutes=2)
        await h.wait_for_events(1)
        h.advance(60)
        [_, again] = await h.wait_for_events(2)
        assert again.validity_window == timedelta(minutes=2)


def realtime(tmp_path: Path, **config: Any) -> SensorHarness:
    """An ephemeral block (10 minute window) bound to a gauge."""
    return SensorHarness(
        Gauge,
        config={**BASE, **config},
        bindings=[{"name": "t", "equals": 1}],
        clock=FakeClock(),
        tmp_path=tmp_path,
        volatility="ephemeral",
    )


async def test_a_polled_block_stays_fresh_through_its_short_window(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """An ephemeral block (10 min window, shorter than confirm_every) polled every 30 s
    never turns stale over an hour of an unchanged world: the poll confirms it every
    half window. A change is still reported at the next poll."""
    async with realtime(tmp_path, interval="30s") as h:
        [bound] = h.bindings
        assert bound.validity_window == timedelta(minutes=10)
        h.sensor.world["t"] = 1
        await h.wait_state(bound, "fresh")
        for n in range(2, 122):  # one hour in 30 s polls
            h.advance(30)
            await eventually(lambda n=n: h.sensor.poll_counters.checks == n)
            block = await h.block("t")
            assert str(block.state) == "fresh", f"{block.state} after {(n - 1) * 30}s"
        assert h.sensor.poll_counters.confirmations == 12  # every 5 minutes, no more
        assert all(e.outcome == Outcome.CONFIRMED for e in h.emitted)

        h.sensor.world["t"] = 5
        h.advance(30)
        refuted = await h.wait_outcome("refuted")
        assert refuted.observed == 5


async def test_a_long_interval_polls_early_to_renew_a_short_window(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """Polling hourly, a block with a 10 minute window is checked every 5 minutes
    instead (half its window), and stays fresh for the hour."""
    async with realtime(tmp_path, interval="1h") as h:
        h.sensor.world["t"] = 1
        await h.wait_state("t", "fresh")
        for n in range(2, 14):  # 12 x 5 minutes
            h.advance(299)
            for _ in range(20):
                await asyncio.sleep(0)
            assert h.sensor.poll_counters.checks == n - 1, "checked before half the window"
            h.advance(1)
            await eventually(lambda n=n: h.sensor.poll_counters.checks == n)
            assert str((await h.block("t")).state) == "fresh"
        assert h.sensor.poll_counters.confirmations == 12


async def test_an_unchanged_refutation_keeps_the_confirm_every_pace(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """Only a confirmation renews a block: an unchanged refutation of a short-window
    block is repeated every confirm_every, not every half window."""
    async with realtime(tmp_path, interval="30s", confirm_every="30m") as h:
        h.sensor.world["t"] = 5
        [event] = await h.wait_for_events(1)
        assert event.outcome == Outcome.REFUTED
        for n in range(2, 42):  # 20 minutes
            h.advance(30)
            await eventually(lambda n=n: h.sensor.poll_counters.checks == n)
        assert len(h.emitted) == 1


async def test_an_erroring_check_keeps_its_backoff_despite_a_short_window(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """An error renews nothing, so the window does not bring the next check forward:
    a down endpoint is not hammered every half window."""
    async with realtime(tmp_path, interval="1h", backoff_max="4h") as h:
        h.sensor.world["t"] = "down"
        [event] = await h.wait_for_events(1)
        assert event.outcome == Outcome.ERROR
        h.advance(timedelta(minutes=90))
        for _ in range(20):
            await asyncio.sleep(0)
        assert h.sensor.poll_counters.checks == 1
        h.advance(timedelta(minutes=30))  # 2 h: the first backoff
        await eventually(lambda: h.sensor.poll_counters.checks == 2)


async def test_errors_back_off_doubling_up_to_the_cap(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """After each error the next check waits twice as long, never longer than backoff_max;
    a working check returns to the interval."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}], backoff_max="3m") as h:
        h.sensor.world["t"] = "down"
        [event] = await h.wait_for_events(1)
        assert event.outcome == Outcome.ERROR
        expected_waits = [120, 180, 180]  # 60 x 2, 60 x 4 capped at 180, capped
        for n, wait in enumerate(expected_waits, start=2):
            h.advance(wait - 1)
            for _ in range(20):
                await asyncio.sleep(0)
            assert h.sensor.poll_counters.checks == n - 1, f"checked before {wait}s"
            h.advance(1)
            await eventually(lambda n=n: h.sensor.poll_counters.checks == n)
        h.sensor.world["t"] = 1
        h.advance(180)
        await h.wait_outcome("confirmed")
        h.advance(60)  # back to the interval
        await eventually(lambda: h.sensor.poll_counters.checks == 6)


async def test_a_crashing_check_is_an_error_never_a_refutation(tmp_path: Path) -> None:
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        h.sensor.world["t"] = "boom"
        [event] = await h.wait_for_events(1)
        assert event.outcome == Outcome.ERROR
        assert event.message == "OSError: sensor wire cut"
        assert h.sensor.poll_counters.crashes == 1
        assert h.status == "running"
        assert (await h.block("t")).state != "refuted"


async def test_a_check_past_its_timeout_is_an_error(tmp_path: Path) -> None:
    async with harness(tmp_path, [{"name": "t", "equals": 1}], check_timeout="20ms") as h:
        h.sensor.world["t"] = "hang"
        [event] = await h.wait_for_events(1)
        assert event.outcome == Outcome.ERROR
        assert event.message == "check timed out after 0.02s"
        assert h.sensor.poll_counters.timeouts == 1


async def test_revalidation_uses_the_same_check(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """A revalidation answers with check()'s outcome, the request id and the block; the
    next poll seeing the same thing emits nothing more."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        h.sensor.world["t"] = 1
        await h.wait_for_events(1)
        h.sensor.world["t"] = 2
        [answer] = await h.revalidate("t")
        assert answer.outcome == Outcome.REFUTED
        assert answer.request_id is not None
        assert answer.block_id == h.bindings[0].block_id
        h.advance(60)
        await eventually(lambda: h.sensor.poll_counters.checks == 3)
        assert len(h.emitted) == 1
        assert h.sensor.poll_counters.revalidations == 1


async def test_never_overlaps_checks_of_one_subject(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """Two blocks on one subject and a revalidation: one check of the subject at a time;
    polls due while one runs wait for it (counted), then run one after another."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}, {"name": "t", "equals": 2}]) as h:
        h.sensor.world["t"] = 1
        await h.wait_for_events(2)
        h.sensor.gate = asyncio.Event()
        block = h.bindings[0].block_id
        revalidation = asyncio.create_task(h.revalidate(block_id=block))
        await eventually(lambda: h.sensor.running.get("t") == 1)
        h.advance(60)  # both polls fall due while the revalidation holds the subject
        await eventually(lambda: h.sensor.poll_counters.waited == 2)
        checks = h.sensor.poll_counters.checks
        h.sensor.gate.set()
        [answer] = await revalidation
        assert answer.outcome == Outcome.CONFIRMED
        await eventually(lambda: h.sensor.poll_counters.checks == checks + 2)
        assert h.sensor.max_running["t"] == 1


async def test_check_soon_checks_at_once_without_the_clock_moving(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """A sensor's own watcher calls check_soon(subject): every binding of that subject is
    checked now, not at its next interval; others keep their schedule."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}, {"name": "u", "equals": 1}]) as h:
        h.sensor.world.update(t=1, u=1)
        await h.wait_for_events(2)
        h.sensor.world.update(t=2, u=2)
        assert h.sensor.check_soon("t") == 1
        refuted = await h.wait_outcome("refuted")
        assert refuted.subject == "t"
        for _ in range(20):
            await asyncio.sleep(0)
        assert h.sensor.poll_counters.checks == 3  # "u" still waits for its interval
        assert h.clock.sleepers == 2  # type: ignore[attr-defined]
        h.advance(60)  # the nudged binding's next poll is an interval after its check
        await eventually(lambda: h.sensor.poll_counters.checks == 5)


async def test_a_revalidation_counts_as_the_bindings_check(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """A revalidation 30s into the interval moves the next poll to 60s after it."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        await h.wait_for_events(1)
        h.advance(30)
        await h.revalidate("t")
        h.advance(30)  # 60s after the first poll: not due, the revalidation checked
        for _ in range(20):
            await asyncio.sleep(0)
        assert h.sensor.poll_counters.checks == 2
        h.advance(30)
        await eventually(lambda: h.sensor.poll_counters.checks == 3)


async def test_a_request_a_poll_answered_since_it_was_made_is_not_checked_again(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """A request made before a poll (it waited in the queue: a retry, a spread after
    downtime) is answered with that poll's look, even one that emitted nothing: no new
    check, the look's own time, the request's id."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        h.sensor.world["t"] = 1
        await h.wait_for_events(1)
        queued = h.clock.time() + 10
        h.advance(60)
        await eventually(lambda: h.sensor.poll_counters.checks == 2)  # unchanged: silent
        polled_at = h.clock.time()
        h.advance(5)
        [answer] = await h.revalidate("t", queued_at=queued)
        counters = h.sensor.poll_counters
        assert (counters.checks, counters.revalidations, counters.answered_by_poll) == (2, 0, 1)
        assert answer.outcome == Outcome.CONFIRMED
        assert answer.observed_at.timestamp() == polled_at
        assert answer.request_id is not None


async def test_a_request_newer_than_the_last_look_or_after_an_error_is_checked(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """The last look answers nothing when it is older than the request or when it was an
    error (it checked nothing): each of those requests is checked."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        h.sensor.world["t"] = 1
        await h.wait_for_events(1)
        h.advance(1)
        await h.revalidate("t", queued_at=h.clock.time())  # made after the poll
        assert h.sensor.poll_counters.revalidations == 1
        before = h.clock.time()
        h.sensor.world["t"] = "down"
        h.advance(60)
        await eventually(lambda: h.sensor.poll_counters.errors == 1)
        [answer] = await h.revalidate("t", queued_at=before)  # the look since: an error
        assert h.sensor.poll_counters.revalidations == 2
        assert h.sensor.poll_counters.answered_by_poll == 0
        assert answer.outcome == Outcome.ERROR


async def test_one_check_answers_every_block_with_the_same_binding(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """Two blocks with the very same binding: one check per interval, an event per block."""
    async with harness(tmp_path, [{"name": "t", "equals": 1}]) as h:
        h.sensor.world["t"] = 1
        [a] = h.bindings
        await h.wait_for_events(1)
        other = await h.store.add({"content": "the same claim, twice", "bindings": [a.binding]})
        h.ctx.set_bindings([a, BoundSubject(other.id, a.binding, a.selector)])
        [_, b_first] = await h.wait_for_events(2)
        assert b_first.block_id == other.id
        checks = h.sensor.poll_counters.checks
        h.sensor.world["t"] = 2
        h.advance(60)
        for block_id in (a.block_id, other.id):
            await h.wait_outcome("refuted", block_id=block_id, since=2)
        for _ in range(20):
            await asyncio.sleep(0)
        assert h.sensor.poll_counters.checks == checks + 1
        assert h.sensor.poll_counters.shared >= 1


async def test_binding_interval_and_its_floor(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    """A binding's own interval wins, but never below min_interval."""
    async with harness(
        tmp_path,
        [{"name": "fast", "interval": "1s"}, {"name": "slow"}],
        min_interval="10s",
    ) as h:
        await h.wait_for_events(2)
        h.advance(10)
        await eventually(lambda: h.sensor.poll_counters.checks == 3)
        for _ in range(20):
            await asyncio.sleep(0)
        assert h.sensor.poll_counters.checks == 3  # "slow" waits its 60s


async def test_bindings_added_and_removed_while_running(
    tmp_path: Path, eventually: Callable[..., Awaitable[None]]
) -> None:
    async with harness(tmp_path, [{"name": "a"}]) as h:
        await h.wait_for_events(1)
        await h.set_bindings([{"name": "b"}])
        [_, b] = await h.wait_for_events(2)
        assert b.subject == "b"
        await eventually(lambda: len(h.sensor._tasks) == 1)
        h.advance(60)
        await eventually(lambda: h.sensor.poll_counters.checks == 3)
        assert h.sensor.poll_counters.unchanged == 1  # only "b" is still polled


def test_jitter_stays_within_bounds() -> None:
    sensor = Gauge(GaugeConfig(interval=timedelta(seconds=100), jitter=0.2))
    sensor.rng.seed(7)
    delays = [sensor._delay(timedelta(seconds=100), 0) for _ in range(200)]
    assert min(delays) >= 80
    assert max(delays) <= 120
    assert max(delays) - min(delays) > 20  # spread, not constant


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"interval": "500ms"}, r"interval: 0\.5s is below min_interval \(1s\)"),
        ({"interval": "5ms", "min_interval": "5ms"}, r"0\.005s is too short \(at least 0\.01s\)"),
        ({"jitter": 0.9}, "less than or equal to 0.5"),
    ],
)
def test_bad_polling_config_is_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        GaugeConfig.model_validate(config)


async def test_bad_polling_config_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sensors\.gauge\.jitter"):
        async with SensorHarness(Gauge, config={"jitter": 2}, tmp_path=tmp_path):
            pass  # pragma: no cover - never entered
