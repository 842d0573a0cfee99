"""The daemon started exactly as the unit's ExecStart= says, talking sd_notify to a real socket.

Nothing here sleeps: every wait reads datagrams against a deadline.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import httpx

from tests.deploy._units import (
    SANDBOX,
    SYSTEM_UNIT,
    exec_start,
    need_tool,
    service_env,
    service_settings,
    time_span_s,
)

if TYPE_CHECKING:
    from pathlib import Path

WATCHDOG_USEC = 1_000_000
START_S = time_span_s(service_settings(SYSTEM_UNIT)["TimeoutStartSec"][-1])
STOP_S = time_span_s(service_settings(SYSTEM_UNIT)["TimeoutStopSec"][-1])


def _start(spawn, notify_socket, argv: list[str]) -> subprocess.Popen[bytes]:
    env = service_env(
        SYSTEM_UNIT, NOTIFY_SOCKET=str(notify_socket.path), WATCHDOG_USEC=str(WATCHDOG_USEC)
    )
    return spawn(argv, env)


def _stop(proc: subprocess.Popen[bytes], notify_socket) -> None:
    proc.send_signal(signal.SIGTERM)
    notify_socket.expect(lambda m: m.get("STOPPING") == "1", timeout_s=STOP_S, proc=None)
    assert proc.wait(timeout=STOP_S) == 0


def test_execstart_daemon_notifies_ready_watchdog_reload_and_stop(
    spawn, notify_socket, memwarden_bin, service_config
):
    """Started as ExecStart= says: READY=1, watchdog pings within WATCHDOG_USEC, SIGHUP gives
    RELOADING=1 (with MONOTONIC_USEC) then READY=1, SIGTERM gives STOPPING=1 and exit 0."""
    argv = exec_start(SYSTEM_UNIT, binary=memwarden_bin, config=service_config)
    assert argv[1:3] == ["run", "--config"]
    proc = _start(spawn, notify_socket, argv)

    ready = notify_socket.expect(lambda m: m.get("READY") == "1", timeout_s=START_S, proc=proc)
    assert "sensors running" in ready.get("STATUS", "")

    ready_at = notify_socket.seen[-1][0]
    for _ in range(2):
        notify_socket.expect(lambda m: m.get("WATCHDOG") == "1", timeout_s=5, proc=proc)
    pings = [ready_at] + [t for t, m in notify_socket.seen if m.get("WATCHDOG") and t > ready_at]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert len(gaps) >= 2
    assert max(gaps) < WATCHDOG_USEC / 1e6, gaps  # systemd would not have killed it

    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    proc.send_signal(signal.SIGHUP)
    reloading = notify_socket.expect(lambda m: "RELOADING" in m, timeout_s=10, proc=proc)
    assert reloading["RELOADING"] == "1"
    assert int(reloading["MONOTONIC_USEC"]) >= before
    notify_socket.expect(lambda m: m.get("READY") == "1", timeout_s=10, proc=proc)
    assert proc.poll() is None

    _stop(proc, notify_socket)


def _project(root: Path) -> Path:
    """A tiny project for the fs and code_test sensors to check."""
    root.mkdir()
    (root / "app.json").write_text('{"http": {"timeout": 30}}')
    (root / "test_sample.py").write_text("def test_ok():\n    assert 6 * 7 == 42\n")
    return root


def test_daemon_with_sensors_serves_under_the_units_seccomp_rules(
    spawn, notify_socket, memwarden_bin, tmp_path: Path
):
    """Under the unit's SystemCallFilter=, MemoryDenyWriteExecute=, RestrictAddressFamilies=
    and RestrictNamespaces= (emulated with libseccomp), the daemon starts an fs and a code_test
    sensor, confirms a file fact and a test fact (running pytest) over its HTTP API, reloads,
    and stops cleanly."""
    need_tool("systemd-analyze")  # the syscall groups come from systemd's own tables
    project = _project(tmp_path / "project")
    config = tmp_path / "memwarden.toml"
    config.write_text(
        f'home = "{tmp_path / "state"}"\n'
        'log_format = "json"\n'
        "[api]\nport = 0\n"
        f'[sensors.files]\nkind = "fs"\nroots = ["{project}"]\n'
        f'[sensors.tests]\nkind = "code_test"\nproject_root = "{project}"\n'
        f'command = ["{sys.executable}", "-m", "pytest", "-p", "no:cacheprovider"]\n'
        'env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }\n'
    )
    argv = exec_start(SYSTEM_UNIT, binary=memwarden_bin, config=config)
    sandboxed = [sys.executable, str(SANDBOX), str(SYSTEM_UNIT), "--", *argv]
    proc = _start(spawn, notify_socket, sandboxed)
    ready = notify_socket.expect(lambda m: m.get("READY") == "1", timeout_s=START_S, proc=proc)
    assert "2/2 sensors running" in ready["STATUS"]

    state = tmp_path / "state"
    url = json.loads((state / "api.json").read_text())["url"]
    token = (state / "token").read_text().strip()
    assert (state / "token").stat().st_mode & 0o777 == 0o600
    facts = {
        "timeout is 30 s": {
            "sensor": "files",
            "path": "app.json",
            "key": "/http/timeout",
            "equals": 30,
        },
        "the sample test passes": {"sensor": "tests", "test": "test_sample.py::test_ok"},
    }
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for content, binding in facts.items():
            added = client.post("/v1/blocks", json={"content": content, "bindings": [binding]})
            assert added.status_code == 201, added.text
            block_id = added.json()["id"]
            checked = client.post(f"/v1/blocks/{block_id}/revalidate", params={"wait": "20s"})
            assert checked.status_code == 200, checked.text
            assert checked.json()["block"]["state"] == "fresh", checked.json()
        found = client.get("/v1/search", params={"q": "sample test"})
        assert found.status_code == 200, found.text
        assert found.json()["results"][0]["block"]["content"] == "the sample test passes"

    proc.send_signal(signal.SIGHUP)
    notify_socket.expect(lambda m: "RELOADING" in m, timeout_s=10, proc=proc)
    notify_socket.expect(lambda m: m.get("READY") == "1", timeout_s=10, proc=proc)
    _stop(proc, notify_socket)


def test_pytest_child_runs_under_the_units_seccomp_rules(tmp_path: Path):
    """A pytest run, as the code-test sensor spawns one, passes under the unit's seccomp
    rules: threads, subprocesses, sockets on loopback, tmp_path; W+X memory is refused."""
    need_tool("systemd-analyze")
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_sample.py").write_text(
        "import mmap, socket, subprocess, sys, threading\n"
        "import pytest\n\n"
        "def test_ordinary_things_work(tmp_path):\n"
        "    (tmp_path / 'f').write_text('x')\n"
        "    t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "    out = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True)\n"
        "    assert out.stdout.strip() == b'42'\n"
        "    with socket.socket() as s:\n"
        "        s.bind(('127.0.0.1', 0)); s.listen()\n\n"
        "def test_writable_executable_memory_is_refused():\n"
        "    with pytest.raises(PermissionError):\n"
        "        mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
    )
    env = {**service_env(SYSTEM_UNIT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("COVERAGE_")}  # a plain child
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_sample.py"]
    result = subprocess.run(
        [sys.executable, str(SANDBOX), str(SYSTEM_UNIT), "--", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
