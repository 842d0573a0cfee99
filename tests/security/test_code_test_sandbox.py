"""The tests under check run sandboxed (issue 13, item 2): bubblewrap.

A coding agent can write test files into the project, so a test is hostile code. Here
one tries to read the daemon's token and database, list its state dir, see its process,
reach the network and plant a file in the project. Under the sandbox every attempt
fails; without it (the control) every one succeeds, so the assertions can fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import sys
import textwrap
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest
import structlog

from memwarden.errors import PluginError
from memwarden.plugins.testing import SensorHarness
from memwarden.sensors import CodeTestSensor
from tests.security._code_test_support import FAST_ENV, OK_ID, live_daemon, make_project
from tests.support import assert_responsive, eventually

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

needs_bwrap = pytest.mark.skipif(
    os.environ.get("CI") != "true" and shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (scripts/system-deps.sh installs it)",
)
ESCAPE_ID = "tests/test_escape.py::test_escape"

ESCAPE = """
import json, os, pathlib, socket

def test_escape():
    home = pathlib.Path({home!r})
    tried = {{}}
    for name in ("token", "memwarden.db"):
        try:
            tried[name] = (home / name).read_bytes()[:8].hex()
        except OSError as err:
            tried[name] = type(err).__name__
    try:
        tried["home"] = sorted(os.listdir(home))[:5]
    except OSError as err:
        tried["home"] = type(err).__name__
    tried["daemon_visible"] = str({daemon_pid}) in os.listdir("/proc")
    for name, port in (("net", {port}), ("api", {api_port})):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=3).close()
            tried[name] = "connected"
        except OSError as err:
            tried[name] = type(err).__name__
    try:
        pathlib.Path({planted!r}).write_text("planted")
        tried["planted"] = "written"
    except OSError as err:
        tried["planted"] = type(err).__name__
    assert False, "ESCAPE " + json.dumps(tried) + " END"
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback TCP listener in the test process: the 'network' the test tries to reach."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    yield sock
    sock.close()


def _connections(sock: socket.socket) -> int:
    n = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


async def _run_escape(tmp_path: Path, listener: socket.socket, *, home_inside: bool, **options):
    project = make_project(tmp_path)
    home = project.root / ".memwarden" if home_inside else tmp_path / "home"
    planted = project.root / "planted.txt"
    options.setdefault("revalidate_timeout", "120s")
    async with live_daemon(home, project.root, **options) as live:
        api_port = int(live.url.rsplit(":", 1)[1].split("/")[0])
        (project.root / "tests" / "test_escape.py").write_text(
            ESCAPE.format(
                home=str(home),
                daemon_pid=os.getpid(),
                port=listener.getsockname()[1],
                api_port=api_port,
                planted=str(planted),
            )
        )
        response = await live.add_block({"test": ESCAPE_ID})
        assert response.status_code == 201, response.text
        block_id = response.json()["id"]
        run = asyncio.get_running_loop().create_task(live.daemon.revalidate(block_id, wait_s=120))
        latencies = []
        async with httpx.AsyncClient(timeout=5) as client:
            while not run.done():  # the daemon answers while the hostile test runs
                latencies.append(await live.healthz_ms(client))
                await asyncio.wait({run}, timeout=0.02)  # a poll step, not a busy loop
        await run
        assert_responsive(latencies)
        events = await live.daemon.store.events_for(block_id)
        sensor = live.daemon.runners["tests"].sensor
        token = live.token
    [event] = [e for e in events if e.sensor == "tests"]
    assert event.outcome == "refuted", event.message
    found = re.search(r"ESCAPE (\{.*?\}) END", event.message)
    assert found is not None, event.message
    tried: dict[str, Any] = json.loads(found.group(1))
    return tried, sensor, token, planted


@needs_bwrap
@pytest.mark.parametrize("home_inside", [False, True], ids=["state-elsewhere", "state-in-project"])
async def test_a_hostile_test_cannot_read_the_state_reach_the_network_or_write(
    tmp_path, listener, home_inside
):
    """Under bwrap: no token, no database, no state dir, no daemon process, no network."""
    tried, sensor, _, planted = await _run_escape(tmp_path, listener, home_inside=home_inside)
    assert sensor.sandboxed
    assert tried["token"] in ("FileNotFoundError", "PermissionError")
    assert tried["memwarden.db"] in ("FileNotFoundError", "PermissionError")
    assert tried["home"] in ([], "FileNotFoundError", "PermissionError")
    assert tried["daemon_visible"] is False
    assert tried["net"] != "connected"
    assert tried["api"] != "connected"
    assert _connections(listener) == 0
    assert tried["planted"] != "written"
    assert not planted.exists()


async def test_without_the_sandbox_the_same_test_gets_everything(tmp_path, listener):
    """The control: sandbox = none, and the hostile test reads the token and connects.
    Redaction off: the report quotes the token's first bytes after "token", which the
    default privacy policy stores as a secret's placeholder (as it should)."""
    tried, sensor, token, planted = await _run_escape(
        tmp_path, listener, home_inside=False, sandbox="none", privacy={"enabled": False}
    )
    assert not sensor.sandboxed
    assert tried["token"] == token.encode()[:8].hex()
    assert tried["net"] == "connected"
    assert tried["api"] == "connected"
    assert tried["planted"] == "written"
    assert planted.exists()


def _harness(tmp_path: Path, project: Path, **config: Any) -> SensorHarness:
    (tmp_path / "harness").mkdir(exist_ok=True)
    return SensorHarness(
        CodeTestSensor,
        config={"project_root": str(project), "batch_window_ms": 0, "env": FAST_ENV, **config},
        bindings=[{"test": OK_ID}],
        name="tests",
        tmp_path=tmp_path / "harness",
        revalidate_timeout_s=60.0,
    )


async def test_sandbox_bwrap_without_bwrap_refuses_to_start(tmp_path):
    """sandbox = 'bwrap' is a requirement: without bwrap the sensor does not start."""
    project = make_project(tmp_path)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    with pytest.raises(PluginError, match=r"sandbox = 'bwrap'.*bubblewrap"):
        async with _harness(tmp_path, project.root, sandbox="bwrap", env={"PATH": str(empty)}):
            pass
    assert project.ran() == []


async def test_sandbox_auto_without_bwrap_runs_unsandboxed_and_says_so(tmp_path):
    """auto: no bwrap means a warning naming the reason, and the tests still run."""
    project = make_project(tmp_path)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    with structlog.testing.capture_logs() as logs:
        async with _harness(tmp_path, project.root, env={"PATH": str(empty)}) as h:
            await h.wait_ready()
            [event] = await h.revalidate(OK_ID)
            assert event.outcome == "confirmed"
            assert not h.sensor.sandboxed
    [warning] = [e for e in logs if e["event"] == "code_test_sandbox_unavailable"]
    assert warning["log_level"] == "warning"
    assert "not installed" in warning["reason"]


@needs_bwrap
async def test_a_hanging_sandboxed_test_leaves_no_process_behind(tmp_path):
    """Past timeout_s the sandbox and everything in it are gone (its own PID namespace)."""
    project = make_project(tmp_path)
    marker = f"memwarden-hang-{uuid.uuid4().hex}"
    (project.root / "tests" / "test_hang.py").write_text(
        textwrap.dedent(
            f"""
            import subprocess, sys, time

            def test_hang():
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"])
                time.sleep(300)
            """
        )
    )

    def running() -> list[int]:
        return [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if marker in (p.info.get("cmdline") or [])
        ]

    test_id = "tests/test_hang.py::test_hang"
    config = {"timeout_s": 5.0, "kill_grace_s": 0.5}
    async with _harness(tmp_path, project.root, **config) as h:
        await h.set_bindings([{"test": test_id}])
        await h.wait_ready()
        run = asyncio.get_running_loop().create_task(h.revalidate(test_id))
        await eventually(running, timeout_s=30)  # the test and its child are up
        [event] = await run
        assert h.sensor.sandboxed
        assert event.outcome == "error"
        assert "timed out after 5s" in event.message
        await eventually(lambda: not running(), timeout_s=10)


def test_the_python_of_this_suite_is_what_the_sandbox_binds():
    """The default command's interpreter (venv and base) is among the sandbox's read paths."""
    from memwarden.sensors._sandbox import interpreter_paths  # noqa: PLC0415

    paths = interpreter_paths([sys.executable, "-m", "pytest"], os.environ.get("PATH"))
    assert any(sys.prefix == str(p) for p in paths)
    assert any(sys.base_prefix == str(p) for p in paths)


def test_an_executable_in_a_home_bin_does_not_expose_the_home(tmp_path):
    """Only a Python installation is bound whole; ~/bin/pytest binds just that file."""
    from memwarden.sensors._sandbox import interpreter_paths  # noqa: PLC0415

    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / ".ssh").mkdir()
    exe = home / "bin" / "pytest"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert interpreter_paths([str(exe)], None) == [exe]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python").symlink_to(sys.executable)
    paths = interpreter_paths([str(venv / "bin" / "python")], None)
    assert paths[0] == venv
    assert home not in paths


async def test_a_project_inside_the_state_directory_is_a_config_error(tmp_path):
    """The sandbox hides the state dir: a project inside it is refused at start, named."""
    harness_dir = tmp_path / "harness"
    project = make_project(harness_dir)  # the harness's state root holds the project
    with pytest.raises(PluginError, match=r"project_root: .* lies inside .*hides"):
        async with _harness(tmp_path, project.root):
            pass
