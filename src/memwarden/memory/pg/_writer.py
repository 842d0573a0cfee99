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

The jobs of one transaction share a :class:`PgRun` (:meth:`PgWriter.part`, as SQLite's
on-thread jobs share a ``ThreadRun``): a job may leave writes in one of its parts, which
are flushed once after the last job and before the ``COMMIT``; each attempt of the
transaction (a retry after a conflict, a job run again alone) starts with none.

The queue and the batching are :class:`~memwarden.memory._batching.BatchWriter`'s, shared
with SQLite; this module holds PostgreSQL's transaction and connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import asyncpg
import structlog

from memwarden.errors import StorageError
from memwarden.memory._batching import BatchWriter, Pending, RunParts

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from memwarden.memory.pg._types import PgConnection

T = TypeVar("T")

__all__ = ["PgRun", "PgRunPart", "PgWriter", "run_transaction", "translate"]

log = structlog.get_logger("memwarden.store")

# What a dead or unusable connection raises (as opposed to an error in a statement).
_CONNECTION_ERRORS = (asyncpg.InterfaceError, OSError)  # TimeoutError is an OSError


# Deadlock victim (40P01), serialization failure (40001): another transaction won a race.
_CONFLICT_RETRIES = 5


def _conflict(err: BaseException) -> bool:
    cause = err.__cause__ if isinstance(err, StorageError) else err
    return isinstance(cause, asyncpg.DeadlockDetectedError | asyncpg.SerializationError)


async def _pause(attempt: int) -> None:
    """A short random wait before running a conflicting transaction again (jitter, so
    that the two writers' retries do not meet again)."""
    await asyncio.sleep(random.uniform(0.0, 0.005 * 2**attempt))  # noqa: S311 - jitter


async def run_transaction(conn: PgConnection, job: Callable[[PgConnection], Awaitable[T]]) -> T:
    """Run ``job`` alone in a transaction on ``conn`` (not the writer's): run again after a
    deadlock or serialization failure, as the writer does, up to
    :data:`_CONFLICT_RETRIES` times; any other driver error as a :class:`StorageError`."""
    for attempt in range(_CONFLICT_RETRIES + 1):
        try:
            async with conn.transaction():
                return await job(conn)
        except Exception as err:
            if attempt == _CONFLICT_RETRIES or not _conflict(err):
                failure = translate(err)
                if failure is err:
                    raise
                raise failure from err
        log.info("store_write_conflict_retried", backend="postgresql", attempt=attempt + 1)
        await _pause(attempt)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


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


class PgRunPart(Protocol):
    """State the jobs of one transaction share: made empty (no arguments) by the first
    job that asks for it, flushed once before the transaction commits."""

    def __init__(self) -> None: ...

    async def flush(self, conn: PgConnection) -> None:
        """Write what the transaction's jobs left here."""


P = TypeVar("P", bound=PgRunPart)


class PgRun(RunParts):
    """The jobs of one attempt at a transaction, and what they share until it commits;
    each part a :class:`PgRunPart`."""

    __slots__ = ()

    async def flush(self, conn: PgConnection) -> None:
        """Flush every part, in the order the jobs first asked for them."""
        parts: list[PgRunPart] = list(self._parts.values())
        self._parts.clear()
        for part in parts:
            await part.flush(conn)


class PgWriter(BatchWriter["PgConnection"]):
    """Owns the write connection (taken from ``pool``) and the task that commits batches."""

    _task_name = "store.pg_writer"

    def __init__(
        self,
        pool: asyncpg.Pool[asyncpg.Record],
        conn: PgConnection,
        *,
        max_jobs: int = 256,
        max_weight: int = 20_000,
    ) -> None:
        super().__init__(max_jobs=max_jobs, max_weight=max_weight)
        self._pool = pool
        self._conn: PgConnection | None = conn
        self.reconnects = 0
        self.conflicts = 0  # transactions run again after a deadlock or serialization failure
        self._current: PgRun | None = None  # the transaction attempt being run, while it is

    def part(self, kind: type[P]) -> P:
        """The ``kind`` part of the transaction the calling job runs in (see the module's
        note); only a job of this writer may ask."""
        if self._current is None:
            raise StorageError("no writer transaction is running")
        return self._current.part(kind)

    async def close(self) -> None:
        """Stop taking jobs, commit what was accepted, stop the task, give the connection
        back to the pool."""
        await super().close()
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

    async def _transaction(self, jobs: list[Pending[Any]]) -> tuple[bool, Any] | None:
        """Run ``jobs`` in one transaction. None when all committed (futures settled) or
        the transaction itself failed (futures failed); otherwise the failing job's
        ``(False, error)`` after rolling everything back.

        A transaction another writer's (another node's) chose as a deadlock victim, or
        failed for serialization, is run again, up to :data:`_CONFLICT_RETRIES` times
        after a short random pause: the jobs keep nothing from one run to the next."""
        for attempt in range(_CONFLICT_RETRIES + 1):
            outcome = await self._attempt(jobs)
            if outcome is None or attempt == _CONFLICT_RETRIES or not _conflict(outcome[1]):
                return outcome
            self.conflicts += 1
            log.info("store_write_conflict_retried", backend="postgresql", attempt=attempt + 1)
            await _pause(attempt)
        return None  # pragma: no cover - the loop returns

    async def _attempt(self, jobs: list[Pending[Any]]) -> tuple[bool, Any] | None:
        results: list[tuple[bool, Any]] = []
        try:
            conn = await self._connection()
            async with conn.transaction():
                self._current = run = PgRun()
                for pending in jobs:
                    try:
                        results.append((True, await pending.fn(conn)))
                    except _CONNECTION_ERRORS:
                        raise  # the connection is gone: the whole transaction failed
                    except Exception as err:  # noqa: BLE001 - a failing job goes back to its caller
                        raise _JobFailedError(translate(err)) from None
                try:
                    await run.flush(conn)
                except _CONNECTION_ERRORS:
                    raise
                except Exception as err:  # noqa: BLE001 - then each job runs alone
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
            self._fail(jobs, failure)
            return None
        finally:
            self._current = None
        self._committed(jobs, results)
        return None
