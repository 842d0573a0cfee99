"""A project with hostile material around it, and a real daemon watching it (code_test).

Every hostile module writes a marker file when it is imported: "nothing ran" is the
marker's absence. Each attack is also shown to work against plain pytest (``control``),
so a test that asserts its absence can fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from memwarden.daemon import Daemon, load_settings
from memwarden.plugins import Registry
from memwarden.sensors import CodeTestSensor
from tests.support import start_in_loop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

OK_ID = "tests/test_ok.py::test_ok"
# The projects here need no third-party pytest plugins; without them pytest starts in a
# second instead of four on a busy machine (the sensor passes only the configured env).
FAST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _writes_marker(marker: Path) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"


@dataclass
class Project:
    """``root`` (the configured project) and ``other`` (a directory outside it)."""

    root: Path
    other: Path
    markers: Path

    def marker(self, name: str) -> Path:
        return self.markers / f"ran-{name}"

    def ran(self) -> list[str]:
        """The hostile modules that ran, by name."""
        return sorted(p.name.removeprefix("ran-") for p in self.markers.iterdir())

    def control(self, *args: str) -> list[str]:
        """Plain pytest, as the sensor used to call it, with ``args``: what ran."""
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        subprocess.run(
            [*pytest, f"--rootdir={self.root}", "--", *args],
            cwd=self.root,
            env={**os.environ, **FAST_ENV},
            check=False,
            capture_output=True,
            timeout=120,
        )
        return self.ran()


def make_project(tmp_path: Path) -> Project:
    root, other, markers = tmp_path / "project", tmp_path / "other", tmp_path / "markers"
    for d in (root / "tests" / "sub", root / "tools", other, markers):
        d.mkdir(parents=True)
    p = Project(root, other, markers)
    (root / "tests" / "test_ok.py").write_text("def test_ok():\n    assert 30 == 30\n")
    # A non-test module in the project: imported only if a selection could name it.
    (root / "tests" / "helpers.py").write_text(_writes_marker(p.marker("helpers")))
    (root / "tools" / "evil.py").write_text(_writes_marker(p.marker("tools")))
    # Outside the project: a module, and an argument file naming it (argparse's @file).
    (other / "evil.py").write_text(_writes_marker(p.marker("outside")))
    (other / "args.txt").write_text(f"{other / 'evil.py'}\n")
    (other / "args.txt::x").write_text(f"{other / 'evil.py'}\n")  # a test id's shape
    (other / "test_outside.py").write_text(
        _writes_marker(p.marker("symlinked")) + "def test_x():\n    pass\n"
    )
    # A sub-directory bringing its own config: addopts loads a plugin from the project.
    sub = root / "tests" / "sub"
    (sub / "pytest.ini").write_text("[pytest]\naddopts = -p tests.sub.evil_plugin\n")
    (sub / "evil_plugin.py").write_text(_writes_marker(p.marker("nested-ini")))
    (sub / "test_sub.py").write_text("def test_sub():\n    pass\n")
    return p


@dataclass
class Live:
    daemon: Daemon
    url: str
    token: str
    home: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def add_block(self, binding: dict[str, Any]) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.url, headers=self.auth, timeout=30) as c:
            return await c.post(
                "/v1/blocks",
                json={
                    "content": "the timeout is 30s",
                    "bindings": [{"sensor": "tests", **binding}],
                },
            )

    async def healthz_ms(self, client: httpx.AsyncClient | None = None) -> float:
        """How long /healthz took to answer (ms), on ``client`` or a new connection."""
        loop = asyncio.get_running_loop()
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                client = await stack.enter_async_context(
                    httpx.AsyncClient(base_url=self.url, timeout=5)
                )
            began = loop.time()
            (await client.get(f"{self.url}/healthz")).raise_for_status()
            return (loop.time() - began) * 1000


@contextlib.asynccontextmanager
async def live_daemon(
    home: Path, project: Path, *, privacy: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[Live]:
    """A daemon in this loop, API on a free loopback port, one code_test sensor ``tests``
    (``options`` are its settings; ``privacy`` the daemon's ``[privacy]``)."""
    settings = load_settings(
        None,
        env={},
        home=home,
        api={"port": 0},
        scheduler={"dispatch_interval": "20ms", "sweep_interval": "50ms"},
        sensors={
            "tests": {
                "kind": "code_test",
                "project_root": str(project),
                "startup": "error",
                "batch_window_ms": 0,
                "env": FAST_ENV,
                **options,
            }
        },
        **({"privacy": privacy} if privacy is not None else {}),
    )
    daemon = Daemon(settings, registry=Registry.from_classes({"code_test": CodeTestSensor}))
    task = await start_in_loop(daemon, name="security-daemon")
    try:
        url = json.loads((home / "api.json").read_text())["url"]
        token = (home / "token").read_text().strip()
        yield Live(daemon, url, token, home)
    finally:
        daemon.request_stop()
        async with asyncio.timeout(30):
            await task


def hostile_test(body: str) -> str:
    return textwrap.dedent(body)
