"""Fixtures for the review page: the in-process daemon."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from memwarden.daemon import Daemon, load_settings
from memwarden.plugins import Registry
from tests.support import WorldSensor, daemon, start_in_loop
from tests.web.console_support import ShiftedClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["daemon", "shifted_daemon"]


@pytest.fixture
async def shifted_daemon(tmp_path) -> AsyncIterator[Daemon]:
    """The in-process daemon on a :class:`ShiftedClock` (a test may move it into the
    past to fill a history, then back)."""
    WorldSensor.world.clear()
    settings = load_settings(
        None, env={}, home=tmp_path / "home", api={"port": 0}, sensors={"world": {}}
    )
    d = Daemon(
        settings, registry=Registry.from_classes({"world": WorldSensor}), clock=ShiftedClock()
    )
    task = await start_in_loop(d)
    yield d
    d.request_stop()
    await asyncio.wait_for(task, timeout=20)
