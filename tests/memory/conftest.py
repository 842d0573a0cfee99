"""Factory fixtures for the memory package: a fake clock and stores on real SQLite files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from memwarden.memory import FakeClock, Store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when a test advances it (starts 2026-01-01T00:00Z)."""
    return FakeClock()


@pytest.fixture
async def make_store(
    tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Callable[..., Awaitable[Store]]]:
    """``await make_store(path=None, **kwargs)``: an open Store on a real file, closed at teardown.

    Every store shares the test's ``clock`` unless ``clock=`` is given.
    """
    opened: list[Store] = []

    async def factory(path: str | Path | None = None, **kwargs: Any) -> Store:
        kwargs.setdefault("clock", clock)
        target = path if path is not None else tmp_path / f"memory-{len(opened)}.db"
        store = Store(target, **kwargs)
        await store.open()
        opened.append(store)
        return store

    yield factory
    for store in reversed(opened):
        await store.close()


@pytest.fixture
async def store(make_store: Callable[..., Awaitable[Store]]) -> Store:
    """One open store on a fresh SQLite file in ``tmp_path``."""
    return await make_store()
