"""The contract a sensor author programs against: SensorContext and the public surface."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from pydantic import ValidationError

import memwarden.plugins
import memwarden.plugins.testing
from memwarden.errors import ValidationInputError
from memwarden.memory import Binding, Outcome
from memwarden.plugins import BaseBinding, BaseSensorConfig, BoundSubject, Sensor


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's __all__ order (RUF022): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_public_surface_is_sorted_and_importable():
    """memwarden.plugins and memwarden.plugins.testing export a sorted, importable __all__."""
    for module in (memwarden.plugins, memwarden.plugins.testing):
        assert module.__all__ == sorted(module.__all__, key=_isort_key)
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_event_is_built_from_the_context(make_ctx, clock):
    """ctx.event fills in the sensor's name and the observation time from the injected clock."""
    ctx = make_ctx("fs")
    event = ctx.event(
        "a.yaml", "refuted", observed=31, message="x" * 5000, validity_window=timedelta(hours=1)
    )
    assert (event.sensor, event.subject, event.outcome) == ("fs", "a.yaml", Outcome.REFUTED)
    assert event.observed_at.timestamp() == clock.time()
    assert len(event.message) == 4096  # truncated, never rejected for length
    with pytest.raises(ValidationError):
        ctx.event("a.yaml", "probably")


async def test_emit_hands_the_event_to_the_daemon(make_ctx):
    """ctx.emit passes the event on and returns once it was taken."""
    ctx = make_ctx()
    event = ctx.event("s", Outcome.CONFIRMED)
    await ctx.emit(event)
    assert ctx.emitted == [event]


async def test_bindings_wake_the_sensor(make_ctx):
    """set_bindings wakes wait_bindings_changed with the new list; touch_bindings re-arms it."""
    ctx = make_ctx()
    waiter = asyncio.get_running_loop().create_task(ctx.wait_bindings_changed())
    await asyncio.sleep(0)
    assert not waiter.done()
    bound = [
        BoundSubject(
            "b1", Binding(sensor="s", path="a"), ctx.parse_binding(Binding(sensor="s", path="a"))
        )
    ]
    ctx.set_bindings(bound)
    assert [b.subject for b in await waiter] == ["a"]
    assert ctx.bindings == bound
    assert ctx.bindings is not ctx.bindings  # a copy: the sensor cannot change ours
    ctx.touch_bindings()
    assert await ctx.wait_bindings_changed() == bound


def test_parse_binding_names_the_field(make_ctx):
    """A selector the sensor's Binding model refuses is a ValidationInputError with the field."""
    ctx = make_ctx()
    with pytest.raises(ValidationInputError) as err:
        ctx.parse_binding(Binding(sensor="s", url="http://x"))
    assert [f for f, _ in err.value.errors] == ["path", "url"]


async def test_readiness(make_ctx):
    """ctx.ready() is what wait_ready() and is_ready observe."""
    ctx = make_ctx()
    assert not ctx.is_ready
    ctx.ready()
    await ctx.wait_ready()
    assert ctx.is_ready


def test_models_forbid_unknown_keys():
    """A sensor's Config and Binding models refuse keys they do not declare, and are frozen."""

    class Config(BaseSensorConfig):
        interval_s: float = 1.0

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Config.model_validate({"intervall_s": 2})
    with pytest.raises(ValidationError):
        Config().interval_s = 3  # type: ignore[misc]
    assert BaseBinding().subject_of() is None


def test_sensor_protocol_is_checkable():
    """An object with the four async methods is a Sensor at runtime."""

    class S:
        api_version = 2
        kind = "s"
        Config = BaseSensorConfig
        Binding = BaseBinding

        async def setup(self, ctx): ...
        async def run(self, ctx): ...
        async def revalidate(self, request, ctx): ...
        async def teardown(self): ...

    assert isinstance(S(), Sensor)
    assert not isinstance(object(), Sensor)
