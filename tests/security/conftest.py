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
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

MEMWARDEN = Path(sys.executable).with_name("memwarden")
HEALTHZ_BUDGET_S = 0.2  # p95
HEALTHZ_WORST_S = 1.0
MIN_PROBES = 20


@dataclass
class Daemon:
    home: Path
    url: str
    token: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def counts(self) -> dict[str, object]:
        """The store's counts (blocks, events, ...), to show that nothing changed."""
        response = httpx.get(f"{self.url}/v1/health", headers=self.auth, timeout=5)
        response.raise_for_status()
        return dict(response.json()["counts"])


def daemon_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMWARDEN_", "NOTIFY_"))}
    env.update(
        MEMWARDEN_HOME=str(home), MEMWARDEN_API__PORT="0", MEMWARDEN_LOG_LEVEL="info", **extra
    )
    return env


def wait_for(path: Path, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"memwarden run exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {deadline_s}s")
        time.sleep(0.02)  # polling a file with a deadline: the daemon says nothing else


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def spawn_daemon() -> Iterator[Callable[..., Daemon]]:
    """``spawn_daemon(home, umask=None, **env)``: a running daemon, stopped at teardown."""
    started: list[tuple[subprocess.Popen[bytes], object]] = []

    def factory(home: Path, *, umask: int = -1, **extra: str) -> Daemon:
        home.parent.mkdir(parents=True, exist_ok=True)
        log_path = home.parent / f"{home.name}.log"
        log = log_path.open("wb")
        process = subprocess.Popen(
            [str(MEMWARDEN), "run"],
            env=daemon_env(home, **extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            umask=umask,
            cwd=home.parent,  # no ./memwarden.toml from wherever pytest runs
        )
        started.append((process, log))
        wait_for(home / "api.json", process, 30)
        url = json.loads((home / "api.json").read_text())["url"]
        token = (home / "token").read_text().strip()
        return Daemon(home, url, token, process, log_path)

    yield factory
    for process, log in reversed(started):
        _stop(process)
        log.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon shared by a module's tests (each checks that it changed nothing)."""
    home = tmp_path_factory.mktemp("security") / "home"
    log_path = home.parent / "daemon.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(MEMWARDEN), "run"],
            env=daemon_env(home),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=home.parent,
        )
        try:
            wait_for(home / "api.json", process, 30)
            url = json.loads((home / "api.json").read_text())["url"]
            token = (home / "token").read_text().strip()
            yield Daemon(home, url, token, process, log_path)
        finally:
            _stop(process)


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
        """95 % of the answers within 200 ms, none slower than 1 s, at least 20 of them.

        On a loaded 2-core machine one request in a few dozen can wait that long for a
        CPU; a daemon stalled by the input (a body read whole, a handler stuck) shows in
        every sample."""
        assert not self.failures, self.failures
        assert len(self.latencies_s) >= MIN_PROBES, f"only {len(self.latencies_s)} probes"
        ordered = sorted(self.latencies_s)
        p95 = ordered[max(0, -(-len(ordered) * 95 // 100) - 1)]
        shown = f"p95 {p95 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms over {len(ordered)}"
        assert p95 < HEALTHZ_BUDGET_S, f"/healthz too slow: {shown}"
        assert ordered[-1] < HEALTHZ_WORST_S, f"/healthz stalled: {shown}"


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
