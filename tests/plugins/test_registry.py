"""The registry: plugins found through entry points, validated at load, failures isolated."""

from __future__ import annotations

import textwrap
from importlib.metadata import EntryPoint

import pytest
import structlog

from memwarden.errors import PluginLoadError
from memwarden.plugins import ENTRY_POINT_GROUP, Registry
from memwarden.plugins import _registry as registry_module

GOOD = """
from memwarden.plugins import BaseBinding, BaseSensorConfig

class Sensor:
    api_version = 2
    Config = BaseSensorConfig
    Binding = BaseBinding
    def __init__(self, config): ...
    async def setup(self, ctx): ...
    async def run(self, ctx): ...
    async def revalidate(self, request, ctx): ...
    async def teardown(self): ...

class Other(Sensor):
    pass
"""

BAD = """
class Sensor:
    Config = dict
    def setup(self, ctx): ...
    async def run(self, ctx): ...
"""


@pytest.fixture
def plugin_modules(tmp_path, monkeypatch):
    """Importable modules: mw_reg_good, mw_reg_bad (breaks the contract), mw_reg_boom
    (raises while importing). Returns a helper that installs entry points for them."""
    (tmp_path / "mw_reg_good.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "mw_reg_bad.py").write_text(textwrap.dedent(BAD))
    (tmp_path / "mw_reg_boom.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def install(**points: str) -> None:
        eps = [EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in points.items()]
        monkeypatch.setattr(registry_module, "entry_points", lambda group: eps)

    return install


def test_group_name():
    """Plugins are published in the entry-point group memwarden.sensors."""
    assert ENTRY_POINT_GROUP == "memwarden.sensors"


def test_loads_good_plugins_and_reports_the_rest(plugin_modules):
    """A plugin that raises on import or breaks the contract is reported; the others load."""
    plugin_modules(good="mw_reg_good:Sensor", bad="mw_reg_bad:Sensor", boom="mw_reg_boom:Sensor")
    with structlog.testing.capture_logs() as logs:
        registry = Registry.from_entry_points()
    assert set(registry.plugins) == {"good"}
    assert registry.plugins["good"].entry_point == "mw_reg_good:Sensor"
    assert str(registry.failures["boom"]) == (
        "sensor plugin 'boom' (mw_reg_boom:Sensor) failed to import: "
        "ZeroDivisionError: division by zero"
    )
    bad = str(registry.failures["bad"])
    assert bad.startswith("sensor plugin 'bad' (mw_reg_bad.Sensor) breaks the contract: ")
    for problem in (
        "Config must be a pydantic model class",
        "Binding must be a pydantic model class",
        "setup() must be an async method",
        "revalidate() must be an async method",
        "teardown() must be an async method",
    ):
        assert problem in bad
    assert "run()" not in bad
    assert sorted(e["plugin"] for e in logs if e["event"] == "plugin_load_failed") == [
        "bad",
        "boom",
    ]
    assert registry.failed_origins["boom"].entry_point == "mw_reg_boom:Sensor"


def test_allowlist_loads_only_what_it_names(plugin_modules):
    """With an allowlist (MEMWARDEN_PLUGINS) the others are not even imported."""
    plugin_modules(good="mw_reg_good:Sensor", boom="mw_reg_boom:Sensor")
    registry = Registry.from_entry_points(allow=["good", " "])
    assert set(registry.plugins) == {"good"}
    assert registry.failures == {}


def test_get_names_what_is_known(plugin_modules):
    """Asking for an unknown kind lists the known ones; a failed one raises its failure."""
    plugin_modules(good="mw_reg_good:Sensor", boom="mw_reg_boom:Sensor")
    registry = Registry.from_entry_points()
    assert registry.get("good").cls.__name__ == "Sensor"
    with pytest.raises(PluginLoadError, match=r"no sensor plugin named 'fs' \(known: good\)"):
        registry.get("fs")
    with pytest.raises(PluginLoadError, match="failed to import") as err:
        registry.get("boom")
    assert err.value.plugin == "boom"


def test_conflicting_names_keep_the_first(plugin_modules, monkeypatch):
    """Two distributions providing one kind: the first found is kept and the clash logged."""
    eps = [
        EntryPoint("dup", "mw_reg_good:Sensor", ENTRY_POINT_GROUP),
        EntryPoint("dup", "mw_reg_good:Other", ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: eps)
    with structlog.testing.capture_logs() as logs:
        registry = Registry.from_entry_points()
    assert registry.plugins["dup"].entry_point == "mw_reg_good:Sensor"
    [clash] = [e for e in logs if e["event"] == "plugin_conflict"]
    assert clash["ignored"].endswith("(mw_reg_good:Other)")


def test_from_classes_validates_like_entry_points():
    """Classes registered directly (tests) are held to the same contract."""

    class NotASensor:
        pass

    registry = Registry.from_classes({"x": NotASensor, "y": 42})  # type: ignore[dict-item]
    assert registry.plugins == {}
    assert "breaks the contract" in str(registry.failures["x"])
    assert str(registry.failures["y"]) == "sensor plugin 'y' is not a class: 42"


def test_installed_distribution_is_named():
    """A plugin from an installed distribution carries its name and version (the example)."""
    registry = Registry.from_entry_points(allow=["envvar"])
    info = registry.plugins["envvar"]
    assert info.distribution == "memwarden-sensor-example"
    assert info.version
