"""The daemon's life: start, ready, serve a block end to end, stop; startup failures."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import mw_test_sensors
import pytest
import structlog

from memwarden.daemon import Daemon
from memwarden.errors import (
    ConfigError,
    MemwardenError,
    PluginError,
    StorageError,
    ValidationInputError,
)
from memwarden.plugins import Registry

NOT_AN_INT = "Input should be a valid integer, unable to parse string as an integer"


async def test_start_ready_stop(running_daemon, make_settings):
    """run() becomes ready, serves, and returns cleanly when asked to stop: no sleeps."""
    running = await running_daemon(make_settings(sensors={"echo": {}}))
    daemon = running.daemon
    assert (await daemon.store.counts())["blocks"] == 0
    assert daemon.runners["echo"].status == "running"
    await running.stop()
    assert daemon.runners["echo"].status == "stopped"
    assert daemon.runners["echo"].sensor.teardowns == 1
    with pytest.raises(MemwardenError, match="not running"):
        _ = daemon.store


async def test_runs_without_sensors_or_config_file(running_daemon, make_settings):
    """No config file and no sensors is a valid daemon: it starts and stops."""
    running = await running_daemon(make_settings())
    assert running.daemon.runners == {}
    await running.stop()


async def test_bound_block_is_confirmed_by_its_sensor(running_daemon, make_settings, eventually):
    """A block bound to a sensor is handed to it and comes back fresh from its event."""
    running = await running_daemon(make_settings(sensors={"echo": {"value": "30s"}}))
    daemon = running.daemon
    block = await daemon.add_block(
        {"content": "the timeout is 30 s", "bindings": [{"sensor": "echo", "path": "app.yaml"}]}
    )
    assert block.state == "unverified"

    async def fresh():
        return (await daemon.store.get(block.id)).state == "fresh"

    await eventually(fresh)
    stored = await daemon.store.get(block.id)
    assert stored.validation.validated_by == "echo"
    assert daemon.runners["echo"].counters.events == 1


async def test_add_block_refuses_bindings_no_sensor_can_check(running_daemon, make_settings):
    """A binding naming no configured sensor, or one its model refuses, is a field error."""
    daemon = (await running_daemon(make_settings(sensors={"echo": {}}))).daemon
    with pytest.raises(ValidationInputError) as err:
        await daemon.add_block({"content": "x", "bindings": [{"sensor": "nope", "path": "a"}]})
    assert err.value.field == "bindings.0.sensor"
    assert "no sensor named 'nope'; running: echo" in str(err.value)
    with pytest.raises(ValidationInputError) as err:
        await daemon.add_block({"content": "x", "bindings": [{"sensor": "echo", "colour": "red"}]})
    assert err.value.field == "bindings.0.colour"
    assert (await daemon.store.counts())["blocks"] == 0


async def test_subject_comes_from_the_binding_model(running_daemon, make_settings):
    """A binding without a subject key gets the subject its model's subject_of() names."""
    daemon = (await running_daemon(make_settings(sensors={"echo": {}}))).daemon
    block = await daemon.add_block({"content": "x", "bindings": [{"sensor": "echo", "name": "db"}]})
    assert block.bindings[0].subject == "name:db"
    with pytest.raises(ValidationInputError, match="names no subject"):
        await daemon.add_block({"content": "x", "bindings": [{"sensor": "echo", "key": "k"}]})


async def test_validate_binding_hook_refuses(running_daemon, make_settings):
    """A sensor's validate_binding() raising ValueError refuses the binding with its message."""

    class Picky(mw_test_sensors.EchoSensor):
        def validate_binding(self, selector):
            if selector.path and selector.path.startswith("/etc"):
                raise ValueError("path: outside the allowed roots")

    daemon = (
        await running_daemon(make_settings(sensors={"picky": {}}), sensors={"picky": Picky})
    ).daemon
    with pytest.raises(ValidationInputError, match="outside the allowed roots") as err:
        await daemon.add_block(
            {"content": "x", "bindings": [{"sensor": "picky", "path": "/etc/x"}]}
        )
    assert err.value.field == "bindings.0"
    await daemon.add_block({"content": "x", "bindings": [{"sensor": "picky", "path": "srv/x"}]})


async def test_unknown_kind_is_a_config_error(make_settings):
    """A sensor table naming an unknown plugin stops the start with the path and the known kinds."""
    daemon = Daemon(
        make_settings(sensors={"a": {"kind": "nope"}}),
        registry=Registry.from_classes(mw_test_sensors.ALL),
    )
    with pytest.raises(
        ConfigError, match=r"sensors\.a\.kind: no sensor plugin named 'nope' \(known: crash"
    ):
        await daemon.run()


async def test_bad_sensor_options_are_a_config_error(make_settings):
    """A sensor's own Config model checks its table; the error names sensors.<name>.<key>."""
    settings = make_settings(sensors={"echo": {"valeu": "x"}, "flood": {"count": "many"}})
    daemon = Daemon(settings, registry=Registry.from_classes(mw_test_sensors.ALL))
    with pytest.raises(ConfigError) as err:
        await daemon.run()
    assert err.value.problems == [
        "sensors.echo.valeu: unknown setting",
        f"sensors.flood.count: {NOT_AN_INT}",
    ]


async def test_run_raises_the_error_not_a_group(make_settings):
    """A startup failure surfaces as the PluginError itself, naming the sensor."""
    settings = make_settings(sensors={"flaky": {"fail_setups": 99, "startup": "error"}})
    daemon = Daemon(settings, registry=Registry.from_classes(mw_test_sensors.ALL))
    with pytest.raises(PluginError, match="sensor 'flaky' failed to start: setup: OSError") as err:
        await daemon.run()
    assert err.value.plugin == "flaky"


async def test_stop_requested_before_ready(make_settings):
    """A stop asked for before the daemon is ready still ends run() cleanly."""
    daemon = Daemon(
        make_settings(sensors={"echo": {}}), registry=Registry.from_classes(mw_test_sensors.ALL)
    )
    daemon.request_stop()
    async with asyncio.timeout(10):
        await daemon.run()
    assert daemon.runners["echo"].status == "stopped"


async def test_buggy_validate_binding_is_contained(running_daemon, make_settings):
    """A validate_binding() that crashes refuses the binding, naming the sensor; no 500."""

    class Buggy(mw_test_sensors.EchoSensor):
        def validate_binding(self, selector):
            raise TypeError("unhashable type: 'list'")

    daemon = (
        await running_daemon(make_settings(sensors={"buggy": {}}), sensors={"buggy": Buggy})
    ).daemon
    with pytest.raises(ValidationInputError) as err:
        await daemon.add_block({"content": "x", "bindings": [{"sensor": "buggy", "path": "p"}]})
    assert err.value.errors == [
        ("bindings.0", "sensor 'buggy' could not check it: TypeError: unhashable type: 'list'")
    ]


async def test_failed_bindings_refresh_is_retried(
    running_daemon, make_settings, monkeypatch, eventually
):
    """If the store cannot list a sensor's bindings, the daemon logs it and retries later."""
    daemon = (await running_daemon(make_settings(sensors={"echo": {}}))).daemon
    real = daemon.store.bindings_for_sensor
    calls = []

    async def flaky(sensor, **kw):
        calls.append(sensor)
        if len(calls) == 1:
            raise StorageError("database is locked")
        return await real(sensor, **kw)

    monkeypatch.setattr(daemon.store, "bindings_for_sensor", flaky)
    with structlog.testing.capture_logs() as logs:
        await daemon.add_block({"content": "a", "bindings": [{"sensor": "echo", "path": "a"}]})
        await eventually(lambda: any(e["event"] == "bindings_refresh_failed" for e in logs))
    await daemon.add_block({"content": "b", "bindings": [{"sensor": "echo", "path": "b"}]})
    echo = daemon.runners["echo"]
    await eventually(lambda: sorted(b.subject for b in echo.ctx.bindings) == ["a", "b"])


async def test_bindings_carry_each_blocks_window(running_daemon, make_settings, eventually):
    """A sensor learns each bound block's window (its own, else its volatility's), so a
    polling sensor can renew it before it expires."""
    daemon = (await running_daemon(make_settings(sensors={"echo": {}}))).daemon
    fast = await daemon.add_block(
        {"content": "a", "volatility": "ephemeral", "bindings": [{"sensor": "echo", "path": "a"}]}
    )
    slow = await daemon.add_block(
        {"content": "b", "volatility": "low", "bindings": [{"sensor": "echo", "path": "b"}]}
    )
    own = await daemon.add_block(
        {"content": "c", "validity_window": "1m", "bindings": [{"sensor": "echo", "path": "c"}]}
    )
    echo = daemon.runners["echo"]
    await eventually(lambda: len(echo.ctx.bindings) == 3)
    windows = {b.block_id: b.validity_window for b in echo.ctx.bindings}
    assert windows == {
        fast.id: timedelta(minutes=10),
        slow.id: timedelta(days=180),
        own.id: timedelta(minutes=1),
    }
