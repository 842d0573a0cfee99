"""A daemon on a fake clock with a probe sensor whose world, speed and failures tests set."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from memwarden.daemon import Daemon, load_settings
from memwarden.memory import FakeClock
from memwarden.plugins import BaseBinding, BaseSensorConfig, Outcome, Registry
from tests.support import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from memwarden.plugins import RevalidationRequest, SensorContext

__all__ = ["Probe", "eventually"]


class ProbeConfig(BaseSensorConfig):
    pass


class ProbeBinding(BaseBinding):
    path: str
    equals: Any = None

    def subject_of(self) -> str:
        return self.path


class Probe:
    """Answers checks from ``world``; ``slow`` subjects take ``delay_s``; ``down`` ones
    fail (an unreachable source); ``checks`` counts the checks per subject."""

    api_version = 2
    kind = "probe"
    Config = ProbeConfig
    Binding = ProbeBinding
    world: ClassVar[dict[str, Any]] = {}
    slow: ClassVar[set[str]] = set()
    down: ClassVar[set[str]] = set()
    checks: ClassVar[Counter[str]] = Counter()
    delay_s: ClassVar[float] = 0.2
    gate: ClassVar[asyncio.Event | None] = None  # when set, checks wait for it

    def __init__(self, config: ProbeConfig) -> None:
        self.config = config
        self.ctx: SensorContext | None = None

    @classmethod
    def reset(cls) -> None:
        cls.world.clear()
        cls.slow.clear()
        cls.down.clear()
        cls.checks.clear()
        cls.gate = None

    async def setup(self, ctx: SensorContext) -> None:
        self.ctx = ctx

    async def run(self, ctx: SensorContext) -> None:
        ctx.ready()
        await asyncio.Event().wait()

    async def revalidate(self, request: RevalidationRequest, ctx: Any) -> Any:
        assert self.ctx is not None
        subject = request.subject
        self.checks[subject] += 1
        if self.gate is not None:
            await self.gate.wait()
        if subject in self.slow:
            await asyncio.sleep(self.delay_s)  # a slow check is what is being measured
        if subject in self.down:
            return self.ctx.event(subject, Outcome.ERROR, message="connection refused")
        value = self.world.get(subject)
        expected = request.binding.selector.get("equals")
        outcome = Outcome.CONFIRMED if value == expected else Outcome.REFUTED
        return self.ctx.event(subject, outcome, observed=value)

    async def teardown(self) -> None:
        self.ctx = None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make_daemon(
    tmp_path, clock: FakeClock
) -> AsyncIterator[Callable[..., Awaitable[Daemon]]]:
    """``await make_daemon(**settings)``: a running daemon with the ``probe`` sensor."""
    Probe.reset()
    started: list[tuple[Daemon, asyncio.Task[None]]] = []

    async def factory(**overrides: Any) -> Daemon:
        settings = load_settings(
            None,
            env={},
            home=tmp_path / f"home{len(started)}",
            api={"enabled": False},
            sensors={"probe": {}},
            read_through={"quick": "50ms", **overrides.pop("read_through", {})},
            **overrides,
        )
        d = Daemon(settings, registry=Registry.from_classes({"probe": Probe}), clock=clock)
        task = asyncio.create_task(d.run(), name="test.daemon")
        ready = asyncio.create_task(d.ready())
        done, _ = await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
        assert ready in done, "daemon did not become ready"
        started.append((d, task))
        return d

    yield factory
    for d, task in started:
        d.request_stop()
        await asyncio.wait_for(task, timeout=20)


async def bound(daemon: Daemon, text: str, subject: str, value: Any, **kw: Any) -> str:
    """A fact bound to the probe, checked once (fresh)."""
    Probe.world[subject] = value
    block = await daemon.add_block(
        {"content": text, "bindings": [{"sensor": "probe", "path": subject, "equals": value}], **kw}
    )
    await daemon.revalidate(block.id, wait_s=5)
    assert (await daemon.store.get(block.id)).state == "fresh"
    return block.id
