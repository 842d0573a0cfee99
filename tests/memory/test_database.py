"""The Database on its own: the connection owner every part of the store goes through."""

from __future__ import annotations

import asyncio
import gc
import shutil
import sqlite3
import threading
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

import memwarden.memory
import memwarden.memory._writer as writer_module
from memwarden.errors import StorageError
from memwarden.memory import Database
from memwarden.memory._database import COMMIT_WEIGHT
from memwarden.memory._sql import in_thread
from memwarden.memory._writer import ThreadRun

if TYPE_CHECKING:
    from pathlib import Path

    import aiosqlite


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's __all__ order (RUF022): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_the_package_exports_the_store_and_its_results_sorted():
    """memwarden.memory exports Store, Database and the result types, in a sorted __all__."""
    exported = memwarden.memory.__all__
    assert exported == sorted(exported, key=_isort_key)
    for name in ("Store", "Database", "ApplyResult", "SearchHit", "BlockPatch", "FactEvidence"):
        assert name in exported
        assert getattr(memwarden.memory, name) is not None


async def test_a_write_returns_its_jobs_result_once_committed(tmp_path: Path):
    """write(job) returns what the job returned, and a reader sees the row at once."""
    async with Database(tmp_path / "d.db") as db:

        async def job(conn: aiosqlite.Connection) -> int:
            cur = await conn.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
            return int(cur.rowcount)

        assert await db.write(job) == 1
        async with db.read() as conn:
            rows = list(await conn.execute_fetchall("SELECT value FROM meta WHERE key = 'k'"))
        assert rows == [("v",)]
        assert db.writer is not None
        assert db.writer.commits >= 1


async def test_a_failing_job_raises_to_its_caller_and_writes_nothing(tmp_path: Path):
    """A job that raises is rolled back and its error reaches the caller."""
    async with Database(tmp_path / "d.db") as db:

        async def job(conn: aiosqlite.Connection) -> None:
            await conn.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
            raise ValueError("no")

        with pytest.raises(ValueError, match="no"):
            await db.write(job)
        async with db.read() as conn:
            assert list(await conn.execute_fetchall("SELECT * FROM meta WHERE key = 'k'")) == []


async def test_readers_are_read_only(tmp_path: Path):
    """A reader connection refuses writes (PRAGMA query_only): writes go through the writer."""
    async with Database(tmp_path / "d.db") as db, db.read() as conn:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await conn.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")


async def test_the_prepare_hook_runs_at_open_instead_of_the_migrations(tmp_path: Path):
    """``prepare`` is the backend's schema step: it runs once on the writer, before readers."""
    seen: list[str] = []

    async def prepare(conn: aiosqlite.Connection) -> None:
        await conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        seen.append("prepared")

    async with Database(tmp_path / "d.db", prepare=prepare) as db:
        async with db.read() as conn:
            tables = {r[0] for r in await conn.execute_fetchall("SELECT name FROM sqlite_master")}
        assert seen == ["prepared"]
        assert tables == {"t"}  # no migration ran


async def test_a_closed_database_refuses_reads_and_writes(tmp_path: Path):
    """After close, read() and write() raise StorageError; close is idempotent."""
    db = Database(tmp_path / "d.db")
    await db.open()
    await db.close()
    await db.close()

    async def job(conn: aiosqlite.Connection) -> None:
        return None

    with pytest.raises(StorageError, match="closed"):
        await db.write(job)
    with pytest.raises(StorageError, match="closed"):
        async with db.read():
            pass
    assert db.write_backlog == 0


async def test_concurrent_writes_share_commits(tmp_path: Path):
    """Jobs queued while the writer is busy commit together (group commit)."""
    async with Database(tmp_path / "d.db") as db:
        assert db.writer is not None
        before = db.writer.commits

        async def one(i: int) -> int:
            async def job(conn: aiosqlite.Connection) -> int:
                await conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (f"k{i}", "v"))
                return i

            return await db.write(job)

        assert await asyncio.gather(*(one(i) for i in range(40))) == list(range(40))
        assert db.writer.commits - before < 40


async def test_in_thread_runs_after_what_was_queued_and_in_the_same_transaction(
    tmp_path: Path,
):
    """``in_thread(conn, fn)`` runs ``fn`` on the connection's own thread, after the
    statements queued before it, inside the job's transaction; its error rolls it back."""
    async with Database(tmp_path / "d.db") as db:

        async def job(conn: aiosqlite.Connection) -> tuple[list[str], bool]:
            queued = asyncio.ensure_future(
                conn.execute("INSERT INTO meta (key, value) VALUES ('a', '1')")
            )
            await asyncio.sleep(0)  # the INSERT is on the thread's queue first

            def fn(raw: sqlite3.Connection) -> tuple[list[str], bool]:
                seen = [r[0] for r in raw.execute("SELECT key FROM meta WHERE key = 'a'")]
                raw.execute("INSERT INTO meta (key, value) VALUES ('b', '2')")
                return seen, threading.current_thread() is not threading.main_thread()

            got = await in_thread(conn, fn)
            await queued
            return got

        assert await db.write(job) == (["a"], True)

        async def failing(conn: aiosqlite.Connection) -> None:
            def fn(raw: sqlite3.Connection) -> None:
                raw.execute("INSERT INTO meta (key, value) VALUES ('c', '3')")
                raise ValueError("no")

            await in_thread(conn, fn)

        with pytest.raises(ValueError, match="no"):
            await db.write(failing)
        async with db.read() as conn:
            keys = [r[0] for r in await conn.execute_fetchall("SELECT key FROM meta")]
        assert {"a", "b"} <= set(keys)
        assert "c" not in keys


async def test_on_thread_jobs_share_one_hand_off_per_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Jobs submitted with write_on_thread run on the writer's thread, in order with the
    async jobs of their transaction, each caller getting its own result; a run of them
    costs one trip to the thread, BEGIN and COMMIT included."""

    trips = []
    real = writer_module.in_thread

    async def counting(conn: aiosqlite.Connection, fn: Any) -> Any:
        trips.append(fn)
        return await real(conn, fn)

    monkeypatch.setattr(writer_module, "in_thread", counting)
    async with Database(tmp_path / "d.db") as db:
        assert db.writer is not None
        before = db.writer.commits
        threads: set[int] = set()

        def put(i: int) -> Any:
            def job(raw: sqlite3.Connection, _run: ThreadRun) -> int:
                threads.add(threading.get_ident())
                assert raw.in_transaction
                raw.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (f"k{i:02}",))
                return i

            return job

        async def put_async(conn: aiosqlite.Connection) -> str:
            async with conn.execute("SELECT count(*) FROM meta WHERE key LIKE 'k%'") as cur:
                row = await cur.fetchone()
            return f"after {row[0] if row else None}"

        got = await asyncio.gather(
            *(db.write_on_thread(put(i)) for i in range(10)),
            db.write(put_async),
            *(db.write_on_thread(put(i)) for i in range(10, 20)),
        )
        assert got == [*range(10), "after 10", *range(10, 20)]
        commits = db.writer.commits - before
        assert commits < 21
        assert len(trips) <= 2 * commits  # one per run of on-thread jobs, not one per job
        assert threading.get_ident() not in threads
        async with db.read() as conn:
            keys = [r[0] for r in await conn.execute_fetchall("SELECT key FROM meta")]
        assert sorted(k for k in keys if k.startswith("k")) == [f"k{i:02}" for i in range(20)]


async def test_a_failing_on_thread_job_is_refused_alone(tmp_path: Path):
    """In a transaction of on-thread jobs, the one that raises gets its error (SQLite's as
    a StorageError) and writes nothing; the others commit."""
    async with Database(tmp_path / "d.db") as db:

        def put(key: str) -> Any:
            def job(raw: sqlite3.Connection, _run: ThreadRun) -> str:
                raw.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (key,))
                if key == "bad":
                    raise ValueError("no")
                if key == "dup":
                    raw.execute("INSERT INTO meta (key, value) VALUES ('dup', 'again')")
                return key

            return job

        got = await asyncio.gather(
            *(db.write_on_thread(put(k)) for k in ("a", "bad", "b", "dup", "c")),
            return_exceptions=True,
        )
        assert got[0::2] == ["a", "b", "c"]
        assert isinstance(got[1], ValueError)
        assert isinstance(got[3], StorageError)
        async with db.read() as conn:
            keys = {r[0] for r in await conn.execute_fetchall("SELECT key FROM meta")}
        assert {"a", "b", "c"} <= keys
        assert not {"bad", "dup"} & keys


class _Keys:
    """A run part: the keys its jobs left, inserted at the run's end; ``fail`` makes the
    flush fail when it holds that key."""

    flushes: ClassVar[list[list[str]]] = []
    fail: ClassVar[str | None] = None

    def __init__(self) -> None:
        self.keys: list[str] = []

    def flush(self, raw: sqlite3.Connection) -> None:
        _Keys.flushes.append(list(self.keys))
        if _Keys.fail in self.keys:
            raise ValueError(f"cannot write {_Keys.fail}")
        raw.executemany(
            "INSERT INTO meta (key, value) VALUES (?, 'late')", [(k,) for k in self.keys]
        )


def _leave(key: str, *, raises: bool = False) -> Any:
    def job(raw: sqlite3.Connection, run: ThreadRun) -> str:
        # Not in the table during the run: written at its end.
        assert raw.execute("SELECT count(*) FROM meta WHERE key = ?", (key,)).fetchone()[0] == 0
        run.part(_Keys).keys.append(key)
        if raises:
            raise ValueError(f"no {key}")
        return key

    return job


async def _meta_keys(db: Database) -> set[str]:
    async with db.read() as conn:
        return {
            r[0] for r in await conn.execute_fetchall("SELECT key FROM meta WHERE value = 'late'")
        }


async def test_a_run_flushes_what_its_jobs_left_once_before_the_commit(tmp_path: Path):
    """The on-thread jobs of one run share one part: it is flushed once, after the last
    job and before the COMMIT, with what every job left in it."""
    _Keys.flushes, _Keys.fail = [], None
    async with Database(tmp_path / "d.db") as db:
        assert db.writer is not None
        commits = db.writer.commits
        got = await asyncio.gather(*(db.write_on_thread(_leave(k)) for k in "abcd"))
        assert got == list("abcd")
        assert db.writer.commits - commits == 1
        assert _Keys.flushes == [list("abcd")]
        assert await _meta_keys(db) == set("abcd")


async def test_a_failing_job_takes_what_its_run_left_with_it(tmp_path: Path):
    """A job that raises rolls its run back, part included (never flushed with its key);
    the others, run again alone, each flush their own."""
    _Keys.flushes, _Keys.fail = [], None
    async with Database(tmp_path / "d.db") as db:
        got = await asyncio.gather(
            db.write_on_thread(_leave("a")),
            db.write_on_thread(_leave("bad", raises=True)),
            db.write_on_thread(_leave("c")),
            return_exceptions=True,
        )
        assert got[0::2] == ["a", "c"]
        assert isinstance(got[1], ValueError)
        assert _Keys.flushes == [["a"], ["c"]]
        assert await _meta_keys(db) == {"a", "c"}


async def test_a_failing_flush_fails_the_run_and_each_job_runs_alone(tmp_path: Path):
    """When the run's flush fails, nothing of the run is written; each job runs again
    alone, and only the one whose own flush fails gets the error."""
    _Keys.flushes, _Keys.fail = [], "bad"
    try:
        async with Database(tmp_path / "d.db") as db:
            got = await asyncio.gather(
                *(db.write_on_thread(_leave(k)) for k in ("a", "bad", "c")),
                return_exceptions=True,
            )
            assert got[0::2] == ["a", "c"]
            assert isinstance(got[1], ValueError)
            assert _Keys.flushes == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]
            assert await _meta_keys(db) == {"a", "c"}
    finally:
        _Keys.fail = None


async def test_on_thread_jobs_run_with_the_cyclic_collector_paused(tmp_path: Path):
    """While a run of on-thread jobs executes, the cyclic garbage collector waits; it is
    back on after the run, a failing one too, and stays off when it was off before."""
    async with Database(tmp_path / "d.db") as db:
        seen: list[bool] = []

        def job(raw: sqlite3.Connection, _run: ThreadRun) -> int:
            seen.append(gc.isenabled())
            return raw.execute("SELECT 1").fetchone()[0]

        def failing(raw: sqlite3.Connection, _run: ThreadRun) -> int:
            seen.append(gc.isenabled())
            raise ValueError("no")

        assert gc.isenabled()
        assert await db.write_on_thread(job) == 1
        assert gc.isenabled()
        with pytest.raises(ValueError, match="no"):
            await db.write_on_thread(failing)
        assert gc.isenabled()
        assert seen == [False, False]

        gc.disable()
        try:
            assert await db.write_on_thread(job) == 1
            assert not gc.isenabled()
        finally:
            gc.enable()


async def test_a_flood_commits_in_growing_steps_and_a_drained_queue_resets_them(tmp_path: Path):
    """A transaction that leaves jobs waiting doubles the next one's weight bound, up to
    ``flood_commit_weight``; the first transaction of a flood is no bigger than the
    normal bound, and once the queue is empty the bound is the normal one again."""
    step = COMMIT_WEIGHT // 2
    async with Database(tmp_path / "d.db", flood_commit_weight=4 * COMMIT_WEIGHT) as db:
        writer = db.writer
        assert writer is not None
        seen: list[int] = []  # the commit count each job ran under: its transaction

        def job(raw: sqlite3.Connection, _run: ThreadRun) -> None:
            assert writer is not None
            seen.append(writer.commits)

        def sizes() -> list[int]:
            return [seen.count(c) for c in sorted(set(seen))]

        await asyncio.gather(*(db.write_on_thread(job, weight=step) for _ in range(20)))
        assert sizes() == [2, 4, 8, 6]  # 20 000, 40 000, 80 000 (the bound), the rest
        seen.clear()
        await asyncio.gather(*(db.write_on_thread(job, weight=step) for _ in range(5)))
        assert sizes() == [2, 3]  # the next flood starts from 20 000 again

    async with Database(tmp_path / "e.db", flood_commit_weight=COMMIT_WEIGHT) as db:
        writer = db.writer
        seen.clear()
        await asyncio.gather(*(db.write_on_thread(job, weight=step) for _ in range(8)))
        assert sizes() == [2, 2, 2, 2]  # no growth: every transaction at the normal bound


async def _flood_of_rows(db: Database, jobs: int) -> list[int]:
    """``jobs`` jobs of half a transaction's weight at once, each writing 150 rows of
    4 000 bytes (a WAL of more than SQLite's 1 000-page checkpoint threshold in all);
    the ``wal_autocheckpoint`` each job's transaction was committed under."""
    seen: list[int] = []

    def job(raw: sqlite3.Connection, _run: ThreadRun) -> None:
        raw.execute("CREATE TABLE IF NOT EXISTS filler (b BLOB NOT NULL)")
        raw.executemany("INSERT INTO filler VALUES (randomblob(4000))", [()] * 150)
        seen.append(raw.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    await asyncio.gather(*(db.write_on_thread(job, weight=COMMIT_WEIGHT // 2) for _ in range(jobs)))
    return seen


def _rows_in_file_alone(path: Path, copy: Path) -> int:
    """The filler rows the database file holds without its WAL (a copy of the file only)."""
    shutil.copyfile(path, copy)
    conn = sqlite3.connect(copy)
    try:
        found = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'filler'")
        if not found.fetchone()[0]:
            return 0
        return int(conn.execute("SELECT count(*) FROM filler").fetchone()[0])
    finally:
        conn.close()


async def test_a_flood_checkpoints_once_at_its_last_commit(tmp_path: Path):
    """Transactions taken while jobs were left waiting commit without a WAL checkpoint;
    the one that empties the queue checkpoints everything before its callers hear back:
    the database file alone then holds every row. With ``flood_wal_mib=0`` every
    commit checkpoints, as SQLite does."""
    path = tmp_path / "d.db"
    async with Database(path) as db:
        writer = db.writer
        assert writer is not None
        # 12 jobs of 10 000: transactions of 2, 4 and 6 jobs (memory._batching's steps).
        assert await _flood_of_rows(db, 12) == [0] * 6 + [1000] * 6
        assert writer.deferred_checkpoints == 2
        assert _rows_in_file_alone(path, tmp_path / "copy.db") == 12 * 150
        # A lone job after the flood: SQLite's default, no deferral counted.
        assert await _flood_of_rows(db, 1) == [1000]
        assert writer.deferred_checkpoints == 2

    async with Database(tmp_path / "e.db", flood_wal_mib=0) as db:
        assert db.writer is not None
        assert await _flood_of_rows(db, 12) == [1000] * 12
        assert db.writer.deferred_checkpoints == 0


async def test_a_flood_checkpoints_again_once_the_wal_passes_its_bound(tmp_path: Path):
    """Past ``flood_wal_mib`` a flood's commit checkpoints (the WAL grows by one
    transaction past the bound at most). The WAL file is cut back to 64 MiB once a
    checkpoint emptied it (``journal_size_limit``), so a flood's WAL does not stay."""
    path = tmp_path / "d.db"
    async with Database(path, flood_wal_mib=1) as db:
        assert db.writer is not None
        seen = await _flood_of_rows(db, 12)
        # The first transaction found a small WAL and deferred; the second found it past
        # 1 MiB (the first wrote 1.2 MB) and checkpointed, as did the last.
        assert seen == [0] * 2 + [1000] * 10
        assert db.writer.deferred_checkpoints == 1
        # The second commit copied both transactions into the file; the last one's 900
        # rows (under SQLite's 1 000 pages) wait in the WAL, as they always did.
        assert _rows_in_file_alone(path, tmp_path / "copy.db") == 6 * 150

        def limit(raw: sqlite3.Connection, _run: ThreadRun) -> int:
            return int(raw.execute("PRAGMA journal_size_limit").fetchone()[0])

        assert await db.write_on_thread(limit) == 64 * 2**20
