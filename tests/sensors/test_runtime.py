"""The runtime sensor against real sockets, processes and Nagios plugins."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
from pydantic import ValidationError
from tests.support import eventually

from memwarden.errors import ValidationInputError
from memwarden.memory import SystemClock
from memwarden.plugins.testing import SensorHarness
from memwarden.sensors.http import HttpConfig
from memwarden.sensors.runtime import RuntimeConfig, RuntimeSensor, parse_perfdata

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from memwarden.memory import ValidationEvent

PLUGINS = Path("/usr/lib/nagios/plugins")
needs_plugins = pytest.mark.skipif(
    os.environ.get("CI") != "true" and not (PLUGINS / "check_tcp").exists(),
    reason="monitoring-plugins-basic is not installed (scripts/system-deps.sh installs it)",
)


# ---------------------------------------------------------------------- helpers


def harness(tmp_path: Path, checks: dict[str, Any], *names: str, **config: Any) -> SensorHarness:
    """A runtime sensor with ``checks``, bound to ``names``; fast loops by default."""
    config = {"interval": "50ms", "min_interval": "10ms", "jitter": 0, **config, "checks": checks}
    return SensorHarness(
        RuntimeSensor,
        config=config,
        bindings=[{"check": n} for n in names],
        clock=SystemClock(),
        tmp_path=tmp_path,
    )


async def next_outcome(
    h: SensorHarness, outcome: str, *, timeout_s: float = 10.0
) -> ValidationEvent:
    """Wait (event-driven, bounded) for the next emitted event with ``outcome``."""
    seen = len(h.emitted)
    async with asyncio.timeout(timeout_s):
        while True:
            await h.wait_for_events(seen + 1, timeout_s=timeout_s)
            event = h.emitted[seen]
            seen += 1
            if event.outcome == outcome:
                return event


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def listener() -> Any:
    """A real listening TCP socket on loopback; the test may close it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def child() -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A real child process whose command line carries a unique marker."""
    marker = f"memwarden-test-{uuid.uuid4().hex}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys, time; time.sleep(120)", marker
    )
    yield proc, marker
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


# ---------------------------------------------------------------------- built-in checks


async def test_tcp_port_confirmed_while_listening_and_refuted_once_closed(tmp_path, listener):
    """A loopback port check confirms while a socket listens and refutes once it closes."""
    port = listener.getsockname()[1]
    checks = {"db-port": {"type": "tcp_port", "host": "127.0.0.1", "port": port}}
    async with harness(tmp_path, checks, "db-port") as h:
        first = await next_outcome(h, "confirmed")
        assert first.subject == "db-port"
        assert first.reliability == 0.9
        assert first.observed == {"open": True}
        listener.close()
        refuted = await next_outcome(h, "refuted")
        assert "refused" in refuted.message


async def test_tcp_listening_method_reads_the_socket_table(tmp_path, listener):
    """method = listening finds the socket through psutil, and misses a closed port."""
    port = listener.getsockname()[1]
    checks = {
        "up": {"type": "tcp_port", "port": port, "method": "listening"},
        "down": {"type": "tcp_port", "port": free_port(), "method": "listening"},
    }
    async with harness(tmp_path, checks, "up", "down", interval="1h") as h:
        [up] = await h.revalidate("up")
        [down] = await h.revalidate("down")
    assert up.outcome == "confirmed"
    assert down.outcome == "refuted"


async def test_process_check_follows_a_real_child_process(tmp_path, child):
    """A cmdline check confirms while the child runs and refutes once it is killed."""
    proc, marker = child
    checks = {"worker": {"type": "process", "cmdline": marker}}
    async with harness(tmp_path, checks, "worker", interval="1h") as h:
        [running] = await h.revalidate("worker")
        assert running.outcome == "confirmed"
        assert running.observed == {"count": 1, "pids": [proc.pid]}
        proc.kill()
        await proc.wait()
        [stopped] = await h.revalidate("worker")
        assert stopped.outcome == "refuted"
        assert stopped.observed["count"] == 0


async def test_process_check_by_pid_file(tmp_path, child):
    """A pid-file check: running, then killed, then a missing file, then garbage."""
    proc, _ = child
    pid_file = tmp_path / "worker.pid"
    pid_file.write_text(f"{proc.pid}\n")
    checks = {"worker": {"type": "process", "pid_file": str(pid_file)}}
    async with harness(tmp_path, checks, "worker", interval="1h") as h:
        assert (await h.revalidate("worker"))[0].outcome == "confirmed"
        proc.kill()
        await proc.wait()
        assert (await h.revalidate("worker"))[0].outcome == "refuted"
        pid_file.unlink()
        [missing] = await h.revalidate("worker")
        assert missing.outcome == "refuted"
        assert "does not exist" in missing.message
        pid_file.write_text("not a pid")
        assert (await h.revalidate("worker"))[0].outcome == "error"


async def test_disk_memory_load_and_file_age_checks(tmp_path):
    """The psutil checks confirm within their bounds and refute outside them."""
    fresh = tmp_path / "backup.tar"
    fresh.write_text("x")
    old = tmp_path / "old.tar"
    old.write_text("x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    checks = {
        "disk-ok": {"type": "disk_free", "path": str(tmp_path), "min_free_percent": 0},
        "disk-full": {"type": "disk_free", "path": str(tmp_path), "min_free_bytes": 2**62},
        "mem-ok": {"type": "memory", "max_used_percent": 100},
        "mem-tight": {"type": "memory", "min_available_bytes": 2**62},
        "load-ok": {"type": "load", "max_load1": 10_000, "per_cpu": True},
        "fresh": {"type": "file_age", "path": str(fresh), "max_age": "1h"},
        "stale": {"type": "file_age", "path": str(old), "max_age": "1h"},
        "absent": {"type": "file_age", "path": str(tmp_path / "nope"), "max_age": "1h"},
    }
    expected = {
        "disk-ok": "confirmed",
        "disk-full": "refuted",
        "mem-ok": "confirmed",
        "mem-tight": "refuted",
        "load-ok": "confirmed",
        "fresh": "confirmed",
        "stale": "refuted",
        "absent": "refuted",
    }
    async with harness(tmp_path, checks, *checks, interval="1h") as h:
        got = {name: (await h.revalidate(name))[0] for name in checks}
    assert {n: e.outcome.value for n, e in got.items()} == expected
    assert set(got["load-ok"].observed) == {"load1", "load5", "load15", "cpus"}
    assert got["disk-ok"].observed["free_bytes"] > 0


async def test_unknown_check_or_a_command_in_a_binding_is_refused(tmp_path):
    """A binding may only name a configured check: unknown names and commands are refused."""
    checks = {"db-port": {"type": "tcp_port", "port": 5432}}
    async with harness(tmp_path, checks, "db-port", interval="1h") as h:
        with pytest.raises(ValidationInputError, match="no runtime check named 'nope'"):
            await h.set_bindings([{"check": "nope"}])
        with pytest.raises(ValidationInputError, match="command"):
            await h.set_bindings([{"check": "db-port", "command": ["/bin/true"]}])


def test_config_rejects_ambiguous_and_empty_checks():
    """A process check names one selector; a nagios check needs a command list."""
    with pytest.raises(ValidationError, match="exactly one of name, cmdline, pid_file"):
        RuntimeConfig.model_validate(
            {"checks": {"p": {"type": "process", "name": "a", "cmdline": "b"}}}
        )
    with pytest.raises(ValidationError):
        RuntimeConfig.model_validate({"checks": {"n": {"type": "nagios", "command": []}}})
    with pytest.raises(ValidationError):
        RuntimeConfig.model_validate({"checks": {"n": {"type": "nagios", "command": "ls -l"}}})


@pytest.mark.parametrize("config", [RuntimeConfig, HttpConfig])
def test_check_timeout_that_would_do_nothing_is_refused(config):
    """runtime and http checks carry their own deadline (timeout_s): the polling base's
    check_timeout would be silently ignored, so setting it is an error naming timeout_s."""
    with pytest.raises(ValidationError, match=r"check_timeout: not used by this sensor.*timeout_s"):
        config.model_validate({"check_timeout": "5s"})
    assert config.model_validate({"timeout_s": 5}).timeout_s == 5


# ---------------------------------------------------------------------- Nagios plugins


def test_perfdata_is_parsed_into_a_dict():
    """Perfdata labels (quoted or not), units, thresholds, min/max and U are all read."""
    parsed = parse_perfdata(
        "time=0.000111s;;;0.000000;10.000000 'free space'=75%;20:;10:;0;100 procs=101;1:1000 x=U"
    )
    assert parsed == {
        "time": {"value": 0.000111, "uom": "s", "min": 0.0, "max": 10.0},
        "free space": {"value": 75, "uom": "%", "warn": "20:", "crit": "10:", "min": 0, "max": 100},
        "procs": {"value": 101, "uom": "", "warn": "1:1000"},
        "x": {"value": None, "uom": ""},
    }


@needs_plugins
async def test_check_tcp_on_an_open_and_a_closed_port(tmp_path, listener):
    """check_tcp: exit 0 on a listening port confirms (with perfdata), exit 2 refutes."""
    tcp = str(PLUGINS / "check_tcp")
    port = listener.getsockname()[1]
    checks = {
        "open": {"type": "nagios", "command": [tcp, "-H", "127.0.0.1", "-p", str(port)]},
        "closed": {"type": "nagios", "command": [tcp, "-H", "127.0.0.1", "-p", str(free_port())]},
    }
    async with harness(tmp_path, checks, "open", "closed", interval="1h") as h:
        [ok] = await h.revalidate("open")
        [critical] = await h.revalidate("closed")
    assert ok.outcome == "confirmed"
    assert ok.observed["exit_code"] == 0
    assert ok.observed["perfdata"]["time"]["uom"] == "s"
    assert ok.message.startswith("TCP OK")
    assert critical.outcome == "refuted"
    assert critical.observed["status"] == "CRITICAL"


@needs_plugins
async def test_check_procs_sees_a_real_child_come_and_go(tmp_path, child):
    """check_procs confirms while the marked child runs and refutes after it is killed."""
    proc, marker = child
    cmd = [str(PLUGINS / "check_procs"), "-a", marker, "-c", "1:"]
    async with harness(
        tmp_path, {"w": {"type": "nagios", "command": cmd}}, "w", interval="1h"
    ) as h:
        [ok] = await h.revalidate("w")
        assert ok.outcome == "confirmed"
        assert ok.observed["perfdata"]["procs"]["value"] >= 1
        proc.kill()
        await proc.wait()
        [critical] = await h.revalidate("w")
        assert critical.outcome == "refuted"


@needs_plugins
async def test_check_disk_ok_warning_critical_and_the_warning_setting(tmp_path):
    """check_disk thresholds force each exit code; WARNING follows the `warning` setting."""
    disk = str(PLUGINS / "check_disk")

    def cmd(warn: str, crit: str) -> list[str]:
        return [disk, "-w", warn, "-c", crit, "-p", str(tmp_path)]

    checks = {
        "ok": {"type": "nagios", "command": cmd("0%", "0%")},
        "warn-soft": {"type": "nagios", "command": cmd("100%", "0%")},
        "warn-confirm": {"type": "nagios", "command": cmd("100%", "0%"), "warning": "confirm"},
        "warn-error": {"type": "nagios", "command": cmd("100%", "0%"), "warning": "error"},
        "critical": {"type": "nagios", "command": cmd("100%", "100%")},
    }
    async with harness(tmp_path, checks, *checks, interval="1h") as h:
        got = {name: (await h.revalidate(name))[0] for name in checks}
    assert {n: (e.observed["exit_code"], e.outcome.value) for n, e in got.items()} == {
        "ok": (0, "confirmed"),
        "warn-soft": (1, "refuted"),
        "warn-confirm": (1, "confirmed"),
        "warn-error": (1, "error"),
        "critical": (2, "refuted"),
    }
    [(label, perf)] = got["ok"].observed["perfdata"].items()
    assert perf["uom"] == "B"
    assert perf["value"] > 0
    assert label


async def test_exit_codes_and_the_warning_setting_with_a_scripted_plugin(tmp_path):
    """Without the Monitoring Plugins: 0 confirms (reliability 0.9, perfdata observed),
    1 follows `warning`, 2 refutes; the status line is the message."""

    def plugin(code: int) -> str:
        word = {0: "OK", 1: "WARNING", 2: "CRITICAL"}[code]
        return script(
            tmp_path, f"check_{code}", f"echo 'X {word} - n | n={code};1;2'\nexit {code}\n"
        )

    checks = {
        "ok": {"type": "nagios", "command": [plugin(0)]},
        "warn-soft": {"type": "nagios", "command": [plugin(1)]},
        "warn-confirm": {"type": "nagios", "command": [plugin(1)], "warning": "confirm"},
        "warn-error": {"type": "nagios", "command": [plugin(1)], "warning": "error"},
        "critical": {"type": "nagios", "command": [plugin(2)]},
    }
    async with harness(tmp_path, checks, *checks, interval="1h") as h:
        got = {name: (await h.revalidate(name))[0] for name in checks}
    assert {n: (e.observed["exit_code"], str(e.outcome)) for n, e in got.items()} == {
        "ok": (0, "confirmed"),
        "warn-soft": (1, "refuted"),
        "warn-confirm": (1, "confirmed"),
        "warn-error": (1, "error"),
        "critical": (2, "refuted"),
    }
    assert got["ok"].message == "X OK - n"
    assert got["ok"].reliability == 0.9
    assert got["critical"].reliability is None
    assert got["ok"].observed["perfdata"] == {"n": {"value": 0, "uom": "", "warn": 1, "crit": 2}}


async def test_unknown_exit_code_and_a_missing_plugin_are_errors(tmp_path):
    """Exit 3 (UNKNOWN) and a command that cannot start are errors, perfdata still read."""
    unknown = script(tmp_path, "check_x", "echo 'X UNKNOWN - no idea | a=1;2;3;0;10'\nexit 3\n")
    checks = {
        "unknown": {"type": "nagios", "command": [unknown]},
        "missing": {"type": "nagios", "command": [str(tmp_path / "no-such-plugin")]},
    }
    async with harness(tmp_path, checks, *checks, interval="1h") as h:
        [u] = await h.revalidate("unknown")
        [m] = await h.revalidate("missing")
    assert u.outcome == "error"
    assert u.message == "X UNKNOWN - no idea"
    assert u.observed["perfdata"] == {
        "a": {"value": 1, "uom": "", "warn": 2, "crit": 3, "min": 0, "max": 10}
    }
    assert m.outcome == "error"
    assert "could not start" in m.message


async def test_a_hanging_plugin_times_out_and_its_process_group_is_killed(tmp_path):
    """A plugin past timeout_s is an error, and the helper it forked dies with it."""
    pid_file = tmp_path / "helper.pid"
    hang = script(tmp_path, "check_hang", f"sleep 300 &\necho $! > {pid_file}\nsleep 300\n")
    checks = {"hang": {"type": "nagios", "command": [hang], "timeout_s": 0.5}}
    async with harness(tmp_path, checks, "hang", interval="1h") as h:
        began = time.monotonic()
        [event] = await h.revalidate("hang")
        took = time.monotonic() - began
    assert event.outcome == "error"
    assert "timed out after 0.5s" in event.message
    assert took < 5
    helper = int(pid_file.read_text())
    await eventually(lambda: gone(helper), interval_s=0.02, what="the helper process reaped")


async def test_a_run_due_while_a_revalidation_runs_waits_and_never_overlaps(tmp_path):
    """The periodic run waits (and counts it) while a revalidation of the check holds it:
    the plugin never runs twice at once."""
    marker = tmp_path / "running"
    slow = script(
        tmp_path,
        "check_slow",
        f"if [ -e {marker} ]; then echo 'OVERLAP'; exit 2; fi\n"
        f"touch {marker}\nsleep 0.6\nrm {marker}\necho 'OK'\n",
    )
    checks = {"slow": {"type": "nagios", "command": [slow]}}
    async with harness(tmp_path, checks, "slow", interval="100ms") as h:
        await h.wait_for_events(1)
        [answer] = await h.revalidate("slow")
        assert answer.outcome == "confirmed"
        await eventually(lambda: h.sensor.poll_counters.waited >= 1)
    assert all(e.outcome == "confirmed" for e in h.emitted), [e.message for e in h.emitted]


async def test_only_changes_are_emitted_and_a_dropped_check_is_an_error(tmp_path, listener):
    """An unchanged result is not emitted again at every run (the polling base's change
    detection); a binding whose check the config no longer names is an `error`."""
    port = listener.getsockname()[1]
    checks = {"db-port": {"type": "tcp_port", "host": "127.0.0.1", "port": port}}
    async with harness(tmp_path, checks, "db-port", interval="20ms") as h:
        await next_outcome(h, "confirmed")
        await eventually(lambda: h.sensor.poll_counters.unchanged >= 3)
        assert [e.outcome for e in h.emitted] == ["confirmed"]
        h.sensor.config = h.sensor.config.model_copy(update={"checks": {}})
        dropped = await next_outcome(h, "error")
    assert dropped.message == "no runtime check named 'db-port'"


def test_system_deps_script_lists_the_monitoring_plugins():
    """scripts/system-deps.sh installs the plugins the tests use (CI has no other way)."""
    text = (Path(__file__).parents[2] / "scripts" / "system-deps.sh").read_text()
    assert "monitoring-plugins-basic" in text
