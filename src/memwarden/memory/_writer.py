"""The single writer: one connection, one task, group commit.

Every write is a *job* (an async function of the connection). The writer takes all
jobs waiting in its queue, runs them in one transaction, commits once, and only then
resolves each caller's future. A write therefore counts as accepted exactly when its
transaction has committed. If a job fails, the transaction is rolled back and each job
runs again on its own, so the failing one fails alone. The queue and the batching are
:class:`~memwarden.memory._batching.BatchWriter`'s; this module holds SQLite's
transaction.

A job may instead be a plain function of the ``sqlite3`` connection, run on the
connection's own thread (:meth:`Writer.submit_on_thread`): consecutive ones run in a
single hand-off to that thread together with the ``BEGIN`` before them and the
``COMMIT`` after them, so a transaction of such jobs costs one trip between threads
instead of one per job and two more for the transaction (on a busy machine each trip
waits for the scheduler).

**A run shares what it writes last.** The on-thread jobs of one hand-off get the same
:class:`ThreadRun`: a job may leave a write in one of the run's parts
(:meth:`ThreadRun.part`) for the end of the run, where the parts are flushed before the
``COMMIT`` (the event jobs leave their blocks' evidence there, so a block that several
jobs of a flood touch is written once: :class:`~memwarden.memory._eventbatch.PendingEvidence`).
A run that fails takes its parts with it: they live exactly as long as the hand-off.

**A flood checkpoints once.** SQLite copies the WAL back into the database file (and
syncs both) at the first commit that finds it past ``wal_autocheckpoint`` pages. In a
flood every transaction rewrites much the same pages, so each commit copied most of the
table again: four checkpoints for 200 000 events where one would do. A transaction taken
while jobs were left waiting (:attr:`~memwarden.memory._batching.BatchWriter.flooding`)
therefore commits without a checkpoint as long as the WAL file is under
``flood_wal_bytes``; the commit that ends the flood (or the first past the bound)
checkpoints it all, before its callers hear back. ``flood_wal_bytes`` = 0 checkpoints
as SQLite does at every commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import structlog

from memwarden.errors import StorageError
from memwarden.memory._batching import BatchWriter, Pending, RunParts
from memwarden.memory._sql import in_thread

if TYPE_CHECKING:
    from pathlib import Path

    import aiosqlite

__all__ = ["AUTOCHECKPOINT_PAGES", "OnThreadJob", "RunPart", "ThreadRun", "Writer"]

# SQLite's default ``wal_autocheckpoint``: a commit that finds the WAL past this many pages
# copies it back into the database file.
AUTOCHECKPOINT_PAGES = 1000

T = TypeVar("T")

log = structlog.get_logger("memwarden.store")


class RunPart(Protocol):
    """State the on-thread jobs of one run share: made empty (no arguments) by the run's
    first job that asks for it, flushed once at the end of the run."""

    def __init__(self) -> None: ...

    def flush(self, conn: sqlite3.Connection) -> None:
        """Write what the run's jobs left here (on the writer's thread, in the transaction)."""


class ThreadRun(RunParts):
    """The on-thread jobs of one hand-off to the writer's thread, and what they share
    until the run ends (see the module's note); each part a :class:`RunPart`."""

    __slots__ = ()

    def flush(self, conn: sqlite3.Connection) -> None:
        """Flush every part, in the order the jobs first asked for them."""
        parts: list[RunPart] = list(self._parts.values())
        self._parts.clear()
        for part in parts:
            part.flush(conn)


#: A job run on the writer connection's own thread: a plain function of that ``sqlite3``
#: connection and of the run it is part of (:meth:`Writer.submit_on_thread`).
OnThreadJob = Callable[[sqlite3.Connection, ThreadRun], T]


class Writer(BatchWriter["aiosqlite.Connection"]):
    """Owns the write connection and the task that commits batches of jobs."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        max_jobs: int = 256,
        max_weight: int = 20_000,
        flood_max_weight: int | None = None,
        wal_path: Path | None = None,
        flood_wal_bytes: int = 0,
    ) -> None:
        super().__init__(
            max_jobs=max_jobs, max_weight=max_weight, flood_max_weight=flood_max_weight
        )
        self._conn = conn
        self._wal_path = wal_path
        self._flood_wal_bytes = flood_wal_bytes
        self._autocheckpoint = AUTOCHECKPOINT_PAGES  # as set on the connection
        self.deferred_checkpoints = 0  # commits of a flood that left the WAL as it was

    def _checkpoint_pages(self) -> int:
        """The ``wal_autocheckpoint`` for the next commit: 0 (none) for a transaction of
        a flood while the WAL file is under ``flood_wal_bytes``, else SQLite's default
        (see the module's note)."""
        if not self.flooding or self._flood_wal_bytes <= 0 or self._wal_path is None:
            return AUTOCHECKPOINT_PAGES
        try:
            size = self._wal_path.stat().st_size
        except OSError:  # no WAL file (yet): nothing to defer
            return AUTOCHECKPOINT_PAGES
        return 0 if size < self._flood_wal_bytes else AUTOCHECKPOINT_PAGES

    async def submit_on_thread(self, fn: OnThreadJob[T], *, weight: int = 1) -> T:
        """Like :meth:`submit`, for a job that is a plain function of the ``sqlite3``
        connection and its :class:`ThreadRun`: it runs on the connection's thread, in one
        hand-off with the jobs of this kind next to it in the transaction (see the
        module's note). It must not touch the event loop, nor end the transaction."""
        if self._closing or self._task is None:
            raise StorageError("the store is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(Pending(_on_thread_only, future, max(1, weight), fn))
        return await future

    async def _transaction(self, jobs: list[Pending[Any]]) -> tuple[bool, Any] | None:
        """Run ``jobs`` in one transaction. None when all committed (futures settled);
        otherwise the failing job's ``(False, error)`` after rolling everything back."""
        conn = self._conn
        results: list[tuple[bool, Any]] = []
        pages = self._checkpoint_pages()
        try:
            if pages != self._autocheckpoint:  # a flood began or ended: one statement
                await conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")
                self._autocheckpoint = pages
            if pages == 0:
                self.deferred_checkpoints += 1
            begun = committed = False
            i, n = 0, len(jobs)
            while i < n:
                fn = jobs[i].fn
                if jobs[i].on_thread is not None:  # on-thread: one hand-off for the run
                    j = i
                    while j < n and jobs[j].on_thread is not None:
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
            self._fail(jobs, StorageError(f"commit failed: {err}"))
            return None
        self._committed(jobs, results)
        return None


async def _on_thread_only(_conn: aiosqlite.Connection) -> Any:
    """The ``fn`` of an on-thread job, never awaited: :meth:`Writer._transaction` runs
    the job's ``on_thread`` function instead."""
    raise AssertionError("an on-thread job runs on the connection's thread")


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
    jobs: list[OnThreadJob[Any]],
    results: list[tuple[bool, Any]],
    begin: bool,
    commit: bool,
) -> None:
    """Run ``jobs`` on the connection's thread, after ``BEGIN`` and before ``COMMIT`` if
    asked, each result into ``results``, then flush what they left in their
    :class:`ThreadRun`. A failing job (or flush) rolls everything back and raises
    :class:`_JobError` (the error goes back to the job's caller, see
    Writer._transaction; after a failed flush, as after any failure in a transaction of
    several jobs, the writer runs each job again alone)."""
    run = ThreadRun()
    if begin:
        conn.execute("BEGIN IMMEDIATE")
    # The cyclic garbage collector waits while the jobs run: what a job allocates it
    # mostly frees itself (rows, records), and collections in the middle of a run only
    # walked those objects and promoted the live ones toward the full collections, which
    # walk the whole heap (a flood of events: one or two of 0.3-0.8 s each, none now).
    # Left as it was when someone else turned it off.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        for job in jobs:
            try:
                results.append((True, job(conn, run)))
            except Exception as err:
                conn.execute("ROLLBACK")
                raise _JobError(err) from err
        try:
            run.flush(conn)
        except Exception as err:
            conn.execute("ROLLBACK")
            raise _JobError(err) from err
    finally:
        if paused:
            gc.enable()
    if commit:
        conn.execute("COMMIT")
