"""Plugin API versions: version-1 plugins run through the shim with a DeprecationWarning
saying what to change; version 2 is strict and checked at load."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs
from tests.plugins import legacy_envvar_v1

from memwarden.errors import PluginLoadError, ValidationInputError
from memwarden.memory import Binding
from memwarden.plugins import (
    PLUGIN_API,
    BaseBinding,
    BaseSensorConfig,
    Outcome,
    Registry,
)
from memwarden.plugins.testing import FakeClock, SensorHarness

ALLOW = {"allow": ["APP_*"], "interval_s": 0.01}


async def test_the_v1_example_runs_through_the_shim_with_a_deprecation_warning(
    tmp_path, monkeypatch
):
    """Today's (API 1) example sensor, unchanged, still confirms, refutes and answers
    revalidate(request) under the API 2 runner, warning once with what to change."""
    monkeypatch.setenv("APP_MODE", "production")
    with (
        capture_logs() as logs,
        pytest.warns(DeprecationWarning, match=r"plugin API 1.*revalidate\(self, request, ctx\)"),
    ):
        h = SensorHarness(
            legacy_envvar_v1.EnvVarSensor,
            config=ALLOW,
            bindings=[{"var": "APP_MODE", "equals": "production"}],
            clock=FakeClock(),
            tmp_path=tmp_path,
        )
    assert [e["plugin"] for e in logs if e["event"] == "plugin_api_deprecated"] == ["envvar"]
    async with h:
        await h.wait_ready()
        [event] = await h.wait_for_events(1)
        assert event.outcome == Outcome.CONFIRMED
        monkeypatch.setenv("APP_MODE", "staging")
        [answer] = await h.revalidate("APP_MODE")
        assert answer.outcome == Outcome.REFUTED
        assert answer.request_id is not None
    # What the shim hands the daemon is an API 2 class; the plugin's own class is intact.
    assert h.sensor_cls.api_version == PLUGIN_API
    assert issubclass(h.sensor_cls, legacy_envvar_v1.EnvVarSensor)
    assert not hasattr(legacy_envvar_v1.EnvVarSensor, "api_version")


class FlagBinding(BaseBinding):
    flag: bool


class _Flags:
    Config = BaseSensorConfig
    Binding = FlagBinding

    def __init__(self, config: BaseSensorConfig) -> None:
        self.config = config

    async def setup(self, ctx: Any) -> None:
        self.ctx = ctx

    async def run(self, ctx: Any) -> None:
        ctx.ready()

    async def teardown(self) -> None:
        pass


class V1Flags(_Flags):
    async def revalidate(self, request: Any) -> Any:
        selector = self.ctx.parse_binding(request.binding)
        return self.ctx.event(request.subject, Outcome.CONFIRMED, observed=selector.flag)


class V2Flags(_Flags):
    api_version: ClassVar[int] = 2

    async def revalidate(self, request: Any, ctx: Any) -> Any:
        selector = ctx.parse_binding(request.binding)
        return ctx.event(request.subject, Outcome.CONFIRMED, observed=selector.flag)


async def test_the_shim_keeps_v1_bindings_loose_while_v2_bindings_are_strict(tmp_path):
    """ "flag": "yes" still means true for a version-1 plugin (for one release); a
    version-2 plugin's binding refuses it, naming the field."""
    with pytest.warns(DeprecationWarning, match="plugin API 1"):
        v1 = SensorHarness(V1Flags, name="flags", bindings=[{"flag": "yes", "subject": "s"}])
    async with v1:
        [answer] = await v1.revalidate("s")
        assert answer.observed is True

    async with SensorHarness(V2Flags, name="flags", tmp_path=tmp_path) as v2:
        with pytest.raises(ValidationInputError) as err:
            await v2.set_bindings([{"flag": "yes", "subject": "s"}])
        assert err.value.errors[0][0] == "bindings.0.flag"
        [bound] = await v2.set_bindings([{"flag": True, "subject": "s"}])
        assert bound.selector.flag is True


def test_a_v1_class_registered_by_the_registry_warns_and_is_adapted():
    """The registry (what the daemon loads plugins with) applies the same shim."""
    with pytest.warns(DeprecationWarning, match="'flags'"):
        registry = Registry.from_classes({"flags": V1Flags})
    info = registry.get("flags")
    assert info.cls.api_version == PLUGIN_API
    assert info.cls.Binding.model_validate({"flag": "yes"}).flag is True


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"kind": "other"}, "kind = 'other' disagrees with its entry-point name 'flags'"),
        ({"api_version": 3}, "written for plugin API 3, this memwarden implements 2"),
        ({"api_version": "2"}, "api_version must be a plugin API version"),
    ],
)
def test_a_v2_class_that_breaks_the_contract_is_refused_at_load(changes, expected):
    """A kind that disagrees with the entry-point name, a newer or a nonsense API version:
    a PluginLoadError saying so, and the other plugins still load."""
    bad = type("Bad", (V2Flags,), changes)
    registry = Registry.from_classes({"flags": bad, "good": V2Flags})
    assert expected in str(registry.failures["flags"])
    with pytest.raises(PluginLoadError, match=r"disagrees|API 3|api_version"):
        registry.get("flags")
    assert registry.get("good").cls is V2Flags


def test_a_v2_class_whose_revalidate_takes_no_ctx_is_refused():
    """Declaring API 2 with an API 1 revalidate(request) is named at load, not at the
    first check."""

    class Half(V1Flags):
        api_version: ClassVar[int] = 2

    registry = Registry.from_classes({"flags": Half})
    assert "revalidate() must take (request, ctx)" in str(registry.failures["flags"])


def test_strictness_is_json_strict_not_python_strict():
    """A strict binding still reads a selector as the JSON it is: a string becomes an enum
    member or a duration, an int a float; only coercions such as "yes" -> True are gone."""
    from datetime import timedelta  # noqa: PLC0415 - local to this one test
    from enum import StrEnum  # noqa: PLC0415

    from memwarden.memory import Duration  # noqa: PLC0415
    from memwarden.plugins import SensorContext  # noqa: PLC0415

    class Mode(StrEnum):
        FAST = "fast"

    class Sel(BaseBinding):
        mode: Mode
        every: Duration
        limit: float

    ctx = SensorContext(
        name="s",
        binding_model=Sel,
        clock=FakeClock(),
        log=None,  # type: ignore[arg-type]
        state_dir=None,  # type: ignore[arg-type]
        emit=None,  # type: ignore[arg-type]
    )
    sel = ctx.parse_binding(Binding(sensor="s", subject="x", mode="fast", every="5m", limit=3))
    assert (sel.mode, sel.every, sel.limit) == (Mode.FAST, timedelta(minutes=5), 3.0)
    with pytest.raises(ValidationInputError, match="limit"):
        ctx.parse_binding(Binding(sensor="s", subject="x", mode="fast", every="5m", limit="3"))
