"""Reloading the configuration restarts exactly the sensors whose settings changed."""

from __future__ import annotations

import structlog

SENSORS = """
[sensors.a]
kind = "echo"
value = "1"
[sensors.b]
kind = "echo"
value = "1"
[sensors.d]
kind = "echo"
value = "1"
"""


async def test_reload_adds_removes_and_keeps(running_daemon, make_settings, config_file):
    """Reload starts the added, tears down the removed, restarts the changed, keeps the rest."""
    path = config_file(SENSORS)
    daemon = (await running_daemon(make_settings(path), config_file=path)).daemon
    a, b, d = (daemon.runners[n] for n in "abd")
    config_file(
        '[sensors.a]\nkind = "echo"\nvalue = "1"\n'  # unchanged
        '[sensors.c]\nkind = "echo"\n'  # added (b is removed)
        '[sensors.d]\nkind = "echo"\nvalue = "2"\n'  # changed
    )
    with structlog.testing.capture_logs() as logs:
        await daemon.reload()
    assert sorted(daemon.runners) == ["a", "c", "d"]
    assert daemon.runners["a"] is a
    assert (a.sensor.setups, a.sensor.teardowns, a.status) == (1, 0, "running")
    assert (b.sensor.teardowns, b.status) == (1, "stopped")
    assert (d.sensor.teardowns, d.status) == (1, "stopped")
    assert daemon.runners["d"].sensor.config.value == "2"
    assert daemon.runners["d"].status == "running"
    assert daemon.runners["c"].status == "running"
    assert daemon.reloads == 1
    reloaded = next(e for e in logs if e["event"] == "daemon_reloaded")
    assert reloaded["restarted"] == ["b", "c", "d"]


async def test_bad_reload_keeps_the_old_configuration(running_daemon, make_settings, config_file):
    """A reload whose new sensor tables are invalid changes nothing and says why."""
    path = config_file(SENSORS)
    daemon = (await running_daemon(make_settings(path), config_file=path)).daemon
    before = dict(daemon.runners)
    config_file('[sensors.a]\nkind = "echo"\nvalu = "1"\n[sensors.x]\nkind = "nope"\n')
    with structlog.testing.capture_logs() as logs:
        await daemon.reload()
    assert daemon.runners == before
    assert all(r.status == "running" for r in before.values())
    [failed] = [e for e in logs if e["event"] == "reload_failed"]
    assert failed["problems"][0] == "sensors.a.valu: unknown setting"
    assert failed["problems"][1].startswith("sensors.x.kind: no sensor plugin named 'nope'")


async def test_unparsable_reload_keeps_the_old_configuration(
    running_daemon, make_settings, config_file
):
    """A config file that is no longer valid TOML is refused; the sensors keep running."""
    path = config_file(SENSORS)
    daemon = (await running_daemon(make_settings(path), config_file=path)).daemon
    config_file("[sensors.a\n")
    with structlog.testing.capture_logs() as logs:
        await daemon.reload()
    assert sorted(daemon.runners) == ["a", "b", "d"]
    assert any(e["event"] == "reload_failed" and "not valid TOML" in e["error"] for e in logs)


async def test_reload_request_is_served(running_daemon, make_settings, config_file, eventually):
    """request_reload() (what SIGHUP calls) makes the serving loop reload."""
    path = config_file(SENSORS)
    daemon = (await running_daemon(make_settings(path), config_file=path)).daemon
    config_file(SENSORS.replace('[sensors.d]\nkind = "echo"\nvalue = "1"\n', ""))
    daemon.request_reload()
    await eventually(lambda: daemon.reloads == 1)
    assert sorted(daemon.runners) == ["a", "b"]
