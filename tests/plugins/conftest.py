"""Factory fixtures for the plugin contract: contexts and runners around throwaway sensors."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from tests.support import eventually as poll_until

from memwarden.memory import FakeClock
from memwarden.plugins import Backoff, BaseBinding, SensorContext, SensorRunner

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

    from memwarden.plugins import ValidationEvent


class PathBinding(BaseBinding):
    path: str


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_ctx(tmp_path: Path, clock: FakeClock) -> Callable[..., SensorContext]:
    """``make_ctx(name="s", binding_model=PathBinding)``: a context whose emits land in
    ``ctx.emitted`` (a list attribute added for the tests)."""

    def factory(name: str = "s", binding_model: type[BaseBinding] = PathBinding) -> SensorContext:
        emitted: list[ValidationEvent] = []

        async def emit(event: ValidationEvent) -> None:
            emitted.append(event)

        state_dir = tmp_path / "sensors" / name
        state_dir.mkdir(parents=True, exist_ok=True)
        ctx = SensorContext(
            name=name,
            binding_model=binding_model,
            clock=clock,
            log=structlog.get_logger("test").bind(sensor=name),
            state_dir=state_dir,
            emit=emit,
        )
        ctx.emitted = emitted  # type: ignore[attr-defined]
        return ctx

    return factory


@pytest.fixture
async def make_runner(
    make_ctx: Callable[..., SensorContext],
) -> AsyncIterator[Callable[..., Awaitable[SensorRunner]]]:
    """``await make_runner(sensor, start=True, **runner_kwargs)``: a SensorRunner whose
    supervise() task runs in the test's loop; stopped and awaited at teardown."""
    tasks: list[tuple[SensorRunner, asyncio.Task[None]]] = []

    async def factory(sensor: Any, *, start: bool = True, **kwargs: Any) -> SensorRunner:
        kwargs.setdefault("backoff", Backoff(base_s=0.001, cap_s=0.01))
        runner = SensorRunner(
            name=kwargs.pop("name", "s"), kind="test", sensor=sensor, ctx=make_ctx(), **kwargs
        )
        if start:
            task = asyncio.get_running_loop().create_task(runner.supervise())
            runner.task = task  # type: ignore[attr-defined]
            tasks.append((runner, task))
        return runner

    yield factory
    for runner, task in tasks:
        runner.stop()
        async with asyncio.timeout(10):
            await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
def eventually() -> Callable[..., Awaitable[Any]]:
    """``await eventually(lambda: cond, timeout_s=5)``: poll with a deadline, no bare sleep."""
    return poll_until
