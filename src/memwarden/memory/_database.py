"""The database: the connections behind the store, and nothing else.

A :class:`Database` owns one SQLite file in WAL mode: one writer connection driven by a
:class:`~memwarden.memory._writer.Writer` (group commit: jobs share a transaction and
return once it committed) and a small pool of read-only connections that never wait
for the writer. It knows no table but what its ``prepare`` hook (the migrations) runs
at open; the store's parts (``_blocks``, ``_apply``, ``_search``...) bring their SQL to
it as jobs (:meth:`Database.write`) and reads (:meth:`Database.read`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

import aiosqlite
import structlog

from memwarden._files import prepare_database
from memwarden.errors import MemwardenError, StorageError
from memwarden.memory._migrate import SCHEMA_VERSION, prepare_schema
from memwarden.memory._writer import OnThreadJob, Writer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
    from types import TracebackType

__all__ = ["COMMIT_WEIGHT", "FLOOD_COMMIT_WEIGHT", "FLOOD_WAL_MIB", "Database"]

T = TypeVar("T")

log = structlog.get_logger("memwarden.store")

_INLINE_STEPS = 1000  # SQLite VM instructions between two looks at an inline read's budget
# An inline read's budget is CPU time of the loop's thread; in wall time it may take this
# many times the budget (waiting for the disk, or for a core on a busy machine) at most.
_INLINE_WALL_FACTOR = 10
# The two clocks of the budget (module attributes, so a test can stand in for them).
_cpu_clock = time.thread_time
_wall_clock = time.perf_counter
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
#: How much one transaction takes (events, rows: the jobs' weights) ...
COMMIT_WEIGHT = 20_000
#: ... and how far that grows while the writer's queue stays deep (a flood of events; see
#: memory._batching): fewer commits, later acknowledgements for the jobs further back.
FLOOD_COMMIT_WEIGHT = 80_000
#: ... and how large the WAL may grow in a flood before a commit copies it back into the
#: database file (memory._writer: a flood checkpoints once, at its end), in MiB.
FLOOD_WAL_MIB = 256
# What the WAL file is cut back to once a checkpoint emptied it (SQLite keeps the file at
# its largest otherwise: a flood's WAL would stay on disk).
_WAL_SIZE_LIMIT = 64 * 2**20
# At most this many statements keep a renewed text for the loop's connection (the store
# runs a handful there: the search statements by namespace count).
_INLINE_TEXTS = 64


class Database:
    """One SQLite database: a single writer with group commit and a pool of readers.

    Use it as an async context manager, or :meth:`open` and :meth:`close` it. ``prepare``
    runs on the writer connection at open, before any reader exists (by default: the
    schema migrations, :func:`~memwarden.memory._migrate.prepare_schema`).
    ``inline_read_ms`` is the budget of :meth:`read_inline` (0: every read on a reader).
    ``flood_wal_mib`` bounds the WAL while a flood defers its checkpoint to its last
    commit (:mod:`memwarden.memory._writer`; 0: a checkpoint at every commit, as SQLite).
    ``secure_delete`` has SQLite overwrite with zeros what every write frees (deleted rows,
    an edit's old text, merged index segments), so an erasure leaves no earlier copy in
    free space (docs/PRIVACY.md; its cost is in docs/BENCHMARKS.md).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        readers: int = 2,
        synchronous: Literal["normal", "full"] = "normal",
        max_jobs_per_commit: int = 256,
        flood_commit_weight: int = FLOOD_COMMIT_WEIGHT,
        flood_wal_mib: int = FLOOD_WAL_MIB,
        prepare: Callable[[aiosqlite.Connection], Awaitable[None]] = prepare_schema,
        inline_read_ms: float = 0.5,
        secure_delete: bool = True,
    ) -> None:
        self.path = Path(path)
        self._secure_delete = secure_delete
        self._prepare = prepare
        self._n_readers = max(1, readers)
        self._synchronous = synchronous
        self._max_jobs = max_jobs_per_commit
        self._flood_weight = flood_commit_weight
        self._flood_wal_bytes = max(0, flood_wal_mib) * 2**20
        self._wconn: aiosqlite.Connection | None = None
        self._writer: Writer | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all_readers: list[aiosqlite.Connection] = []
        self._replacing: set[asyncio.Future[None]] = set()
        self._open = False
        self._inline_budget_s = max(0.0, inline_read_ms) / 1000.0
        self._inline: sqlite3.Connection | None = None
        self._inline_budget = 0.0  # of the read running on the loop, in seconds
        self._inline_started = False  # whether its budget runs (from the first look)
        self._inline_deadline = 0.0  # of the loop thread's CPU time
        self._inline_wall_budget_end = 0.0  # the wall time at which the CPU budget could be spent
        self._inline_wall_deadline = 0.0
        self._inline_stopped = False
        self._inline_spent = False  # stopped for the CPU it used, not for the wall time
        # The text each statement now runs under on the loop's connection (see
        # _renew_inline_text), and how many texts were made.
        self._inline_texts: dict[str, str] = {}
        self._inline_serial = 0
        self.inline_reads = 0  # reads answered on the loop
        self.inline_overruns = 0  # reads that ran past the budget (or found a lock): a reader's
        self.inline_retries = 0  # reads stopped by the wall-time cap alone, tried once more

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
    def writer(self) -> Writer | None:
        """The writer (its ``commits`` and ``jobs`` counters), while open."""
        return self._writer

    async def open(self) -> Self:
        """Open (creating or migrating) the database and start the writer."""
        if self._open:
            return self
        try:
            prepare_database(self.path)  # 0600 (and so its -wal and -shm), whatever the umask
        except OSError as err:
            raise StorageError(f"cannot open the store at {self.path}: {err}") from err
        try:
            self._wconn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._configure(self._wconn, writer=True)
            await self._prepare(self._wconn)
            for _ in range(self._n_readers):
                conn = await aiosqlite.connect(self.path, isolation_level=None)
                await self._configure(conn, writer=False)
                self._all_readers.append(conn)
                self._readers.put_nowait(conn)
            if self._inline_budget_s > 0:
                self._inline = self._open_inline()
        except sqlite3.Error as err:
            await self._close_connections()
            raise StorageError(f"cannot open the store at {self.path}: {err}") from err
        except BaseException:  # a too-new schema, a cancelled open: leave no thread running
            await self._close_connections()
            raise
        self._writer = Writer(
            self._wconn,
            max_jobs=self._max_jobs,
            max_weight=COMMIT_WEIGHT,
            flood_max_weight=self._flood_weight,
            wal_path=self.path.with_name(self.path.name + "-wal"),
            flood_wal_bytes=self._flood_wal_bytes,
        )
        self._writer.start()
        self._open = True
        log.debug("store_opened", path=str(self.path), schema=SCHEMA_VERSION)
        return self

    async def close(self) -> None:
        """Commit what was accepted, stop the writer and close every connection."""
        if not self._open:
            return
        self._open = False
        if self._replacing:
            await asyncio.gather(*self._replacing, return_exceptions=True)
        if self._writer is not None:
            await self._writer.close()
            self._writer = None
        if self._wconn is not None:
            with contextlib.suppress(sqlite3.Error):
                await self._wconn.execute("PRAGMA optimize")
        await self._close_connections()

    async def _close_connections(self) -> None:
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        for conn in [*self._all_readers, self._wconn]:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error, ValueError):
                    await conn.close()
        self._all_readers.clear()
        self._readers = asyncio.Queue()
        self._wconn = None

    async def _configure(self, conn: aiosqlite.Connection, *, writer: bool) -> None:
        await conn.execute("PRAGMA busy_timeout = 10000")
        await conn.execute("PRAGMA foreign_keys = ON")
        if writer:
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute(f"PRAGMA synchronous = {self._synchronous.upper()}")
            await conn.execute(f"PRAGMA secure_delete = {'ON' if self._secure_delete else 'OFF'}")
            await conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")
        else:
            await conn.execute("PRAGMA query_only = ON")
        await conn.execute("PRAGMA cache_size = -65536")  # KiB: 64 MiB per connection, at most
        await conn.execute("PRAGMA mmap_size = 268435456")
        await conn.execute("PRAGMA temp_store = MEMORY")

    def _open_inline(self) -> sqlite3.Connection:
        """The loop's own read-only connection (see :meth:`read_inline`)."""
        conn = sqlite3.connect(self.path, isolation_level=None)
        # Never wait for a lock on the loop: a busy database sends the read to a reader.
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA mmap_size = 268435456")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.set_progress_handler(self._inline_progress, _INLINE_STEPS)
        return conn

    def _inline_progress(self) -> int:
        if not self._inline_started:
            # The first look: the budget counts from here, once the statement is prepared
            # (preparing a new text costs more than a small search's run: see
            # _renew_inline_text), so a preparation never makes a read miss its budget.
            self._inline_started = True
            budget = self._inline_budget
            self._inline_deadline = _cpu_clock() + budget
            wall = _wall_clock()
            self._inline_wall_budget_end = wall + budget
            self._inline_wall_deadline = wall + budget * _INLINE_WALL_FACTOR
            return 0
        # The thread cannot have used more CPU than the wall time that passed, so its CPU
        # clock (a system call, about 2 us on a VM, where the wall clock costs 0.1 us) is
        # read only once the wall time alone could have spent the budget.
        wall = _wall_clock()
        if wall <= self._inline_wall_budget_end:
            return 0
        if _cpu_clock() > self._inline_deadline:
            self._inline_stopped = self._inline_spent = True
            return 1  # interrupts the statement
        if wall > self._inline_wall_deadline:
            self._inline_stopped = True
            return 1
        return 0

    def read_inline(
        self, sql: str, params: Mapping[str, Any], *, budget_factor: float = 1.0
    ) -> list[Any] | None:
        """The rows of a read run right here on the loop, or None if it did not finish
        within the budget (``inline_read_ms``) or found the database locked: then the
        caller runs it on a reader (:meth:`read`).

        A read on a reader connection costs two thread hand-offs, which on a busy machine
        take longer than a small query itself (each waits for the scheduler). A search
        matching a few blocks takes SQLite a fraction of a millisecond, so it is tried
        here first, under a progress handler that interrupts it once the budget is spent
        (it looks every thousand SQLite instructions): the loop is never held much longer
        than the budget. Only for reads whose result is worth no more than the budget.

        The budget counts the CPU time the read takes on the loop's thread from the
        handler's first look (after the statement is prepared: preparing is bounded by the
        statement, not the data), so a read the OS paused (another process had the core)
        is not thrown away and run again on a reader for that; in wall time a read gets
        ``_INLINE_WALL_FACTOR`` times the budget (one waiting for the disk is stopped
        there). ``budget_factor`` scales the budget for a read that belongs to a search
        already holding the loop that long (the ranking statement of a vector search,
        after its in-memory pass). A read stopped by that cap with its CPU budget unspent
        is tried here once more, at once: the thread mostly did not run (the OS gave the
        core to another process, or it waited for the disk, whose pages are now cached),
        and on a busy machine the two hand-offs of a reader cost more than the statement.
        The loop is then held twice the cap at most.
        """
        conn = self._inline
        if conn is None or not self._open:
            return None
        self._inline_budget = self._inline_budget_s * budget_factor
        text = self._inline_texts.get(sql, sql)
        for attempt in range(2):
            self._inline_stopped = self._inline_spent = self._inline_started = False
            try:
                rows = conn.execute(text, params).fetchall()
            except sqlite3.OperationalError as err:
                text = self._renew_inline_text(sql)
                if not self._inline_stopped and err.sqlite_errorcode not in _BUSY:
                    raise
                if self._inline_stopped and not self._inline_spent and attempt == 0:
                    self.inline_retries += 1
                    continue
                self.inline_overruns += 1
                return None
            self.inline_reads += 1
            return rows
        return None  # not reached: the second attempt returns

    def _renew_inline_text(self, sql: str) -> str:
        """A new text for ``sql`` on the loop's connection, after a run of it failed.

        The ``sqlite3`` module keeps its prepared statements in a cache by text, and one
        whose run failed (interrupted past the budget, or busy) can stay marked "in use"
        there for good (its reset returns the error again, so the module keeps the mark;
        CPython 3.11). Every later run of that text then prepares the statement anew,
        which for the search statement costs more than the run (0.35 ms against 0.24 ms
        at 100 000 blocks) and so pushes small searches past the budget in turn. A comment
        makes the next run's text new: prepared once, then cached like any other. (When
        the mark was cleared after all, that costs one preparation after a failed run,
        which already cost the budget.)
        """
        self._inline_serial += 1
        if len(self._inline_texts) >= _INLINE_TEXTS:
            self._inline_texts.clear()
        text = self._inline_texts[sql] = f"{sql}\n/* {self._inline_serial} */"
        return text

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[aiosqlite.Connection]:
        """A reader connection for the duration of the block (a consistent snapshot per
        statement; it never waits for the writer)."""
        if not self._open:
            raise StorageError("the store is closed")
        conn = await self._readers.get()
        clean = False
        try:
            yield conn
            clean = True
        except MemwardenError:
            clean = True  # ours, raised after a completed fetch (NotFoundError, ...)
            raise
        finally:
            if clean:
                self._readers.put_nowait(conn)
            else:
                # Cancelled or failed between a statement and its fetch: the statement may
                # still be open and would pin this connection to an old snapshot (WAL), so
                # later reads would miss new writes. A fresh connection costs a millisecond.
                replacing = asyncio.ensure_future(self._replace_reader(conn))
                self._replacing.add(replacing)
                replacing.add_done_callback(self._replacing.discard)
                await asyncio.shield(replacing)  # close() waits for it too

    def _closed_meanwhile(self) -> bool:
        # A method, not the attribute: the database may close while we awaited.
        return not self._open

    async def _replace_reader(self, old: aiosqlite.Connection) -> None:
        with contextlib.suppress(sqlite3.Error, ValueError):
            await old.close()
        if old in self._all_readers:
            self._all_readers.remove(old)
        if not self._open:
            return
        try:
            conn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._configure(conn, writer=False)
        except sqlite3.Error as err:
            log.error("store_reader_reopen_failed", error=str(err))
            return
        if self._closed_meanwhile():  # do not leak the new connection
            await conn.close()
            return
        self._all_readers.append(conn)
        self._readers.put_nowait(conn)

    async def write(
        self, job: Callable[[aiosqlite.Connection], Awaitable[T]], *, weight: int = 1
    ) -> T:
        """Run ``job`` (an async function of the writer connection) in the writer's next
        transaction; returns its result once that transaction committed.

        ``weight`` is the job's size (rows, events), which bounds how much one
        transaction takes (see :meth:`Writer.submit`).
        """
        if self._writer is None:
            raise StorageError("the store is closed")
        return await self._writer.submit(job, weight=weight)

    async def write_on_thread(self, job: OnThreadJob[T], *, weight: int = 1) -> T:
        """Like :meth:`write`, for a job that is a plain function of the ``sqlite3``
        connection and of its :class:`~memwarden.memory._writer.ThreadRun`, run on the
        writer connection's own thread: the jobs of this kind in one transaction share a
        single hand-off between threads, ``BEGIN`` and ``COMMIT`` included, and may leave
        writes in the run's parts for its end (:meth:`Writer.submit_on_thread`). The job
        must not touch the event loop, nor end the transaction."""
        if self._writer is None:
            raise StorageError("the store is closed")
        return await self._writer.submit_on_thread(job, weight=weight)

    @property
    def write_backlog(self) -> int:
        """Jobs waiting for the writer."""
        return self._writer.backlog if self._writer is not None else 0
