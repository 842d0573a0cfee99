"""Short-id resolution and duplicate detection in the store: indexed, and correct."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from memwarden.errors import AmbiguousIdError, NotFoundError, ValidationInputError
from memwarden.memory import _shortid


def _plan(path, sql: str, args: tuple[str, ...]) -> str:
    with sqlite3.connect(path) as conn:
        return " ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, args))


async def test_lookups_use_their_indexes(make_store, tmp_path):
    store = await make_store(tmp_path / "m.db")
    await store.add({"content": "x"})
    assert "USING INDEX blocks_id_key" in _plan(
        tmp_path / "m.db",
        f"SELECT id FROM blocks WHERE {_shortid.ID_KEY_SQL} >= ?"
        f" AND {_shortid.ID_KEY_SQL} < ? ORDER BY id LIMIT 6",
        ("abc", "abcg"),
    )
    assert "USING INDEX blocks_content_key" in _plan(
        tmp_path / "m.db",
        "SELECT id, content FROM blocks WHERE content_key = ? AND state <> 'archived'",
        ("k",),
    )


def test_short_forms_come_from_the_random_end():
    block_id = "01a20a43-4801-7abc-9def-0123456789ab"
    assert _shortid.short_form(block_id, 8) == "456789ab"
    assert _shortid.short_form(block_id, 13) == "f0123456789ab"
    assert _shortid.short_form(block_id, 20) == block_id  # longer than the key: whole id
    assert _shortid.parse_ref("F0123456-789AB") == ("short", "ba9876543210f")
    assert _shortid.parse_ref(block_id.upper()) == ("full", block_id)
    with pytest.raises(ValueError, match="too short"):
        _shortid.parse_ref("abc")


async def test_resolve_full_short_unknown_and_ambiguous(make_store, monkeypatch):
    ids = iter(["01a20a43-4801-7000-8000-00aa11223344", "01a20a43-4801-7001-8000-00bb11223344"])
    monkeypatch.setattr("memwarden.memory._blocks.new_id", lambda: next(ids))
    store = await make_store()
    a = await store.add({"content": "a"})
    b = await store.add({"content": "b"})
    assert (await store.short_ids([a.id, b.id])) == {a.id: "a11223344", b.id: "b11223344"}
    assert await store.resolve_id("a11223344") == a.id
    assert await store.resolve_id(b.id) == b.id
    with pytest.raises(AmbiguousIdError) as err:
        await store.resolve_id("11223344")
    assert err.value.candidates == [a.id, b.id]
    assert "a11223344" in str(err.value)
    with pytest.raises(NotFoundError, match="no block with id 'ffffffff'"):
        await store.resolve_id("ffffffff")
    with pytest.raises(ValidationInputError):
        await store.resolve_id("1234")


async def test_concurrent_duplicate_adds_store_the_fact_once(make_store):
    store = await make_store()
    added = await asyncio.gather(
        *(
            store.add({"content": f"The  API timeout is 30 s{' ' * i}"}, dedupe=True)
            for i in range(8)
        )
    )
    assert len({b.id for b in added}) == 1
    assert sum(b.duplicate_of is None for b in added) == 1
    assert (await store.counts())["blocks"] == 1
    ids = await store.add_many(
        [{"content": "one"}, {"content": "ONE"}, {"content": "two"}], dedupe=True
    )
    assert ids[0] == ids[1] != ids[2]


async def test_an_edit_moves_the_content_key_and_old_rows_are_filled_in(make_store, tmp_path):
    path = tmp_path / "m.db"
    store = await make_store(path)
    block = await store.add({"content": "first text"})
    await store.update(block.id, {"content": "second text"})
    assert (await store.add({"content": "Second   TEXT"}, dedupe=True)).duplicate_of == block.id
    assert (await store.add({"content": "first text"}, dedupe=True)).duplicate_of is None
    await store.close()
    with sqlite3.connect(path) as conn:  # as a database from before the column existed
        conn.execute("UPDATE blocks SET content_key = NULL")
    store = await make_store(path)
    assert (await store.add({"content": "second text"}, dedupe=True)).duplicate_of == block.id


async def test_the_id_key_is_an_index_on_an_expression_not_a_generated_column(make_store, tmp_path):
    """SQLite computes a row's generated columns on every UPDATE of it (about 4 us a row
    for this key): the key is an index on the expression, and blocks has no generated
    column; short ids still resolve through it."""
    store = await make_store(tmp_path / "m.db")
    block = await store.add({"content": "keyed"})
    with sqlite3.connect(tmp_path / "m.db") as conn:
        hidden = [r[1] for r in conn.execute("PRAGMA table_xinfo(blocks)") if r[6] != 0]
        (index_sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'blocks_id_key'"
        ).fetchone()
        (key,) = conn.execute(
            f"SELECT {_shortid.ID_KEY_SQL} FROM blocks WHERE id = ?", (block.id,)
        ).fetchone()
    assert hidden == []
    assert "substr(id, 36, 1)" in index_sql
    assert key == _shortid.id_key(block.id)
    assert await store.resolve_id(block.id[-8:]) == block.id
