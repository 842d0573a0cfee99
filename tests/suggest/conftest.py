"""A daemon in this process with the real fs sensor over a small workspace, and its API."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from memwarden.daemon import Daemon, load_settings
from memwarden.plugins import Registry
from memwarden.sensors import CodeTestSensor, FsSensor, HttpSensor, RuntimeSensor
from tests.support import eventually, start_in_loop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

WORKSPACE: dict[str, str] = {
    "config/app.yaml": "http:\n  timeout: 30\n  port: 8080\nlogging:\n  level: debug\n",
    "config/db.yaml": "db:\n  host: db.internal\n  pool_size: 10\n  password: hunter2\n",
    "package.json": json.dumps({"name": "web", "version": "1.2.3"}),
    ".env": "API_TOKEN=s3cr3t-token-value\n",
}


@dataclass
class Api:
    daemon: Daemon
    client: httpx.AsyncClient
    workspace: Path

    async def post(self, path: str, body: dict[str, Any], status: int = 200) -> Any:
        answer = await self.client.post(path, json=body)
        assert answer.status_code == status, answer.text
        return answer.json()


def write_workspace(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@contextlib.asynccontextmanager
async def start_api(
    tmp_path: Path,
    files: dict[str, str],
    *,
    index: bool = True,
    sensors: dict[str, dict[str, Any]] | None = None,
    timeout_s: float = 10.0,
) -> AsyncIterator[Api]:
    """A daemon whose fs sensor's root is a workspace of ``files``, its index built;
    ``sensors``: more sensor tables (code_test, runtime, http by their kind)."""
    workspace = tmp_path / "ws"
    write_workspace(workspace, files)
    home = tmp_path / "home"
    tables = {
        "fs": {"roots": [str(workspace)], "debounce_ms": 10, "index": index},
        **(sensors or {}),
    }
    settings = load_settings(None, env={}, home=home, api={"port": 0}, sensors=tables)
    classes = {"fs": FsSensor, "code_test": CodeTestSensor, "runtime": RuntimeSensor}
    classes["http"] = HttpSensor
    daemon = Daemon(settings, registry=Registry.from_classes(classes))
    task = await start_in_loop(daemon, timeout_s=20)
    try:
        sensor = daemon.runners["fs"].sensor
        assert isinstance(sensor, FsSensor)
        if index:
            built = lambda: sensor.index is not None and sensor.index.builds > 0  # noqa: E731
            await eventually(built, timeout_s=10)
        url = json.loads((home / "api.json").read_text())["url"]
        token = (home / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout_s) as client:
            yield Api(daemon, client, workspace)
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, timeout=20)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with start_api(tmp_path, WORKSPACE) as running:
        yield running
