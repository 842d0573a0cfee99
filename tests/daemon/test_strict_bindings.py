"""Plugin API 2 bindings are strict: stored bindings the stricter models refuse are
quarantined at start, never a failed start (issue 16 item 3)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from memwarden.daemon import Daemon, load_settings
from memwarden.errors import ValidationInputError
from memwarden.memory import Binding, FakeClock, Store
from memwarden.plugins import BaseBinding, BaseSensorConfig, Registry


class FlagBinding(BaseBinding):
    path: str
    clean: bool


class FlagSensor:
    api_version: ClassVar[int] = 2
    Config = BaseSensorConfig
    Binding = FlagBinding

    def __init__(self, config: BaseSensorConfig) -> None:
        self.config = config

    async def setup(self, ctx: Any) -> None:
        pass

    async def run(self, ctx: Any) -> None:
        ctx.ready()
        await asyncio.Event().wait()

    async def revalidate(self, request: Any, ctx: Any) -> None:
        return None

    async def teardown(self) -> None:
        pass


async def test_a_lax_stored_binding_is_quarantined_at_start_not_a_failed_start(tmp_path):
    """A binding stored when "clean": "yes" passed for a bool is quarantined at start,
    naming the field; the daemon still starts and its sensor gets only the good one."""
    settings = load_settings(
        None, env={}, home=tmp_path / "home", api={"port": 0}, sensors={"flags": {}}
    )
    settings.home.mkdir(mode=0o700)
    async with Store(settings.db_path, clock=FakeClock()) as store:
        lax = await store.add(
            {"content": "lax", "bindings": [{"sensor": "flags", "path": "a", "clean": "yes"}]}
        )
        good = await store.add(
            {"content": "good", "bindings": [{"sensor": "flags", "path": "b", "clean": True}]}
        )
    for path in settings.home.iterdir():
        path.chmod(0o600)

    d = Daemon(settings, registry=Registry.from_classes({"flags": FlagSensor}))
    task = asyncio.create_task(d.run(), name="test.daemon")
    ready = asyncio.create_task(d.ready())
    done, _ = await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    try:
        if task in done:
            task.result()  # a failed start: raise it here
        assert ready in done, "daemon did not become ready"
        (listed,) = await d.store.quarantined_bindings()
        assert listed.block_id == lax.id
        assert listed.quarantine is not None
        assert "clean" in listed.quarantine
        assert "boolean" in listed.quarantine
        assert list(d.quarantined.values()) == ["flags"]
        assert [b.block_id for b in d.runners["flags"].ctx.bindings] == [good.id]
        # The same binding offered today is refused, naming the field.
        with pytest.raises(ValidationInputError) as err:
            d.check_bindings([Binding(sensor="flags", path="c", clean="yes")])
        assert err.value.errors[0][0] == "bindings.0.clean"
    finally:
        d.request_stop()
        await asyncio.wait_for(task, timeout=20)
