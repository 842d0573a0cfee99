"""SensorRunner: setup policies, restart with backoff, crash loops, deadlines, skips."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import ClassVar

import pytest
import structlog

from memwarden.errors import PluginError
from memwarden.memory import Binding, Outcome, RevalidationRequest, from_ts
from memwarden.plugins import Backoff, BaseBinding, BaseSensorConfig, BoundSubject, StartupPolicy


class Sel(BaseBinding):
    path: str


class Scripted:
    """A sensor whose behaviour each test scripts through attributes."""

    api_version: ClassVar[int] = 2
    kind: ClassVar[str] = "scripted"
    Config: ClassVar[type[BaseSensorConfig]] = BaseSensorConfig
    Binding: ClassVar[type[Sel]] = Sel

    def __init__(self) -> None:
        self.setup_errors: list[BaseException] = []
        self.run_errors: list[BaseException] = []
        self.setups = self.teardowns = self.runs = 0
        self.seen_bindings: list[list[str]] = []
        self.check: object = None  # what revalidate returns, raises, or "hang"
        self.teardown_error: Exception | None = None
        self.setup_hangs = False
        self.run_returns = False

    async def setup(self, ctx):
        self.ctx = ctx
        self.setups += 1
        if self.setup_hangs:
            await asyncio.Event().wait()
        if self.setup_errors:
            raise self.setup_errors.pop(0)

    async def run(self, ctx):
        self.runs += 1
        ctx.ready()
        self.seen_bindings.append([b.subject for b in await ctx.wait_bindings_changed()])
        if self.run_errors:
            raise self.run_errors.pop(0)
        if self.run_returns:
            return
        await asyncio.Event().wait()

    async def revalidate(self, request, ctx):
        if self.check == "hang":
            await asyncio.Event().wait()
        if isinstance(self.check, Exception):
            raise self.check
        return self.check

    async def teardown(self):
        self.teardowns += 1
        if self.teardown_error is not None:
            raise self.teardown_error


def _request(subject: str = "a", timeout_s: float = 30.0, block: str = "b1") -> RevalidationRequest:
    now = 1_767_225_600.0
    return RevalidationRequest(
        block_id=block,
        sensor="s",
        subject=subject,
        binding=Binding(sensor="s", path=subject),
        reason="manual",
        created_at=from_ts(now),
        deadline=from_ts(now + timeout_s),
    )


def test_backoff_is_capped_full_jitter():
    """Delays are uniform in [0, min(cap, base * 2**attempt)] and never overflow."""
    backoff = Backoff(base_s=0.5, cap_s=8.0)
    rng = random.Random(4)
    for attempt in range(1, 200):
        ceiling = min(8.0, 0.5 * 2 ** min(attempt, 32))
        delays = [backoff.delay(attempt, rng) for _ in range(20)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert max(backoff.delay(10_000, rng) for _ in range(100)) > 4.0  # reaches towards the cap


async def test_crash_loop_marks_failed(make_runner, eventually):
    """More crashes than crash_loop_restarts within the window: failed, no more restarts."""
    sensor = Scripted()
    sensor.run_errors = [RuntimeError(f"crash {i}") for i in range(10)]
    with structlog.testing.capture_logs() as logs:
        runner = await make_runner(sensor, crash_loop_restarts=2)
        await eventually(lambda: runner.status == "failed")
    assert (sensor.runs, runner.counters.restarts, runner.counters.errors) == (3, 2, 3)
    assert sensor.setups == sensor.teardowns == 3
    assert runner.counters.last_error == "run: RuntimeError: crash 2"
    names = [e["event"] for e in logs]
    assert names.count("sensor_crashed") == 3
    assert names.count("sensor_restarting") == 2
    assert names[-1] == "sensor_failed"
    await runner.task
    assert runner.status == "failed"


async def test_healthy_run_resets_the_backoff(make_runner, eventually):
    """A run that lasted healthy_after_s restarts with the first delay again."""
    sensor = Scripted()
    sensor.run_errors = [RuntimeError("x")] * 4
    with structlog.testing.capture_logs() as logs:
        runner = await make_runner(sensor, healthy_after_s=0.0, crash_loop_restarts=100)
        await eventually(lambda: sensor.runs == 5)
    assert [e["attempt"] for e in logs if e["event"] == "sensor_restarting"] == [1, 1, 1, 1]
    assert runner.status == "running"


async def test_backoff_grows_between_quick_crashes(make_runner, eventually):
    """Quick crashes back off with a growing attempt number."""
    sensor = Scripted()
    sensor.run_errors = [RuntimeError("x")] * 3
    with structlog.testing.capture_logs() as logs:
        runner = await make_runner(sensor, crash_loop_restarts=100)
        await eventually(lambda: sensor.runs == 4)
    assert [e["attempt"] for e in logs if e["event"] == "sensor_restarting"] == [1, 2, 3]
    assert runner.counters.restarts == 3


async def test_restarted_run_sees_its_bindings(make_runner, eventually):
    """Each run's first wait_bindings_changed() returns the current bindings at once."""
    sensor = Scripted()
    sensor.run_errors = [RuntimeError("x")]
    runner = await make_runner(sensor, start=False)
    sel = Sel(path="a")
    runner.ctx.set_bindings([BoundSubject("b1", Binding(sensor="s", path="a"), sel)])
    task = asyncio.get_running_loop().create_task(runner.supervise())
    try:
        await eventually(lambda: len(sensor.seen_bindings) == 2)
        assert sensor.seen_bindings == [["a"], ["a"]]
    finally:
        runner.stop()
        await task


async def test_setup_policy_error_raises_from_started(make_runner):
    """Under startup = error a failing setup fails started() with a PluginError naming it."""
    sensor = Scripted()
    sensor.setup_errors = [OSError("no device")]
    runner = await make_runner(sensor, startup=StartupPolicy.ERROR, name="dev")
    with pytest.raises(
        PluginError, match="sensor 'dev' failed to start: setup: OSError: no device"
    ):
        await runner.started()
    await runner.task
    assert runner.status == "failed"
    assert sensor.teardowns == 1  # teardown after a partial setup


async def test_setup_policy_ignore_disables(make_runner):
    """Under startup = ignore a failing setup disables the sensor for good."""
    sensor = Scripted()
    sensor.setup_errors = [OSError("no device")]
    runner = await make_runner(sensor, startup=StartupPolicy.IGNORE)
    await runner.started()
    await runner.task
    assert (runner.status, sensor.setups, sensor.runs) == ("disabled", 1, 0)


async def test_setup_policy_retry_until_it_works(make_runner, eventually):
    """Under startup = retry setup is retried with backoff; started() settles at once."""
    sensor = Scripted()
    sensor.setup_errors = [OSError("not yet")] * 3
    runner = await make_runner(sensor, startup=StartupPolicy.RETRY, crash_loop_restarts=0)
    await runner.started()
    await eventually(lambda: runner.status == "running")
    assert sensor.setups == 4  # a crash-loop limit of 0 does not stop a first start


async def test_setup_timeout_is_a_setup_failure(make_runner):
    """A setup that hangs past setup_timeout_s fails like one that raised."""
    sensor = Scripted()
    sensor.setup_hangs = True
    runner = await make_runner(sensor, startup=StartupPolicy.ERROR, setup_timeout_s=0.05)
    with pytest.raises(PluginError, match="setup: TimeoutError"):
        await runner.started()


async def test_stop_interrupts_a_long_backoff(make_runner, eventually):
    """stop() ends the supervisor at once even in the middle of a long backoff."""
    sensor = Scripted()
    sensor.run_errors = [RuntimeError("x")]
    runner = await make_runner(sensor, backoff=Backoff(base_s=3600, cap_s=3600))
    await eventually(lambda: runner.status == "backoff")
    runner.stop()
    async with asyncio.timeout(2):
        await runner.task
    assert runner.status == "stopped"


async def test_cancellation_propagates_and_tears_down(make_runner, eventually):
    """Cancelling the supervisor (its owner going away) cancels run and still tears down."""
    sensor = Scripted()
    runner = await make_runner(sensor)
    await eventually(lambda: runner.ctx.is_ready)
    runner.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner.task
    assert sensor.teardowns == 1
    assert runner.status == "stopped"


async def test_run_that_returns_is_not_restarted(make_runner, eventually):
    """A run() that returns normally is done, not crashed: no restart until stop."""
    sensor = Scripted()
    sensor.run_returns = True
    with structlog.testing.capture_logs() as logs:
        runner = await make_runner(sensor)
        await eventually(lambda: any(e["event"] == "sensor_run_finished" for e in logs))
    assert (sensor.runs, runner.counters.restarts) == (1, 0)


async def test_teardown_failure_is_logged_not_raised(make_runner):
    """A teardown that raises is logged; stopping still completes."""
    sensor = Scripted()
    sensor.teardown_error = RuntimeError("stuck handle")
    runner = await make_runner(sensor)
    await runner.started()
    with structlog.testing.capture_logs() as logs:
        runner.stop()
        await runner.task
    assert runner.status == "stopped"
    [failed] = [e for e in logs if e["event"] == "sensor_teardown_failed"]
    assert failed["error"] == "RuntimeError: stuck handle"


async def test_revalidate_normalises_what_the_sensor_returns(make_runner, eventually):
    """One event, a list or None all come back as a list carrying the request id."""
    sensor = Scripted()
    runner = await make_runner(sensor)
    await eventually(lambda: runner.available)
    ctx = runner.ctx
    sensor.check = ctx.event("a", Outcome.CONFIRMED)
    [one] = await runner.revalidate(req := _request())
    assert one.request_id == req.id
    sensor.check = [
        ctx.event("a", Outcome.CONFIRMED),
        ctx.event("a", Outcome.CHANGED, request_id="x"),
    ]
    both = await runner.revalidate(req)
    assert [e.request_id for e in both] == [req.id, "x"]
    sensor.check = None
    assert await runner.revalidate(req) == []
    assert runner.counters.revalidations == 3


async def test_revalidate_crash_is_an_error_event(make_runner, eventually):
    """A check that raises becomes an error event with the message, never a refutation."""
    sensor = Scripted()
    runner = await make_runner(sensor)
    await eventually(lambda: runner.available)
    sensor.check = ValueError("parse failed")
    [event] = await runner.revalidate(_request())
    assert (event.outcome, event.message) == (Outcome.ERROR, "revalidate: ValueError: parse failed")
    assert runner.counters.errors == 1


@pytest.mark.parametrize(
    ("configured", "requested", "expected"), [(0.05, 30.0, 0.05), (None, 0.05, 0.05)]
)
async def test_revalidate_deadline(make_runner, eventually, configured, requested, expected):
    """The check's deadline is the sensor's configured timeout, else the request's own."""
    sensor = Scripted()
    sensor.check = "hang"
    runner = await make_runner(sensor, revalidate_timeout_s=configured)
    await eventually(lambda: runner.available)
    loop = asyncio.get_running_loop()
    began = loop.time()
    [event] = await runner.revalidate(_request(timeout_s=requested))
    assert loop.time() - began >= expected
    assert event.outcome == Outcome.ERROR
    assert event.message == f"check timed out after {expected:g}s"
    assert runner.counters.timeouts == 1


async def test_revalidate_skips_a_binding_being_checked(make_runner, eventually):
    """A block's binding being checked is skipped (None, counted); other blocks are not."""
    sensor = Scripted()
    sensor.check = "hang"
    runner = await make_runner(sensor, revalidate_timeout_s=5)
    await eventually(lambda: runner.available)
    first = asyncio.get_running_loop().create_task(runner.revalidate(_request("a")))
    await eventually(lambda: runner.busy("a", "b1"))
    assert await runner.revalidate(_request("a")) is None
    assert runner.counters.skipped == 1
    other = asyncio.get_running_loop().create_task(runner.revalidate(_request("a", block="b2")))
    await eventually(lambda: runner.busy("a", "b2"))
    assert runner.counters.revalidations == 2
    for task in (first, other):
        task.cancel()
    await asyncio.gather(first, other, return_exceptions=True)
    assert not runner.busy("a", "b1")
    assert not runner.busy("a", "b2")


async def test_revalidate_while_not_running(make_runner, eventually):
    """A check asked of a sensor that is not running is answered with an error saying so."""
    sensor = Scripted()
    sensor.setup_errors = [OSError("x")]
    runner = await make_runner(sensor, startup=StartupPolicy.IGNORE)
    await runner.task
    [event] = await runner.revalidate(_request())
    assert event.message == "sensor 's' is disabled"
    assert event.outcome == Outcome.ERROR


def test_request_timeout_is_deadline_minus_creation():
    """A request's timeout is what its deadline allows from its creation."""
    assert _request(timeout_s=12.5).timeout == timedelta(seconds=12.5)


async def test_error_outcomes_count_as_sensor_errors(make_runner, eventually, clock):
    """An unreachable source's error events count in ``errors`` and show ``last_error``;
    ``last_success`` moves only on an answer that is not an error."""
    sensor = Scripted()
    runner = await make_runner(sensor)
    await eventually(lambda: runner.available)
    sensor.check = sensor.ctx.event("a", Outcome.ERROR, message="connection refused")
    await runner.revalidate(_request())
    await runner.revalidate(_request())
    assert (runner.counters.errors, runner.counters.last_error) == (2, "connection refused")
    assert runner.counters.last_success is None
    sensor.check = sensor.ctx.event("a", Outcome.CONFIRMED)
    await runner.revalidate(_request())
    assert runner.counters.errors == 2
    assert runner.counters.last_success == clock.time()
