"""Group commit, whatever the database: the queue of jobs and how it is cut into batches.

Every write is a *job* (an async function of the connection). A :class:`BatchWriter`
takes the jobs waiting in its queue (up to ``max_jobs``, or until their weights reach
``max_weight``), hands them to the backend's :meth:`~BatchWriter._transaction` as one
transaction, and, when a job failed, runs each job again on its own so the failing one
fails alone. Each backend (SQLite's ``Writer``, PostgreSQL's ``PgWriter``) keeps its own
transaction code.

**Floods commit in bigger steps.** With ``flood_max_weight`` above ``max_weight``, a
transaction that left jobs waiting in the queue (a flood: more work arrived than one
transaction takes) lets the next one take twice the weight, and so on up to
``flood_max_weight``; a transaction that empties the queue brings the bound back to
``max_weight``. Outside a flood nothing changes (the first transaction of a flood is no
bigger than before, so its acknowledgements come as soon as before); inside one, fewer
commits rewrite the same pages, at the price of later acknowledgements for the jobs
further back in the queue. A backend may do more for a transaction taken while jobs
were left waiting (:attr:`BatchWriter.flooding`): SQLite's writer leaves the WAL
checkpoint to the commit that ends the flood.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from memwarden.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["BatchWriter", "Pending", "RunParts"]

T = TypeVar("T")
C = TypeVar("C")
Q = TypeVar("Q")


class RunParts:
    """What the jobs of one transaction share until it ends: one part of each kind,
    made empty by the first job that asks for it. A backend's subclass flushes them
    (SQLite's ``ThreadRun``, PostgreSQL's ``PgRun``)."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: dict[type[Any], Any] = {}

    def part(self, kind: type[Q]) -> Q:
        """The run's one ``kind`` part, made by the first job that asks for it."""
        got = self._parts.get(kind)
        if got is None:
            got = self._parts[kind] = kind()
        return cast("Q", got)  # keyed by its own type


@dataclass(slots=True)
class Pending(Generic[T]):
    fn: Callable[[Any], Awaitable[T]]
    future: asyncio.Future[T]
    weight: int = 1
    # A backend may run this plain function (of its connection and the run of such jobs
    # it is part of) on the connection's own thread instead of awaiting ``fn`` (SQLite's
    # Writer.submit_on_thread).
    on_thread: Callable[[Any, Any], T] | None = None


class BatchWriter(Generic[C]):
    """The queue and the task that commits batches of jobs on a connection of type ``C``;
    a backend supplies :meth:`_transaction`."""

    _task_name = "store.writer"

    def __init__(
        self, *, max_jobs: int, max_weight: int, flood_max_weight: int | None = None
    ) -> None:
        self._max_jobs = max_jobs
        self._max_weight = max_weight
        self._flood_max_weight = max(max_weight, flood_max_weight or max_weight)
        self._limit = max_weight  # the next transaction's bound (see the module's note)
        # Whether the transaction being run left jobs waiting in the queue when it was
        # taken: a flood, which more transactions will follow at once.
        self.flooding = False
        self._queue: asyncio.Queue[Pending[Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0
        self.jobs = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._task_name)

    async def submit(self, fn: Callable[[C], Awaitable[T]], *, weight: int = 1) -> T:
        """Run ``fn`` inside the next transaction; returns once that transaction committed.

        ``weight`` is the job's size (rows, events): one transaction takes jobs until their
        weights reach ``max_weight``, so a flood of work commits in steps instead of one
        long transaction that every caller would wait for.
        """
        if self._closing or self._task is None:
            raise StorageError("the store is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(Pending(fn, future, max(1, weight)))
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
            limit = self._limit
            while len(batch) < self._max_jobs and weight < limit and not self._queue.empty():
                batch.append(self._queue.get_nowait())
                weight += batch[-1].weight
            # A flood (jobs still waiting) doubles the next transaction's bound, up to the
            # flood bound; an emptied queue brings it back (see the module's note).
            self.flooding = not self._queue.empty()
            self._limit = (
                min(self._flood_max_weight, limit * 2) if self.flooding else self._max_weight
            )
            try:
                await self._commit(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _commit(self, batch: list[Pending[Any]]) -> None:
        """Run the batch in one transaction; if a job fails, redo each job on its own.

        A savepoint per job would cost more than the rare retry (SQLite copies every page
        a job touches into a sub-journal; PostgreSQL's per-backend cache overflows past 64
        subtransactions), so the batch is optimistic.
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

    async def _transaction(self, jobs: list[Pending[Any]]) -> tuple[bool, Any] | None:
        """Run ``jobs`` in one transaction. None when all committed (futures settled, see
        :meth:`_committed`) or the transaction itself failed (futures failed, see
        :meth:`_fail`); otherwise the failing job's ``(False, error)`` after rolling
        everything back."""
        raise NotImplementedError

    def _committed(self, jobs: list[Pending[Any]], results: list[tuple[bool, Any]]) -> None:
        self.commits += 1
        self.jobs += len(jobs)
        self._settle(jobs, results)

    @staticmethod
    def _fail(jobs: list[Pending[Any]], failure: BaseException) -> None:
        for pending in jobs:
            if not pending.future.done():
                pending.future.set_exception(failure)

    @staticmethod
    def _settle(jobs: list[Pending[Any]], results: list[tuple[bool, Any]]) -> None:
        for pending, (ok, value) in zip(jobs, results, strict=True):
            if pending.future.done():
                continue
            if ok:
                pending.future.set_result(value)
            else:
                pending.future.set_exception(value)
