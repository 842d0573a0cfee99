"""Copying a SQLite store into PostgreSQL (``memwarden migrate --to``): every table row for
row, verified; resumable after an interruption with an identical result; refusing a
target that holds anything else; an older source migrated in a temporary copy, never
written; values SQLite's loose typing lets through that PostgreSQL cannot hold unchanged
are refused by name."""

from __future__ import annotations

import asyncio
import hashlib
import math
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwarden.errors import StorageError
from memwarden.memory import Store, ValidationEvent, from_ts
from memwarden.memory._clock import FakeClock
from memwarden.memory.pg._copy import DERIVED, copy_to_postgres, row_digest
from memwarden.memory.pg._schema import SQLITE_SINCE
from tests.support import sqlite_at_version

if TYPE_CHECKING:
    from pathlib import Path

    from tests.pgserver import PgServer

# Tables each side has that the copy leaves out (see memory/pg/_copy.py).
NOT_COPIED_PG = {
    "schema_version",
    "copy_progress",
    "compaction_guard",
    "embed_claims",
    "vector_stamps",
    "block_falls",
}


async def populate(path: Path, *, blocks: int = 30) -> None:
    """A store with rows in every table that carries state: through the Store where it
    has a door, raw SQL for the rest, with awkward values (unicode, quotes, -0.0, huge
    and tiny floats, NUL bytes in blobs, JSON with escapes)."""
    clock = FakeClock()
    async with Store(path, clock=clock) as store:
        root = await store.add(
            {
                "title": "Café «naïve» — 'quoted' \"twice\"",
                "content": "db port is 5432 🐘 and\nnewlines\ttabs",
                "tags": ["deploy", "ünïcode"],
                "bindings": [
                    {"sensor": "fs", "path": "a.yaml"},
                    {"sensor": "fs", "path": "0.yaml"},
                ],
            }
        )
        ids = [root.id]
        for i in range(blocks):
            block = await store.add(
                {
                    "content": f"fact {i} about config/app{i}.yaml",
                    "tags": [f"t{i % 3}"],
                    "depends_on": [root.id] if i % 5 == 0 else [],
                    "bindings": [{"sensor": "fs", "path": f"f{i}.yaml"}],
                }
            )
            ids.append(block.id)
        clock.advance(10)
        await store.apply_events(
            [
                ValidationEvent(
                    sensor="fs",
                    subject=f"f{i}.yaml",
                    outcome="refuted" if i % 4 == 0 else "confirmed",
                    observed_at=from_ts(clock.time() - 1),
                    message=f"seen {i} \u2028",
                )
                for i in range(blocks)
            ]
        )
        await store.update(ids[1], {"content": "edited text"}, actor="cli")
        await store.archive(ids[2], reason="old")
        await store.request_review(ids[3], reason="check me")
        await store.set_meta("last_alive", "2026-01-01")
        await store.dead_letter(source="http", reason="bad", payload=b"\x00\xffraw")
        await store.outbox_put([("memwarden/x", b"\x00\x01payload", 1, True)], max_rows=100)
        await store.record_access([ids[4]], session="s1")
        await store.record_series()
        await store.erase([ids[5]], actor="cli", reason="gdpr")
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        rid = raw.execute("SELECT rid FROM blocks WHERE id = ?", (ids[6],)).fetchone()[0]
        raw.executescript(
            f"""
            INSERT INTO block_vectors VALUES ({rid}, 'stub', 4, x'00017f80');
            INSERT INTO sessions VALUES ('{ids[6]}', 's2', 1.5, -0.0, 3);
            INSERT INTO accesses (block_id, session_id, at)
                VALUES ('{ids[6]}', NULL, 1e300);
            INSERT INTO unmatched_counts VALUES ('fs', '2026-01-01', 'confirmed', 7, 5e-324, 2.5);
            INSERT INTO event_runs VALUES ({rid}, 9, 3, 'fs', 'confirmed', 4, 1.0, 2.0, 3.0);
            INSERT INTO proposals (id, block_rid, kind, key, proposal, confidence, why, created_at)
                VALUES ('p1', {rid}, 'binding', 'k', '{{"a": "\\u0000 esc"}}', 0.25, 'why', 1);
            INSERT INTO metric_series VALUES ('state', 'fresh', 300.0, 12);
            INSERT INTO revalidations (id, block_id, sensor, subject, reason, created_at, send_at,
                deadline_s) VALUES ('r1', '{ids[6]}', 'fs', 'f.yaml', 'stale', 1, 2, 30);
            """
        )
    finally:
        raw.close()


def _absent(path: Path) -> set[str]:
    """Tables of the PostgreSQL schema a store at this memwarden's SQLite version lacks
    (brought by a later SQLite version: left out of the copy)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    return {t for t in SQLITE_SINCE if t not in have}


def sqlite_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})") if r[6] == 0]
        rows = conn.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
    finally:
        conn.close()
    return sorted(rows, key=repr)


async def pg_rows(conn, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    quoted = ", ".join(f'"{c}"' for c in columns)
    return sorted((tuple(r) for r in await conn.fetch(f"SELECT {quoted} FROM {table}")), key=repr)


def same(a: Any, b: Any) -> bool:
    """Equal as values, -0.0 and NaN told apart as the copy must keep them."""
    if isinstance(a, float) and isinstance(b, float):
        return a.hex() == b.hex() or (math.isnan(a) and math.isnan(b))
    return bool(a == b) and type(a) is type(b)


async def compare_everything(source: Path, dsn: str) -> dict[str, int]:
    """Every copied table, row for row and value for value; table -> rows."""
    conn = await asyncpg.connect(dsn)
    try:
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
        } - NOT_COPIED_PG
        counts = {}
        for table in sorted(tables - _absent(source)):
            expected = sqlite_rows(source, table)
            cols = [
                r["attname"]
                for r in await conn.fetch(
                    "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0"
                    " AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
                    table,
                )
            ]
            got = await pg_rows(conn, table, cols)
            assert len(got) == len(expected), table
            for want_row, got_row in zip(expected, got, strict=True):
                for want, have in zip(want_row, got_row, strict=True):
                    if isinstance(want, int) and isinstance(have, float):
                        want = float(want)  # noqa: PLW2901 - an integral REAL
                    if isinstance(want, str) and isinstance(have, bytes):
                        want = want.encode()  # noqa: PLW2901 - dead_letters.payload
                    assert same(want, have), (table, want_row, got_row)
            counts[table] = len(got)
        return counts
    finally:
        await conn.close()


@pytest.fixture
async def source(tmp_path: Path) -> Path:
    path = tmp_path / "memwarden.db"
    await populate(path)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_round_trip_every_table_row_for_row(pg_server: PgServer, source: Path) -> None:
    """Every table that carries state arrives value for value; every one had rows, so the
    test covers them all; the source file is not changed by a byte."""
    before = digest(source)
    dsn = pg_server.create_database()
    report = await copy_to_postgres(source, dsn, chunk_rows=7)
    assert not report.resumed
    counts = await compare_everything(source, dsn)
    empty = sorted(t for t, n in counts.items() if n == 0)
    assert empty == [], f"populate() left these tables empty: {empty}"
    assert {t.name for t in report.tables} == set(counts)
    assert set(report.absent) == _absent(source)
    assert report.copied == report.rows == sum(counts.values())
    assert digest(source) == before
    assert "blocks_fts" in DERIVED


async def test_copied_store_searches_and_continues_numbering(
    pg_server: PgServer, source: Path
) -> None:
    """The derived search column is filled for copied blocks (archived ones outside the
    index), and a new row after the copy gets the next number, not a taken one."""
    dsn = pg_server.create_database()
    await copy_to_postgres(source, dsn)
    conn = await asyncpg.connect(dsn)
    try:
        hits = await conn.fetchval(
            "SELECT count(*) FROM blocks WHERE state <> 'archived'"
            " AND search @@ to_tsquery('memwarden_search', 'cafe & naive')"
        )
        assert hits == 1
        top = await conn.fetchval("SELECT max(seq) FROM events")
        seq = await conn.fetchval(
            "INSERT INTO events (event_id, sensor, subject, outcome, observed_at, received_at)"
            " VALUES ('new', 'fs', 'x', 'confirmed', 1, 1) RETURNING seq"
        )
        assert seq == top + 1
        queued = await conn.fetchval("SELECT count(*) FROM embed_queue")
        assert queued == len(sqlite_rows(source, "embed_queue"))  # not doubled by triggers
    finally:
        await conn.close()


class InterruptedCopyError(Exception):
    """Stands for the process being killed between two chunks."""


async def test_interrupted_copy_resumes_to_the_same_result(
    pg_server: PgServer, source: Path
) -> None:
    """A copy stopped after 5 chunks, then run again, finishes with exactly the rows of an
    uninterrupted copy (none twice, none missing), and says it resumed."""
    dsn = pg_server.create_database()

    def stop_after_five(_table: str, chunks: int) -> None:
        if chunks == 5:
            raise InterruptedCopyError

    with pytest.raises(InterruptedCopyError):
        await copy_to_postgres(source, dsn, chunk_rows=3, after_chunk=stop_after_five)
    conn = await asyncpg.connect(dsn)
    try:
        partial = await conn.fetchval("SELECT sum(rows) FROM copy_progress")
        assert 0 < partial < sum(len(sqlite_rows(source, t)) for t in ("blocks", "bindings"))
    finally:
        await conn.close()
    # Resumed with another chunk size: the keys, not the chunk count, say where it was.
    report = await copy_to_postgres(source, dsn, chunk_rows=4)
    assert report.resumed
    assert report.copied == report.rows - partial
    interrupted = await compare_everything(source, dsn)

    fresh = pg_server.create_database()
    await copy_to_postgres(source, fresh, chunk_rows=1000)
    assert await compare_everything(source, fresh) == interrupted
    # Run again once finished: nothing to copy, verified again.
    again = await copy_to_postgres(source, dsn)
    assert again.copied == 0
    assert again.rows == report.rows


async def test_changed_source_fails_verification(pg_server: PgServer, source: Path) -> None:
    """A source that changed between an interrupted run and its resumption (a row already
    copied was edited) is caught by the checksum, naming the table."""
    dsn = pg_server.create_database()

    def stop(_table: str, chunks: int) -> None:
        if chunks == 3:
            raise InterruptedCopyError

    with pytest.raises(InterruptedCopyError):
        await copy_to_postgres(source, dsn, chunk_rows=5, after_chunk=stop)
    raw = sqlite3.connect(source, isolation_level=None)
    try:
        raw.execute("UPDATE blocks SET importance = 0.123 WHERE rid = 1")
    finally:
        raw.close()
    with pytest.raises(StorageError, match="verification failed for table blocks"):
        await copy_to_postgres(source, dsn)


async def test_target_with_other_data_is_refused(
    pg_server: PgServer, source: Path, tmp_path: Path
) -> None:
    """A database with foreign tables, a store of its own, or a copy from another file is
    refused with a clear message, and left as it was."""
    foreign = pg_server.create_database()
    conn = await asyncpg.connect(foreign)
    await conn.execute("CREATE TABLE customers (id int)")
    await conn.close()
    with pytest.raises(StorageError, match=r"tables memwarden did not create \(customers\)"):
        await copy_to_postgres(source, foreign)

    copied = pg_server.create_database()
    await copy_to_postgres(source, copied)
    other = tmp_path / "other.db"
    await populate(other, blocks=7)
    with pytest.raises(StorageError, match="holds a copy of another store"):
        await copy_to_postgres(other, copied)

    own = pg_server.create_database()
    conn = await asyncpg.connect(own)
    try:
        from memwarden.memory.pg import migrate  # noqa: PLC0415

        await migrate(conn)
        await conn.execute("INSERT INTO meta VALUES ('k', 'v')")
    finally:
        await conn.close()
    with pytest.raises(StorageError, match="already holds a memwarden store"):
        await copy_to_postgres(source, own)

    # A memwarden schema beside another application's table: refused too.
    conn = await asyncpg.connect(own)
    try:
        await conn.execute("DELETE FROM meta; CREATE TABLE invoices (id int)")
    finally:
        await conn.close()
    with pytest.raises(StorageError, match=r"did not create \(invoices\)"):
        await copy_to_postgres(source, own)


async def test_older_source_is_migrated_in_a_copy(pg_server: PgServer, tmp_path: Path) -> None:
    """A store at schema version 4 is copied through a migrated temporary snapshot; the file
    itself stays at version 4, unchanged."""
    old = tmp_path / "old.db"
    conn = sqlite_at_version(old, 4)
    conn.execute(
        "INSERT INTO blocks (id, content, source, category, info_type, volatility, tier, state,"
        " reliability, importance, validity_window_s, half_life_s, created_at, updated_at)"
        " VALUES ('0190a0b0-0000-7000-8000-000000000001', 'old fact', 'agent', 'fact', 'fact',"
        " 'stable', 'working', 'fresh', 0.5, 0.5, 60, 60, 1, 1)"
    )
    conn.close()
    before = digest(old)
    dsn = pg_server.create_database()
    report = await copy_to_postgres(old, dsn)
    assert report.source_schema == 4
    assert digest(old) == before
    pg = await asyncpg.connect(dsn)
    try:
        row = await pg.fetchrow("SELECT content, namespace, content_key FROM blocks")
        assert row["content"] == "old fact"
        assert row["namespace"] == "default"  # added by SQLite migration 10
        assert row["content_key"]  # filled by the backfill after migration 6
    finally:
        await pg.close()


async def test_sources_refused_clearly(pg_server: PgServer, tmp_path: Path) -> None:
    """Missing file, not a database, not a memwarden store, newer schema: one clear line."""
    dsn = pg_server.create_database()
    with pytest.raises(StorageError, match="no such database file"):
        await copy_to_postgres(tmp_path / "missing.db", dsn)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StorageError, match="not a readable SQLite database"):
        await copy_to_postgres(junk, dsn)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(StorageError, match="not a memwarden store"):
        await copy_to_postgres(empty, dsn)
    newer = tmp_path / "newer.db"
    await populate(newer, blocks=7)
    raw = sqlite3.connect(newer)
    raw.execute("PRAGMA user_version = 999")
    raw.close()
    with pytest.raises(StorageError, match="newer than this memwarden"):
        await copy_to_postgres(newer, dsn)


async def test_value_postgres_cannot_hold_unchanged_is_refused(
    pg_server: PgServer, source: Path
) -> None:
    """Text in an INTEGER column (SQLite stores it; PostgreSQL could not) stops the copy
    naming table, row and column; nothing is half-copied in that table."""
    raw = sqlite3.connect(source, isolation_level=None)
    try:
        raw.execute("UPDATE blocks SET access_count = 'many' WHERE rid = 2")
    finally:
        raw.close()
    dsn = pg_server.create_database()
    with pytest.raises(StorageError, match=r"blocks row \[2\]: column access_count holds str"):
        await copy_to_postgres(source, dsn, chunk_rows=1)


def test_row_digest_tells_types_and_values_apart() -> None:
    """The canonical encoding separates 1, 1.0, '1', b'1', None, -0.0 and 0.0, and column
    boundaries ('ab','c' vs 'a','bc')."""
    rows = [(1,), (1.0,), ("1",), (b"1",), (None,), (-0.0,), (0.0,), ("ab", "c"), ("a", "bc")]
    assert len({row_digest(r) for r in rows}) == len(rows)


async def test_two_copies_at_once_are_refused(pg_server: PgServer, source: Path) -> None:
    """While one copy runs into a database, a second is refused (it would copy the same
    chunks); once the first has finished, a run goes ahead (and finds nothing to copy)."""
    dsn = pg_server.create_database()
    second: list[BaseException] = []

    def start_second(_table: str, chunks: int) -> None:
        if chunks == 1:
            # The first copy holds its lock now: a second one, run to its end on its own
            # loop in another thread, must be refused.
            with ThreadPoolExecutor(1) as pool:
                future = pool.submit(asyncio.run, copy_to_postgres(source, dsn))
                try:
                    future.result(timeout=60)
                except StorageError as err:
                    second.append(err)

    await copy_to_postgres(source, dsn, chunk_rows=10, after_chunk=start_second)
    assert len(second) == 1
    assert "another `memwarden migrate` is copying" in str(second[0])
    again = await copy_to_postgres(source, dsn)
    assert again.copied == 0


_ROUND_TRIP_DB: dict[str, str] = {}
_VALUES = st.tuples(
    st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.one_of(st.none(), st.text(st.characters(exclude_characters="\x00", codec="utf-8"))),
    st.one_of(st.none(), st.binary()),
)


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(_VALUES, min_size=1, max_size=40))
def test_values_arrive_exactly(pg_server: PgServer, rows: list[tuple[Any, ...]]) -> None:
    """Any bigint, double (NaN, infinities, -0.0, subnormals), text (no NUL) and bytes a
    SQLite store can hold comes back from PostgreSQL with the same digest, so the copy's
    checksum compares values, never their rendering."""
    if "dsn" not in _ROUND_TRIP_DB:
        _ROUND_TRIP_DB["dsn"] = pg_server.create_database()

    async def round_trip() -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(_ROUND_TRIP_DB["dsn"])
        try:
            await conn.execute(
                'CREATE TEMP TABLE v (i bigint, r double precision, t text COLLATE "C", b bytea)'
            )
            await conn.copy_records_to_table("v", records=rows)
            return [tuple(r) for r in await conn.fetch("SELECT i, r, t, b FROM v")]
        finally:
            await conn.close()

    back = asyncio.run(round_trip())
    assert sorted(row_digest(r) for r in back) == sorted(row_digest(r) for r in rows)


async def test_connection_lost_mid_copy_then_resumed(pg_server: PgServer, source: Path) -> None:
    """The server drops the copy's connection between chunks: the run fails with one line
    naming the target, and the next run resumes to the same rows as an unbroken copy."""
    dsn = pg_server.create_database()
    name = dsn.rsplit("/", 1)[1]

    def drop_connection(_table: str, chunks: int) -> None:
        if chunks == 3:
            pg_server.psql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            )

    with pytest.raises(StorageError) as caught:
        await copy_to_postgres(source, dsn, chunk_rows=4, after_chunk=drop_connection)
    assert "\n" not in str(caught.value)
    assert name in str(caught.value)
    report = await copy_to_postgres(source, dsn)
    assert report.resumed
    await compare_everything(source, dsn)
