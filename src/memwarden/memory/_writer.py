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

    from memwarden.memory._record import BlockRecord

__all__ = ["RouteCache", "Writer"]

T = TypeVar("T")

log = structlog.get_logger("memwarden.store")


class RouteCache:
    """Where events go, kept by the writer between event jobs: each subject's bindings
    (``subjects``: subject -> ``[(sensor, block id)]``, empty for an unbound subject) and
    the evidence records of the blocks behind them (``records``: block id -> record).

    An event job reads the subjects it does not find here and updates the records it
    changes in place, in the same transaction that writes them. Everything else drops the
    whole cache: any other writer job (binding changes, edits, archive, restore, delete,
    import, quarantine, decay, ...) before it runs, a rollback, a failed commit, and a
    commit by another connection (``data_version``, checked by each event job). It holds
    at most about ``max_subjects`` subjects (then it starts again): about 1 KB each with
    one binding (measured with tracemalloc), so about 100 MB when full.
    """

    __slots__ = ("data_version", "max_subjects", "records", "subjects")

    def __init__(self, max_subjects: int = 100_000) -> None:
        self.subjects: dict[str, list[tuple[str, str]]] = {}
        self.records: dict[str, BlockRecord] = {}
        self.data_version: int | None = None
        self.max_subjects = max_subjects

    def clear(self) -> None:
        self.subjects.clear()
        self.records.clear()


@dataclass(slots=True)
class _Pending(Generic[T]):
    fn: Callable[[aiosqlite.Connection], Awaitable[T]]
    future: asyncio.Future[T]
    weight: int = 1
    keeps_routes: bool = False


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
        self.routes = RouteCache()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="store.writer")

    async def submit(
        self,
        fn: Callable[[aiosqlite.Connection], Awaitable[T]],
        *,
        weight: int = 1,
        keeps_routes: bool = False,
    ) -> T:
        """Run ``fn`` inside the next transaction; returns once that transaction committed.

        ``weight`` is the job's size (rows, events): one transaction takes jobs until their
        weights reach ``max_weight``, so a flood of work commits in steps instead of one
        long transaction that every caller would wait for.

        ``keeps_routes`` says the job keeps :attr:`routes` true by itself (the event job,
        which reads and updates it); before any other job the cache is dropped, so a job
        that changes bindings or blocks never leaves a stale route behind.
        """
        if self._closing or self._task is None:
            raise StorageError("the store is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(fn, future, max(1, weight), keeps_routes))
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
                if not pending.keeps_routes:
                    self.routes.clear()
                try:
                    results.append((True, await pending.fn(conn)))
                except Exception as err:  # noqa: BLE001 - a failing job goes back to its caller
                    self.routes.clear()  # it may hold what the rollback undoes
                    await conn.execute("ROLLBACK")
                    if isinstance(err, sqlite3.Error):
                        wrapped = StorageError(str(err))
                        wrapped.__cause__ = err
                        return False, wrapped
                    return False, err
            await conn.execute("COMMIT")
        except (sqlite3.Error, ValueError) as err:
            # The transaction itself failed (disk full, I/O error, ...): nothing committed.
            self.routes.clear()
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
