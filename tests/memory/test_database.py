"""The Database on its own: the connection owner every part of the store goes through."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import TYPE_CHECKING

import pytest

import memwarden.memory
from memwarden.errors import StorageError
from memwarden.memory import Database
from memwarden.memory._sql import in_thread

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
