"""A real ``memwarden run`` process on a free loopback port, for API and CLI tests."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support import DaemonProcess, daemon, daemon_env, memwarden_running

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["REMOTE_SENSOR", "LiveDaemon", "daemon", "live_daemon"]

REMOTE_SENSOR = "edge-files"  # configured remote in the live daemon
LiveDaemon = DaemonProcess  # the name the API and CLI tests annotate with


@pytest.fixture(scope="session")
def live_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    """One daemon for every API (and, imported there, CLI) test module: a start costs
    seconds, and each test works on blocks it made itself (its own tags and ids)."""
    home = tmp_path_factory.mktemp("live") / "home"
    # A sensor on another host: the only kind that may report over POST /v1/events.
    sensors = json.dumps({REMOTE_SENSOR: {"remote": True, "kind": "fs"}})
    with memwarden_running(home, env=daemon_env(home, MEMWARDEN_SENSORS=sensors)) as running:
        httpx.get(f"{running.url}/healthz", timeout=5).raise_for_status()
        yield running
