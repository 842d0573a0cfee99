"""The runtime sensor's least privilege (issue 13, item 6): Nagios plugins get an explicit
environment, and no check polls in a tight loop."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import ConfigError, ValidationInputError
from memwarden.memory import SystemClock
from memwarden.plugins.testing import SensorHarness
from memwarden.sensors.runtime import RuntimeSensor

if TYPE_CHECKING:
    from pathlib import Path


def _plugin(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return str(path)


def _harness(tmp_path: Path, config: dict[str, Any], *bound: str) -> SensorHarness:
    return SensorHarness(
        RuntimeSensor,
        config={"jitter": 0, "interval": "1h", **config},
        bindings=[{"check": n} for n in bound],
        clock=SystemClock(),
        tmp_path=tmp_path,
    )


async def test_a_plugin_sees_path_lang_and_the_configured_env_only(tmp_path, monkeypatch):
    """The daemon's secrets stay in the daemon: the plugin's environment is explicit."""
    monkeypatch.setenv("MEMWARDEN_TEST_SECRET", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    dump = _plugin(
        tmp_path,
        "check_env",
        "import os\nprint('OK - ' + ' '.join(f'{k}={v}' for k, v in sorted(os.environ.items())"
        " if k != 'PATH'))\n",
    )
    config = {
        "env": {"PGHOST": "db.internal", "PGUSER": "monitor"},
        "checks": {"env": {"type": "nagios", "command": [dump], "env": {"PGUSER": "override"}}},
    }
    async with _harness(tmp_path, config, "env") as h:
        [event] = await h.revalidate("env")
    assert event.outcome == "confirmed"
    seen = dict(item.split("=", 1) for item in event.message.removeprefix("OK - ").split())
    seen.pop("LC_CTYPE", None)  # Python itself may add it when it coerces a C locale (PEP 538)
    assert seen == {"LANG": "C.UTF-8", "PGHOST": "db.internal", "PGUSER": "override"}
    assert "hunter2" not in event.message
    assert "also-secret" not in event.message


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"interval": "0s"}, r"interval: 0s is below min_interval"),
        ({"interval": "500ms"}, r"interval: 0\.5s is below min_interval \(1s\)"),
        ({"min_interval": "0s", "interval": "0s"}, r"min_interval: 0s is too short"),
        ({"check_interval": "0s"}, r"checks\.probe\.nagios\.interval: .*0s is too short.*0\.01s"),
        ({"check_interval": "200ms"}, r"checks\.probe\.interval: 0\.2s is below min_interval"),
    ],
)
async def test_a_tight_polling_loop_is_refused_at_start_and_nothing_runs(tmp_path, config, problem):
    """0s, or anything below min_interval (default 1s), fails the config naming the key."""
    marker = tmp_path / "ran"
    probe = _plugin(
        tmp_path, "check_probe", f"open({str(marker)!r}, 'a').write('x')\nprint('OK')\n"
    )
    check: dict[str, Any] = {"type": "nagios", "command": [probe]}
    if "check_interval" in config:
        check["interval"] = config.pop("check_interval")
    with pytest.raises(ConfigError, match=problem):
        async with _harness(tmp_path, {**config, "checks": {"probe": check}}, "probe"):
            pass
    assert not marker.exists()


async def test_the_floor_itself_is_accepted(tmp_path):
    """interval = min_interval (1s) is fine; a lower min_interval down to 10ms may be asked."""
    probe = _plugin(tmp_path, "check_ok", "print('OK')\n")
    checks = {"probe": {"type": "nagios", "command": [probe], "interval": "1s"}}
    async with _harness(tmp_path, {"checks": checks}, "probe") as h:
        [event] = await h.revalidate("probe")
        assert event.outcome == "confirmed"
    async with _harness(tmp_path, {"checks": checks, "min_interval": "10ms", "interval": "20ms"}):
        pass


async def test_a_binding_cannot_set_an_interval_or_a_command(tmp_path):
    """A runtime binding names a check; interval or command keys are refused, named."""
    probe = _plugin(tmp_path, "check_ok", "print('OK')\n")
    async with _harness(
        tmp_path, {"checks": {"probe": {"type": "nagios", "command": [probe]}}}
    ) as h:
        for key, value in (("interval", "0s"), ("command", ["/bin/sh", "-c", "id"])):
            with pytest.raises(ValidationInputError) as refused:
                await h.set_bindings([{"check": "probe", key: value}])
            assert refused.value.field == f"bindings.0.{key}"
