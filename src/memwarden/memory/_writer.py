"""The single writer: one connection, one task, group commit.

Every write is a *job* (an async function of the connection). The writer takes all
jobs waiting in its queue, runs them in one transaction, commits once, and only then
resolves each caller's future. A write therefore counts as accepted exactly when its
transaction has committed. If a job fails, everything is rolled back and each job is
run again in a transaction of its own, so the failing one alone is refused.

A job may instead be a plain function of the ``sqlite3`` connection, run on the
connection's own thread (:meth:`Writer.submit_on_thread`): consecutive ones run in a
single hand-off to that thread together with the ``BEGIN`` before them and the
``COMMIT`` after them, so a transaction of such jobs costs one trip between threads
instead of one per job and two more for the transaction (on a busy machine each trip
waits for the scheduler).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import structlog

from memwarden.errors import StorageError
from memwarden.memory._sql import in_thread

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import aiosqlite

__all__ = ["Writer"]

T = TypeVar("T")

log = structlog.get_logger("memwarden.store")


@dataclass(slots=True)
class _Pending(Generic[T]):
    fn: Callable[[aiosqlite.Connection], Awaitable[T]] | None  # None: on_thread
    future: asyncio.Future[T]
    weight: int = 1
    on_thread: Callable[[sqlite3.Connection], T] | None = None


class Writer:
    """Owns the write connection and the task that commits batches of jobs."""

    def __init__(
        self, conn: aiosqlite.Connection, *, max_jobs: int = 256, max_weight: int = 20_000
    ) -> None:
        self._conn = conn
        self._max_jobs = max_jobs
        self._max_weight = max_weight
        self._queue: asyncio.Queue[_Pending[Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0
        self.jobs = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="store.writer")

    async def submit(
        self, fn: Callable[[aiosqlite.Connection], Awaitable[T]], *, weight: int = 1
    ) -> T:
        """Run ``fn`` inside the next transaction; returns once that transaction committed.

        ``weight`` is the job's size (rows, events): one transaction takes jobs until their
        weights reach ``max_weight``, so a flood of work commits in steps instead of one
        long transaction that every caller would wait for.
        """
        return await self._submit(_Pending(fn, self._future(), max(1, weight)))

    async def submit_on_thread(
        self, fn: Callable[[sqlite3.Connection], T], *, weight: int = 1
    ) -> T:
        """Like :meth:`submit`, for a job that is a plain function of the ``sqlite3``
        connection: it runs on the connection's thread, in one hand-off with the jobs of
        this kind next to it in the transaction (see the module's note). It must not
        touch the event loop, nor end the transaction."""
        return await self._submit(_Pending(None, self._future(), max(1, weight), fn))

    def _future(self) -> asyncio.Future[Any]:
        if self._closing or self._task is None:
            raise StorageError("the store is closed")
        return asyncio.get_running_loop().create_future()

    async def _submit(self, pending: _Pending[T]) -> T:
        self._queue.put_nowait(pending)
        return await pending.future

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def close(self) -> None:
        """Stop taking jobs, commit what was accepted, then stop the task."""
        self._closing = True
        if self._task is None:
            return
        await self._queue.join()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

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
        """Run the batch in one transaction; if a job fails, redo each job on its own.

        Savepoints per job would copy every page a job touches into a sub-journal, which
        costs more than the rare retry, so the batch is optimistic.
        """
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
        """Run ``jobs`` in one transaction. None when all committed (futures settled);
        otherwise the failing job's ``(False, error)`` after rolling everything back."""
        conn = self._conn
        results: list[tuple[bool, Any]] = []
        try:
            begun = committed = False
            i, n = 0, len(jobs)
            while i < n:
                fn = jobs[i].fn
                if fn is None:  # on-thread jobs: one hand-off for the run of them
                    j = i
                    while j < n and jobs[j].fn is None:
                        j += 1
                    committed = j == n
                    try:
                        await in_thread(
                            conn,
                            functools.partial(
                                _on_thread,
                                jobs=[p.on_thread for p in jobs[i:j] if p.on_thread is not None],
                                results=results,
                                begin=not begun,
                                commit=committed,
                            ),
                        )
                    except _JobError as failed:  # rolled back on the thread
                        return False, _wrapped(failed.error)
                    begun = True
                    i = j
                    continue
                if not begun:
                    await conn.execute("BEGIN IMMEDIATE")
                    begun = True
                try:
                    results.append((True, await fn(conn)))
                except Exception as err:  # noqa: BLE001 - a failing job goes back to its caller
                    await conn.execute("ROLLBACK")
                    return False, _wrapped(err)
                i += 1
            if not begun:  # nothing to run (every job cancelled): an empty transaction
                await conn.execute("BEGIN IMMEDIATE")
            if not committed:
                await conn.execute("COMMIT")
        except (sqlite3.Error, ValueError) as err:
            # The transaction itself failed (disk full, I/O error, ...): nothing committed.
            with contextlib.suppress(sqlite3.Error, ValueError):
                await conn.execute("ROLLBACK")
            log.exception("store_commit_failed", jobs=len(jobs))
            failure = StorageError(f"commit failed: {err}")
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


def _wrapped(err: Exception) -> Exception:
    """A job's error as its caller gets it (SQLite's as a :class:`StorageError`)."""
    if isinstance(err, sqlite3.Error):
        wrapped = StorageError(str(err))
        wrapped.__cause__ = err
        return wrapped
    return err


class _JobError(Exception):
    """An on-thread job raised ``error``; the transaction was rolled back."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _on_thread(
    conn: sqlite3.Connection,
    *,
    jobs: list[Callable[[sqlite3.Connection], Any]],
    results: list[tuple[bool, Any]],
    begin: bool,
    commit: bool,
) -> None:
    """Run ``jobs`` on the connection's thread, after ``BEGIN`` and before ``COMMIT`` if
    asked, each result into ``results``. A failing job rolls everything back and raises
    :class:`_JobError` (its error goes back to its caller, see Writer._transaction)."""
    if begin:
        conn.execute("BEGIN IMMEDIATE")
    for job in jobs:
        try:
            results.append((True, job(conn)))
        except Exception as err:
            conn.execute("ROLLBACK")
            raise _JobError(err) from err
    if commit:
        conn.execute("COMMIT")
