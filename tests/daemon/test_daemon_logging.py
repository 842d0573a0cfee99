"""Logging: JSON lines off a TTY (journald), pretty on one; stdlib routed the same way."""

from __future__ import annotations

import io
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time

import structlog
from tests.projects import MEMWARDEN, user_env

from memwarden.daemon import configure_logging


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_lines_when_not_a_tty(isolated_logging):
    """Off a TTY every line is one JSON object with an ISO UTC timestamp, level and event."""
    out = io.StringIO()
    configure_logging("info", "auto", stream=out)
    structlog.get_logger("memwarden.test").bind(sensor="fs").warning("sensor_restarting", attempt=2)
    logging.getLogger("thirdparty").error("disk %s", "full")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["event"] == "sensor_restarting"
    assert (first["sensor"], first["attempt"], first["level"]) == ("fs", 2, "warning")
    assert first["timestamp"].endswith("Z")
    assert second["event"] == "disk full"
    assert second["logger"] == "thirdparty"


def test_console_on_a_tty(isolated_logging):
    """On a TTY the output is for people, not JSON."""
    out = _Tty()
    configure_logging("info", "auto", stream=out)
    structlog.get_logger().info("daemon_ready", sensors=["fs"])
    line = out.getvalue()
    assert "daemon_ready" in line
    assert not line.startswith("{")


def test_level_filters(isolated_logging):
    """Below the configured level nothing is written; noisy libraries are held to WARNING."""
    out = io.StringIO()
    configure_logging("warning", "json", stream=out)
    structlog.get_logger().info("chatty")
    structlog.get_logger().error("bad")
    logging.getLogger("aiosqlite").info("noise")
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["bad"]
    assert logging.getLogger("aiosqlite").level == logging.WARNING


def test_std_streams_are_looked_up_at_each_write(isolated_logging, monkeypatch):
    """Logging to "stderr" follows sys.stderr when it is swapped: never a closed file."""
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info", "json", stream="stderr")
    first.close()  # what an in-process CLI runner does when the command returns
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    structlog.get_logger().info("still_here")
    logging.getLogger("lib").warning("and_here")
    events = [json.loads(line)["event"] for line in second.getvalue().splitlines()]
    assert events == ["still_here", "and_here"]


def test_the_daemon_logs_for_people_on_a_terminal_and_json_otherwise(tmp_path):
    """`memwarden run` with stderr on a terminal: coloured console lines, no JSON; with
    stderr on a pipe: one JSON object per line."""

    env = user_env(tmp_path, {"MEMWARDEN_HOME": str(tmp_path / "home"), "MEMWARDEN_API__PORT": "0"})
    controller, terminal = os.openpty()
    proc = subprocess.Popen(
        [str(MEMWARDEN), "run"], cwd=tmp_path, env=env, stderr=terminal, stdout=subprocess.DEVNULL
    )
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"daemon_ready" not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, seen.decode(errors="replace")
            if select.select([controller], [], [], remaining)[0]:
                seen += os.read(controller, 65536)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        os.close(controller)
    lines = [line for line in seen.decode(errors="replace").splitlines() if line.strip()]
    assert lines
    assert not any(line.lstrip().startswith("{") for line in lines)
    assert "\x1b[" in seen.decode(errors="replace")  # coloured

    with socket.create_server(("127.0.0.1", 0)) as taken:  # cannot listen: logs, exits 75
        piped = subprocess.run(
            [str(MEMWARDEN), "run"],
            cwd=tmp_path,
            env={**env, "MEMWARDEN_API__PORT": str(taken.getsockname()[1])},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert piped.returncode == 75
    logged = [line for line in piped.stderr.splitlines() if line.startswith("{")]
    assert logged
    assert all("event" in json.loads(line) for line in logged)
