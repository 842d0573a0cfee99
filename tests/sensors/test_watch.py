"""The watcher's thread-to-loop handoff: debounce, coalescing, lost events."""

from __future__ import annotations

import asyncio

from watchdog.events import FileClosedEvent, FileCreatedEvent

from memwarden.sensors._watch import Watcher


async def test_changes_are_coalesced_into_one_batch(tmp_path):
    """Many events for the same key within the debounce arrive as one batch, one key."""
    async with Watcher(lambda e: [("k", str(e.src_path))], debounce_ms=20) as w:
        for _ in range(50):
            w.on_event(FileClosedEvent(str(tmp_path / "a")))
        w.on_event(FileClosedEvent(str(tmp_path / "b")))
        batch = await w.next_batch(timeout_s=5)
        assert batch.changes == {("k", str(tmp_path / "a")), ("k", str(tmp_path / "b"))}
        assert not batch.overflow
        assert w.events_seen == 51
        assert not await w.next_batch(timeout_s=0.01)  # nothing left: an empty batch


async def test_a_failing_filter_is_reported_as_lost_events(tmp_path):
    """If the filter raises in the observer thread, the consumer is told to rescan."""

    def accept(event):
        raise ValueError("bug")

    async with Watcher(accept, debounce_ms=0) as w:
        w.on_event(FileCreatedEvent(str(tmp_path / "x")))
        batch = await w.next_batch(timeout_s=5)
        assert batch.overflow
        assert w.overflows == 1


async def test_schedule_tells_kept_added_and_missing(tmp_path):
    """Watching a directory twice keeps the watch; a replaced directory is watched anew."""
    d = tmp_path / "d"
    d.mkdir()
    async with Watcher(lambda e: [], debounce_ms=0) as w:
        assert await asyncio.to_thread(w.schedule, str(d)) == "added"
        assert await asyncio.to_thread(w.schedule, str(d)) == "kept"
        d.rename(tmp_path / "old")
        d.mkdir()
        assert await asyncio.to_thread(w.schedule, str(d)) == "added"
        assert await asyncio.to_thread(w.schedule, str(tmp_path / "none")) == "missing"
        assert list(w.watched) == [str(d)]
    assert not w.running
