"""Logging: JSON lines off a TTY (journald), pretty on one; stdlib routed the same way."""

from __future__ import annotations

import io
import json
import logging
import sys

import structlog

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
