"""The writer's route cache: every change made after it is warm is honoured by the very
next event, and a rolled-back job leaves nothing stale behind."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import StorageError
from memwarden.memory import BlockState, ValidationEvent, from_ts

if TYPE_CHECKING:
    import aiosqlite

    from memwarden.memory import FakeClock, Store

APP = "config/app.yaml"
FS_APP = {"sensor": "fs", "path": APP}


def ev(outcome: str = "confirmed", *, at: float, subject: str = APP) -> ValidationEvent:
    return ValidationEvent(sensor="fs", subject=subject, outcome=outcome, observed_at=from_ts(at))


def cached_subjects(store: Store) -> set[str]:
    writer = store.db.writer
    assert writer is not None
    return set(writer.routes.subjects)


async def warm(store: Store, clock: FakeClock) -> None:
    """One event through the cache; it now knows APP's routes."""
    clock.advance(60)
    await store.apply_events([ev(at=clock.time())])
    assert APP in cached_subjects(store)


async def test_cache_serves_repeated_subjects(store, clock):
    """Events on a known subject keep reaching its block, the cache following each write."""
    block = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    await warm(store, clock)
    for outcome in ("refuted", "refuted", "confirmed"):
        clock.advance(60)
        result = await store.apply_events([ev(outcome, at=clock.time())])
        assert result.unmatched == 0
    got = await store.get(block.id)
    assert got.state == BlockState.FRESH
    assert got.validation.validated_at == from_ts(clock.time())
    assert len(await store.events_for(block.id)) == 4


async def test_binding_added_after_warm_is_honoured(store, clock):
    first = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    await warm(store, clock)
    second = await store.add({"content": "retries 3", "bindings": [FS_APP]})
    clock.advance(60)
    result = await store.apply_events([ev(at=clock.time())])
    assert sorted(c.block_id for c in result.changes) == [second.id]  # first was fresh
    assert (await store.get(second.id)).state == BlockState.FRESH
    assert len(await store.events_for(first.id)) == 2


async def test_unbound_subject_then_bound(store, clock):
    """A subject cached as unbound reaches the block bound to it afterwards."""
    clock.advance(60)
    assert (await store.apply_events([ev(at=clock.time())])).unmatched == 1
    assert APP in cached_subjects(store)
    block = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    clock.advance(60)
    assert (await store.apply_events([ev(at=clock.time())])).unmatched == 0
    assert (await store.get(block.id)).state == BlockState.FRESH


async def test_deleted_block_is_not_reached(store, clock):
    block = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    await warm(store, clock)
    await store.delete(block.id)
    clock.advance(60)
    assert (await store.apply_events([ev(at=clock.time())])).unmatched == 1


async def test_archive_and_restore_after_warm(store, clock):
    block = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    await warm(store, clock)
    await store.archive(block.id, reason="moved")
    clock.advance(60)
    result = await store.apply_events([ev("refuted", at=clock.time())])
    assert result.changes == []
    assert (await store.get(block.id)).state == BlockState.ARCHIVED
    await store.restore(block.id)
    clock.advance(60)
    result = await store.apply_events([ev(at=clock.time())])
    assert [(c.block_id, c.before, c.after) for c in result.changes] == [
        (block.id, "unverified", "fresh")
    ]


async def test_edit_after_warm_is_honoured(store, clock):
    """An edit makes the block unverified: the next confirmation makes it fresh again."""
    block = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    await warm(store, clock)
    await store.update(block.id, {"content": "timeout 60 s"})
    assert (await store.get(block.id)).state == BlockState.UNVERIFIED
    clock.advance(60)
    result = await store.apply_events([ev(at=clock.time())])
    assert [(c.before, c.after) for c in result.changes] == [("unverified", "fresh")]


async def test_change_by_another_connection_is_honoured(store, clock):
    """A binding removed by another process (another connection's commit) is seen."""
    block = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    await warm(store, clock)
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM bindings")
    clock.advance(60)
    assert (await store.apply_events([ev(at=clock.time())])).unmatched == 1
    assert len(await store.events_for(block.id)) == 1


async def test_rolled_back_job_leaves_no_stale_cache(store, clock):
    """An event job rolled back with its transaction (another job of it failed) is redone
    from the database: without the cache dropped it would find its own rolled-back
    confirmation and ignore the event as outdated."""
    block = await store.add({"content": "timeout 30 s", "bindings": [FS_APP]})
    await warm(store, clock)
    await store.apply_events([ev("refuted", at=clock.time() + 1)])
    assert (await store.get(block.id)).state == BlockState.STALE

    async def failing(conn: aiosqlite.Connection) -> Any:
        await conn.execute("SELECT 1")
        raise StorageError("boom")

    clock.advance(60)
    applied, failed = await asyncio.gather(
        store.apply_events([ev(at=clock.time())]),
        store.db.write(failing, keeps_routes=True),
        return_exceptions=True,
    )
    assert isinstance(failed, StorageError)
    assert [(c.before, c.after) for c in applied.changes] == [("stale", "fresh")]
    assert (await store.get(block.id)).state == BlockState.FRESH


@pytest.mark.parametrize("max_subjects", [1])
async def test_full_cache_starts_again(make_store, clock, max_subjects):
    store = await make_store()
    writer = store.db.writer
    writer.routes.max_subjects = max_subjects
    blocks = [
        await store.add({"content": f"fact {i}", "bindings": [{"sensor": "fs", "path": f"{i}"}]})
        for i in range(3)
    ]
    for i in range(3):
        clock.advance(60)
        result = await store.apply_events([ev(at=clock.time(), subject=f"{i}")])
        assert [c.block_id for c in result.changes] == [blocks[i].id]
        assert len(writer.routes.subjects) <= max_subjects + 1
