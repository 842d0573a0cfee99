"""The single writer: one connection, one task, group commit.

Every write is a *job* (an async function of the connection). The writer takes all
jobs waiting in its queue, runs them in one transaction — each in its own savepoint,
so one failing job is rolled back alone — commits once, and only then resolves each
caller's future. A write therefore counts as accepted exactly when its transaction
has committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import structlog

from memwarden.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import aiosqlite

__all__ = ["Writer"]

T = TypeVar("T")

log = structlog.get_logger("memwarden.store")


@dataclass(slots=True)
class _Pending(Generic[T]):
    fn: Callable[[aiosqlite.Connection], Awaitable[T]]
    future: asyncio.Future[T]
    weight: int = 1


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
        if self._closing or self._task is None:
            raise StorageError("the store is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(fn, future, max(1, weight)))
        return await future

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
            await conn.execute("BEGIN IMMEDIATE")
            for pending in jobs:
                try:
                    results.append((True, await pending.fn(conn)))
                except Exception as err:  # noqa: BLE001 - a failing job goes back to its caller
                    await conn.execute("ROLLBACK")
                    if isinstance(err, sqlite3.Error):
                        wrapped = StorageError(str(err))
                        wrapped.__cause__ = err
                        return False, wrapped
                    return False, err
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
