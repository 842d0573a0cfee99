"""The envvar sensor, run under memwarden's real supervisor by memwarden.plugins.testing."""

from __future__ import annotations

import asyncio

import pytest
from memwarden.errors import ConfigError, ValidationInputError
from memwarden.plugins import Outcome
from memwarden.plugins.testing import FakeClock, SensorHarness

from memwarden_sensor_example import EnvVarSensor

ALLOW = {"allow": ["APP_*"], "interval_s": 0.01}


async def test_confirms_a_variable_with_the_expected_value(tmp_path, monkeypatch):
    """A binding whose variable has the expected value is confirmed, and the block is fresh."""
    monkeypatch.setenv("APP_MODE", "production")
    async with SensorHarness(
        EnvVarSensor,
        config=ALLOW,
        bindings=[{"var": "APP_MODE", "equals": "production"}],
        clock=FakeClock(),
        tmp_path=tmp_path,
    ) as h:
        await h.wait_ready()
        [event] = await h.wait_for_events(1)
        assert event.outcome == Outcome.CONFIRMED
        assert event.subject == "APP_MODE"
        assert event.observed == "production"
        assert (await h.block("APP_MODE")).state == "fresh"


async def test_refutes_a_different_or_missing_value(tmp_path, monkeypatch):
    """A different value or an unset variable refutes the binding, each reaching only its block."""
    monkeypatch.setenv("APP_MODE", "staging")
    monkeypatch.delenv("APP_REGION", raising=False)
    async with SensorHarness(
        EnvVarSensor,
        config=ALLOW,
        bindings=[
            {"var": "APP_MODE", "equals": "production"},
            {"var": "APP_MODE", "equals": "staging"},
            {"var": "APP_REGION"},
        ],
        tmp_path=tmp_path,
    ) as h:
        events = await h.wait_for_events(3)
        by_block = {e.block_id: e for e in events}
        ids = {b.selector.equals or b.selector.var: b.block_id for b in h.bindings}
        assert by_block[ids["production"]].outcome == Outcome.REFUTED
        assert "expected 'production'" in by_block[ids["production"]].message
        assert by_block[ids["staging"]].outcome == Outcome.CONFIRMED
        assert by_block[ids["APP_REGION"]].outcome == Outcome.REFUTED
        assert by_block[ids["APP_REGION"]].message == "APP_REGION is not set"


async def test_reports_a_change_once(tmp_path, monkeypatch):
    """When the variable changes the sensor emits once more, and not again while it stays."""
    monkeypatch.setenv("APP_MODE", "production")
    async with SensorHarness(
        EnvVarSensor,
        config=ALLOW,
        bindings=[{"var": "APP_MODE", "equals": "production"}],
        tmp_path=tmp_path,
    ) as h:
        await h.wait_for_events(1)
        monkeypatch.setenv("APP_MODE", "maintenance")
        _, changed = await h.wait_for_events(2)
        assert changed.outcome == Outcome.REFUTED
        assert changed.observed == "maintenance"
        # Several more polls (interval_s is 10 ms) see no change and emit nothing.
        with pytest.raises(TimeoutError):
            await h.wait_for_events(3, timeout_s=0.1)


async def test_new_bindings_are_checked_at_once(tmp_path, monkeypatch):
    """A binding added while running is checked without waiting for the next poll."""
    monkeypatch.setenv("APP_MODE", "production")
    async with SensorHarness(
        EnvVarSensor, config={"allow": ["APP_*"], "interval_s": 3600}, tmp_path=tmp_path
    ) as h:
        await h.wait_ready()
        await h.set_bindings([{"var": "APP_MODE"}])
        [event] = await h.wait_for_events(1, timeout_s=2)
        assert event.outcome == Outcome.CONFIRMED


async def test_revalidate_answers_the_request(tmp_path, monkeypatch):
    """revalidate() reads the variable now and answers with the request id."""
    monkeypatch.setenv("APP_MODE", "production")
    async with SensorHarness(
        EnvVarSensor,
        config=ALLOW,
        bindings=[{"var": "APP_MODE", "equals": "production"}],
        tmp_path=tmp_path,
    ) as h:
        monkeypatch.setenv("APP_MODE", "off")
        [answer] = await h.revalidate("APP_MODE")
        assert answer.outcome == Outcome.REFUTED
        assert answer.request_id is not None
        assert answer.block_id == h.bindings[0].block_id


async def test_refuses_a_variable_outside_the_allow_list(tmp_path):
    """A binding to a variable the config does not allow is refused, naming the variable."""
    async with SensorHarness(EnvVarSensor, config=ALLOW, tmp_path=tmp_path) as h:
        with pytest.raises(ValidationInputError, match="'HOME' is not allowed"):
            await h.set_bindings([{"var": "HOME"}])


async def test_never_reads_a_variable_outside_the_allow_list(tmp_path, monkeypatch):
    """A disallowed binding that reached the store anyway gets an error event, not the value."""
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    async with SensorHarness(EnvVarSensor, config=ALLOW, tmp_path=tmp_path) as h:
        h.sensor.config = h.sensor.Config(allow=["*"])  # bound while it was allowed ...
        await h.set_bindings([{"var": "SECRET_TOKEN"}])
        h.sensor.config = h.sensor.Config(**ALLOW)  # ... then the config narrowed
        [answer] = await h.revalidate("SECRET_TOKEN")
        assert answer.outcome == Outcome.ERROR
        assert answer.observed is None


async def test_unknown_option_is_a_config_error(tmp_path):
    """A misspelt option is reported with its path, as `memwarden config check` would."""
    with pytest.raises(ConfigError, match=r"sensors\.envvar\.intervall_s: unknown setting"):
        async with SensorHarness(EnvVarSensor, config={"intervall_s": 5}, tmp_path=tmp_path):
            pass  # pragma: no cover - never entered


async def test_stops_cleanly(tmp_path, monkeypatch):
    """Leaving the harness stops the run loop and tears the sensor down (it forgets)."""
    monkeypatch.setenv("APP_MODE", "production")
    async with SensorHarness(
        EnvVarSensor, config=ALLOW, bindings=[{"var": "APP_MODE"}], tmp_path=tmp_path
    ) as h:
        await h.wait_for_events(1)
        assert h.sensor._last  # it remembered what it saw
    assert h.status == "stopped"
    assert h.sensor._last == {}
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("sensor[")]


async def test_describe_offers_bindings_the_sensor_accepts(tmp_path):
    """describe() names what may be bound, and each example passes validation as it is."""
    async with SensorHarness(EnvVarSensor, config=ALLOW, clock=FakeClock(), tmp_path=tmp_path) as h:
        info = h.runner.sensor.describe()
        assert info["binds"] == {"allow": ["APP_*"]}
        bound = await h.set_bindings(info["examples"])
        assert [b.subject for b in bound] == ["APP_MODE", "APP_MODE"]
