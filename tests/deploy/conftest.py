"""Fixtures for the deployment checks: the unit files, systemd's tools, an sd_notify socket.

With ``CI=true`` a missing tool fails the test instead of skipping it:
``scripts/system-deps.sh`` installs them (Debian package ``systemd``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.deploy._units import need_tool

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@pytest.fixture
def memwarden_bin() -> Path:
    """The ``memwarden`` console script of the environment running the tests."""
    path = Path(sys.executable).with_name("memwarden")
    if not path.is_file():
        found = shutil.which("memwarden")
        assert found, "the memwarden console script is not installed (pip install -e .)"
        path = Path(found)
    return path


@pytest.fixture
def systemd_analyze() -> str:
    return need_tool("systemd-analyze")


@pytest.fixture
def service_config(tmp_path: Path) -> Path:
    """A config for a daemon started by a test: state in tmp_path, any free port."""
    path = tmp_path / "memwarden.toml"
    path.write_text(f'home = "{tmp_path / "state"}"\nlog_format = "json"\n\n[api]\nport = 0\n')
    return path


@dataclass
class Notifications:
    """The service manager's end of ``NOTIFY_SOCKET``: a bound AF_UNIX datagram socket."""

    sock: socket.socket
    path: Path
    seen: list[tuple[float, dict[str, str]]] = field(default_factory=list)

    def expect(
        self,
        want: Callable[[dict[str, str]], bool],
        *,
        timeout_s: float,
        proc: subprocess.Popen[bytes] | None = None,
    ) -> dict[str, str]:
        """Read datagrams until one satisfies ``want``; fail at the deadline or if
        ``proc`` exits first. Every message read is kept in ``seen`` with its time."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(min(left, 0.25))  # short slices: notice a dead daemon
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                if proc is not None and proc.poll() is not None:
                    pytest.fail(f"the daemon exited ({proc.returncode}); saw {self.messages()}")
                continue
            message = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            self.seen.append((time.monotonic(), message))
            if want(message):
                return message
        pytest.fail(f"no such notification within {timeout_s} s; saw {self.messages()}")

    def messages(self) -> list[dict[str, str]]:
        return [m for _, m in self.seen]


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[Notifications]:
    """A real sd_notify socket bound in tmp_path (or a short temp dir if that path is
    longer than AF_UNIX allows)."""
    where = tmp_path
    short = None
    if len(str(tmp_path / "notify")) > 100:
        short = Path(tempfile.mkdtemp(prefix="mw-notify-"))
        where = short
    path = where / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    sock.bind(str(path))
    try:
        yield Notifications(sock, path)
    finally:
        sock.close()
        if short is not None:
            shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``spawn(argv, env)``: start a process logging to tmp_path; killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"service-{len(procs)}.log").open("wb")
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
