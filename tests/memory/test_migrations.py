"""The versioned schema: fresh files, upgrades from every earlier version, newer files."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import pytest
from tests.support import sqlite_at_version

from memwarden.errors import StorageError
from memwarden.memory import BlockState, Store
from memwarden.memory._schema import MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    from pathlib import Path

TABLES = {
    "blocks",
    "blocks_fts",
    "bindings",
    "events",
    "effects",
    "revalidations",
    "accesses",
    "sessions",
    "dead_letters",
    "audit",
    "block_history",
    "reviews",
    "meta",
}
T0 = 1_767_225_600.0


def _user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def _build(path: Path, version: int) -> None:
    """A database as memwarden at schema ``version`` left it, with a little data in it."""
    conn = sqlite_at_version(path, version)
    try:
        if version >= 1:  # blocks, bindings and events exist since version 1
            conn.execute(
                "INSERT INTO blocks (rid, id, title, content, tags, source, category, info_type,"
                " volatility, tier, state, reliability, importance, validity_window_s, stale_at,"
                " half_life_s, created_at, updated_at)"
                " VALUES (1, 'old-block', 'legacy', 'the legacy billing cron runs at noon',"
                " '[\"billing\"]', 'user', 'semantic', 'semi_static', 'medium', 'long_term',"
                " 'unverified', 0.8, 0.5, 604800, ?, 1209600, ?, ?)",
                (T0 + 604800, T0, T0),
            )
            conn.execute(
                "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at)"
                " VALUES (1, 'fs', 'cron.yaml', '{\"path\": \"cron.yaml\"}', ?)",
                (T0,),
            )
            conn.execute(
                "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at,"
                " received_at) VALUES (1, 'old-event', 'fs', 'cron.yaml', 'changed', ?, ?)",
                (T0, T0),
            )
        if version >= 2:  # block_history exists since version 2
            conn.execute(
                "INSERT INTO block_history"
                " VALUES ('old-block', 0, '', 'older text', '[]', ?, 'me')",
                (T0,),
            )
    finally:
        conn.close()


async def test_empty_file_gets_the_whole_schema(make_store, tmp_path):
    """Opening a new file creates every table and sets user_version to SCHEMA_VERSION."""
    path = tmp_path / "new.db"
    await make_store(path)
    assert _user_version(path) == SCHEMA_VERSION
    assert _tables(path) >= TABLES


def test_schema_version_counts_migrations():
    """SCHEMA_VERSION is the number of migrations (user_version k = first k applied)."""
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 2


@pytest.mark.parametrize("version", range(SCHEMA_VERSION + 1))
async def test_upgrade_from_every_version_keeps_data(make_store, tmp_path, version):
    """A file at any earlier version is migrated to the current one with its data intact."""
    path = tmp_path / f"v{version}.db"
    _build(path, version)
    store = await make_store(path)
    assert _user_version(path) == SCHEMA_VERSION
    assert _tables(path) >= TABLES
    if version == 0:
        assert (await store.counts())["blocks"] == 0
        return
    block = await store.get("old-block")
    assert block.content == "the legacy billing cron runs at noon"
    assert block.tags == ["billing"]
    assert block.state == BlockState.UNVERIFIED
    assert [(b.sensor, b.subject) for b in block.bindings] == [("fs", "cron.yaml")]
    assert [h.block.id for h in await store.search("billing cron")] == ["old-block"]
    assert (await store.counts())["events"] == 1
    new = await store.add({"content": "added after the upgrade"})
    assert new.id != "old-block"


async def test_reopening_is_a_no_op(make_store, tmp_path):
    """Opening an up-to-date file twice changes nothing and loses nothing."""
    path = tmp_path / "twice.db"
    first = await make_store(path)
    block = await first.add({"content": "still here"})
    await first.close()
    second = await make_store(path)
    assert (await second.get(block.id)).content == "still here"
    assert _user_version(path) == SCHEMA_VERSION


async def test_newer_file_is_refused(make_store, tmp_path):
    """A file from a newer memwarden is refused with a clear StorageError, and left untouched."""
    path = tmp_path / "future.db"
    _build(path, SCHEMA_VERSION)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StorageError) as info:
        await make_store(path)
    message = str(info.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert "newer" in message
    assert "upgrade memwarden" in message
    assert _user_version(path) == SCHEMA_VERSION + 1


async def test_refused_open_leaves_no_connection_open(tmp_path):
    """A refused open closes the connections it made (no worker thread left behind)."""
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    store = Store(path)
    with pytest.raises(StorageError):
        await store.open()
    assert store.db._wconn is None
    assert store.db._all_readers == []


async def test_not_a_database_is_a_storage_error(make_store, tmp_path):
    """A file that is not SQLite gives a StorageError naming the path."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError, match=r"garbage\.db"):
        await make_store(path)


async def test_v13_gives_old_blocks_a_retention_point_from_their_last_change(
    make_store, tmp_path, clock
):
    """Upgrading a version-12 file with a block in it gives the block one retention point
    (its inputs as they stand, from its last change), and later changes add points."""
    path = tmp_path / "v12.db"
    _build(path, 12)
    store = await make_store(path)
    [point] = await store.retention_points("old-block")
    assert (point.at, point.touched_at, point.importance) == (T0, T0, 0.5)
    assert (point.state, point.tier, point.stale_at) == ("unverified", "long_term", T0 + 604800)
    clock.set(T0 + 3600)
    await store.record_access(["old-block"])
    assert [p.at for p in await store.retention_points("old-block")] == [T0, T0 + 3600]
