"""A small SQLite file a process keeps for itself: the agent's durable queue
(``memwarden/agent/_queue.py``) and a node's spool (``memwarden/cluster/_spool.py``).

Opened 0600 in WAL mode with a group-commit writer (the store's
:class:`~memwarden.memory._writer.Writer`: a write returns once committed) and a
read-only connection for reads; a subclass gives its ``schema`` (idempotent DDL, run at
every open) and its name for messages.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Self, TypeVar

import aiosqlite

from memwarden._files import prepare_database
from memwarden.errors import StorageError
from memwarden.memory._writer import Writer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

__all__ = ["LocalFile"]

T = TypeVar("T")


class LocalFile:
    """The file; an async context manager. Subclasses set ``schema`` and ``what``."""

    schema = ""
    what = "local file"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._wconn: aiosqlite.Connection | None = None
        self._rconn: aiosqlite.Connection | None = None
        self._writer: Writer | None = None

    async def __aenter__(self) -> Self:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            prepare_database(self.path)  # 0600 (and so its -wal and -shm), whatever the umask
            self._wconn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._wconn.execute("PRAGMA journal_mode = WAL")
            await self._wconn.execute("PRAGMA synchronous = NORMAL")
            await self._wconn.execute("PRAGMA busy_timeout = 10000")
            await self._wconn.executescript(self.schema)
            self._rconn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._rconn.execute("PRAGMA query_only = ON")
        except (sqlite3.Error, OSError) as err:
            await self._close()
            raise StorageError(f"cannot open the {self.what} at {self.path}: {err}") from err
        except BaseException:
            await self._close()
            raise
        self._writer = Writer(self._wconn)
        self._writer.start()
        await self._opened()
        return self

    async def _opened(self) -> None:
        """Called once open (a subclass reads what it keeps in memory)."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._writer is not None:
            await self._writer.close()
            self._writer = None
        for conn in (self._rconn, self._wconn):
            if conn is not None:
                with contextlib.suppress(sqlite3.Error, ValueError):
                    await conn.close()
        self._rconn = self._wconn = None

    async def _write(self, job: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        if self._writer is None:
            raise StorageError(f"the {self.what} is closed")
        return await self._writer.submit(job)

    def _reader(self) -> aiosqlite.Connection:
        if self._rconn is None:
            raise StorageError(f"the {self.what} is closed")
        return self._rconn
