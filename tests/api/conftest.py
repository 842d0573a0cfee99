"""A real ``memwarden run`` process on a free loopback port, for API and CLI tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support import daemon

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["REMOTE_SENSOR", "LiveDaemon", "daemon", "live_daemon"]

REMOTE_SENSOR = "edge-files"  # configured remote in the live daemon


@dataclass
class LiveDaemon:
    home: Path
    url: str
    token: str
    process: subprocess.Popen[bytes]

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def env(self) -> dict[str, str]:
        return {**os.environ, "MEMWARDEN_HOME": str(self.home)}


def _wait_for(path: Path, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"memwarden run exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {deadline_s}s")
        time.sleep(0.02)  # polling a file with a deadline: the daemon says nothing else


@pytest.fixture(scope="module")
def live_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    home = tmp_path_factory.mktemp("live") / "home"
    exe = Path(sys.executable).with_name("memwarden")
    env = {
        **os.environ,
        "MEMWARDEN_HOME": str(home),
        "MEMWARDEN_API__PORT": "0",
        "MEMWARDEN_LOG_LEVEL": "warning",
        # A sensor on another host: the only kind that may report over POST /v1/events.
        "MEMWARDEN_SENSORS": json.dumps({REMOTE_SENSOR: {"remote": True, "kind": "fs"}}),
    }
    log = (home.parent / "daemon.log").open("wb")
    # Run outside the checkout: `memwarden run` would otherwise use its memwarden.toml.
    process = subprocess.Popen(
        [str(exe), "run"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=home.parent
    )
    try:
        _wait_for(home / "api.json", process, 30)
        url = json.loads((home / "api.json").read_text())["url"]
        token = (home / "token").read_text().strip()
        httpx.get(f"{url}/healthz", timeout=5).raise_for_status()
        yield LiveDaemon(home, url, token, process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
