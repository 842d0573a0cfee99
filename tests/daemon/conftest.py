"""Factory fixtures for the daemon: settings, a running daemon, a notify socket, plugins.

Every factory owns its teardown. Nothing here sleeps to wait: readiness is awaited,
and what has no event is polled with a deadline (``eventually``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import shutil
import socket
import sys
import tempfile
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from tests.support import eventually as poll_until
from tests.support import start_in_loop

from memwarden.daemon import Daemon, Notifier, load_settings
from memwarden.plugins import Registry

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from memwarden.daemon import Settings

HERE = Path(__file__).parent


def _load_test_sensors() -> Any:
    """Import mw_test_sensors.py by path (whatever pytest's import mode) as ``mw_test_sensors``."""
    spec = importlib.util.spec_from_file_location("mw_test_sensors", HERE / "mw_test_sensors.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mw_test_sensors"] = module
    spec.loader.exec_module(module)
    return module


mw_test_sensors = _load_test_sensors()  # the test modules `import mw_test_sensors` after this
MEMWARDEN = Path(sys.executable).parent / "memwarden"  # the console script, as installed


# ---------------------------------------------------------------------- waiting


_eventually = poll_until  # the shared deadline-bounded poll (tests/support.py)


@pytest.fixture
def eventually() -> Callable[..., Awaitable[Any]]:
    """``await eventually(lambda: cond, timeout_s=5)``: deadline-bounded polling, no bare sleep."""
    return _eventually


# ---------------------------------------------------------------------- settings


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def make_settings(home: Path) -> Callable[..., Settings]:
    """``make_settings(sensors={...}, **overrides)``: settings in ``tmp_path``, no API, no env.

    The scheduler's loops tick fast so revalidations flow within a test's patience.
    """

    def factory(config_file: Path | None = None, **overrides: Any) -> Settings:
        overrides.setdefault("home", home)
        overrides.setdefault("api", {"enabled": False})
        overrides.setdefault("scheduler", {"dispatch_interval": "20ms", "sweep_interval": "50ms"})
        return load_settings(config_file, env={}, **overrides)

    return factory


# ---------------------------------------------------------------------- a running daemon


@dataclass
class Running:
    """A daemon running in a task of the test's loop."""

    daemon: Daemon
    task: asyncio.Task[None]
    stopped: bool = field(default=False)

    async def stop(self, timeout_s: float = 15.0) -> None:
        """Ask it to stop and wait for ``run()`` to return (raising what it raised)."""
        self.daemon.request_stop()
        self.stopped = True
        async with asyncio.timeout(timeout_s):
            await self.task


@pytest.fixture
async def running_daemon(
    make_settings: Callable[..., Settings],
) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """``await running_daemon(settings=None, sensors={...}, **daemon_kwargs)``.

    ``sensors`` maps kinds to throwaway classes (registered with
    ``Registry.from_classes``) unless ``registry=`` is given. Returns once
    ``daemon.ready()``; a startup failure is raised here. Stopped at teardown.
    """
    started: list[Running] = []

    async def factory(
        settings: Settings | None = None,
        *,
        sensors: dict[str, type[Any]] | None = None,
        **kwargs: Any,
    ) -> Running:
        if "registry" not in kwargs:
            kwargs["registry"] = Registry.from_classes(sensors or mw_test_sensors.ALL)
        daemon = Daemon(settings or make_settings(), **kwargs)
        running = Running(daemon, await start_in_loop(daemon, name="test-daemon"))
        started.append(running)
        return running

    yield factory
    for running in reversed(started):
        if not running.task.done():
            await running.stop()
        elif not running.stopped:
            running.task.result()  # a daemon that died under a test fails it


# ---------------------------------------------------------------------- sd_notify


class NotifySocket:
    """The service manager's end of ``NOTIFY_SOCKET``: a bound AF_UNIX datagram socket."""

    def __init__(self, address: str) -> None:
        self.env_value = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.setblocking(False)
        self.messages: list[dict[str, str]] = []

    def notifier(self, **env: str) -> Notifier:
        return Notifier(env={"NOTIFY_SOCKET": self.env_value, **env})

    async def expect(
        self, key: str, value: str | None = None, timeout_s: float = 10.0
    ) -> dict[str, str]:
        """The next message (after the ones already seen) carrying ``key`` (= ``value``)."""
        async with asyncio.timeout(timeout_s):
            while True:
                data = await asyncio.get_running_loop().sock_recv(self.sock, 4096)
                fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
                self.messages.append(fields)
                if key in fields and (value is None or fields[key] == value):
                    return fields

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify_socket() -> Iterator[Callable[..., NotifySocket]]:
    """``notify_socket(abstract=False)``: a socket to pass as NOTIFY_SOCKET, closed at teardown.

    Path sockets live in a short temp dir (AF_UNIX paths are limited to 107 bytes).
    """
    made: list[NotifySocket] = []
    dirs: list[str] = []

    def factory(*, abstract: bool = False) -> NotifySocket:
        if abstract:
            address = f"@memwarden-test-{uuid.uuid4().hex}"
        else:
            dirs.append(tempfile.mkdtemp(prefix="mw-"))
            address = os.path.join(dirs[-1], "notify")  # noqa: PTH118 - a str for the env
        made.append(NotifySocket(address))
        return made[-1]

    yield factory
    for sock in made:
        sock.close()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------- a throwaway distribution

_BROKEN_MODULE = 'raise ImportError("libfoo.so.1: cannot open shared object file")\n'


@pytest.fixture
def plugin_site(tmp_path: Path) -> Path:
    """A directory to put on ``PYTHONPATH``: a throwaway distribution ``mw-test-sensors``
    whose entry points (group ``memwarden.sensors``) name the classes of
    ``mw_test_sensors.py``, plus ``broken``, whose module raises ImportError."""
    site = tmp_path / "site"
    dist = site / "mw_test_sensors-0.3.dist-info"
    dist.mkdir(parents=True)
    shutil.copy(HERE / "mw_test_sensors.py", site / "mw_test_sensors.py")
    (site / "mw_test_broken.py").write_text(_BROKEN_MODULE)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mw-test-sensors\nVersion: 0.3\n")
    lines = [
        f"{kind} = mw_test_sensors:{cls.__name__}" for kind, cls in mw_test_sensors.ALL.items()
    ]
    (dist / "entry_points.txt").write_text(
        "[memwarden.sensors]\n" + "\n".join(lines) + "\nbroken = mw_test_broken:Sensor\n"
    )
    return site


def subprocess_env(site: Path, **extra: str) -> dict[str, str]:
    """The environment for ``memwarden run`` in a subprocess: the throwaway plugins first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMWARDEN_", "NOTIFY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


@pytest.fixture
def make_env(plugin_site: Path) -> Callable[..., dict[str, str]]:
    """``make_env(**extra)``: a subprocess environment that finds the throwaway plugins."""
    return lambda **extra: subprocess_env(plugin_site, **extra)


@pytest.fixture
async def memwarden_process() -> AsyncIterator[
    Callable[..., Awaitable[asyncio.subprocess.Process]]
]:
    """``await memwarden_process(*args, env=...)``: ``memwarden <args>`` as a real process,
    killed at teardown if a test left it running."""
    procs: list[asyncio.subprocess.Process] = []

    async def factory(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            str(MEMWARDEN),
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        procs.append(proc)
        return proc

    yield factory
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await proc.communicate()


def write_config(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def config_file(tmp_path: Path) -> Callable[[str], Path]:
    """``config_file(toml)``: write a TOML config in ``tmp_path`` (rewrite it to reload)."""
    return lambda body: write_config(tmp_path / "memwarden.toml", body)


# ---------------------------------------------------------------------- logging


@pytest.fixture
def isolated_logging() -> Iterator[None]:
    """Restore structlog's configuration and the root logger after a test that configures
    them (``memwarden`` commands call ``configure_logging``)."""
    saved = structlog.get_config()
    processors = list(saved["processors"])
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    saved["processors"][:] = processors  # the same list object: loggers bound earlier use it
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)
