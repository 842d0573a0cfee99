"""The single writer: one connection, one task, group commit.

Every write is a *job* (an async function of the connection). The writer takes all
jobs waiting in its queue, runs them in one transaction, commits once, and only then
resolves each caller's future. A write therefore counts as accepted exactly when its
transaction has committed. If a job fails, the transaction is rolled back and each job
runs again on its own, so the failing one fails alone. The queue and the batching are
:class:`~memwarden.memory._batching.BatchWriter`'s; this module holds SQLite's
transaction.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.errors import StorageError
from memwarden.memory._batching import BatchWriter, Pending

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["Writer"]

log = structlog.get_logger("memwarden.store")


class Writer(BatchWriter["aiosqlite.Connection"]):
    """Owns the write connection and the task that commits batches of jobs."""

    def __init__(
        self, conn: aiosqlite.Connection, *, max_jobs: int = 256, max_weight: int = 20_000
    ) -> None:
        super().__init__(max_jobs=max_jobs, max_weight=max_weight)
        self._conn = conn

    async def _transaction(self, jobs: list[Pending[Any]]) -> tuple[bool, Any] | None:
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
            self._fail(jobs, StorageError(f"commit failed: {err}"))
            return None
        self._committed(jobs, results)
        return None
