"""The SQLite store on a real file."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import NotFoundError, StorageError
from memwarden.memory import BlockState, ValidationEvent, from_ts
from memwarden.memory import _blocks as blocks_module

if TYPE_CHECKING:
    from collections.abc import Iterator

    from memwarden.memory import Store

H = 3600.0
D = 86400.0
APP = "config/app.yaml"
FS_APP = {"sensor": "fs", "path": APP, "key": "/http/timeout", "equals": 30}


def ev(
    subject: str = APP, outcome: str = "confirmed", *, at: float, sensor: str = "fs", **kw: Any
) -> ValidationEvent:
    """An event observed at POSIX time ``at``."""
    return ValidationEvent(
        sensor=sensor, subject=subject, outcome=outcome, observed_at=from_ts(at), **kw
    )


@contextlib.contextmanager
def raw(store: Store) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection on the store's file, as another process would have."""
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def query(store: Store, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with raw(store) as conn:
        return conn.execute(sql, args).fetchall()


# ------------------------------------------------------------------ add / get


async def test_add_get_round_trip(store, clock):
    """What was added comes back from get(): text, metadata, unverified state, times."""
    added = await store.add(
        {
            "title": "API timeout",
            "content": "the API timeout is 30 s",
            "tags": ["api", "config", "api"],
            "source": "agent",
            "category": "procedural",
            "info_type": "dynamic",
            "tier": "long_term",
            "importance": 0.7,
            "signals": {"user_confirmations": 2.0},
        }
    )
    got = await store.get(added.id)
    assert got == added
    assert (got.title, got.content, got.tags) == (
        "API timeout",
        "the API timeout is 30 s",
        ["api", "config"],
    )
    assert (got.category, got.info_type, got.volatility, got.tier) == (
        "procedural",
        "dynamic",
        "high",
        "long_term",
    )
    assert got.importance == 0.7
    assert got.signals == {"user_confirmations": 2.0}
    assert got.state == BlockState.UNVERIFIED
    assert got.validation.validated_by is None
    assert got.validation.validated_at is None
    assert got.created_at == got.updated_at == from_ts(clock.time())
    assert got.version == 1


@pytest.mark.parametrize(
    ("source", "reliability"), [("agent", 0.6), ("user", 0.8), ("human", 0.8), ("some-bot", 0.6)]
)
async def test_initial_reliability_from_source(store, source, reliability):
    """A new block starts with the reliability of its source (agent 0.6, user 0.8)."""
    block = await store.add({"content": "x", "source": source})
    assert block.validation.reliability == reliability


async def test_explicit_reliability_wins(store):
    """An explicit reliability overrides the source default."""
    block = await store.add({"content": "x", "source": "user", "reliability": 0.33})
    assert block.validation.reliability == 0.33


@pytest.mark.parametrize(
    ("volatility", "window"),
    [
        ("low", timedelta(days=180)),
        ("medium", timedelta(days=7)),
        ("high", timedelta(hours=6)),
        ("ephemeral", timedelta(minutes=10)),
    ],
)
async def test_validity_window_from_volatility(store, volatility, window):
    """The window comes from the volatility, and stale_at = created_at + window."""
    block = await store.add({"content": "x", "volatility": volatility})
    assert block.validation.validity_window == window
    assert block.stale_at == block.created_at + window


async def test_explicit_validity_window(store):
    """A block's own validity_window overrides the one its volatility implies."""
    block = await store.add({"content": "x", "volatility": "low", "validity_window": "90m"})
    assert block.validation.validity_window == timedelta(minutes=90)
    assert block.stale_at == block.created_at + timedelta(minutes=90)


async def test_bindings_stored_and_returned(store):
    """Bindings come back with their sensor, derived subject and full selector, in order."""
    block = await store.add(
        {
            "content": "the API timeout is 30 s",
            "bindings": [FS_APP, {"sensor": "tests", "test": "tests/test_api.py::test_timeout"}],
        }
    )
    got = await store.get(block.id)
    assert [(b.sensor, b.subject) for b in got.bindings] == [
        ("fs", APP),
        ("tests", "tests/test_api.py::test_timeout"),
    ]
    assert got.bindings[0].selector == {"path": APP, "key": "/http/timeout", "equals": 30}


async def test_find_by_subject(store):
    """find_by_subject returns exactly the blocks bound to that sensor and subject."""
    a = await store.add({"content": "a", "bindings": [FS_APP]})
    b = await store.add({"content": "b", "bindings": [{"sensor": "fs", "path": APP}]})
    await store.add({"content": "c", "bindings": [{"sensor": "fs", "path": "other.yaml"}]})
    await store.add({"content": "d", "bindings": [{"sensor": "tests", "subject": APP}]})
    assert await store.find_by_subject("fs", APP) == sorted([a.id, b.id])
    assert await store.find_by_subject("fs", "missing") == []


async def test_bindings_for_sensor(store):
    """A sensor learns every binding it must watch; archived blocks are not watched."""
    a = await store.add({"content": "a", "bindings": [FS_APP, {"sensor": "tests", "test": "t"}]})
    b = await store.add({"content": "b", "bindings": [{"sensor": "fs", "path": "b.yaml"}]})
    gone = await store.add({"content": "c", "bindings": [{"sensor": "fs", "path": "c.yaml"}]})
    await store.archive(gone.id, reason="obsolete")
    watched = await store.bindings_for_sensor("fs")
    assert [(bid, binding.subject) for bid, binding in watched] == [(a.id, APP), (b.id, "b.yaml")]
    assert watched[0][1].selector["key"] == "/http/timeout"
    assert await store.bindings_for_sensor("nobody") == []


async def test_get_missing_block(store):
    """Getting an unknown id raises NotFoundError naming it."""
    with pytest.raises(NotFoundError, match="nope"):
        await store.get("nope")


# ------------------------------------------------------------------ update


async def test_content_edit_versions_unverifies_and_demotes(store, clock):
    """A new text bumps the version, keeps the old text in history, unverifies and demotes core."""
    block = await store.add({"content": "timeout is 30 s", "tier": "core", "bindings": [FS_APP]})
    await store.apply_events([ev(at=clock.time())])
    assert (await store.get(block.id)).state == BlockState.FRESH
    clock.advance(60)
    edited = await store.update(block.id, {"content": "timeout is 45 s"}, actor="alice")
    assert edited.content == "timeout is 45 s"
    assert edited.version == 2
    assert edited.state == BlockState.UNVERIFIED
    assert edited.tier == "long_term"
    assert edited.stale_at == from_ts(clock.time()) + timedelta(days=7)
    assert query(store, "SELECT version, content, replaced_by FROM block_history") == [
        (1, "timeout is 30 s", "alice")
    ]


async def test_edit_reindexes_search(store):
    """After an edit, search finds the new words and no longer the old ones."""
    block = await store.add({"content": "the cache lives in redis"})
    await store.update(block.id, {"content": "the cache lives in memcached"})
    assert await store.search("redis") == []
    assert [h.block.id for h in await store.search("memcached")] == [block.id]


async def test_non_text_edit_keeps_version_and_state(store, clock):
    """Changing only importance is not a new version and keeps the block fresh."""
    block = await store.add({"content": "x", "tier": "core", "bindings": [FS_APP]})
    await store.apply_events([ev(at=clock.time())])
    edited = await store.update(block.id, {"importance": 0.9})
    assert (edited.version, edited.state, edited.tier, edited.importance) == (
        1,
        BlockState.FRESH,
        "core",
        0.9,
    )
    assert query(store, "SELECT count(*) FROM block_history") == [(0,)]


async def test_update_missing_block(store):
    """Editing an unknown id raises NotFoundError and writes nothing."""
    with pytest.raises(NotFoundError):
        await store.update("nope", {"content": "x"})
    assert query(store, "SELECT count(*) FROM audit") == [(0,)]


# ------------------------------------------------------------------ archive / restore / delete


async def test_archive_and_restore(store):
    """Archiving takes a block out of search with its reason; restoring brings it back."""
    block = await store.add({"content": "the legacy billing cron runs at noon"})
    archived = await store.archive(block.id, reason="billing moved")
    assert archived.state == BlockState.ARCHIVED
    assert archived.archive_reason == "billing moved"
    assert archived.archived_at is not None
    assert await store.search("billing cron") == []
    assert await store.search("billing cron", include_refuted=True) == []
    restored = await store.restore(block.id)
    assert restored.state == BlockState.UNVERIFIED
    assert restored.archive_reason is None
    assert [h.block.id for h in await store.search("billing cron")] == [block.id]


async def test_events_on_archived_block_change_nothing(store, clock):
    """An event reaching an archived block is logged but ignored."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    await store.archive(block.id, reason="cold")
    await store.apply_events([ev(at=clock.time())])
    assert (await store.get(block.id)).state == BlockState.ARCHIVED
    (record,) = await store.events_for(block.id)
    assert record.detail["ignored"] == "archived"


async def test_delete(store, clock):
    """Delete removes the block and its bindings; an audit row keeps the reason; events stay."""
    block = await store.add({"content": "the old fact", "bindings": [FS_APP]})
    event = ev(at=clock.time())
    await store.apply_events([event])
    await store.delete(block.id, actor="bob", reason="wrong")
    with pytest.raises(NotFoundError):
        await store.get(block.id)
    assert await store.find_by_subject("fs", APP) == []
    assert await store.search("old fact") == []
    ((actor, detail),) = query(
        store, "SELECT actor, detail FROM audit WHERE action = 'delete' AND block_id = ?", block.id
    )
    assert actor == "bob"
    assert json.loads(detail)["reason"] == "wrong"
    assert query(store, "SELECT count(*) FROM events WHERE event_id = ?", event.event_id) == [(1,)]


async def test_new_block_does_not_inherit_a_deleted_blocks_history(store, clock):
    """After deleting the newest block, a new block starts with an empty event history."""
    old = await store.add({"content": "old", "bindings": [FS_APP]})
    await store.apply_events([ev(at=clock.time())])
    await store.delete(old.id)
    new = await store.add({"content": "new"})
    assert await store.events_for(new.id) == []


async def test_delete_missing_block(store):
    """Deleting an unknown id raises NotFoundError."""
    with pytest.raises(NotFoundError):
        await store.delete("nope")


# ------------------------------------------------------------------ list_blocks


async def test_list_blocks_filters(store, clock):
    """list_blocks filters by effective state, tier, volatility, sensor and tag."""
    fresh = await store.add({"content": "a", "tags": ["api"], "tier": "core", "bindings": [FS_APP]})
    high = await store.add({"content": "b", "volatility": "high", "tags": ["db"]})
    low = await store.add(
        {"content": "c", "volatility": "low", "bindings": [{"sensor": "tests", "test": "t"}]}
    )
    gone = await store.add({"content": "d"})
    await store.archive(gone.id, reason="old")
    await store.apply_events([ev(at=clock.time())])

    async def ids(**flt: Any) -> list[str]:
        return [b.id for b in await store.list_blocks(flt)]

    assert await ids() == [fresh.id, high.id, low.id, gone.id]
    assert await ids(state="fresh") == [fresh.id]
    assert await ids(state="unverified") == [high.id, low.id]
    assert await ids(state="stale") == []
    assert await ids(state="archived") == [gone.id]
    clock.advance(7 * H)  # past the 6 h window of the high-volatility block
    assert await ids(state="stale") == [high.id]
    assert await ids(state="unverified") == [low.id]
    assert (await store.get(high.id)).state == BlockState.STALE
    assert await ids(tier="core") == [fresh.id]
    assert await ids(volatility="low") == [low.id]
    assert await ids(sensor="tests") == [low.id]
    assert await ids(tag="db") == [high.id]
    assert await ids(tag="d") == []


async def test_list_blocks_keyset_pagination(store):
    """Pages of `limit` blocks continue `after` the last id, covering all blocks exactly once."""
    added = await store.add_many([{"content": f"block {i}"} for i in range(25)])
    seen: list[str] = []
    after = None
    while True:
        page = await store.list_blocks({"limit": 10, "after": after})
        if not page:
            break
        seen.extend(b.id for b in page)
        after = page[-1].id
    assert seen == added


# ------------------------------------------------------------------ apply_events


async def test_confirmed_makes_fresh_with_sensor_reliability(store, clock):
    """confirmed: fresh, reliability = the sensor's default (fs 0.9), window from observed_at."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    clock.advance(10)
    seen = clock.time() - 5
    result = await store.apply_events([ev(at=seen)])
    assert (result.accepted, result.unmatched) == (1, 0)
    assert [(c.block_id, c.before, c.after) for c in result.changes] == [
        (block.id, "unverified", "fresh")
    ]
    got = await store.get(block.id)
    assert got.state == BlockState.FRESH
    assert got.validation.reliability == 0.9
    assert got.validation.validated_by == "fs"
    assert got.validation.validated_at == from_ts(seen)
    assert got.stale_at == from_ts(seen) + timedelta(days=7)
    assert got.reinforcement_count == 1


async def test_event_reliability_wins(store, clock):
    """An event carrying its own reliability sets that, not the sensor default."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    await store.apply_events([ev(at=clock.time(), reliability=0.77)])
    assert (await store.get(block.id)).validation.reliability == 0.77


async def test_event_validity_window_applies_to_that_observation(store, clock):
    """An event's validity_window sets stale_at for that observation only."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    t0 = clock.time()
    await store.apply_events([ev(at=t0, validity_window="1h")])
    got = await store.get(block.id)
    assert got.stale_at == from_ts(t0 + H)
    assert got.validation.validity_window == timedelta(days=7)
    clock.advance(2 * H)
    assert (await store.get(block.id)).state == BlockState.STALE
    await store.apply_events([ev(at=clock.time())])
    got = await store.get(block.id)
    assert got.state == BlockState.FRESH
    assert got.stale_at == from_ts(clock.time() + 7 * D)


async def test_duplicate_event_ids_stored_once(store, clock):
    """The same event_id twice in a batch, or again in a later batch, is stored and applied once."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    event = ev("unbound", "refuted", at=clock.time())
    first = await store.apply_events([event, event])
    assert (first.accepted, first.duplicates) == (1, 1)
    again = await store.apply_events([event])
    assert (again.accepted, again.duplicates) == (0, 1)
    assert query(store, "SELECT count(*) FROM events") == [(1,)]
    refute = ev("config/app.yaml", "refuted", at=clock.time())
    await store.apply_events([refute])
    await store.apply_events([refute])
    assert (await store.get(block.id)).contradiction_count == 0  # one soft refutation only
    assert len(await store.events_for(block.id)) == 1


async def test_outdated_event_is_recorded_but_changes_nothing(store, clock):
    """An event older than the last validation is logged with effect 'outdated', nothing else."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    t0 = clock.time()
    await store.apply_events([ev(at=t0)])
    before = await store.get(block.id)
    late = ev(outcome="refuted", at=t0 - 60)
    result = await store.apply_events([late])
    assert result.accepted == 1
    assert result.changes == []
    after = await store.get(block.id)
    assert after == before
    newest = (await store.events_for(block.id))[0]
    assert newest.event_id == late.event_id
    assert newest.detail["ignored"] == "outdated"
    assert newest.state_before == newest.state_after == "fresh"


async def test_future_events_are_rejected_and_dead_lettered(store, clock):
    """An observation more than 5 min ahead of our clock is dead-lettered, never applied."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    future = ev(at=clock.time() + 301)
    soon = ev(at=clock.time() + 299)  # within the allowed clock skew
    result = await store.apply_events([future])
    assert result.rejected == [(future.event_id, "observed_at is in the future")]
    assert result.accepted == 0
    assert (await store.get(block.id)).state == BlockState.UNVERIFIED
    assert query(store, "SELECT count(*) FROM events") == [(0,)]
    ((reason, payload),) = query(store, "SELECT reason, payload FROM dead_letters")
    assert "future" in reason
    assert future.event_id in payload
    assert (await store.apply_events([soon])).accepted == 1
    assert (await store.get(block.id)).state == BlockState.FRESH


async def test_unknown_subject_is_stored_unmatched(store, clock):
    """An event nobody is bound to is kept in the log with no effect."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    event = ev("nobody/binds/this", at=clock.time())
    wrong_sensor = ev(at=clock.time(), sensor="tests")  # same subject, other sensor
    result = await store.apply_events([event, wrong_sensor])
    assert (result.accepted, result.unmatched, result.changes) == (2, 2, [])
    assert query(store, "SELECT count(*) FROM events") == [(2,)]
    assert query(store, "SELECT count(*) FROM effects") == [(0,)]
    assert (await store.get(block.id)).state == BlockState.UNVERIFIED


async def test_one_event_reaches_every_bound_block(store, clock):
    """One event reaches all 3 blocks bound to its subject, and no other block."""
    bound = [await store.add({"content": f"fact {i}", "bindings": [FS_APP]}) for i in range(3)]
    other = await store.add({"content": "other", "bindings": [{"sensor": "fs", "path": "b"}]})
    result = await store.apply_events([ev(at=clock.time())])
    assert sorted(c.block_id for c in result.changes) == sorted(b.id for b in bound)
    for block in bound:
        assert (await store.get(block.id)).state == BlockState.FRESH
    assert (await store.get(other.id)).state == BlockState.UNVERIFIED


async def test_block_with_two_bindings_on_one_subject(store, clock):
    """Two assertions on the same file: an event on that file is applied to the block once."""
    block = await store.add(
        {
            "content": "timeout 30 s, retries 3",
            "bindings": [
                {"sensor": "fs", "path": APP, "key": "/http/timeout", "equals": 30},
                {"sensor": "fs", "path": APP, "key": "/http/retries", "equals": 3},
            ],
        }
    )
    result = await store.apply_events([ev(outcome="refuted", at=clock.time())])
    assert result.accepted == 1
    got = await store.get(block.id)
    assert got.state == BlockState.STALE
    assert got.validation.reliability == pytest.approx(0.6 * 0.7)  # one soft refutation
    assert len(await store.events_for(block.id)) == 1


async def test_unbound_authoritative_refutation_queues_review(store, clock):
    """A direct hard refutation from a sensor not bound to the block queues a human review."""
    block = await store.add({"content": "we chose SQLite", "bindings": [FS_APP]})
    result = await store.apply_events(
        [ev("", "refuted", at=clock.time(), sensor="review", block_id=block.id)]
    )
    assert result.reviews == 1
    assert (await store.get(block.id)).state == BlockState.REFUTED
    ((reason, status),) = query(
        store, "SELECT reason, status FROM reviews WHERE block_id = ?", block.id
    )
    assert status == "pending"
    assert "not bound" in reason
    assert (await store.counts())["pending_reviews"] == 1


async def test_bound_authoritative_refutation_needs_no_review(store, clock):
    """The same refutation from a sensor bound to the block settles it without a review."""
    block = await store.add({"content": "we chose SQLite", "bindings": [{"sensor": "review"}]})
    result = await store.apply_events(
        [ev("", "refuted", at=clock.time(), sensor="review", block_id=block.id)]
    )
    assert result.reviews == 0
    assert (await store.get(block.id)).state == BlockState.REFUTED


async def test_changed_makes_stale_and_queues_one_revalidation(store, clock):
    """changed: stale (source_changed) and one open revalidation, not two after a second change."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    t0 = clock.time()
    await store.apply_events([ev(at=t0)])
    await store.apply_events([ev(outcome="changed", at=t0 + 1)])
    got = await store.get(block.id)
    assert got.state == BlockState.STALE
    assert "source_changed" in got.stale_reasons
    assert got.validation.reliability == pytest.approx(0.9 * 0.7)
    await store.apply_events([ev(outcome="changed", at=t0 + 2)])
    rows = query(store, "SELECT block_id, sensor, subject, reason, status FROM revalidations")
    assert rows == [(block.id, "fs", APP, "source_changed", "pending")]
    assert (await store.counts())["revalidation_backlog"] == 1


async def test_answer_to_a_request_closes_it(store, clock):
    """An event carrying a revalidation request's id marks that request done."""
    await store.add({"content": "x", "bindings": [FS_APP]})
    t0 = clock.time()
    await store.apply_events([ev(outcome="changed", at=t0)])
    ((request_id,),) = query(store, "SELECT id FROM revalidations")
    await store.apply_events([ev(at=t0 + 1, request_id=request_id)])
    assert query(store, "SELECT status, outcome FROM revalidations") == [("done", "confirmed")]


async def test_soft_refutations_then_hard(store, clock):
    """Two refutations are soft (stale, reliability cut); the third in a row is hard (refuted)."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    t0 = clock.time()
    await store.apply_events([ev(at=t0)])
    states = []
    for i in range(1, 4):
        await store.apply_events([ev(outcome="refuted", at=t0 + i)])
        got = await store.get(block.id)
        states.append((got.state.value, round(got.validation.reliability, 4)))
    assert states == [
        ("stale", round(0.9 * 0.7, 4)),
        ("stale", round(0.9 * 0.7 * 0.7, 4)),
        ("refuted", round(0.9 * 0.7 * 0.7 * 0.3, 4)),
    ]
    got = await store.get(block.id)
    assert got.contradiction_count == 1
    history = await store.events_for(block.id)
    assert history[0].detail["hard"] is True
    assert "hard" not in (history[1].detail or {})


async def test_events_for_newest_first_with_effects(store, clock):
    """events_for lists a block's history newest first, each with what it did."""
    block = await store.add({"content": "x", "bindings": [FS_APP]})
    t0 = clock.time()
    first = ev(at=t0, observed={"timeout": 30}, message="checked")
    second = ev(outcome="changed", at=t0 + 1)
    await store.apply_events([first])
    await store.apply_events([second])
    history = await store.events_for(block.id)
    assert [r.event_id for r in history] == [second.event_id, first.event_id]
    assert (history[1].state_before, history[1].state_after) == ("unverified", "fresh")
    assert (history[0].state_before, history[0].state_after) == ("fresh", "stale")
    assert history[1].observed == {"timeout": 30}
    assert history[1].message == "checked"
    as_dict = history[0].as_dict()
    assert as_dict["effect"]["state"] == ["fresh", "stale"]
    assert as_dict["outcome"] == "changed"
    assert await store.events_for(block.id, limit=1) == history[:1]


# ------------------------------------------------------------------ staleness sweep


async def test_due_for_revalidation(store, clock):
    """Exactly the fresh/unverified blocks past stale_at are due, oldest first, up to the limit."""
    eph = await store.add({"content": "e", "volatility": "ephemeral"})
    high = await store.add({"content": "h", "volatility": "high"})
    await store.add({"content": "m", "volatility": "medium"})
    refuted = await store.add({"content": "r", "volatility": "ephemeral", "bindings": [FS_APP]})
    await store.apply_events(
        [ev("", "refuted", at=clock.time(), sensor="review", block_id=refuted.id)]
    )
    assert await store.due_for_revalidation() == []
    clock.advance(10 * 60)  # exactly at the ephemeral stale_at: due
    assert [d.id for d in await store.due_for_revalidation()] == [eph.id]
    clock.advance(6 * H)
    due = await store.due_for_revalidation()
    assert [d.id for d in due] == [eph.id, high.id]
    assert due[0].stale_at < due[1].stale_at
    assert (due[1].state, due[1].volatility) == ("unverified", "high")
    assert [d.id for d in await store.due_for_revalidation(limit=1)] == [eph.id]


async def test_due_for_revalidation_uses_the_blocks_due_index(store, clock):
    """The sweep's query is an index range scan on blocks_due, not a full scan or a sort."""
    await store.add_many([{"content": f"b{i}", "volatility": "high"} for i in range(50)])
    statements: list[str] = []
    for conn in store.db._all_readers:
        await conn.set_trace_callback(statements.append)
    clock.advance(7 * H)
    assert len(await store.due_for_revalidation()) == 50
    for conn in store.db._all_readers:
        await conn.set_trace_callback(None)
    (sql,) = [s for s in statements if "stale_at" in s]
    with raw(store) as conn:
        plan = " / ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
    assert "INDEX blocks_due" in plan, plan
    assert "SCAN blocks" not in plan, plan
    assert "TEMP B-TREE" not in plan, plan


async def test_mark_stale(store, clock):
    """mark_stale: due blocks go stale, one revalidation per binding; returns the changed ones."""
    two = await store.add(
        {
            "content": "a",
            "volatility": "high",
            "bindings": [FS_APP, {"sensor": "tests", "test": "t"}],
        }
    )
    none = await store.add({"content": "b", "volatility": "high"})
    later = await store.add({"content": "c", "volatility": "low", "bindings": [FS_APP]})
    clock.advance(7 * H)
    due = [d.id for d in await store.due_for_revalidation()]
    assert due == [two.id, none.id]
    changed = await store.mark_stale([*due, later.id])
    assert changed == [two.id, none.id]
    assert [(await store.get(i)).state for i in (two.id, none.id, later.id)] == [
        BlockState.STALE,
        BlockState.STALE,
        BlockState.UNVERIFIED,
    ]
    assert (await store.get(two.id)).stale_reasons == ["expired"]
    rows = query(
        store, "SELECT block_id, sensor, subject, reason FROM revalidations ORDER BY sensor"
    )
    assert rows == [(two.id, "fs", APP, "expired"), (two.id, "tests", "t", "expired")]
    assert await store.due_for_revalidation() == []
    assert await store.mark_stale(due) == []  # already stale: nothing changes, nothing queued
    assert len(query(store, "SELECT id FROM revalidations")) == 2


# ------------------------------------------------------------------ search


TEXT = "the payment service timeout is 30 seconds"


async def test_search_ranks_fresh_reliable_first(store, clock):
    """With equal text, a fresh reliable block ranks above a stale, less reliable one."""
    stale = await store.add({"content": TEXT, "bindings": [{"sensor": "fs", "path": "s"}]})
    fresh = await store.add({"content": TEXT, "bindings": [FS_APP]})
    t0 = clock.time()
    await store.apply_events([ev(at=t0), ev("s", "refuted", at=t0)])
    hits = await store.search("payment timeout")
    assert [h.block.id for h in hits] == [fresh.id, stale.id]
    assert hits[0].score > hits[1].score
    assert hits[0].relevance == pytest.approx(hits[1].relevance)
    assert (hits[0].stale, hits[1].stale) == (False, True)
    assert hits[0].warnings == []
    warnings = hits[1].warnings
    # Stale by a refutation, not by time: no "since" with a future expiry date.
    assert warnings[0].startswith("stale (")
    assert "soft_refuted" in warnings[0]
    assert "reliability 0.42 is below 0.70" in warnings


async def test_search_ranks_expired_below_fresh(store, clock):
    """A block whose window ran out ranks below an equally relevant fresh one and says so."""
    expiring = await store.add({"content": TEXT, "volatility": "high", "bindings": [FS_APP]})
    lasting = await store.add(
        {"content": TEXT, "volatility": "low", "bindings": [{"sensor": "fs", "path": "b"}]}
    )
    t0 = clock.time()
    await store.apply_events([ev(at=t0), ev("b", at=t0)])
    clock.advance(7 * H)
    hits = await store.search("payment")
    assert [h.block.id for h in hits] == [lasting.id, expiring.id]
    assert hits[1].stale
    assert hits[1].block.stale_reasons == ["expired"]
    assert hits[1].warnings[0].startswith(f"stale since {hits[1].block.stale_at.isoformat()}")


async def test_search_warns_about_unverified(store):
    """An unverified result says so, and warns about its agent-level reliability."""
    await store.add({"content": TEXT})
    (hit,) = await store.search("payment")
    assert hit.stale is False
    assert hit.warnings[0].startswith("unverified")
    assert "reliability 0.60 is below 0.70" in hit.warnings


async def test_search_excludes_refuted_unless_asked_and_archived_always(store, clock):
    """Refuted blocks appear only with include_refuted; archived ones never."""
    refuted = await store.add({"content": TEXT})
    archived = await store.add({"content": TEXT})
    kept = await store.add({"content": TEXT})
    await store.apply_events(
        [ev("", "refuted", at=clock.time(), sensor="review", block_id=refuted.id)]
    )
    await store.archive(archived.id, reason="cold")
    assert [h.block.id for h in await store.search("payment")] == [kept.id]
    with_refuted = await store.search("payment", include_refuted=True)
    assert {h.block.id for h in with_refuted} == {kept.id, refuted.id}
    assert with_refuted[-1].block.id == refuted.id
    assert any(w.startswith("refuted") for w in with_refuted[-1].warnings)


async def test_search_limit(store):
    """search returns at most `limit` hits."""
    await store.add_many([{"content": f"{TEXT} {i}"} for i in range(5)])
    assert len(await store.search("payment", limit=3)) == 3
    assert await store.search("   ") == []


async def test_counts(store, clock):
    """counts() reports blocks by effective state, tier and volatility, and pending work."""
    await store.add({"content": "a", "volatility": "high"})
    await store.add({"content": "b", "tier": "core", "bindings": [FS_APP]})
    # the second event is an hour in the future: dead-lettered, not logged
    await store.apply_events([ev(at=clock.time()), ev(at=clock.time() + 3600)])
    await store.dead_letter(source="mqtt", reason="bad json", payload=b"{")
    clock.advance(7 * H)
    counts = await store.counts()
    assert counts == {
        "blocks": 2,
        "by_state": {"stale": 1, "fresh": 1},
        "by_tier": {"short_term": 1, "core": 1},
        "by_volatility": {"high": 1, "medium": 1},
        "events": 1,
        "revalidation_backlog": 0,
        "pending_reviews": 0,
        "dead_letters": 2,
    }


# ------------------------------------------------------------------ the writer


async def test_group_commit(store, clock):
    """50 concurrent apply_events share commits; each returns only once its event is readable."""
    await store.add({"content": "x", "bindings": [FS_APP]})
    before = store.db._writer.commits
    visible: list[bool] = []

    with raw(store) as reader:

        async def one(i: int) -> None:
            event = ev(at=clock.time() + i * 0.001)
            result = await store.apply_events([event])
            assert result.accepted == 1
            row = reader.execute(
                "SELECT 1 FROM events WHERE event_id = ?", (event.event_id,)
            ).fetchone()
            visible.append(row is not None)

        async with asyncio.timeout(10):
            await asyncio.gather(*(one(i) for i in range(50)))
    assert visible == [True] * 50
    assert store.db._writer.commits - before < 50
    assert query(store, "SELECT count(*) FROM events") == [(50,)]


async def test_failing_job_fails_alone(store, clock, monkeypatch):
    """In one batch, a job that raises fails alone (rolled back) while the others commit."""
    await store.add({"content": "x", "bindings": [FS_APP]})
    real = blocks_module.binding_selector_json

    def failing(binding):
        if binding.subject == "boom":
            raise RuntimeError("injected failure")
        return real(binding)

    monkeypatch.setattr(blocks_module, "binding_selector_json", failing)
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def hold(conn):
        entered.set()
        await gate.wait()

    holder = asyncio.create_task(store.db._writer.submit(hold))
    await entered.wait()  # the writer is busy: what comes next queues into one batch
    queue = store.db._writer._queue
    put = queue.put_nowait
    all_queued = asyncio.Event()

    def counting_put(item):
        put(item)
        if queue.qsize() == 5:
            all_queued.set()

    monkeypatch.setattr(queue, "put_nowait", counting_put)
    events = [ev(f"s{i}", at=clock.time()) for i in range(5)]
    tasks = [
        asyncio.create_task(store.apply_events(events[:3])),
        asyncio.create_task(
            store.add({"content": "bad", "bindings": [{"sensor": "fs", "path": "boom"}]})
        ),
        asyncio.create_task(store.update("missing-block", {"content": "y"})),
        asyncio.create_task(
            store.add({"content": "good", "bindings": [{"sensor": "fs", "path": "ok"}]})
        ),
        asyncio.create_task(store.apply_events(events[3:])),
    ]
    await all_queued.wait()
    gate.set()
    async with asyncio.timeout(10):  # a job left unsettled fails here, not at the test timeout
        await holder
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0].accepted == 3
    assert isinstance(results[1], RuntimeError)
    assert isinstance(results[2], NotFoundError)
    assert results[3].content == "good"
    assert results[4].accepted == 2
    assert query(store, "SELECT count(*) FROM events") == [(5,)]
    assert query(store, "SELECT content FROM blocks ORDER BY rid") == [("x",), ("good",)]
    assert query(store, "SELECT subject FROM bindings ORDER BY id") == [(APP,), ("ok",)]


async def test_closed_store_refuses_work(make_store):
    """After close, reads and writes raise StorageError instead of hanging."""
    store = await make_store()
    await store.close()
    with pytest.raises(StorageError, match="closed"):
        await store.add({"content": "x"})
    with pytest.raises(StorageError, match="closed"):
        await store.search("x")


async def test_close_commits_accepted_writes(make_store, tmp_path):
    """Writes accepted before close are committed and there after reopening."""
    path = tmp_path / "reopen.db"
    first = await make_store(path)
    block = await first.add({"content": "survives a restart"})
    await first.close()
    second = await make_store(path)
    assert (await second.get(block.id)).content == "survives a restart"


# ------------------------------------------------------------------ append-only log


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE events SET outcome = 'confirmed'",
        "DELETE FROM events",
        "UPDATE effects SET state_after = 'fresh'",
    ],
)
async def test_event_log_is_append_only(store, clock, sql):
    """UPDATE or DELETE on the event log is refused by the database itself."""
    await store.add({"content": "x", "bindings": [FS_APP]})
    await store.apply_events([ev(outcome="refuted", at=clock.time())])
    with raw(store) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute(sql)
    assert query(store, "SELECT outcome FROM events") == [("refuted",)]


async def test_a_batch_stores_every_events_optional_fields_as_given(make_store, clock):
    """Events with and without their optional fields in one batch (the common ones are
    written by a statement with the NULLs in it): each stored column is what was sent,
    and an effect's detail only where the rules had something to say."""
    store = await make_store()
    block = await store.add(
        {"title": "port", "content": "listens on 8080", "bindings": [{"sensor": "fs", "path": "a"}]}
    )
    at = clock.time()
    events = [
        ValidationEvent(sensor="fs", subject="a", outcome="confirmed", observed_at=from_ts(at)),
        ValidationEvent(
            sensor="fs",
            subject="a",
            outcome="confirmed",
            observed_at=from_ts(at + 1),
            reliability=0.7,
            validity_window=timedelta(hours=2),
            request_id="req-1",
            message="checked",
        ),
        ValidationEvent(
            sensor="fs",
            block_id=block.id,
            outcome="refuted",
            observed_at=from_ts(at + 2),
            observed={"port": 9090},
            agent="laptop",
            seq=7,
        ),
    ]
    result = await store.apply_events(events, bound_only=True)
    assert (result.accepted, result.rejected) == (3, [])
    conn = sqlite3.connect(store.path)
    rows = conn.execute(
        "SELECT event_id, reliability, validity_window_s, request_id, block_id, message,"
        " observed, agent, agent_seq FROM events ORDER BY seq"
    ).fetchall()
    details = [r[0] for r in conn.execute("SELECT detail FROM effects ORDER BY event_seq")]
    conn.close()
    assert rows == [
        (events[0].event_id, None, None, None, None, "", None, None, None),
        (events[1].event_id, 0.7, 7200.0, "req-1", None, "checked", None, None, None),
        (events[2].event_id, None, None, None, block.id, "", '{"port":9090}', "laptop", 7),
    ]
    assert details[:2] == [None, None]
    assert details[2] is not None
    assert json.loads(details[2])["state"][1] in {"stale", "refuted"}
