"""One misbehaving plugin breaks nothing else.

Each test runs a misbehaving sensor beside the well-behaved ``echo`` and proves that
echo's blocks still come back fresh while the other one is contained.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import EntryPoint

import mw_test_sensors
import pytest
import structlog

from memwarden.daemon import Daemon
from memwarden.errors import PluginError, PluginLoadError
from memwarden.plugins import ENTRY_POINT_GROUP, Registry
from memwarden.plugins import _registry as registry_module

FAST_RESTART = {"backoff_initial": "1ms", "backoff_max": "10ms", "crash_loop_restarts": 3}


async def _echo_still_works(daemon, eventually, subject="still/fine"):
    """Bind a new block to echo and wait until echo's event made it fresh."""
    block = await daemon.add_block(
        {"content": f"{subject} holds", "bindings": [{"sensor": "echo", "path": subject}]}
    )

    async def fresh():
        return (await daemon.store.get(block.id)).state == "fresh"

    await eventually(fresh)


async def test_crashing_run_restarts_then_fails(running_daemon, make_settings, eventually):
    """run() raising is restarted with backoff, marked failed after a crash loop; echo goes on."""
    settings = make_settings(sensors={"echo": {}, "crash": {"restart": FAST_RESTART}})
    with structlog.testing.capture_logs() as logs:
        daemon = (await running_daemon(settings)).daemon
        crash = daemon.runners["crash"]
        await eventually(lambda: crash.status == "failed")
    assert crash.counters.restarts == 3
    assert crash.sensor.runs == 4  # the first run and three restarts
    assert crash.sensor.setups == crash.sensor.teardowns == 4  # each restart tears down
    assert crash.counters.last_error == "run: RuntimeError: boom #4"
    events = [(e["event"], e.get("sensor")) for e in logs]
    assert events.count(("sensor_crashed", "crash")) == 4
    assert events.count(("sensor_restarting", "crash")) == 3
    assert ("sensor_failed", "crash") in events
    await _echo_still_works(daemon, eventually)
    status = {s["name"]: s for s in daemon.sensor_status()}
    assert status["crash"]["status"] == "failed"
    assert status["echo"]["status"] == "running"


async def test_hanging_check_times_out_at_its_deadline(running_daemon, make_settings, eventually):
    """A check that never returns becomes an error event at the configured deadline, not sooner."""
    settings = make_settings(
        sensors={"echo": {}, "hang": {"revalidate_timeout": "300ms"}},
        rules={"staleness": {"revalidation_timeout": "50ms"}},
    )
    daemon = (await running_daemon(settings)).daemon
    block = await daemon.add_block(
        {"content": "x", "bindings": [{"sensor": "hang", "path": "slow"}]}
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    result = await daemon.revalidate(block.id, wait_s=10)
    elapsed = loop.time() - began
    assert result["answered"] == result["requested"]
    assert elapsed >= 0.3  # the sensor's 300 ms, not the request's 50 ms
    hang = daemon.runners["hang"]
    assert hang.counters.timeouts == 1
    [event] = await daemon.store.events_for(block.id)
    assert event.outcome == "error"
    assert event.message == "check timed out after 0.3s"
    assert (await daemon.store.get(block.id)).state != "refuted"  # an error is not a refutation
    await _echo_still_works(daemon, eventually)


async def test_flooding_sensor_does_not_starve_others(
    running_daemon, make_settings, eventually, monkeypatch
):
    """A sensor emitting flat out waits on its own full queue; echo's events get through.

    No wall-clock bound (a loaded machine can stall any of it): the property is counted in
    commits. Once echo's event is queued, the very next commit the bus makes carries it,
    however much the flood has waiting; the flood gets its share in that commit too.
    """
    settings = make_settings(
        sensors={"echo": {}, "flood": {}}, bus={"queue_per_source": 50, "batch_max": 100}
    )
    daemon = (await running_daemon(settings)).daemon
    flood = daemon.runners["flood"].sensor
    await eventually(lambda: flood.emitted > 500)  # it is flooding

    commits: list[set[str]] = []  # the sensors in each batch the store was asked to commit
    echo_queued_after: list[int] = []  # how many commits had begun when echo's event was queued
    put, apply_events = daemon.bus.put, daemon.store.apply_events

    async def recording_put(source, event):
        await put(source, event)
        if source == "echo":
            echo_queued_after.append(len(commits))

    async def recording_apply(events, **options):
        commits.append({e.sensor for e in events})
        return await apply_events(events, **options)

    monkeypatch.setattr(daemon.bus, "put", recording_put)
    monkeypatch.setattr(daemon.store, "apply_events", recording_apply)
    await _echo_still_works(daemon, eventually)

    [queued] = echo_queued_after
    assert "echo" in commits[queued], commits[queued : queued + 3]  # no flood batch got ahead
    assert "flood" in commits[queued]  # and the flood is not shut out either
    assert daemon.bus._queues["flood"].qsize() <= 50  # back-pressure: bounded, never more
    assert flood.emitted > 500


async def test_failing_import_is_reported_and_the_rest_load(
    monkeypatch, tmp_path, make_settings, running_daemon, eventually
):
    """A plugin whose module raises ImportError is reported by name; the others load and run."""
    (tmp_path / "mw_broken_plugin.py").write_text('raise ImportError("libfoo is missing")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [
        EntryPoint("broken", "mw_broken_plugin:Sensor", ENTRY_POINT_GROUP),
        EntryPoint("echo", "mw_test_sensors:EchoSensor", ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: points)
    with structlog.testing.capture_logs() as logs:
        registry = Registry.from_entry_points()
    assert set(registry.plugins) == {"echo"}
    failure = registry.failures["broken"]
    assert failure.plugin == "broken"
    assert str(failure) == (
        "sensor plugin 'broken' (mw_broken_plugin:Sensor) failed to import: "
        "ImportError: libfoo is missing"
    )
    assert {
        "event": "plugin_load_failed",
        "plugin": "broken",
        "error": str(failure),
        "log_level": "error",
    } in logs

    # Under startup = "ignore" the daemon runs without it and says so.
    settings = make_settings(sensors={"echo": {}, "broken": {"startup": "ignore"}})
    daemon = (await running_daemon(settings, registry=registry)).daemon
    assert set(daemon.runners) == {"echo"}
    status = {s["name"]: s for s in daemon.sensor_status()}
    assert status["broken"]["status"] == "load_failed"
    await _echo_still_works(daemon, eventually)

    # Under startup = "error" it refuses to start, naming the sensor.
    strict = make_settings(sensors={"echo": {}, "broken": {"startup": "error"}})
    with pytest.raises(PluginLoadError, match="sensor 'broken': sensor plugin 'broken'") as err:
        await Daemon(strict, registry=registry).run()
    assert err.value.plugin == "broken"


async def test_startup_error_refuses_to_start(make_settings):
    """startup = "error": a failing setup makes run() raise a PluginError naming the sensor."""
    settings = make_settings(sensors={"echo": {}, "flaky": {"startup": "error", "fail_setups": 1}})
    daemon = Daemon(settings, registry=Registry.from_classes(mw_test_sensors.ALL))
    with pytest.raises(PluginError, match="sensor 'flaky' failed to start") as err:
        await daemon.run()
    assert err.value.plugin == "flaky"
    assert daemon.runners["echo"].status == "stopped"  # the one that started was torn down
    assert daemon.runners["echo"].sensor.teardowns == 1


async def test_startup_ignore_disables_the_sensor(running_daemon, make_settings, eventually):
    """startup = "ignore": a failing setup leaves the sensor disabled; the daemon runs."""
    settings = make_settings(sensors={"echo": {}, "flaky": {"startup": "ignore", "fail_setups": 1}})
    daemon = (await running_daemon(settings)).daemon
    flaky = daemon.runners["flaky"]
    assert flaky.status == "disabled"
    assert flaky.counters.last_error == "setup: OSError: device not ready (attempt 1)"
    assert flaky.sensor.setups == 1  # never retried
    block = await daemon.add_block({"content": "x", "bindings": [{"sensor": "flaky", "path": "p"}]})
    result = await daemon.revalidate(block.id, wait_s=5)
    [event] = await daemon.store.events_for(block.id)
    assert result["answered"]
    assert (event.outcome, event.message) == ("error", "sensor 'flaky' is disabled")
    await _echo_still_works(daemon, eventually)


async def test_startup_retry_becomes_running(running_daemon, make_settings, eventually):
    """startup = "retry": setup is retried with backoff until it works, then the sensor runs."""
    settings = make_settings(
        sensors={
            "echo": {},
            "flaky": {"startup": "retry", "fail_setups": 3, "restart": FAST_RESTART},
        }
    )
    with structlog.testing.capture_logs() as logs:
        daemon = (await running_daemon(settings)).daemon  # ready without waiting for flaky
        flaky = daemon.runners["flaky"]
        await eventually(lambda: flaky.status == "running")
    assert flaky.sensor.setups == 4
    assert [e["attempt"] for e in logs if e["event"] == "sensor_setup_failed"] == [0, 1, 2]
    block = await daemon.add_block({"content": "x", "bindings": [{"sensor": "flaky", "path": "p"}]})

    async def fresh():
        return (await daemon.store.get(block.id)).state == "fresh"

    await eventually(fresh)  # flaky's own run() confirms its binding once it is up


async def test_restart_that_cannot_set_up_counts_as_a_crash(
    running_daemon, make_settings, eventually
):
    """After a first good start, a failing setup on restart is a crash (not the startup policy)."""

    class Fragile(mw_test_sensors.EchoSensor):
        async def setup(self, ctx):
            await super().setup(ctx)
            if self.setups > 1:
                raise OSError("gone")

        async def run(self, ctx):
            ctx.ready()
            raise RuntimeError("fell over")

    settings = make_settings(sensors={"fragile": {"startup": "ignore", "restart": FAST_RESTART}})
    daemon = (await running_daemon(settings, sensors={"fragile": Fragile})).daemon
    runner = daemon.runners["fragile"]
    await eventually(lambda: runner.status == "failed")  # not "disabled"
    assert runner.sensor.setups == 4
