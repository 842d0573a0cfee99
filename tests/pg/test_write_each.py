"""PgDatabase.write_each: jobs in transactions of their own on up to N connections at once
(the writer's and ones opened for the call), results in the jobs' order, conflicts run
again, a refused connection done without, a failure or a cancellation leaving no
connection behind."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import asyncpg
import pytest
from structlog.testing import capture_logs

from memwarden.errors import StorageError
from memwarden.memory import Store
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg import _database as pg_database
from memwarden.memory.pg._writer import run_transaction
from tests.support import eventually

if TYPE_CHECKING:
    from tests.pgserver import PgServer


async def _no_schema(_conn: object) -> None:
    """A prepare hook that migrates nothing (these tests make their own table)."""


@pytest.fixture
async def db(pg_server: PgServer):
    dsn = pg_server.create_database()
    async with PgDatabase(dsn, prepare=_no_schema, readers=1) as database:
        await database.write(
            lambda c: c.execute("CREATE TABLE t (k text PRIMARY KEY, pid int NOT NULL)")
        )
        yield database


class _Meter:
    """Jobs that record their connection's backend and how many of them run at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.two_inside = asyncio.Event()

    def job(self, key: str, *, wait_for_two: bool = False):
        async def run(conn) -> tuple[str, int]:
            self.inside += 1
            self.most = max(self.most, self.inside)
            if self.inside >= 2:
                self.two_inside.set()
            try:
                pid = int(await conn.fetchval("SELECT pg_backend_pid()"))
                await conn.execute("INSERT INTO t (k, pid) VALUES ($1, $2)", key, pid)
                if wait_for_two:  # hold this transaction open until another job is inside
                    await asyncio.wait_for(self.two_inside.wait(), timeout=10)
                return key, pid
            finally:
                self.inside -= 1

        return run


async def _sessions(db: PgDatabase) -> int:
    async with db.read() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            )
        )


async def _back_to(db: PgDatabase, sessions: int) -> bool:
    return await _sessions(db) == sessions


async def _rows(db: PgDatabase) -> dict[str, int]:
    async with db.read() as conn:
        return {r["k"]: r["pid"] for r in await conn.fetch("SELECT k, pid FROM t")}


async def test_two_connections_at_once_results_in_order(db: PgDatabase) -> None:
    """Eight jobs on two connections: two run at once (never more), on the writer's
    connection and one opened for the call, which is closed afterwards; the results come
    back in the jobs' order and every job's row committed."""
    before = await _sessions(db)
    writer_pid = await db.write(lambda c: c.fetchval("SELECT pg_backend_pid()"))
    meter = _Meter()
    keys = [f"k{i}" for i in range(8)]
    done = await db.write_each(
        [meter.job(k, wait_for_two=i < 2) for i, k in enumerate(keys)], connections=2
    )
    assert [k for k, _ in done] == keys
    assert meter.most == 2
    pids = {pid for _, pid in done}
    assert len(pids) == 2
    assert writer_pid in pids
    assert await _rows(db) == dict(done)
    assert await eventually(lambda: _back_to(db, before), what="the side connection closed")


async def test_one_connection_is_the_writer_alone(db: PgDatabase) -> None:
    """connections=1 (or a database made with maintenance_connections=1): every job on
    the writer's connection, one after the other."""
    writer_pid = await db.write(lambda c: c.fetchval("SELECT pg_backend_pid()"))
    meter = _Meter()
    done = await db.write_each([meter.job(f"k{i}") for i in range(4)], connections=1)
    assert {pid for _, pid in done} == {writer_pid}
    assert meter.most == 1
    db.maintenance_connections = 1
    done = await db.write_each([meter.job(f"m{i}") for i in range(4)])
    assert {pid for _, pid in done} == {writer_pid}


async def test_a_refused_connection_is_done_without(
    db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server refuses the extra connection: a warning names it, and every job runs on
    the writer's connection."""

    async def refused(*_args: object, **_kwargs: object) -> None:
        raise asyncpg.TooManyConnectionsError("sorry, too many clients already")

    monkeypatch.setattr(pg_database.asyncpg, "connect", refused)
    writer_pid = await db.write(lambda c: c.fetchval("SELECT pg_backend_pid()"))
    meter = _Meter()
    with capture_logs() as logs:
        done = await db.write_each([meter.job(f"k{i}") for i in range(4)], connections=3)
    assert [k for k, _ in done] == ["k0", "k1", "k2", "k3"]
    assert {pid for _, pid in done} == {writer_pid}
    refusals = [e for e in logs if e["event"] == "store_maintenance_connection_refused"]
    assert len(refusals) == 1
    assert "too many clients" in refusals[0]["error"]


async def test_a_failing_job_raises_and_leaves_no_connection(db: PgDatabase) -> None:
    """A job breaking a constraint on the extra connection: its error is raised (a
    StorageError with the driver's error as its cause), its row is rolled back, what
    committed before stays, and the extra connection is gone."""
    await db.write(lambda c: c.execute("INSERT INTO t VALUES ('taken', 0)"))
    before = await _sessions(db)
    meter = _Meter()
    jobs = [meter.job("a", wait_for_two=True), meter.job("taken", wait_for_two=True)]
    with pytest.raises(StorageError) as err:
        await db.write_each(jobs, connections=2)
    assert isinstance(err.value.__cause__, asyncpg.UniqueViolationError)
    rows = await _rows(db)
    assert rows["taken"] == 0  # the failed job's insert never landed
    assert set(rows) == {"a", "taken"}
    assert await eventually(lambda: _back_to(db, before), what="the side connection closed")


async def test_a_cancelled_call_leaves_no_connection(db: PgDatabase) -> None:
    """Cancelled while both connections are inside a transaction: the extra connection's
    transaction is ended uncommitted and the connection with it; the writer's job, like
    any job a ``write`` handed to the writer, runs to its end and commits."""
    writer_pid = await db.write(lambda c: c.fetchval("SELECT pg_backend_pid()"))
    before = await _sessions(db)
    both, release = asyncio.Event(), asyncio.Event()
    inside: list[int] = []

    async def hold(conn) -> None:
        pid = int(await conn.fetchval("SELECT pg_backend_pid()"))
        inside.append(pid)
        await conn.execute("INSERT INTO t VALUES ($1, $2)", f"held-{pid}", pid)
        if len(inside) == 2:
            both.set()
        await release.wait()

    task = asyncio.create_task(db.write_each([hold, hold], connections=2))
    await asyncio.wait_for(both.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await eventually(lambda: _back_to(db, before), what="the side connection ended")
    await db.write(lambda c: c.execute("INSERT INTO t VALUES ('after', 0)"))
    assert set(await _rows(db)) == {f"held-{writer_pid}", "after"}


async def test_a_deadlock_victim_is_run_again(pg_server: PgServer) -> None:
    """run_transaction (the extra connections' jobs): a deadlock-victim transaction is
    rolled back and run again; another error is not."""
    conn = await asyncpg.connect(pg_server.create_database())
    try:
        await conn.execute("CREATE TABLE t (k text PRIMARY KEY)")
        attempts = 0

        async def victim_once(c) -> int:
            nonlocal attempts
            attempts += 1
            await c.execute("INSERT INTO t VALUES ($1)", "row")
            if attempts == 1:
                raise asyncpg.DeadlockDetectedError("deadlock detected")
            return attempts

        assert await run_transaction(conn, victim_once) == 2
        assert await conn.fetchval("SELECT count(*) FROM t") == 1

        async def duplicate(c) -> None:
            await c.execute("INSERT INTO t VALUES ('row')")

        with pytest.raises(StorageError) as err:
            await run_transaction(conn, duplicate)
        assert isinstance(err.value.__cause__, asyncpg.UniqueViolationError)
    finally:
        await conn.close()


async def test_the_store_passes_its_setting_on(pg_server: PgServer) -> None:
    """``Store(maintenance_connections=...)`` (the daemon's ``[store]
    maintenance_connections``) is what the decay's write_each uses."""
    async with Store(pg_server.create_database(), maintenance_connections=3) as store:
        assert store.pg_db is not None
        assert store.pg_db.maintenance_connections == 3
