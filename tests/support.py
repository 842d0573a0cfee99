"""Shared test support: a daemon in this process with a sensor whose world the test controls.

Import the fixtures into a folder's conftest.py: ``from tests.support import daemon``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from memwarden.daemon import Daemon, load_settings
from memwarden.plugins import BaseBinding, BaseSensorConfig, Outcome, Registry

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from memwarden.plugins import RevalidationRequest, SensorContext


class WorldConfig(BaseSensorConfig):
    pass


class WorldBinding(BaseBinding):
    path: str
    equals: Any = None


class WorldSensor:
    """Answers revalidations from a dict the test edits: the 'world'."""

    api_version = 2
    kind = "world"
    quick_check = True  # answers at once: read-through may wait for it
    Config = WorldConfig
    Binding = WorldBinding
    world: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self.ctx: SensorContext | None = None

    async def setup(self, ctx: SensorContext) -> None:
        self.ctx = ctx

    async def run(self, ctx: SensorContext) -> None:
        ctx.ready()
        await asyncio.Event().wait()

    async def revalidate(self, request: RevalidationRequest, ctx: Any) -> Any:
        assert self.ctx is not None
        value = self.world.get(request.subject)
        expected = request.binding.selector.get("equals")
        outcome = Outcome.CONFIRMED if value == expected else Outcome.REFUTED
        return self.ctx.event(request.subject, outcome, observed=value)

    async def teardown(self) -> None:
        self.ctx = None


@pytest.fixture
async def daemon(tmp_path) -> AsyncIterator[Daemon]:
    WorldSensor.world.clear()
    settings = load_settings(
        None, env={}, home=tmp_path / "home", api={"port": 0}, sensors={"world": {}}
    )
    d = Daemon(settings, registry=Registry.from_classes({"world": WorldSensor}))
    task = asyncio.create_task(d.run(), name="test.daemon")
    ready = asyncio.create_task(d.ready())
    done, _ = await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # startup failed: raise it here
    assert ready in done, "daemon did not become ready"
    yield d
    d.request_stop()
    await asyncio.wait_for(task, timeout=20)


async def eventually(predicate: Any, *, timeout_s: float = 5.0, interval_s: float = 0.002) -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy, or fail.

    Deadline-bounded polling for state that has no event to wait on; never a bare sleep.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            pytest.fail(f"condition not met within {timeout_s}s: {predicate}")
        await asyncio.sleep(interval_s)  # one poll step, bounded by the deadline above
