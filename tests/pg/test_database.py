"""PgDatabase: group commit (jobs share a transaction, each result returned after the
commit), a failing job fails alone, reads never wait for the writer, a lost writer
connection is replaced, and connecting fails with one clear line."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import asyncpg
import pytest

from memwarden.errors import StorageError
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg import _database as pg_database
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
    released = []
    give_back = db._give_back_slowly

    async def counted(conn):
        released.append(conn)
        await give_back(conn)

    monkeypatch.setattr(db, "_give_back_slowly", counted)
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
