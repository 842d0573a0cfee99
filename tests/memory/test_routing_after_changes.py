"""Routing after a change: a binding added, a block edited, archived, restored or
deleted, or a binding removed by another connection, is honoured by the very next event
on a subject that events have reached before (guards for any caching of routes)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from memwarden.memory import BlockState, ValidationEvent, from_ts

if TYPE_CHECKING:
    from memwarden.memory import FakeClock, Store

APP = "config/app.yaml"
FS_APP = {"sensor": "fs", "path": APP}


def ev(outcome: str = "confirmed", *, at: float, subject: str = APP) -> ValidationEvent:
    return ValidationEvent(sensor="fs", subject=subject, outcome=outcome, observed_at=from_ts(at))


async def warm(store: Store, clock: FakeClock) -> None:
    """One event on APP before the change under test."""
    clock.advance(60)
    await store.apply_events([ev(at=clock.time())])


async def test_repeated_subject_follows_each_write(store, clock):
    """Events on one subject keep reaching its block, each seeing the last one's effect."""
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
