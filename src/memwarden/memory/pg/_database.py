"""The PostgreSQL database: the connections behind the store on this backend.

:class:`PgDatabase` plays the part :class:`~memwarden.memory._database.Database` plays
for SQLite: it owns an asyncpg pool of ``readers + 1`` connections; one of them belongs
to the :class:`~memwarden.memory.pg._writer.PgWriter` (group commit: jobs share a
transaction and return once it committed), the others serve :meth:`PgDatabase.read`.
Under PostgreSQL's MVCC a read never waits for the writer. Its ``prepare`` hook (by
default the migrations, :func:`~memwarden.memory.pg._migrate.migrate`) runs on the
writer's connection at open.

Connecting fails with one :class:`~memwarden.errors.StorageError` line that names the
server (its URL with the password hidden) and the reason: refused, unknown host,
authentication, no such database, timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from typing import TYPE_CHECKING, Self, TypeVar

import asyncpg
import structlog

from memwarden.errors import ConfigError, StorageError
from memwarden.memory.pg._dsn import check_dsn, redact_dsn
from memwarden.memory.pg._migrate import migrate
from memwarden.memory.pg._schema import SCHEMA_VERSION
from memwarden.memory.pg._writer import PgRunPart, PgWriter, run_transaction, translate

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from types import TracebackType

    from memwarden.memory.pg._types import PgConnection

__all__ = ["CONNECT_ERRORS", "PgDatabase", "connect_error"]

T = TypeVar("T")
P = TypeVar("P", bound=PgRunPart)

log = structlog.get_logger("memwarden.store")

# What connecting can raise (a bad DSN value, a port out of range, the network, the
# server): connect_error turns each into a StorageError.
CONNECT_ERRORS = (OSError, OverflowError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError)


def connect_error(dsn: str, err: BaseException) -> StorageError:
    """What went wrong connecting to ``dsn``, as one line without the password."""
    where = redact_dsn(dsn)
    if isinstance(
        err, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
    ):
        reason = f"authentication failed ({err})"
    elif isinstance(err, asyncpg.InvalidCatalogNameError):
        reason = f"no such database ({err})"
    elif isinstance(err, socket.gaierror):
        reason = f"unknown host ({err.strerror or err})"
    elif isinstance(err, ConnectionRefusedError):
        reason = "connection refused (is the server running, on that host and port?)"
    elif isinstance(err, TimeoutError):
        reason = "timed out"
    elif isinstance(err, ssl.SSLError):
        reason = f"TLS failed ({err.reason or err})"
    else:
        reason = str(err) or type(err).__name__
    # One line: a server's message may span several.
    reason = " ".join(reason.split())
    failure = StorageError(f"cannot connect to PostgreSQL at {where}: {reason}")
    failure.__cause__ = err
    return failure


async def _reset(conn: PgConnection) -> None:
    """What a pooled connection needs on its way back: a transaction left open (a read
    cancelled inside one) rolled back. asyncpg's default reset also runs ``SELECT
    pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` — a round trip on every
    read (0.12-0.14 ms measured, a third of a search at 100 000 blocks) for session state
    the store never sets on its pooled connections: its advisory locks are
    transaction-level or on connections of their own (reviews, the leader, the notifier),
    it never ``LISTEN``s or ``SET``s on them, and cursors end with their transaction."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


# What a read can raise besides the store's own errors (translated by _read_error).
_READ_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)

# How many reads in a row the readers are handed on before one goes back through the pool.
READS_PER_RELEASE = 1000


def _reusable(conn: PgConnection) -> bool:
    """Whether a reader can serve the next read as it is: open, no transaction left. A
    connection whose session ended is closed, or already back in the pool (asyncpg
    releases a pooled connection it sees close: its proxy then refuses every call)."""
    try:
        return not conn.is_closed() and not conn.is_in_transaction()
    except asyncpg.InterfaceError:
        return False


class PgDatabase:
    """One PostgreSQL database: a writer with group commit and a pool of readers.

    Use it as an async context manager, or :meth:`open` and :meth:`close` it.
    ``connect_timeout_s`` bounds each connection attempt; ``command_timeout_s`` (None:
    none) each statement. ``maintenance_connections``: how many connections
    :meth:`write_each` (the decay pass's ranges) runs its transactions on at once.
    """

    def __init__(
        self,
        dsn: str,
        *,
        readers: int = 2,
        max_jobs_per_commit: int = 256,
        prepare: Callable[[PgConnection], Awaitable[object]] = migrate,
        connect_timeout_s: float = 10.0,
        command_timeout_s: float | None = None,
        maintenance_connections: int = 2,
    ) -> None:
        self.dsn = dsn
        self.maintenance_connections = max(1, maintenance_connections)
        self._prepare = prepare
        self._n_readers = max(1, readers)
        self._max_jobs = max_jobs_per_commit
        self._connect_timeout_s = connect_timeout_s
        self._command_timeout_s = command_timeout_s
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self._writer: PgWriter | None = None
        self._open = False
        # The readers' fast path (read()): connections a read gave back cleanly wait
        # here, still acquired from the pool, for the next read; ``_held`` counts the
        # readers taken from the pool (idle here or in use), ``_waiting`` the reads
        # waiting for one when all are in use, first come first served: a reader given
        # back goes to the first of them (None: one went back to the pool, acquire it).
        self._idle: list[PgConnection] = []
        self._reads = 0
        self._held = 0
        self._waiting: deque[asyncio.Future[PgConnection | None]] = deque()

    @property
    def shown(self) -> str:
        """The URL without its password (for logs and messages)."""
        return redact_dsn(self.dsn)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def writer(self) -> PgWriter | None:
        """The writer (its ``commits`` and ``jobs`` counters), while open."""
        return self._writer

    async def open(self) -> Self:
        """Connect, run ``prepare`` (the migrations) and start the writer."""
        if self._open:
            return self
        try:
            check_dsn(self.dsn)
        except ConfigError as err:
            raise StorageError(str(err)) from None
        try:
            pool = await asyncpg.create_pool(
                self.dsn,
                min_size=self._n_readers + 1,
                max_size=self._n_readers + 1,
                timeout=self._connect_timeout_s,
                command_timeout=self._command_timeout_s,
                reset=_reset,
            )
        except CONNECT_ERRORS as err:
            raise connect_error(self.dsn, err) from None
        conn: PgConnection | None = None
        try:
            conn = await pool.acquire()
            await self._prepare(conn)
        except BaseException as err:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await pool.release(conn)  # type: ignore[arg-type]
            await pool.close()
            if isinstance(err, asyncpg.PostgresError | asyncpg.InterfaceError):
                raise StorageError(f"cannot prepare {self.shown}: {err}") from err
            raise
        self._pool = pool
        self._writer = PgWriter(pool, conn, max_jobs=self._max_jobs)
        self._writer.start()
        self._open = True
        log.debug("store_opened", backend="postgresql", dsn=self.shown, schema=SCHEMA_VERSION)
        return self

    async def close(self) -> None:
        """Commit what was accepted, stop the writer and close every connection."""
        if not self._open:
            return
        self._open = False
        if self._writer is not None:
            await self._writer.close()
            self._writer = None
        while self._idle:
            await self._give_back_slowly(self._idle.pop())
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def read(self) -> contextlib.AbstractAsyncContextManager[PgConnection]:
        """A reader connection for the duration of the block. Under MVCC it never waits
        for the writer; each statement sees what had committed when it started (use
        ``conn.transaction(isolation="repeatable_read", readonly=True)`` for one snapshot
        over several). Driver errors come out as :class:`StorageError`.

        A read that ends cleanly (no error, no transaction left open, the connection
        open) hands its connection straight to the next read, without going back
        through asyncpg's pool: its release is a task (``asyncio.shield``), a timer and
        a reset, 40-150 µs of the event loop's time per read, as much as a whole
        sub-millisecond search statement. Any other ending (an error, a cancellation, a
        transaction left open, a closed connection) releases it to the pool as before,
        which rolls back, waits for a cancelled query, or reconnects.

        The context manager is a small class (:class:`_Read`), not a generator: entering
        and leaving it took 14-15 µs of the event loop in a search, against 18-21 for a
        generator-based one (docs/BENCHMARKS.md, "Session 11"); :meth:`fetch` serves
        one statement without it."""
        return _Read(self._begin_read, self._end_read)

    async def fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        """One statement on a reader: ``async with read() as conn: return await
        conn.fetch(sql, *args)``, the same rules and errors, without the context manager
        object around it: a keyword search on PostgreSQL is one such statement of about
        0.2-0.3 ms. Measured in a search, the context manager's entry and exit took
        14-15 µs of the event loop; this call takes 8-13 µs more than the same ``fetch``
        on a connection of its own (docs/BENCHMARKS.md, "Session 11")."""
        conn = await self._begin_read()
        try:
            rows = await conn.fetch(sql, *args)
        except BaseException as exc:
            await self._end_read(conn, exc)  # raises a driver error as StorageError
            raise
        await self._end_read(conn, None)
        return rows

    async def _begin_read(self) -> PgConnection:
        """A read's start: a reader (:meth:`_take`), driver errors as StorageError."""
        if not self._open or self._pool is None:
            raise StorageError("the store is closed")
        try:
            return await self._take()
        except _READ_ERRORS as err:
            raise self._read_error(err) from err

    async def _end_read(self, conn: PgConnection, exc: BaseException | None) -> None:
        """A read's end (``exc``: what ended it, if anything): its reader handed on or
        given back, and a driver error, the read's own or the release's, raised as
        StorageError."""
        try:
            if not self._handed_on(conn, clean=exc is None):
                await self._give_back_slowly(conn)
        except _READ_ERRORS as err:
            raise self._read_error(err) from err
        if isinstance(exc, _READ_ERRORS):
            raise self._read_error(exc) from exc

    def _handed_on(self, conn: PgConnection, *, clean: bool) -> bool:
        """Count a read that ended, and hand its reader on when it ended cleanly and can
        serve the next read as it is; False: the caller gives it back to the pool. Every
        READS_PER_RELEASE-th read goes back through the pool all the same, whose release
        replaces a connection past its max_queries (asyncpg's recycling of long-lived
        server sessions)."""
        self._reads = (self._reads + 1) % READS_PER_RELEASE
        if clean and self._open and self._reads and _reusable(conn):
            self._hand_on(conn)
            return True
        return False

    def _read_error(self, err: BaseException) -> BaseException:
        """A read's driver or network error as the store reports it."""
        if isinstance(err, OSError):  # a (re)connect of the pool refused or timed out
            return StorageError(f"cannot reach PostgreSQL at {self.shown}: {err}")
        return translate(err)

    async def _take(self) -> PgConnection:
        """A reader: an idle one (one the server closed meanwhile goes back to the pool,
        which reconnects it), else one more from the pool while fewer than ``readers``
        are held, else the next one given back (in the order the reads came)."""
        while True:
            if self._idle and not self._waiting:
                conn = self._idle.pop()
                if _reusable(conn):
                    return conn
                await self._give_back_slowly(conn)
                continue
            if self._pool is None:
                raise StorageError("the store is closed")
            if self._held < self._n_readers and not self._waiting:
                self._held += 1
                try:
                    return await self._pool.acquire()
                except BaseException:
                    self._held -= 1
                    self._hand_on(None)
                    raise
            turn: asyncio.Future[PgConnection | None] = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
            try:
                given = await turn
            except BaseException:
                if turn.done() and not turn.cancelled():
                    self._hand_on(turn.result())  # given, but leaving: the next one's
                else:
                    with contextlib.suppress(ValueError):
                        self._waiting.remove(turn)
                raise
            if given is None:  # room in the pool: acquire (the line was left first)
                continue
            if _reusable(given):
                return given
            await self._give_back_slowly(given)

    def _hand_on(self, conn: PgConnection | None) -> None:
        """A reader given back (``None``: room made in the pool) to the first read
        waiting, else (a reader) to the idle ones."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(conn)
                return
        if conn is not None:
            self._idle.append(conn)

    async def _give_back_slowly(self, conn: PgConnection) -> None:
        """Release a reader to the pool (its reset: a rollback, a cancelled query waited
        for, a dead connection replaced on its next acquire)."""
        self._held -= 1
        try:
            if self._pool is not None:
                await self._pool.release(conn)  # type: ignore[arg-type]
        finally:
            self._hand_on(None)

    async def write(self, job: Callable[[PgConnection], Awaitable[T]], *, weight: int = 1) -> T:
        """Run ``job`` (an async function of the writer's connection) in the writer's next
        transaction; returns its result once that transaction committed."""
        if self._writer is None:
            raise StorageError("the store is closed")
        return await self._writer.submit(job, weight=weight)

    def run_part(self, kind: type[P]) -> P:
        """The ``kind`` part of the writer transaction the calling job runs in
        (:meth:`PgWriter.part`): state the transaction's jobs share until it commits."""
        if self._writer is None:
            raise StorageError("the store is closed")
        return self._writer.part(kind)

    async def write_each(
        self,
        jobs: Sequence[Callable[[PgConnection], Awaitable[T]]],
        *,
        connections: int | None = None,
    ) -> list[T]:
        """Run each of ``jobs`` in a transaction of its own, on up to ``connections``
        (default :attr:`maintenance_connections`) connections at once, and return their
        results in the jobs' order.

        For set-based maintenance over disjoint ranges of rows (the decay pass): one range
        is one statement-heavy transaction, and the server runs two of them on two cores
        in about half the time of one after the other (docs/BENCHMARKS.md, "Session 10").
        One connection is the writer's (its jobs take their turn in its queue, between the
        group commits, as a :meth:`write` does); the others are opened for this call and
        closed after it, each running one job at a time (a deadlock or serialization
        failure run again, as the writer does). A connection the server refuses (its
        ``max_connections`` reached, say) is logged and done without. The first failing
        job's error is raised once the jobs in flight ended (or were cancelled); the
        transactions that committed stay, the jobs not yet started are not run.
        """
        if not self._open:
            raise StorageError("the store is closed")
        want = self.maintenance_connections if connections is None else max(1, connections)
        results: dict[int, T] = {}
        order = iter(enumerate(jobs))

        async def through_writer() -> None:
            for i, job in order:
                results[i] = await self.write(job)

        async def on_side(conn: PgConnection) -> None:
            for i, job in order:
                results[i] = await run_transaction(conn, job)

        sides = await self._side_connections(min(want, len(jobs)) - 1)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(through_writer())
                for conn in sides:
                    group.create_task(on_side(conn))
        except BaseExceptionGroup as failed:  # the first job's error, as write() raises it
            first = failed.exceptions[0]
            raise first from first.__cause__
        finally:
            for conn in sides:
                with contextlib.suppress(Exception):
                    if conn.is_in_transaction():
                        conn.terminate()
                    else:
                        await conn.close(timeout=self._connect_timeout_s)
        return [results[i] for i in range(len(jobs))]

    async def _side_connections(self, n: int) -> list[PgConnection]:
        """Up to ``n`` connections of their own (not the pool's), for :meth:`write_each`."""
        conns: list[PgConnection] = []
        for _ in range(n):
            try:
                conn: PgConnection = await asyncpg.connect(
                    self.dsn,
                    timeout=self._connect_timeout_s,
                    command_timeout=self._command_timeout_s,
                )
            except CONNECT_ERRORS as err:
                log.warning(
                    "store_maintenance_connection_refused",
                    backend="postgresql",
                    connections=len(conns) + 1,
                    error=str(connect_error(self.dsn, err)),
                )
                break
            conns.append(conn)
        return conns

    @property
    def write_backlog(self) -> int:
        """Jobs waiting for the writer."""
        return self._writer.backlog if self._writer is not None else 0


class _Read:
    """:meth:`PgDatabase.read`'s context manager: ``begin`` gives the reader on entry,
    ``end`` ends the read on exit (see :meth:`PgDatabase._end_read`)."""

    __slots__ = ("_begin", "_conn", "_end")

    def __init__(
        self,
        begin: Callable[[], Awaitable[PgConnection]],
        end: Callable[[PgConnection, BaseException | None], Awaitable[None]],
    ) -> None:
        self._begin = begin
        self._end = end

    async def __aenter__(self) -> PgConnection:
        self._conn = await self._begin()
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._end(self._conn, exc)
