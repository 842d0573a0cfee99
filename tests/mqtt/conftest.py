"""Factory fixtures for the MQTT tests: a real mosquitto, a daemon, an agent.

Every broker is our own ``mosquitto`` on a free loopback port with a generated config
(persistence in the test's tmp_path), never the system one. Startup is awaited on the
broker's own "running" log line (then one connect), teardown kills what is left.
Nothing sleeps to wait: events, futures, and deadline-bounded polling (``eventually``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.support import eventually as poll_until
from tests.support import eventually_blocking, start_in_loop

from memwarden.agent import Agent
from memwarden.daemon import Daemon, load_settings
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"
PREFIX = "memwarden/v1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    """One mosquitto process; restartable on the same port and persistence directory."""

    directory: Path
    port: int = field(default_factory=free_port)
    extra: str = ""
    settings: str = ""  # replaces the default persistence and queue settings
    proc: subprocess.Popen[bytes] | None = None
    log: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / "mosquitto.conf"
        settings = self.settings or (
            "persistence true\n"
            f"persistence_location {self.directory}/\n"
            "max_queued_messages 100000\n"
        )
        path.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n" + settings + "log_dest stderr\n"
            "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
            + ("user root\n" if os.geteuid() == 0 else "")
            + self.extra
        )
        return path

    def start(self, timeout_s: float = 10.0) -> None:
        running = threading.Event()
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.config())],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out = self.proc.stdout
        assert out is not None

        def drain() -> None:  # keeps the pipe from filling; tells us when it runs
            for raw in out:
                line = raw.decode(errors="replace").rstrip()
                self.log.append(line)
                if " running" in line:
                    running.set()
            running.set()  # the process ended: stop waiting

        self.reader = threading.Thread(target=drain, name="mosquitto.log", daemon=True)
        self.reader.start()
        if not running.wait(timeout_s) or self.proc.poll() is not None:
            self.kill()
            pytest.fail(f"mosquitto did not start: {self.log[-10:]}")
        try:  # the log line says it runs; one connect says it listens
            eventually_blocking(
                self.accepting,
                timeout_s=timeout_s,
                what=f"mosquitto accepting on {self.port}",
                process=self.proc,
            )
        except BaseException:
            self.kill()
            raise

    def accepting(self) -> bool:
        """One TCP connect to the broker's port succeeds."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
        except OSError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL: no chance to save its state."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM: mosquitto saves its persistence file on the way out."""
        self._end(signal.SIGTERM)

    def _end(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        if self.reader is not None:
            self.reader.join(timeout=5)
            self.reader = None
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None


@pytest.fixture
def mosquitto_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """``mosquitto_broker(extra="...")`` starts a broker; all are killed at teardown.

    ``settings`` replaces the default persistence and queue lines (the listener, anonymous
    access and logging stay ours); ``extra`` is appended.
    """
    brokers: list[Broker] = []

    def make(extra: str = "", settings: str = "") -> Broker:
        broker = Broker(tmp_path / f"broker{len(brokers)}", extra=extra, settings=settings)
        brokers.append(broker)
        broker.start()
        return broker

    yield make
    for broker in brokers:
        broker.kill()


# ---------------------------------------------------------------------- waiting


def _eventually(predicate: Callable[[], Any], *, timeout_s: float = 10.0) -> Awaitable[Any]:
    return poll_until(predicate, timeout_s=timeout_s, interval_s=0.01)


@pytest.fixture
def eventually() -> Callable[..., Awaitable[Any]]:
    return _eventually


async def wait_state(daemon: Daemon, block_id: str, state: str, timeout_s: float = 10.0) -> None:
    """Wait (on the daemon's commits, not a clock) until the block is in ``state``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (block := await daemon.store.get(block_id)).state != state:
        left = deadline - loop.time()
        if left <= 0:
            pytest.fail(f"block {block_id} is {block.state}, not {state}, after {timeout_s}s")
        await daemon.wait_for_events(min(left, 0.5))


async def wait_accepted(daemon: Daemon, n: int, timeout_s: float = 10.0) -> None:
    """Wait (on the daemon's commits) until its MQTT bridge stored ``n`` events in total."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    assert daemon.mqtt is not None
    while daemon.mqtt.accepted < n:
        left = deadline - loop.time()
        if left <= 0:
            pytest.fail(f"the bridge accepted {daemon.mqtt.accepted} of {n} events in {timeout_s}s")
        await daemon.wait_for_events(min(left, 0.5))


# ---------------------------------------------------------------------- daemon and agent


@dataclass
class Running:
    """A daemon or an agent running in this process, as a task."""

    obj: Any
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.obj.request_stop()
        await asyncio.wait_for(self.task, timeout=20)


async def _start(obj: Any, name: str) -> Running:
    return Running(obj, await start_in_loop(obj, name=name))


@pytest.fixture
async def start_daemon(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """``await start_daemon(broker, **overrides)``: a daemon with remote sensor ``files``."""
    running: list[Running] = []

    async def start(broker: Broker, *, mqtt: dict[str, Any] | None = None, **kw: Any) -> Running:
        settings = load_settings(
            None,
            env={},
            home=tmp_path / "daemon",
            api={"enabled": False},
            mqtt={
                "url": broker.url,
                "client_id": "memwarden-test-daemon",
                "backoff_initial": "20ms",
                "backoff_max": "200ms",
                **(mqtt or {}),
            },
            sensors=kw.pop("sensors", {"files": {"kind": "fs", "remote": True}}),
            **kw,
        )
        r = await _start(Daemon(settings, registry=Registry.from_classes({})), "test.daemon")
        running.append(r)
        return r

    yield start
    for r in running:
        if not r.task.done():
            await r.stop()


def agent_settings(broker: Broker, home: Path, world: Path, **agent: Any) -> Any:
    return load_settings(
        None,
        env={},
        home=home,
        mqtt={
            "url": broker.url,
            "backoff_initial": "20ms",
            "backoff_max": "200ms",
        },
        agent={"id": "edge1", "heartbeat_interval": "200ms", **agent},
        sensors={"files": {"kind": "fs", "roots": [str(world)], "debounce_ms": 0}},
    )


@pytest.fixture
async def start_agent(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """``await start_agent(broker)``: an in-process agent running the fs sensor ``files``."""
    running: list[Running] = []
    world = tmp_path / "world"
    world.mkdir(exist_ok=True)

    async def start(broker: Broker, **agent: Any) -> Running:
        settings = agent_settings(broker, tmp_path / "agent", world, **agent)
        r = await _start(Agent(settings, registry=Registry.from_classes({"fs": FsSensor})), "agent")
        running.append(r)
        return r

    yield start
    for r in running:
        if not r.task.done():
            await r.stop()


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """The directory the agent's fs sensor watches."""
    path = tmp_path / "world"
    path.mkdir(exist_ok=True)
    return path


def event_json(sensor: str = "files", subject: str = "app.json", **fields: Any) -> bytes:
    """A ValidationEvent as a remote sensor would publish it."""
    body = {
        "sensor": sensor,
        "subject": subject,
        "outcome": "confirmed",
        "observed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **fields,
    }
    return json.dumps(body).encode()


MEMWARDEN = Path(sys.executable).parent / "memwarden"  # the console script, as installed


def stored(db: Path, agent: str) -> tuple[int, int]:
    """(rows, distinct seqs) of ``agent``'s events in a daemon's database."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT agent_seq) FROM events WHERE agent = ?", (agent,)
        ).fetchone()
    return int(row[0]), int(row[1])


async def run_tool(*args: str, timeout_s: float = 15.0) -> str:
    """Run a mosquitto client tool; its stdout (fails on a non-zero exit)."""
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
    assert proc.returncode == 0, f"{args[0]} exited {proc.returncode}: {err.decode()}"
    return out.decode()
