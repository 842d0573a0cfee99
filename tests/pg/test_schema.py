"""The PostgreSQL schema: migrations from empty, idempotent, concurrent, refusing a newer
schema; the same tables and columns as the SQLite store's; the search column, the
append-only log and the embedding queue behave as SQLite's triggers do."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING

import asyncpg
import pytest

from memwarden.errors import StorageError
from memwarden.memory._database import Database
from memwarden.memory._schema import SCHEMA_VERSION as SQLITE_VERSION
from memwarden.memory.pg import SCHEMA_VERSION, SQLITE_SCHEMA_VERSION, migrate, schema_version
from memwarden.memory.pg._blocks import DUPLICATES_SQL
from memwarden.memory.pg._ids import allocate
from memwarden.memory.pg._schema import MIGRATIONS, SQLITE_SINCE

if TYPE_CHECKING:
    from pathlib import Path

    from tests.pgserver import PgServer

# Tables only one backend has, and why.
SQLITE_ONLY = {"blocks_fts"}  # FTS5 (and its shadow tables): the generated tsvector here
# PRAGMA user_version; migrate --to's progress; embedding nodes' claims and stamps.
PG_ONLY = {"schema_version", "copy_progress", "embed_claims", "vector_stamps", "block_falls"}
TYPES = {"INTEGER": "bigint", "REAL": "double precision", "TEXT": "text", "BLOB": "bytea"}
# Columns whose type differs on purpose (the reason is in memory/pg/_schema.py).
RETYPED = {("dead_letters", "payload"): "bytea"}  # may hold NUL: PostgreSQL text cannot


@pytest.fixture
async def conn(pg_server: PgServer):
    connection = await asyncpg.connect(pg_server.create_database())
    try:
        yield connection
    finally:
        await connection.close()


async def _migrated(pg_server: PgServer) -> asyncpg.Connection:
    connection = await asyncpg.connect(pg_server.create_database())
    await migrate(connection)
    return connection


async def test_migrate_from_empty_then_idempotent(conn) -> None:
    """An empty database is brought to the current version; a second run changes nothing."""
    assert await schema_version(conn) == 0
    assert await migrate(conn) == 0
    assert await schema_version(conn) == SCHEMA_VERSION
    tables = await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
    assert await migrate(conn) == SCHEMA_VERSION
    assert (
        await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == tables
    )


async def test_two_daemons_migrating_at_once_take_turns(pg_server: PgServer) -> None:
    """Four connections migrating one empty database at once: the advisory lock lets one do
    it; the others find it done (no duplicate-object error)."""
    dsn = pg_server.create_database()
    conns = [await asyncpg.connect(dsn) for _ in range(4)]
    try:
        found = await asyncio.gather(*(migrate(c) for c in conns))
        assert set(found) <= {0, SCHEMA_VERSION}
        assert await schema_version(conns[0]) == SCHEMA_VERSION
        assert await conns[0].fetchval("SELECT count(*) FROM schema_version") == 1
    finally:
        for c in conns:
            await c.close()


async def test_newer_schema_is_refused_untouched(conn) -> None:
    """A database migrated by a newer memwarden is refused with a clear message."""
    await migrate(conn)
    await conn.execute("UPDATE schema_version SET version = 99")
    newer = rf"schema version 99, newer than this memwarden \({SCHEMA_VERSION}\)"
    with pytest.raises(StorageError, match=newer):
        await migrate(conn)
    assert await schema_version(conn) == 99


async def test_failed_migration_leaves_the_version_before(conn) -> None:
    """A migration that fails is rolled back whole: no table of it stays, version 0."""
    await conn.execute("CREATE TABLE blocks (x int)")  # in the way of migration 1
    with pytest.raises(StorageError, match="migration to schema version 1 failed"):
        await migrate(conn)
    assert await schema_version(conn) == 0
    assert await conn.fetchval("SELECT to_regclass('events')") is None


def _sqlite_tables(path: Path) -> dict[str, list[tuple[str, str, bool, int]]]:
    """table -> [(column, declared type, not null, pk position)] of a current SQLite store,
    generated columns included (PRAGMA table_xinfo)."""
    db = sqlite3.connect(path)
    try:
        names = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                " AND name NOT LIKE 'blocks_fts%'"
            )
        ]
        return {
            name: [
                (r[1], r[2].split()[0].upper(), bool(r[3]), r[5])
                for r in db.execute(f"PRAGMA table_xinfo({name})")
            ]
            for name in names
        }
    finally:
        db.close()


async def test_same_tables_and_columns_as_sqlite(pg_server: PgServer, tmp_path: Path) -> None:
    """Every SQLite table has its PostgreSQL twin: same columns in the same order, types
    mapped (INTEGER bigint, REAL double precision, TEXT text, BLOB bytea), same NOT NULL,
    same primary key. Fails when the SQLite schema moves on without this one."""
    assert SQLITE_SCHEMA_VERSION >= SQLITE_VERSION, (
        "the SQLite schema has a new version: add a PostgreSQL migration with its tables"
    )
    later = {t for t, since in SQLITE_SINCE.items() if since > SQLITE_VERSION}
    async with Database(tmp_path / "m.db"):
        pass
    sqlite_tables = _sqlite_tables(tmp_path / "m.db")
    conn = await _migrated(pg_server)
    try:
        pg_tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
        }
        assert set(sqlite_tables) == pg_tables - PG_ONLY - later
        for table, columns in sqlite_tables.items():
            rows = await conn.fetch(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,"
                " coalesce(array_position(i.indkey::int2[], a.attnum) + 1, 0) AS pk"  # 0-based
                " FROM pg_attribute a LEFT JOIN pg_index i"
                "   ON i.indrelid = a.attrelid AND i.indisprimary"
                " WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped"
                " ORDER BY a.attnum",
                table,
            )
            pg_cols = [(r["attname"], r["type"], r["attnotnull"], r["pk"]) for r in rows]
            if table == "blocks":
                assert pg_cols[-1][:2] == ("search", "tsvector")
                pg_cols = pg_cols[:-1]
                # The short-id key: a generated column here, an index on the same
                # expression in SQLite (its schema 14: SQLite recomputes a generated
                # column on every UPDATE of the row).
                assert ("id_key", "text", False, 0) in pg_cols
                pg_cols = [c for c in pg_cols if c[0] != "id_key"]
            expected = [
                # SQLite's INTEGER PRIMARY KEY is NOT NULL in effect (the rowid).
                (name, RETYPED.get((table, name), TYPES[decl]), notnull or pk > 0, pk)
                for name, decl, notnull, pk in columns
            ]
            assert pg_cols == expected, table
    finally:
        await conn.close()


async def test_search_column_weights_words_and_diacritics(pg_server: PgServer) -> None:
    """Title weighs A, content B, tags C; punctuation splits words as unicode61 does; no
    stemming; diacritics removed; archived blocks are out of the search index."""
    conn = await _migrated(pg_server)
    try:
        await _block(
            conn,
            "b1",
            title="Café config",
            content="see config/app.yaml running",
            tags='["deploy"]',
        )
        vector = await conn.fetchval("SELECT search::text FROM blocks WHERE id = 'b1'")
        assert "'cafe':1A" in vector
        assert "'config':2A,4B" in vector
        assert "'app':5B" in vector
        assert "'yaml':6B" in vector
        assert "'running':7B" in vector  # not stemmed to 'run'
        assert "'deploy':8C" in vector
        mixed = await conn.fetchval("SELECT to_tsvector('memwarden_search', 'café2 foo_bar')::text")
        assert mixed == "'bar':3 'cafe2':1 'foo':2"  # as unicode61: digits too, _ splits
        hits = await conn.fetchval(
            "SELECT count(*) FROM blocks WHERE search @@ to_tsquery('memwarden_search', 'café')"
        )
        assert hits == 1
        index = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'blocks_search'"
        )
        assert "USING gin (search)" in index
        assert "state <> 'archived'" in index
    finally:
        await conn.close()


async def test_due_sweep_uses_the_partial_index(pg_server: PgServer) -> None:
    """The staleness sweep's query is answered from the partial index on stale_at."""
    conn = await _migrated(pg_server)
    try:
        for i in range(200):
            await _block(conn, f"b{i}", state="fresh" if i % 2 else "stale", stale_at=float(i))
        await conn.execute("ANALYZE blocks")
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN SELECT rid FROM blocks WHERE state IN ('fresh', 'unverified')"
                " AND stale_at <= 50 ORDER BY stale_at"
            )
        )
        assert "blocks_due" in plan
    finally:
        await conn.close()


async def test_event_ids_are_unique(pg_server: PgServer) -> None:
    """An event delivered twice is stored once: event_id is unique."""
    conn = await _migrated(pg_server)
    try:
        insert = (
            "INSERT INTO events (event_id, sensor, subject, outcome, observed_at, received_at)"
            " VALUES ('e1', 'fs', 'a', 'confirmed', 1, 1)"
        )
        await conn.execute(insert)
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(insert)
        await conn.execute(insert + " ON CONFLICT (event_id) DO NOTHING")
        assert await conn.fetchval("SELECT count(*) FROM events") == 1
    finally:
        await conn.close()


async def test_logs_are_append_only_unless_guarded(pg_server: PgServer) -> None:
    """Events, effects, runs and erasures refuse UPDATE, DELETE and TRUNCATE; the guard row
    lets compaction delete (and erasure blank) events inside its own transaction."""
    conn = await _migrated(pg_server)
    try:
        await conn.execute(
            "INSERT INTO events (event_id, sensor, subject, outcome, observed_at, received_at)"
            " VALUES ('e1', 'fs', 'a', 'confirmed', 1, 1);"
            "INSERT INTO effects VALUES (1, 1, 'fresh', 'fresh', 0.5, 0.6, NULL);"
            "INSERT INTO erasures (block_id, erased_at, actor) VALUES ('b', 1, 'cli')"
        )
        for statement in (
            "UPDATE events SET message = 'x'",
            "DELETE FROM events",
            "UPDATE effects SET detail = 'x'",
            "DELETE FROM effects",
            "UPDATE erasures SET reason = 'x'",
            "DELETE FROM erasures",
            "TRUNCATE events CASCADE",
        ):
            with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
                await conn.execute(statement)
        async with conn.transaction():
            await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
            await conn.execute("UPDATE events SET message = ''")
            await conn.execute("DELETE FROM effects")
            await conn.execute("DELETE FROM events")
            await conn.execute("DELETE FROM compaction_guard")
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
        async with conn.transaction():
            await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
            with pytest.raises(asyncpg.RestrictViolationError, match="erasure log"):
                await conn.execute("DELETE FROM erasures")
    finally:
        await conn.close()


async def test_embed_queue_follows_text_edits_only(pg_server: PgServer) -> None:
    """A new block is queued for a vector; a title or content edit bumps its generation;
    a state change does not (SQLite's embed_queue triggers)."""
    conn = await _migrated(pg_server)
    try:
        rid = await _block(conn, "b1")
        assert await conn.fetchval("SELECT gen FROM embed_queue WHERE block_rid = $1", rid) == 0
        await conn.execute("UPDATE blocks SET state = 'stale' WHERE rid = $1", rid)
        await conn.execute("UPDATE blocks SET title = title WHERE rid = $1", rid)
        assert await conn.fetchval("SELECT gen FROM embed_queue WHERE block_rid = $1", rid) == 0
        await conn.execute("UPDATE blocks SET content = 'new' WHERE rid = $1", rid)
        assert await conn.fetchval("SELECT gen FROM embed_queue WHERE block_rid = $1", rid) == 1
    finally:
        await conn.close()


async def test_largest_block_is_indexed(pg_server: PgServer) -> None:
    """A block at the content limit (256 Ki characters of distinct words, the worst case for
    a tsvector) is stored and searchable."""
    conn = await _migrated(pg_server)
    try:
        words = " ".join(f"w{i:x}" for i in range(60_000))[: 256 * 1024]
        await _block(conn, "big", content=words)
        found = await conn.fetchval(
            "SELECT id FROM blocks WHERE search @@ to_tsquery('memwarden_search', 'w1f3') "
            "AND state <> 'archived'"
        )
        assert found == "big"
    finally:
        await conn.close()


async def _block(
    conn,
    block_id: str,
    *,
    title: str = "t",
    content: str = "c",
    tags: str = "[]",
    state: str = "fresh",
    stale_at: float | None = None,
) -> int:
    rid: int = await conn.fetchval(
        "INSERT INTO blocks (id, title, content, tags, source, category, info_type, volatility,"
        " tier, state, reliability, importance, validity_window_s, stale_at, half_life_s,"
        " created_at, updated_at) VALUES ($1, $2, $3, $4, 'agent', 'fact', 'fact', 'stable',"
        " 'working', $5, 0.5, 0.5, 60, $6, 60, 1, 1) RETURNING rid",
        block_id,
        title,
        content,
        tags,
        state,
        stale_at,
    )
    return rid


async def test_retention_points_follow_the_decay_inputs(pg_server: PgServer) -> None:
    """As SQLite's retention_points triggers: a point when a block is added, one more when
    a decay input changes (not for a text edit), at most 500 kept, none after a delete."""
    conn = await _migrated(pg_server)
    try:
        rid = await _block(conn, "b1")
        count = "SELECT count(*) FROM retention_points WHERE block_rid = $1"
        assert await conn.fetchval(count, rid) == 1
        await conn.execute("UPDATE blocks SET content = 'x', updated_at = 2 WHERE rid = $1", rid)
        assert await conn.fetchval(count, rid) == 1
        await conn.execute("UPDATE blocks SET importance = 0.9, updated_at = 3 WHERE rid = $1", rid)
        assert await conn.fetchval(count, rid) == 2
        # Same time again: the point is replaced, not added (INSERT OR REPLACE).
        await conn.execute("UPDATE blocks SET importance = 0.8 WHERE rid = $1", rid)
        assert await conn.fetchval(count, rid) == 2
        assert (
            await conn.fetchval(
                "SELECT importance FROM retention_points WHERE block_rid = $1 AND at = 3", rid
            )
            == 0.8
        )
        for i in range(520):
            await conn.execute(
                "UPDATE blocks SET importance = $2, updated_at = $3 WHERE rid = $1",
                rid,
                i / 1000,
                10.0 + i,
            )
        assert await conn.fetchval(count, rid) == 500
        assert (
            await conn.fetchval("SELECT min(at) FROM retention_points WHERE block_rid = $1", rid)
            == 10.0 + 20
        )
        await conn.execute("DELETE FROM blocks WHERE rid = $1", rid)
        assert await conn.fetchval(count, rid) == 0
    finally:
        await conn.close()


async def test_upgrade_from_version_1_backfills_points(pg_server: PgServer) -> None:
    """A database left at PostgreSQL schema 1 with blocks in it is migrated to the current
    version; each block gets its first retention point, as SQLite's migration 13 does."""
    conn = await asyncpg.connect(pg_server.create_database())
    try:
        await conn.execute(MIGRATIONS[0])
        await conn.execute(
            "CREATE TABLE schema_version (id integer PRIMARY KEY CHECK (id = 1),"
            " version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now());"
            "INSERT INTO schema_version (id, version) VALUES (1, 1)"
        )
        rid = await _block(conn, "old")
        await conn.execute(
            "UPDATE blocks SET last_accessed_at = 5, validated_at = 4 WHERE rid = $1", rid
        )
        assert await migrate(conn) == 1
        assert await schema_version(conn) == SCHEMA_VERSION
        point = await conn.fetchrow("SELECT at, touched_at FROM retention_points")
        assert tuple(point) == (5.0, 5.0)
    finally:
        await conn.close()


async def _at_version(conn: asyncpg.Connection, version: int) -> None:
    """The schema as migrations 1 to ``version`` left it (an older memwarden's)."""
    for migration in MIGRATIONS[:version]:
        await conn.execute(migration)
    await conn.execute(
        "CREATE TABLE schema_version (id integer PRIMARY KEY CHECK (id = 1),"
        " version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now());"
        f"INSERT INTO schema_version (id, version) VALUES (1, {version})"
    )


async def test_upgrade_from_version_2_moves_the_identities_past_every_number(
    pg_server: PgServer,
) -> None:
    """Migration 3 (several writers): a database at schema 2 whose sequences lag behind
    the numbers in use (rids and seqs written as the highest plus one, a deleted block's
    rid kept by its effects and compacted runs) hands out only numbers above all of them."""
    conn = await asyncpg.connect(pg_server.create_database())
    try:
        await _at_version(conn, 2)
        await conn.execute(
            "INSERT INTO blocks (rid, id, content, source, category, info_type, volatility,"
            " tier, state, reliability, importance, validity_window_s, half_life_s,"
            " created_at, updated_at) VALUES (7, 'b7', 'c', 'agent', 'fact', 'fact', 'stable',"
            " 'working', 'fresh', 0.5, 0.5, 60, 60, 1, 1)"
        )
        await conn.execute(
            "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at,"
            " received_at) VALUES (40, 'e40', 'fs', 'a', 'confirmed', 1, 1)"
        )
        await conn.execute(  # a deleted block (rid 12) and an event compacted away (41)
            "INSERT INTO effects (block_rid, event_seq, state_before, state_after,"
            " reliability_before, reliability_after) VALUES (12, 41, 'fresh', 'fresh', 0.5, 0.5)"
        )
        await conn.execute(
            "INSERT INTO event_runs VALUES (9, 44, 42, 'fs', 'confirmed', 3, 1, 2, 3)"
        )
        assert await migrate(conn) == 2
        assert await schema_version(conn) == SCHEMA_VERSION
        assert await allocate(conn, "blocks", "rid", 2) == [13, 14]
        assert await allocate(conn, "events", "seq", 1) == [45]
        # The data is untouched.
        assert await conn.fetchval("SELECT count(*) FROM blocks") == 1
        assert await conn.fetchval("SELECT seq FROM events") == 40
    finally:
        await conn.close()


async def test_identities_of_an_empty_database_start_at_one(pg_server: PgServer) -> None:
    """From empty (every migration in a row) the first rid and the first seq are 1, as on
    SQLite; a number is never handed out twice, by any number of connections at once."""
    dsn = pg_server.create_database()
    conn = await asyncpg.connect(dsn)
    others = [await asyncpg.connect(dsn) for _ in range(3)]
    try:
        await migrate(conn)
        assert await allocate(conn, "blocks", "rid", 1) == [1]
        assert await allocate(conn, "events", "seq", 3) == [1, 2, 3]
        taken = await asyncio.gather(*(allocate(c, "events", "seq", 500) for c in others))
        numbers = [n for part in taken for n in part]
        assert len(set(numbers)) == 1500
        assert min(numbers) == 4
        assert all(part == sorted(part) for part in taken)
        with pytest.raises(ValueError, match="no identity"):
            await allocate(conn, "blocks; DROP TABLE blocks; --", "rid", 1)
    finally:
        for c in (conn, *others):
            await c.close()


async def test_upgrade_from_the_version_before_block_falls(pg_server: PgServer) -> None:
    """A database at the version before ``block_falls`` (the session notices' log of
    falls with no effects row) with a block in it migrates to the current version: the
    table is there, empty, and takes a fall stamped with its transaction."""
    before = next(i for i, m in enumerate(MIGRATIONS) if "CREATE TABLE block_falls" in m)
    conn = await asyncpg.connect(pg_server.create_database())
    try:
        await _at_version(conn, before)
        await _block(conn, "old")
        assert await conn.fetchval("SELECT to_regclass('block_falls')") is None
        assert await migrate(conn) == before
        assert await schema_version(conn) == SCHEMA_VERSION
        assert await conn.fetchval("SELECT count(*) FROM block_falls") == 0
        xid = await conn.fetchval(
            "INSERT INTO block_falls (block_id, state_before, state_after, reason, reliability,"
            " at) VALUES ('b', 'fresh', 'stale', 'expired', 0.5, 1) RETURNING xid::text"
        )
        assert int(xid) > 0
    finally:
        await conn.close()


async def test_archived_blocks_leave_the_content_key_index(pg_server: PgServer) -> None:
    """A database at version 8 (the content-key index over every block) migrates to an
    index over live blocks only; a new block's duplicates are still looked up through it,
    and an archived block is no longer found as one."""
    before = 8
    conn = await asyncpg.connect(pg_server.create_database())
    try:
        await _at_version(conn, before)
        index = "SELECT indexdef FROM pg_indexes WHERE indexname = 'blocks_content_key'"
        assert "WHERE" not in await conn.fetchval(index)
        for i in range(300):
            await _block(conn, f"b{i}", state="archived" if i % 3 == 0 else "fresh")
        await conn.execute("UPDATE blocks SET content_key = 'k' || (rid % 100)")
        assert await migrate(conn) == before
        assert await schema_version(conn) == SCHEMA_VERSION
        assert "WHERE (state <> 'archived'::text)" in await conn.fetchval(index)
        await conn.execute("ANALYZE blocks")
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0] for r in await conn.fetch("EXPLAIN " + DUPLICATES_SQL, "k1", "default")
        )
        assert "blocks_content_key" in plan
        # k1: rids 1, 101, 201 (b0 archived, b100 fresh, b200 fresh).
        found = [r["id"] for r in await conn.fetch(DUPLICATES_SQL, "k1", "default")]
        assert found == ["b100", "b200"]
        await conn.execute("UPDATE blocks SET state = 'archived' WHERE id = 'b100'")
        assert [r["id"] for r in await conn.fetch(DUPLICATES_SQL, "k1", "default")] == ["b200"]
    finally:
        await conn.close()
