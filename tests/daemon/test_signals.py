"""`memwarden run` as a real process: SIGTERM drains the bus, SIGHUP reloads the sensors.

The sensors come from a throwaway distribution on PYTHONPATH (``plugin_site``), found
through the entry-point group like any installed plugin, and allowed by MEMWARDEN_PLUGINS.
"""

from __future__ import annotations

import json
import signal
import sqlite3

import pytest

pytestmark = pytest.mark.slow


def _config(home, sensors: str) -> str:
    return f'home = "{home}"\nlog_format = "json"\n[api]\nenabled = false\n' + sensors


def _emitted(path) -> int:
    try:
        return int(path.read_text() or 0)
    except FileNotFoundError:
        return 0


async def test_sigterm_loses_no_queued_event(  # noqa: PLR0917 - pytest fixtures
    tmp_path, config_file, notify_socket, make_env, memwarden_process, eventually
):
    """SIGTERM mid-stream: exit 0, and every event whose emit() returned is in the store."""
    home = tmp_path / "home"
    path = config_file(
        # one event a commit: the store falls behind the sensor, so events are queued when
        # the signal comes, however fast the machine (with big batches it may keep up)
        _config(
            home,
            '[bus]\nqueue_per_source = 500\nbatch_max = 1\n[sensors.sequence]\nstartup = "error"\n',
        )
    )
    sock = notify_socket()
    env = make_env(NOTIFY_SOCKET=sock.env_value, MEMWARDEN_PLUGINS="sequence,echo")
    proc = await memwarden_process("run", "--config", str(path), env=env)
    await sock.expect("READY", "1", timeout_s=30)
    counter = home / "sensors" / "sequence" / "emitted"
    # a thousand events through the store, then the signal while more are queued
    await eventually(lambda: _emitted(counter) >= 1000, timeout_s=30)
    proc.send_signal(signal.SIGTERM)
    await sock.expect("STOPPING", "1")
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    handed_over = _emitted(counter)  # written after each emit() returned, so a lower bound

    with sqlite3.connect(home / "memwarden.db") as db:
        rows = db.execute("SELECT observed FROM events WHERE sensor = 'sequence'").fetchall()
    stored = sorted(json.loads(r[0]) for r in rows)
    assert len(stored) >= handed_over >= 1000
    assert stored == list(range(len(stored)))  # no gap, no duplicate: nothing queued was lost
    log = {e["event"]: e for e in map(json.loads, err.decode().splitlines())}  # logs: stderr
    assert log["bus_draining"]["pending"] > 0  # events were in flight when the signal came
    assert "bus_drain_timed_out" not in log
    assert "daemon_stopped" in log


async def test_sighup_adds_and_removes_sensors(
    tmp_path, config_file, notify_socket, make_env, memwarden_process
):
    """SIGHUP: the added sensor starts, the removed one is torn down, the unchanged one stays."""
    home = tmp_path / "home"
    path = config_file(
        _config(home, '[sensors.keep]\nkind = "echo"\n[sensors.gone]\nkind = "echo"\n')
    )
    sock = notify_socket()
    env = make_env(NOTIFY_SOCKET=sock.env_value, MEMWARDEN_PLUGINS="echo")
    proc = await memwarden_process("run", "--config", str(path), env=env)
    await sock.expect("READY", "1", timeout_s=30)
    config_file(_config(home, '[sensors.keep]\nkind = "echo"\n[sensors.new]\nkind = "echo"\n'))
    proc.send_signal(signal.SIGHUP)
    await sock.expect("RELOADING", "1")
    ready = await sock.expect("READY", "1")
    assert ready["STATUS"] == "2/2 sensors running"
    lifecycle = {
        name: [
            line.split()[0]
            for line in (home / "sensors" / name / "lifecycle").read_text().splitlines()
        ]
        for name in ("keep", "gone", "new")
    }
    assert lifecycle == {"keep": ["setup"], "gone": ["setup", "teardown"], "new": ["setup"]}
    proc.send_signal(signal.SIGTERM)
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


async def test_startup_failure_exits_1_with_a_clear_message(
    tmp_path, config_file, make_env, memwarden_process
):
    """A sensor failing under startup = "error" ends `memwarden run` with exit 1, no traceback."""
    home = tmp_path / "home"
    path = config_file(_config(home, '[sensors.flaky]\nstartup = "error"\nfail_setups = 1\n'))
    proc = await memwarden_process("run", "--config", str(path), env=make_env())
    _, err = await proc.communicate()
    assert proc.returncode == 1
    text = err.decode()
    assert "sensor 'flaky' failed to start: setup: OSError: device not ready" in text
    assert "Traceback" not in text
