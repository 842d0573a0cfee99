"""Erasure in the store: a forgotten block's words are nowhere in the database's bytes,
the search index's terms or the score log; a tombstone says it went; nothing else moves."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
from tests.support import fts_terms_with, occurrences, sqlite_at_version

from memwarden.errors import NotFoundError, StorageError, ValidationInputError
from memwarden.memory import ValidationEvent, from_ts
from memwarden.memory._schema import MIGRATIONS

if TYPE_CHECKING:
    from memwarden.memory import Store

MARKER = "Zqxv7Marker"  # mixed case: FTS stores it lowercased
SUBJECT = "notes/customer.txt"


def fs_binding(pattern: str = MARKER) -> dict[str, Any]:
    return {"sensor": "fs", "path": SUBJECT, "regex": pattern}


def event(store: Store, outcome: str, observed: Any, *, block_id: str | None = None) -> Any:
    return ValidationEvent(
        sensor="fs",
        subject=SUBJECT,
        outcome=outcome,
        observed_at=from_ts(store.clock.time()),
        observed=observed,
        message=f"saw {observed}",
        block_id=block_id,
    )


async def fill(store: Store, marker: str = MARKER) -> tuple[str, str]:
    """A block carrying ``marker`` everywhere the store can hold it; and an unrelated one."""
    other = await store.add(
        {
            "title": "Build tool",
            "content": "the build uses make and ruff",
            "tags": ["tooling"],
            "bindings": [{"sensor": "fs", "path": SUBJECT, "regex": "ruff"}],
        }
    )
    block = await store.add(
        {
            "title": f"Customer {marker}",
            "content": f"The customer contact is {marker}@example.com",
            "tags": ["customer", marker.lower()],
            "bindings": [fs_binding()],
        }
    )
    # Observations: one naming the block, one routed by subject (reaches both blocks).
    await store.apply_events(
        [event(store, "confirmed", f"{marker}@example.com", block_id=block.id)]
    )
    await store.apply_events([event(store, "changed", {"line": f"{marker} and ruff"})])
    assert await store.search(marker.lower())
    await store.record_access([block.id, other.id], session="s1")
    await store.update(block.id, {"content": f"Contact {marker} by phone"}, actor="agent")
    review = await store.request_review(block.id, reason=f"is {marker} still right?")
    await store.decide_review(
        review["review_id"], "confirm", reviewer="ann", comment=f"checked {marker}"
    )
    await store.dead_letter(source="api", reason="bad", payload=json.dumps({"block_id": block.id}))
    await store.outbox_put(
        [(f"memwarden/blocks/{block.id}", json.dumps({"id": block.id}).encode(), 1, False)],
        max_rows=100,
    )
    assert store.score_log is not None
    store.score_log.write({"block_id": block.id, "event": "score", "note": marker})
    store.score_log.write({"block_id": other.id, "event": "score"})
    return block.id, other.id


async def test_erased_block_leaves_no_byte_and_no_term(make_store, tmp_path):
    """After erase(): the marker is in no file of the state dir (as written or lowercased),
    in no FTS term, and the unrelated block and its history survive."""
    home = tmp_path / "home"
    home.mkdir()
    store = await make_store(home / "memwarden.db", score_log=home / "scores.jsonl")
    block_id, other_id = await fill(store)
    before_other = await store.get(other_id)
    other_events = await store.events_for(other_id)
    assert occurrences(home, MARKER)  # the test can fail: the marker was there

    report = await store.erase([block_id], actor="test", reason="subject access request")

    assert occurrences(home, MARKER) == {}
    assert fts_terms_with(home / "memwarden.db", MARKER) == []
    assert report.erased == [block_id]
    assert report.wal_truncated
    assert report.score_log_lines == 1
    assert report.removed["blocks"] == 1
    assert report.removed["history"] == 1
    with pytest.raises(NotFoundError):
        await store.get(block_id)
    after_other = await store.get(other_id)
    assert after_other.content == before_other.content
    assert after_other.bindings == before_other.bindings
    assert len(await store.events_for(other_id)) == len(other_events)
    assert [h.block.id for h in await store.search("ruff")] == [other_id]
    tombs = await store.erasures()
    assert [(t["block_id"], t["actor"], t["reason"]) for t in tombs] == [
        (block_id, "test", "subject access request")
    ]
    await store.close()
    assert occurrences(home, MARKER) == {}


async def test_erasing_an_archived_block_reaches_its_old_index_terms(make_store, tmp_path):
    """An archived block is out of the index, but its terms stayed in the segments: gone too."""
    store = await make_store(tmp_path / "m.db")
    block = await store.add({"content": f"secret {MARKER}"})
    await store.archive(block.id, reason="old")
    assert await store.erasure_targets(query=MARKER) != []
    await store.erase([block.id], actor="test")
    assert fts_terms_with(tmp_path / "m.db", MARKER) == []
    assert occurrences(tmp_path, MARKER) == {}


async def test_unknown_id_changes_nothing(make_store, tmp_path):
    """An id that names no block: NotFoundError, no row gone, no tombstone."""
    store = await make_store(tmp_path / "m.db")
    block = await store.add({"content": "keep me"})
    with pytest.raises(NotFoundError, match="no block with id"):
        await store.erase([block.id, "0190d2d8-0000-7000-8000-000000000000"], actor="t")
    with pytest.raises(NotFoundError):
        await store.erasure_targets(ids=["0190d2d8-0000-7000-8000-000000000000"])
    assert (await store.get(block.id)).content == "keep me"
    assert await store.erasures() == []


@pytest.mark.parametrize(
    "query", ['"unbalanced AND (', "content:* NEAR(", "keep -me OR ^x", "💥 me\x00"]
)
async def test_query_is_words_never_fts_syntax(make_store, tmp_path, query):
    """Whatever a query holds is matched as its words: FTS syntax is no error, no injection."""
    store = await make_store(tmp_path / "m.db")
    await store.add({"content": "keep me"})
    found = await store.erasure_targets(query=query)
    assert all(t.text == "keep me" for t in found)  # matched or not, never an error


@pytest.mark.parametrize("query", ["*", '"" () :', "   "])
async def test_query_without_words_is_refused(make_store, tmp_path, query):
    """A query with no word names no block: a clear error naming the field."""
    store = await make_store(tmp_path / "m.db")
    await store.add({"content": "keep me"})
    with pytest.raises(ValidationInputError) as info:
        await store.erasure_targets(query=query)
    assert info.value.errors[0][0] in {"query", "ids"}


async def test_targets_by_tag_and_query(make_store, tmp_path):
    """A tag names the blocks carrying it; a query the blocks holding every word."""
    store = await make_store(tmp_path / "m.db")
    a = await store.add({"content": "alpha beta", "tags": ["t1"]})
    b = await store.add({"content": "alpha gamma", "tags": ["t2"]})
    [target] = await store.erasure_targets(tag="t1")
    assert (target.id, target.text) == (a.id, "alpha beta")  # no title: the content shows
    assert [t.id for t in await store.erasure_targets(query="alpha")] == sorted([a.id, b.id])
    assert [t.id for t in await store.erasure_targets(query="alpha gamma")] == [b.id]
    with pytest.raises(ValidationInputError):
        await store.erasure_targets(tag="t1", query="alpha")


async def test_erasure_log_is_append_only(make_store, tmp_path):
    """No UPDATE or DELETE reaches a tombstone; the event log still refuses updates."""
    store = await make_store(tmp_path / "m.db")
    block = await store.add({"content": "x", "bindings": [fs_binding("x")]})
    await store.apply_events([event(store, "confirmed", "x", block_id=block.id)])
    await store.erase([block.id], actor="t")
    other = await store.add({"content": "y", "bindings": [fs_binding("y")]})
    await store.apply_events([event(store, "confirmed", "y", block_id=other.id)])
    conn = sqlite3.connect(tmp_path / "m.db")
    try:
        for sql in (
            "UPDATE erasures SET reason = 'x'",
            "DELETE FROM erasures",
            "UPDATE events SET message = 'x'",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(sql)
    finally:
        conn.close()


async def test_migration_from_version_7_keeps_data_and_erases(make_store, tmp_path):
    """A file at schema 7 with a block and its event migrates; that block and a new one
    erase cleanly; the event log still refuses updates outside an erasure."""
    path = tmp_path / "v7.db"
    conn = sqlite_at_version(path, 7)
    old_id = "0190d2d8-0000-7000-8000-00000000a0a0"
    conn.execute(  # a block written by the version before, with an event that reached it
        "INSERT INTO blocks (rid, id, title, content, source, category, info_type, volatility,"
        " tier, state, reliability, importance, validity_window_s, half_life_s, created_at,"
        " updated_at) VALUES (1, ?, 'old', ?, 'agent', 'semantic', 'static', 'low',"
        " 'short_term', 'fresh', 0.9, 0.5, 86400, 86400, 0, 0)",
        (old_id, f"written before {MARKER}"),
    )
    conn.execute(
        "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at, received_at,"
        " block_id, observed) VALUES (1, 'e1', 'fs', ?, 'confirmed', 0, 0, ?, ?)",
        (SUBJECT, old_id, json.dumps(MARKER)),
    )
    conn.execute(
        "INSERT INTO effects (block_rid, event_seq, state_before, state_after,"
        " reliability_before, reliability_after) VALUES (1, 1, 'unverified', 'fresh', 0.6, 0.9)"
    )
    conn.close()
    store = await make_store(path)
    assert (await store.get(old_id)).content == f"written before {MARKER}"
    await store.erase([old_id], actor="t")
    block = await store.add({"content": f"old {MARKER}", "bindings": [fs_binding()]})
    await store.apply_events([event(store, "confirmed", MARKER, block_id=block.id)])
    kept = await store.add({"content": "kept", "bindings": [fs_binding("kept")]})
    await store.apply_events([event(store, "confirmed", "kept", block_id=kept.id)])
    await store.erase([block.id], actor="t")
    assert occurrences(tmp_path, MARKER) == {}
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("UPDATE events SET message = 'x'")  # still refused outside erasure
    finally:
        raw.close()


async def test_nothing_to_erase_is_an_input_error(make_store, tmp_path):
    store = await make_store(tmp_path / "m.db")
    with pytest.raises(ValidationInputError):
        await store.erase([], actor="t")
    with pytest.raises(ValidationInputError):
        await store.erasure_targets()
    assert isinstance(ValidationInputError([("x", "y")]), Exception)
    assert issubclass(NotFoundError, StorageError)


async def _published_then_erased(store: Store, *, vacuum: bool) -> None:
    """A message carrying the marker leaves the outbox the ordinary way (published),
    long before the erasure: no row names it any more, only free space can."""
    block = await store.add({"content": f"note {MARKER}"})
    body = json.dumps({"id": "elsewhere", "text": f"{MARKER} " * 10}).encode()
    await store.outbox_put([("memwarden/state", body, 1, False)], max_rows=100)
    await store.outbox_delete([m.id for m in await store.outbox_peek()])
    await store.erase([block.id], actor="t", vacuum=vacuum)


async def test_secure_delete_zeroes_what_ordinary_deletes_freed(make_store, tmp_path):
    """With secure_delete (the default), content freed by an ordinary delete before the
    erasure is zeros; without it, it stays in free space (the contrast proves the pragma
    matters) until a vacuum rewrites the file."""
    on = tmp_path / "on"
    off = tmp_path / "off"
    vacuumed = tmp_path / "vacuumed"
    for d in (on, off, vacuumed):
        d.mkdir()
    await _published_then_erased(await make_store(on / "m.db"), vacuum=False)
    assert occurrences(on, MARKER) == {}
    await _published_then_erased(await make_store(off / "m.db", secure_delete=False), vacuum=False)
    assert occurrences(off, MARKER) != {}
    await _published_then_erased(
        await make_store(vacuumed / "m.db", secure_delete=False), vacuum=True
    )
    assert occurrences(vacuumed, MARKER) == {}


@pytest.mark.parametrize("bound_only", [False, True])
async def test_late_events_about_an_erased_block_are_dropped(make_store, tmp_path, bound_only):
    """An event naming an erased block (a sensor not yet told, an agent's queue) is
    neither stored nor dead-lettered: its observation does not come back."""
    store = await make_store(tmp_path / "m.db")
    block = await store.add({"content": "x", "bindings": [fs_binding()]})
    await store.erase([block.id], actor="t")
    result = await store.apply_events(
        [event(store, "confirmed", f"{MARKER} again", block_id=block.id)], bound_only=bound_only
    )
    assert (result.erased, result.accepted, result.rejected) == (1, 0, [])
    assert occurrences(tmp_path, MARKER) == {}
    conn = sqlite3.connect(tmp_path / "m.db")
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM dead_letters").fetchone()[0] == 0
    finally:
        conn.close()
