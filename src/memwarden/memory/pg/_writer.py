"""The PostgreSQL writer: one connection, one task, group commit.

The same contract as the SQLite :class:`~memwarden.memory._writer.Writer`: every write
is a *job* (an async function of the connection); the writer takes the jobs waiting in
its queue, runs them in one transaction, commits once, and only then resolves each
caller's future, so a write is accepted exactly when its transaction committed. If a
job fails, the whole transaction is rolled back and each job is run again on its own,
so the failing one fails alone (no savepoint per job: more than 64 subtransactions in
one transaction overflow PostgreSQL's per-backend cache and slow every session).

A lost connection fails the jobs of the transaction it was in with
:class:`~memwarden.errors.StorageError` (whether a COMMIT that was on its way arrived
cannot be known: ingestion is exactly-once by the events' unique ids, so a retry is
safe), and the next batch runs on a fresh connection from the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import asyncpg
import structlog

from memwarden.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from memwarden.memory.pg._types import PgConnection

__all__ = ["PgWriter", "translate"]

T = TypeVar("T")

log = structlog.get_logger("memwarden.store")

# What a dead or unusable connection raises (as opposed to an error in a statement).
_CONNECTION_ERRORS = (asyncpg.InterfaceError, OSError)  # TimeoutError is an OSError


def translate(err: BaseException) -> BaseException:
    """A driver error as a :class:`StorageError` (its cause kept); others unchanged."""
    if isinstance(err, asyncpg.PostgresError | asyncpg.InterfaceError):
        wrapped = StorageError(str(err))
        wrapped.__cause__ = err
        return wrapped
    return err


class _JobFailedError(Exception):
    """A job raised ``error``: the transaction is rolled back and the job run alone."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _usable(conn: PgConnection) -> bool:
    """Whether ``conn`` is open (asyncpg detaches a pooled connection the server ended,
    and then every call on it raises)."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False


@dataclass(slots=True)
class _Pending(Generic[T]):
    fn: Callable[[PgConnection], Awaitable[T]]
    future: asyncio.Future[T]
    weight: int = 1


class PgWriter:
    """Owns the write connection (taken from ``pool``) and the task that commits batches."""

    def __init__(
        self,
        pool: asyncpg.Pool[asyncpg.Record],
        conn: PgConnection,
        *,
        max_jobs: int = 256,
        max_weight: int = 20_000,
    ) -> None:
        self._pool = pool
        self._conn: PgConnection | None = conn
        self._max_jobs = max_jobs
        self._max_weight = max_weight
        self._queue: asyncio.Queue[_Pending[Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0
        self.jobs = 0
        self.reconnects = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="store.pg_writer")

    async def submit(self, fn: Callable[[PgConnection], Awaitable[T]], *, weight: int = 1) -> T:
        """Run ``fn`` inside the next transaction; returns once that transaction committed.

        ``weight`` is the job's size (rows, events): one transaction takes jobs until
        their weights reach ``max_weight``.
        """
        if self._closing or self._task is None:
            raise StorageError("the store is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(fn, future, max(1, weight)))
        return await future

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def close(self) -> None:
        """Stop taking jobs, commit what was accepted, stop the task, give the connection
        back to the pool."""
        self._closing = True
        if self._task is not None:
            await self._queue.join()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop_connection()

    async def _drop_connection(self, *, broken: bool = False) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            if broken:
                # A reset could wait on a connection out of step. A connection the server
                # ended was already detached by the pool (every call on it raises).
                with contextlib.suppress(asyncpg.InterfaceError):
                    conn.terminate()
            with contextlib.suppress(*_CONNECTION_ERRORS, asyncpg.PostgresError):
                await self._pool.release(conn)  # type: ignore[arg-type]

    async def _connection(self) -> PgConnection:
        if self._conn is None or not _usable(self._conn):
            await self._drop_connection()
            self._conn = await self._pool.acquire()
            self.reconnects += 1
            log.info("store_writer_reconnected", backend="postgresql")
        return self._conn

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            weight = first.weight
            while (
                len(batch) < self._max_jobs
                and weight < self._max_weight
                and not self._queue.empty()
            ):
                batch.append(self._queue.get_nowait())
                weight += batch[-1].weight
            try:
                await self._commit(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _commit(self, batch: list[_Pending[Any]]) -> None:
        """Run the batch in one transaction; if a job fails, redo each job on its own."""
        live = [p for p in batch if not p.future.cancelled() or len(batch) == 1]
        outcome = await self._transaction(live)
        if outcome is None:
            return
        if len(live) == 1:
            self._settle(live, [outcome])
            return
        for pending in live:  # one job failed: isolate it
            single = await self._transaction([pending])
            if single is not None:
                self._settle([pending], [single])

    async def _transaction(self, jobs: list[_Pending[Any]]) -> tuple[bool, Any] | None:
        """Run ``jobs`` in one transaction. None when all committed (futures settled) or
        the transaction itself failed (futures failed); otherwise the failing job's
        ``(False, error)`` after rolling everything back."""
        results: list[tuple[bool, Any]] = []
        try:
            conn = await self._connection()
            async with conn.transaction():
                for pending in jobs:
                    try:
                        results.append((True, await pending.fn(conn)))
                    except _CONNECTION_ERRORS:
                        raise  # the connection is gone: the whole transaction failed
                    except Exception as err:  # noqa: BLE001 - a failing job goes back to its caller
                        raise _JobFailedError(translate(err)) from None
        except _JobFailedError as failed:  # rolled back by the context manager
            return False, failed.error
        except Exception as err:  # noqa: BLE001 - whatever it was, the writer carries on
            # The transaction itself failed (connection lost, server shutting down, a
            # deferred constraint at COMMIT, the driver's protocol out of step): nothing
            # committed, as far as we know. The connection is closed and given back to the
            # pool, which opens a new one for the next batch.
            log.error("store_commit_failed", backend="postgresql", jobs=len(jobs), error=str(err))
            await self._drop_connection(broken=True)
            failure = StorageError(f"commit failed: {err}")
            failure.__cause__ = err
            for pending in jobs:
                if not pending.future.done():
                    pending.future.set_exception(failure)
            return None
        self.commits += 1
        self.jobs += len(jobs)
        self._settle(jobs, results)
        return None

    @staticmethod
    def _settle(jobs: list[_Pending[Any]], results: list[tuple[bool, Any]]) -> None:
        for pending, (ok, value) in zip(jobs, results, strict=True):
            if pending.future.done():
                continue
            if ok:
                pending.future.set_result(value)
            else:
                pending.future.set_exception(value)
