"""Factory fixtures for the built-in sensors: harnesses over real files and real projects.

Nothing here sleeps to wait: events are awaited through the harness, and what has no
event is polled with a deadline (``tests.support.eventually``).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.plugins.testing import SensorHarness
from memwarden.sensors import CodeTestSensor, FsSensor

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from memwarden.memory import ValidationEvent


class Watch:
    """The events a harness emits from now on: ``await w.next(2)``."""

    def __init__(self, harness: SensorHarness) -> None:
        self.h = harness
        self.mark = len(harness.emitted)

    async def next(self, n: int = 1, *, timeout_s: float = 10.0) -> list[ValidationEvent]:
        events = await self.h.wait_for_events(self.mark + n, timeout_s=timeout_s)
        out = events[self.mark : self.mark + n]
        self.mark += n
        return out

    def since(self) -> list[ValidationEvent]:
        return self.h.emitted[self.mark :]


def outcomes(events: Sequence[ValidationEvent]) -> list[str]:
    return [str(e.outcome) for e in events]


@pytest.fixture
def fs_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


@pytest.fixture
def fs_harness(tmp_path: Path, fs_root: Path) -> Callable[..., SensorHarness]:
    """``fs_harness(bindings, **config)``: an fs sensor over ``fs_root`` (state in tmp_path)."""

    def make(bindings: Sequence[Mapping[str, Any]] = (), **config: Any) -> SensorHarness:
        options = {"roots": [str(fs_root)], "debounce_ms": 10, **config}
        return SensorHarness(
            FsSensor, config=options, bindings=bindings, name="fs", tmp_path=tmp_path
        )

    return make


PASSING_API = """
    import pytest

    def test_timeout():
        assert 30 == 30

    def test_other():
        pass

    class TestLimits:
        def test_rate(self):
            pass

    @pytest.mark.skip(reason="not today")
    def test_skipped():
        pass
"""


@pytest.fixture
def small_project(tmp_path: Path) -> Path:
    """A small real pytest project: tests/test_api.py with passing tests."""
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_api.py").write_text(textwrap.dedent(PASSING_API))
    return root


@pytest.fixture
def code_harness(tmp_path: Path) -> Callable[..., SensorHarness]:
    """``code_harness(project, bindings, **config)``: a code_test sensor named ``tests``."""

    def make(
        project: Path, bindings: Sequence[Mapping[str, Any]] = (), **config: Any
    ) -> SensorHarness:
        options = {"project_root": str(project), "batch_window_ms": 20, **config}
        startup = options.pop("startup", "error")
        return SensorHarness(
            CodeTestSensor,
            config=options,
            bindings=bindings,
            name="tests",
            tmp_path=tmp_path / "harness",
            startup=startup,
            revalidate_timeout_s=30.0,
        )

    (tmp_path / "harness").mkdir(exist_ok=True)
    return make
