"""Fixtures for the MCP tests."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.daemon import Daemon, load_settings
from memwarden.demo import build_workspace
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor
from tests.support import daemon, eventually, start_in_loop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

__all__ = ["daemon", "demo_daemon", "start_demo_daemon"]


@contextlib.asynccontextmanager
async def start_demo_daemon(root: Path, **settings: Any) -> AsyncIterator[Daemon]:
    """A daemon whose fs sensor watches the demo's workspace (built under ``root``) with its
    value index on and built; ``settings`` are more settings sections (``suggest=...``)."""
    workspace = root / "ws"
    build_workspace(workspace)
    config = load_settings(
        None,
        env={},
        home=root / "home",
        api={"port": 0},
        sensors={"fs": {"roots": [str(workspace)], "debounce_ms": 10, "index": True}},
        **settings,
    )
    d = Daemon(config, registry=Registry.from_classes({"fs": FsSensor}))
    task = await start_in_loop(d, timeout_s=30)
    try:
        sensor = d.runners["fs"].sensor
        assert isinstance(sensor, FsSensor)
        await eventually(
            lambda: sensor.index is not None and sensor.index.builds > 0,
            timeout_s=20,
            what="the fs value index built",
        )
        yield d
    finally:
        d.request_stop()
        await asyncio.wait_for(task, timeout=30)


@pytest.fixture
async def demo_daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    async with start_demo_daemon(tmp_path) as d:
        yield d
