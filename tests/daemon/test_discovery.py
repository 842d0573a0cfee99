"""Real entry-point discovery: a distribution on PYTHONPATH, one of its plugins broken."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


async def test_sensors_lists_a_broken_plugin_beside_the_good(make_env, memwarden_process):
    """A plugin whose module raises ImportError is listed by name; the others load."""
    env = make_env(MEMWARDEN_PLUGINS="echo,broken")
    proc = await memwarden_process("sensors", "--json", env=env)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    rows = {r["kind"]: r for r in json.loads(out)}  # stdout is JSON only: logs go to stderr
    assert set(rows) == {"echo", "broken"}
    assert rows["echo"] == {
        "kind": "echo",
        "distribution": "mw-test-sensors",
        "version": "0.3",
        "entry_point": "mw_test_sensors:EchoSensor",
        "status": "ok",
        "instances": [],  # no daemon runs here
    }
    assert rows["broken"]["distribution"] == "mw-test-sensors"
    assert rows["broken"]["status"] == (
        "sensor plugin 'broken' (mw_test_broken:Sensor) failed to import: "
        "ImportError: libfoo.so.1: cannot open shared object file"
    )
