"""docs/PLUGINS.md's polling example runs as written: its code block, taken from the page,
makes a sensor that the test kit runs, confirms, refutes and answers errors with."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

from memwarden.plugins import Outcome
from memwarden.plugins.testing import FakeClock, SensorHarness

PAGE = Path(__file__).resolve().parents[2] / "docs" / "PLUGINS.md"


def polling_example() -> str:
    """The first python block of the page's polling section."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("A polling sensor in a few lines", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the polling section lost its code block"
    return match.group(1)


def load_example(world: dict[str, Any]) -> Any:
    module = types.ModuleType("docs_polling_example")

    async def read_gauge(name: str) -> Any:  # the page leaves the I/O to the reader
        return world.get(name)

    module.__dict__["read_gauge"] = read_gauge
    exec(compile(polling_example(), str(PAGE), "exec"), module.__dict__)  # noqa: S102 - our own docs
    return module.GaugeSensor


async def test_the_pages_polling_example_runs(tmp_path):
    """The sensor built from the page's snippet confirms, refutes on change, errors when gone."""
    world: dict[str, Any] = {"pressure": 3}
    sensor_cls = load_example(world)
    async with SensorHarness(
        sensor_cls,
        config={"interval": "60s", "jitter": 0},
        bindings=[{"name": "pressure", "equals": 3}],
        clock=FakeClock(),
        tmp_path=tmp_path,
    ) as h:
        [first] = await h.wait_for_events(1)
        assert first.outcome == Outcome.CONFIRMED
        world["pressure"] = 4
        h.advance(60)
        changed = await h.wait_outcome(Outcome.REFUTED, since=0)
        assert changed.observed == 4
        world.pop("pressure")
        h.advance(1)
        [gone] = await h.revalidate("pressure")
        assert gone.outcome == Outcome.ERROR
