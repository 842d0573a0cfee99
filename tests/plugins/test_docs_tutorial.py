"""docs/PLUGINS.md runs: every python block on the page, in order, makes one module (a
block preceded by ``<!-- not run: why -->`` is skipped, explicitly), and the tests the
page writes pass against the sensor the page builds."""

from __future__ import annotations

import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "PLUGINS.md"
BLOCK = re.compile(r"(?:<!--\s*not run:(?P<why>[^>]*)-->\n)?```python\n(?P<code>.*?)```", re.DOTALL)
MODULE = "docs_plugins_tutorial"


def blocks() -> list[tuple[str, str | None]]:
    """(code, why-not-run or None) for each python block of the page, in order."""
    text = PAGE.read_text(encoding="utf-8")
    return [(m["code"], m["why"]) for m in BLOCK.finditer(text)]


@pytest.fixture(scope="module")
def page() -> Any:
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module  # pydantic resolves the page's annotations through it
    try:
        for code, why in blocks():
            if why is None:
                exec(compile(code, str(PAGE), "exec"), module.__dict__)  # noqa: S102 - our own docs
        yield module
    finally:
        sys.modules.pop(MODULE, None)


def test_every_python_block_runs_or_says_why_not():
    """Nothing on the page is silently left out: each block runs, or is marked with why."""
    found = blocks()
    assert len(found) >= 8
    skipped = [why.strip() for _, why in found if why is not None]
    assert all(skipped), "a not-run marker must say why"
    assert len(skipped) <= 2  # fragments are the exception, not the rule


def page_tests() -> list[str]:
    names = []
    for code, why in blocks():
        if why is None:
            names += re.findall(r"^async def (test_\w+)\(", code, re.MULTILINE)
    return names


@pytest.mark.parametrize("name", page_tests())
async def test_the_pages_own_tests_pass(page, name, tmp_path, monkeypatch):
    """The page's tests (its Testing section) pass against the sensor the page builds."""
    fn = getattr(page, name)
    fixtures = {"tmp_path": tmp_path, "monkeypatch": monkeypatch}
    await fn(**{p: fixtures[p] for p in inspect.signature(fn).parameters})


def test_the_page_builds_an_api_2_sensor_with_every_capability(page):
    """What the page builds is the current contract: API 2, all capabilities."""
    from memwarden.plugins import PLUGIN_API, Registry  # noqa: PLC0415

    registry = Registry.from_classes({"envvar": page.EnvVarSensor})
    assert registry.failures == {}
    assert page.EnvVarSensor.api_version == PLUGIN_API
    assert len(page_tests()) >= 3
