"""Throwaway sensors for the daemon tests: well-behaved, crashing, hanging, flooding ...

Used in-process (registered with ``Registry.from_classes``) and by the subprocess tests,
which copy this file into a throwaway distribution (``plugin_site`` in conftest.py) whose
``entry_points.txt`` names these classes in the group ``memwarden.sensors``.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, ClassVar

from memwarden.plugins import BaseBinding, BaseSensorConfig, Outcome

if TYPE_CHECKING:
    from memwarden.plugins import RevalidationRequest, SensorContext, ValidationEvent


class Config(BaseSensorConfig):
    value: str = "ok"
    fail_setups: int = 0  # setup raises this many times, then succeeds
    count: int = 0  # how many events the sequence sensor emits (0: until stopped)


class Selector(BaseBinding):
    path: str | None = None
    key: str | None = None
    name: str | None = None

    def subject_of(self) -> str | None:
        return f"name:{self.name}" if self.name else None


class _Base:
    api_version: ClassVar[int] = 2
    kind: ClassVar[str] = "base"
    Config: ClassVar[type[Config]] = Config
    Binding: ClassVar[type[Selector]] = Selector

    def __init__(self, config: Config) -> None:
        self.config = config
        self.ctx: SensorContext | None = None
        self.setups = 0
        self.teardowns = 0
        self.runs = 0

    def _mark(self, what: str) -> None:
        if self.ctx is not None:  # the subprocess tests read this file
            with (self.ctx.state_dir / "lifecycle").open("a") as fh:
                fh.write(f"{what} {os.getpid()}\n")

    async def setup(self, ctx: SensorContext) -> None:
        self.ctx = ctx
        self.setups += 1
        self._mark("setup")

    async def run(self, ctx: SensorContext) -> None:
        self.runs += 1
        ctx.ready()
        await asyncio.Event().wait()

    async def revalidate(self, request: RevalidationRequest, ctx: Any) -> ValidationEvent | None:
        assert self.ctx is not None
        return self.ctx.event(request.subject, Outcome.CONFIRMED, observed=self.config.value)

    async def teardown(self) -> None:
        self.teardowns += 1
        self._mark("teardown")


class EchoSensor(_Base):
    """Confirms each bound subject when it learns the binding, and on every check."""

    kind = "echo"

    async def run(self, ctx: SensorContext) -> None:
        self.runs += 1
        ctx.ready()
        while True:
            for bound in await ctx.wait_bindings_changed():
                await ctx.emit(
                    ctx.event(bound.subject, Outcome.CONFIRMED, observed=self.config.value)
                )


class CrashSensor(_Base):
    """``run`` raises at once, every time."""

    kind = "crash"

    async def run(self, ctx: SensorContext) -> None:
        self.runs += 1
        ctx.ready()
        raise RuntimeError(f"boom #{self.runs}")


class HangSensor(_Base):
    """``revalidate`` never returns."""

    kind = "hang"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.checking = asyncio.Event()

    async def revalidate(self, request: RevalidationRequest, ctx: Any) -> ValidationEvent | None:
        self.checking.set()
        await asyncio.Event().wait()
        return None  # pragma: no cover - never reached


class FloodSensor(_Base):
    """Emits as fast as the bus lets it, forever."""

    kind = "flood"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.emitted = 0

    async def run(self, ctx: SensorContext) -> None:
        self.runs += 1
        ctx.ready()
        while True:
            await ctx.emit(ctx.event("flood/unbound", Outcome.CONFIRMED, observed=self.emitted))
            self.emitted += 1


class FlakySetupSensor(EchoSensor):
    """``setup`` fails ``fail_setups`` times, then works."""

    kind = "flaky"

    async def setup(self, ctx: SensorContext) -> None:
        self.setups += 1
        if self.setups <= self.config.fail_setups:
            raise OSError(f"device not ready (attempt {self.setups})")
        self.ctx = ctx


class SilentSensor(_Base):
    """Answers checks through ``ctx.emit`` and returns None."""

    kind = "silent"

    async def revalidate(self, request: RevalidationRequest, ctx: Any) -> ValidationEvent | None:
        assert self.ctx is not None
        await self.ctx.emit(
            self.ctx.event(request.subject, Outcome.CONFIRMED, request_id=request.id)
        )
        return None


class SequenceSensor(_Base):
    """Emits events numbered 0, 1, 2 ... as fast as it can; after each ``emit`` returns,
    writes how many were handed over to ``<state_dir>/emitted``."""

    kind = "sequence"

    async def run(self, ctx: SensorContext) -> None:
        self.runs += 1
        ctx.ready()
        done = ctx.state_dir / "emitted"
        tmp = ctx.state_dir / "emitted.tmp"
        i = 0
        while not self.config.count or i < self.config.count:
            await ctx.emit(ctx.event("seq", Outcome.CONFIRMED, observed=i, message=f"#{i}"))
            i += 1
            tmp.write_text(str(i))
            tmp.replace(done)
        await asyncio.Event().wait()


ALL = {
    cls.kind: cls
    for cls in (
        EchoSensor,
        CrashSensor,
        HangSensor,
        FloodSensor,
        FlakySetupSensor,
        SilentSensor,
        SequenceSensor,
    )
}
