"""The example package (examples/memwarden-sensor-example), installed like any third-party
plugin: discovered through its entry point, listed, configured and run by the daemon."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version

import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.errors import ValidationInputError
from memwarden.plugins import Registry


@pytest.fixture(scope="module")
def example_version() -> str:
    try:
        return version("memwarden-sensor-example")
    except PackageNotFoundError:
        pytest.fail(
            "memwarden-sensor-example is not installed: "
            "pip install -e examples/memwarden-sensor-example (make venv does it)"
        )


def test_sensors_lists_it_with_its_distribution(isolated_logging, example_version):
    """`memwarden sensors --json` lists envvar with its distribution and version."""
    result = CliRunner().invoke(app, ["sensors", "--json"], env={"MEMWARDEN_PLUGINS": "envvar"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {
            "kind": "envvar",
            "distribution": "memwarden-sensor-example",
            "version": example_version,
            "entry_point": "memwarden_sensor_example:EnvVarSensor",
            "status": "ok",
            "instances": [],  # no daemon runs here
        }
    ]


async def test_daemon_discovers_configures_and_runs_it(
    example_version, running_daemon, make_settings, monkeypatch, eventually
):
    """Found through the entry-point group, configured from its table, it confirms its block."""
    registry = Registry.from_entry_points(allow=["envvar"])
    assert registry.plugins["envvar"].distribution == "memwarden-sensor-example"
    monkeypatch.setenv("MW_EXAMPLE_MODE", "on")
    settings = make_settings(sensors={"env": {"kind": "envvar", "allow": ["MW_EXAMPLE_*"]}})
    daemon = (await running_daemon(settings, registry=registry)).daemon
    assert daemon.runners["env"].kind == "envvar"
    block = await daemon.add_block(
        {
            "content": "example mode is on",
            "bindings": [{"sensor": "env", "var": "MW_EXAMPLE_MODE", "equals": "on"}],
        }
    )
    assert block.bindings[0].subject == "MW_EXAMPLE_MODE"  # from its subject_of()

    async def fresh():
        b = await daemon.store.get(block.id)
        return b.state == "fresh" and b.validation.validated_by == "env"

    await eventually(fresh)
    with pytest.raises(ValidationInputError, match="'HOME' is not allowed") as err:
        await daemon.add_block({"content": "x", "bindings": [{"sensor": "env", "var": "HOME"}]})
    assert err.value.field == "bindings.0"
