"""Store.update with ``bindings``: replaced in the edit's transaction, audited, the block
unverified again, open requests of removed bindings closed (docs/RULES.md)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import ValidationInputError, VersionConflictError
from memwarden.memory import BlockState, ValidationEvent, from_ts

if TYPE_CHECKING:
    from memwarden.memory import Store

APP = "config/app.yaml"
FS_APP = {"sensor": "fs", "path": APP, "key": "/http/timeout", "equals": 30}
FS_PORT = {"sensor": "fs", "path": APP, "key": "/http/port", "equals": 8080}


def query(store: Store, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


async def test_rebinding_a_fresh_block_makes_it_unverified_and_keeps_its_text(store, clock):
    block = await store.add({"content": "The API timeout is 30 s", "bindings": [FS_APP]})
    seen = clock.time()
    event = ValidationEvent(
        sensor="fs", subject=APP, outcome="confirmed", observed_at=from_ts(seen)
    )
    await store.apply_events([event])
    fresh = await store.get(block.id)
    assert fresh.state == BlockState.FRESH
    clock.advance(60)
    rebound = await store.update(block.id, {"bindings": [FS_PORT]}, actor="tester")
    assert rebound.state == BlockState.UNVERIFIED
    assert rebound.version == fresh.version + 1  # new bindings are a new version
    assert rebound.content == fresh.content
    assert rebound.validation.reliability == fresh.validation.reliability
    assert rebound.stale_at == from_ts(clock.time()) + timedelta(days=7)
    assert [b.selector["key"] for b in rebound.bindings] == ["/http/port"]
    [(detail,)] = query(
        store, "SELECT detail FROM audit WHERE action = 'update' AND actor = 'tester'"
    )
    assert APP in detail
    assert "8080" not in detail  # the expected value is not audited


async def test_the_same_bindings_change_nothing_and_keep_their_rows(store):
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    [(row_id,)] = query(store, "SELECT id FROM bindings")
    again = await store.update(block.id, {"bindings": [FS_APP]})
    assert query(store, "SELECT id FROM bindings") == [(row_id,)]
    assert again.stale_at == block.stale_at


async def test_empty_bindings_unbind_and_close_open_requests(store, clock):
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    now = clock.time()
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO revalidations (id, block_id, sensor, subject, reason, created_at,"
            " send_at, deadline_s) VALUES ('r1', ?, 'fs', ?, 'expired', ?, ?, 5)",
            (block.id, APP, now, now),
        )
    finally:
        conn.close()
    clock.advance(1)
    unbound = await store.update(block.id, {"bindings": []})
    assert unbound.bindings == []
    assert query(store, "SELECT count(*) FROM bindings") == [(0,)]
    assert query(store, "SELECT status, outcome FROM revalidations") == [("expired", "unbound")]


async def test_a_bad_binding_or_null_changes_nothing(store):
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    with pytest.raises(ValidationInputError) as err:
        await store.update(block.id, {"bindings": None, "importance": 0.1})
    assert err.value.errors[0][0] == "bindings"
    with pytest.raises(ValidationInputError) as err:
        await store.update(block.id, {"bindings": [{"path": APP}], "importance": 0.1})
    assert err.value.errors[0][0].startswith("bindings.0")
    after = await store.get(block.id)
    assert after.bindings == block.bindings
    assert after.importance == block.importance


async def test_a_binding_stored_twice_is_kept_once(store):
    block = await store.add({"content": "x", "bindings": [FS_APP, FS_APP]})
    assert len(query(store, "SELECT id FROM bindings")) == 2
    kept = await store.update(block.id, {"bindings": [FS_APP]})
    assert len(query(store, "SELECT id FROM bindings")) == 1
    assert [b.selector["key"] for b in kept.bindings] == ["/http/timeout"]


async def test_a_change_of_bindings_is_a_new_version_an_old_edit_cannot_undo(store):
    """The version is the compare-and-set token: an edit based on the version read before
    the bindings changed is refused, and the history keeps that version (its same text)."""
    block = await store.add({"content": "The API timeout is 30 s"})
    rebound = await store.update(block.id, {"bindings": [FS_APP]}, actor="binder")
    assert rebound.version == block.version + 1
    with pytest.raises(VersionConflictError):
        await store.update(block.id, {"bindings": []}, expected_version=block.version)
    assert [b.sensor for b in (await store.get(block.id)).bindings] == ["fs"]
    [old] = await store.versions(block.id)
    assert (old["version"], old["content"], old["replaced_by"]) == (1, block.content, "binder")
    same = await store.update(block.id, {"bindings": [FS_APP]}, expected_version=2)
    assert same.version == 2  # the same bindings are no change: no new version
