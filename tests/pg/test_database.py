"""PgDatabase: group commit (jobs share a transaction, each result returned after the
commit), a failing job fails alone, reads never wait for the writer, a lost writer
connection is replaced, and connecting fails with one clear line. ``write_each``: jobs in
transactions of their own on up to N connections at once (the writer's and ones opened
for the call), results in the jobs' order, conflicts run again, a refused connection
done without, a failure or a cancellation leaving no connection behind."""

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
    async with PgDatabase(dsn, prepare=_no_schema, readers=2) as database:
        await database.write(
            lambda c: c.execute("CREATE TABLE t (k text PRIMARY KEY, v int NOT NULL)")
        )
        yield database


def _insert(key: str, value: int = 0):
    async def job(conn) -> str:
        await conn.execute("INSERT INTO t (k, v) VALUES ($1, $2)", key, value)
        return key

    return job


def _count_releases(db: PgDatabase, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The readers ``db`` gives back through the pool from now on, in order."""
    released: list[object] = []
    give_back = db._give_back_slowly

    async def counted(conn):
        released.append(conn)
        await give_back(conn)

    monkeypatch.setattr(db, "_give_back_slowly", counted)
    return released


async def _keys(db: PgDatabase) -> list[str]:
    async with db.read() as conn:
        return [r["k"] for r in await conn.fetch("SELECT k FROM t ORDER BY k")]


async def test_jobs_share_commits_and_return_their_results(db: PgDatabase) -> None:
    """Fifty concurrent writes commit in fewer transactions than jobs, each caller gets its
    own result, and every row is there once they have returned."""
    assert db.writer is not None
    before = db.writer.commits
    keys = [f"k{i:02d}" for i in range(50)]
    results = await asyncio.gather(*(db.write(_insert(k)) for k in keys))
    assert results == keys
    assert db.writer.commits - before < len(keys)
    assert await _keys(db) == keys


async def test_a_failing_job_fails_alone(db: PgDatabase) -> None:
    """In one batch, a job that breaks a constraint and one that raises get their own
    errors; the other jobs of the batch commit."""
    await db.write(_insert("dup"))

    async def boom(_conn) -> None:
        msg = "the job's own error"
        raise ValueError(msg)

    outcomes = await asyncio.gather(
        db.write(_insert("a")),
        db.write(_insert("dup")),  # unique violation inside the shared transaction
        db.write(_insert("b")),
        db.write(boom),
        db.write(_insert("c")),
        return_exceptions=True,
    )
    assert outcomes[0] == "a"
    assert isinstance(outcomes[1], StorageError)
    assert isinstance(outcomes[1].__cause__, asyncpg.UniqueViolationError)
    assert outcomes[2] == "b"
    assert isinstance(outcomes[3], ValueError)
    assert outcomes[4] == "c"
    assert await _keys(db) == ["a", "b", "c", "dup"]


async def test_result_returned_only_after_commit(db: PgDatabase) -> None:
    """While a job's transaction is open its row is invisible to readers, and its caller
    has not returned; once it returns, readers see the row."""
    inside = asyncio.Event()
    release = asyncio.Event()

    async def slow(conn) -> str:
        await conn.execute("INSERT INTO t (k, v) VALUES ('slow', 1)")
        inside.set()
        await release.wait()
        return "done"

    task = asyncio.create_task(db.write(slow))
    await inside.wait()
    # A read while the writer holds its transaction open: answered, without the row.
    assert await asyncio.wait_for(_keys(db), timeout=5) == []
    assert not task.done()
    release.set()
    assert await task == "done"
    assert await _keys(db) == ["slow"]


async def test_close_commits_what_was_accepted(pg_server: PgServer) -> None:
    """Writes submitted before close are committed; a write after close is refused."""
    dsn = pg_server.create_database()
    database = PgDatabase(dsn, prepare=_no_schema)
    await database.open()
    await database.write(lambda c: c.execute("CREATE TABLE t (k text PRIMARY KEY, v int)"))
    release = asyncio.Event()
    inside = asyncio.Event()

    async def hold(_conn) -> None:
        inside.set()
        await release.wait()

    holding = asyncio.create_task(database.write(hold))
    await inside.wait()
    pending = [asyncio.create_task(database.write(_insert(f"k{i}"))) for i in range(10)]
    await eventually(lambda: database.write_backlog == 10, what="ten jobs queued")
    closing = asyncio.create_task(database.close())
    release.set()
    await closing
    await holding
    assert [await p for p in pending] == [f"k{i}" for i in range(10)]
    with pytest.raises(StorageError, match="closed"):
        await database.write(_insert("late"))
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM t") == 10
    finally:
        await conn.close()


async def test_writer_survives_a_killed_connection(db: PgDatabase) -> None:
    """The server ends the writer's session: a job caught in it fails with StorageError
    (never hangs), and writes go on, on a fresh connection."""
    pid = await db.write(lambda c: c.fetchval("SELECT pg_backend_pid()"))
    async with db.read() as conn:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)

    async def new_pid() -> int | None:
        try:
            found = await db.write(lambda c: c.fetchval("SELECT pg_backend_pid()"))
        except StorageError:
            return None  # the job that met the dead connection
        return int(found)

    assert await eventually(new_pid, timeout_s=10, what="a write after the kill") != pid
    await db.write(_insert("after"))

    async def ends_its_own_session(conn) -> None:
        await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with pytest.raises(StorageError):
        await db.write(ends_its_own_session)
    await db.write(_insert("again"))
    assert await _keys(db) == ["after", "again"]
    assert db.writer is not None
    assert db.writer.reconnects >= 2


async def test_read_translates_driver_errors(db: PgDatabase) -> None:
    """A failing statement in a read comes out as StorageError, and the reader is usable."""
    with pytest.raises(StorageError, match="no_such_table"):
        async with db.read() as conn:
            await conn.fetch("SELECT * FROM no_such_table")
    assert await _keys(db) == []


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("mysql://u:pw@127.0.0.1/x", "is not a PostgreSQL URL"),
        ("postgresql://u:secretpw@127.0.0.1:1/x", "connection refused"),
        ("postgresql://u:secretpw@no-such-host.invalid/x", "cannot connect"),  # or timed out
        ("postgresql://u:secretpw@127.0.0.1:5432\n/x", "control characters"),
        ("postgresql://u:secretpw@127.0.0.1:99999/x", "cannot connect"),
    ],
)
async def test_bad_urls_fail_with_one_line_without_the_password(dsn: str, message: str) -> None:
    """Unreachable, unknown or malformed servers: one StorageError line, password hidden."""
    with pytest.raises(StorageError) as caught:
        await PgDatabase(dsn, connect_timeout_s=5).open()
    text = str(caught.value)
    assert message in text
    assert "secretpw" not in text
    assert "\n" not in text


async def test_wrong_database_and_user(pg_server: PgServer) -> None:
    """A database or role that does not exist is named as such."""
    missing_db = pg_server.dsn("no_such_database")
    with pytest.raises(StorageError, match="no such database"):
        await PgDatabase(missing_db).open()
    bad_user = f"postgresql://nobody_here:pw@127.0.0.1:{pg_server.port}/postgres"
    with pytest.raises(StorageError, match=r"authentication failed|role") as caught:
        await PgDatabase(bad_user).open()
    assert ":pw@" not in str(caught.value)


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        (
            "postgresql://u@h/db?password=pw&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        ("postgres:///db?host=/run/pg", "postgres:///db?host=/run/pg"),
        ("postgresql://u:p@ss:word@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h1:5432,h2:5433/db", "postgresql://h1:5432,h2:5433/db"),
    ],
)
def test_redact_dsn_hides_every_password(dsn: str, shown: str) -> None:
    """Passwords in the user part or the query never reach a message; the rest does."""
    from memwarden.memory.pg import redact_dsn  # noqa: PLC0415

    assert redact_dsn(dsn) == shown


async def test_a_reader_left_in_a_transaction_comes_back_rolled_back(pg_server: PgServer) -> None:
    """The pool's light reset: a read that leaves a transaction open (cancelled inside
    one) does not hand it to the next read; what it wrote there is gone."""
    async with PgDatabase(pg_server.create_database(), readers=1) as db:
        async with db.read() as conn:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TABLE left_open (x int)")
            assert conn.is_in_transaction()
        async with db.read() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT to_regclass('left_open')") is None


async def _pid(conn) -> int:
    return int(await conn.fetchval("SELECT pg_backend_pid()"))


async def test_readers_are_handed_on_and_never_more_than_readers(db: PgDatabase) -> None:
    """A read that ends cleanly hands its connection to the next read (the same
    session); more reads than readers at once wait their turn, one that gives up waiting
    (cancelled) passes it on, and no more than ``readers`` sessions ever serve reads."""
    async with db.read() as conn:
        first = await _pid(conn)
    async with db.read() as conn:
        assert await _pid(conn) == first  # the same session, not a fresh acquire
    gate = asyncio.Event()
    inside: list[str] = []

    async def hold(name: str, until: asyncio.Event) -> int:
        async with db.read() as conn:
            inside.append(name)
            await until.wait()
            return await _pid(conn)

    first_out = asyncio.Event()
    holders = [
        asyncio.create_task(hold("h1", first_out)),
        asyncio.create_task(hold("h2", gate)),
    ]
    await eventually(lambda: len(inside) == 2, what="both readers in use")
    waiting = []
    for n, name in enumerate(("w1", "w2", "w3", "w4"), start=1):
        waiting.append(asyncio.create_task(hold(name, gate)))
        await eventually(lambda n=n: len(db._waiting) == n, what=f"{name} waiting")
    waiting[0].cancel()  # gives up its place in the line
    with pytest.raises(asyncio.CancelledError):
        await waiting[0]
    # A read arriving now queues behind the others: the reader h1 gives back goes to w2.
    late = asyncio.create_task(hold("late", gate))
    await eventually(lambda: len(db._waiting) == 4, what="the late read waiting")
    first_out.set()
    await eventually(lambda: len(inside) == 3, what="the next in line served")
    assert inside[2] == "w2"
    gate.set()
    pids = await asyncio.gather(*holders, *waiting[1:], late)
    assert inside[2:] == ["w2", "w3", "w4", "late"]
    assert len(set(pids)) <= 2
    assert not db._waiting


async def test_every_so_many_reads_one_goes_back_through_the_pool(
    db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handed on reads still pass through the pool's release now and then (every
    ``READS_PER_RELEASE``-th), where asyncpg replaces a connection past its max_queries."""
    monkeypatch.setattr(pg_database, "READS_PER_RELEASE", 3)
    released = _count_releases(db, monkeypatch)
    db._reads = 0
    for _ in range(7):
        async with db.read() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    assert len(released) == 2  # the 3rd and the 6th read


async def test_a_reader_whose_session_ended_is_replaced(db: PgDatabase) -> None:
    """The server ends an idle reader's session: the next read gets a working
    connection (the pool reconnects); a read whose session ends under it fails with
    StorageError and the next read works."""
    async with db.read() as conn:
        pid = await _pid(conn)
        held = conn

    def gone() -> bool:
        try:
            return held.is_closed()
        except asyncpg.InterfaceError:  # asyncpg took it back to the pool itself
            return True

    killer = await asyncpg.connect(db.dsn)
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await killer.close()
    await eventually(gone, what="the client sees the session end")
    for _ in range(3):  # whichever reader comes first
        async with db.read() as conn:
            assert await _pid(conn) != pid

    async def ends_its_own_session() -> None:
        async with db.read() as conn:
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with pytest.raises(StorageError):
        await ends_its_own_session()
    for _ in range(3):
        async with db.read() as conn:
            assert await conn.fetchval("SELECT 1") == 1


async def test_a_failed_read_gives_its_reader_back_and_a_closed_store_refuses(
    db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that ended cleanly hands its reader on (not released); one ended by a
    failing statement raises StorageError and gives its reader back through the pool
    (rolled back there), and the next read works; a closed store refuses a read."""
    released = _count_releases(db, monkeypatch)
    async with db.read() as conn:
        assert await conn.fetchval("SELECT $1::int + 1", 41) == 42
        pid = await _pid(conn)
    async with db.read() as conn:
        assert await _pid(conn) == pid  # handed on, not released
    assert released == []
    with pytest.raises(StorageError, match="no_such_table"):
        async with db.read() as conn:
            await conn.fetch("SELECT * FROM no_such_table")
    assert len(released) == 1
    async with db.read() as conn:
        assert await conn.fetchval("SELECT 1") == 1
    await db.close()
    with pytest.raises(StorageError, match="closed"):
        async with db.read():
            pass


async def test_a_cancelled_read_gives_its_reader_back(db: PgDatabase) -> None:
    """A read cancelled while its statement runs does not hand the reader on (its query
    may still run): the pool takes it back (cancelling the query), and reads go on."""
    started = asyncio.Event()

    async def slow() -> None:
        async with db.read() as conn:
            started.set()
            await conn.fetch("SELECT pg_sleep(30)")

    task = asyncio.create_task(slow())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not db._idle  # not handed on
    async with db.read() as conn:
        assert await conn.fetchval("SELECT 2") == 2
        sleeping = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'"
        )
    assert sleeping == 0


async def test_fetch_ends_its_read_as_read_does(
    db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fetch`` is a read of one statement: its rows, its reader handed on; a failing
    statement raises StorageError and gives the reader back to the pool; a cancelled
    one is not handed on; a closed store refuses it."""
    released = _count_releases(db, monkeypatch)
    rows = await db.fetch("SELECT $1::int + 1 AS n, pg_backend_pid() AS pid", 41)
    assert [r["n"] for r in rows] == [42]
    async with db.read() as conn:
        assert await _pid(conn) == rows[0]["pid"]  # handed on, not released
    assert released == []
    with pytest.raises(StorageError, match="no_such_table"):
        await db.fetch("SELECT * FROM no_such_table")
    assert len(released) == 1
    task = asyncio.create_task(db.fetch("SELECT pg_sleep(30)"))
    await eventually(lambda: db._held and not db._idle, what="the fetch running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not db._idle
    assert [r[0] for r in await db.fetch("SELECT 2")] == [2]
    await db.close()
    with pytest.raises(StorageError, match="closed"):
        await db.fetch("SELECT 1")


# ------------------------------------------------------------------ write_each


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
                await conn.execute("INSERT INTO t (k, v) VALUES ($1, $2)", key, pid)
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


async def _values(db: PgDatabase) -> dict[str, int]:
    async with db.read() as conn:
        return {r["k"]: r["v"] for r in await conn.fetch("SELECT k, v FROM t")}


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
    assert await _values(db) == dict(done)
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
    rows = await _values(db)
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
    assert set(await _values(db)) == {f"held-{writer_pid}", "after"}


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
