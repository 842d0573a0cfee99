"""The cluster primitives are tested on a real PostgreSQL server of the tests' own
(tests/pgserver.py), each test on a fresh database; ``proxy`` stands between a client and
the server when a test must cut the line or make it go silent."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import pytest

from tests.pgserver import pg_server

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.pgserver import PgServer

__all__ = ["TcpProxy", "dsn", "pg_server", "proxy"]


@pytest.fixture
def dsn(pg_server: PgServer) -> str:
    """A fresh, empty database on the session's server."""
    return pg_server.create_database("cluster")


class TcpProxy:
    """A loopback TCP proxy to the server: ``pause()`` stops carrying bytes both ways
    (a partition that drops packets: connections stay open, nothing answers),
    ``resume()`` carries them again, ``cut()`` closes every connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def dsn(self, dsn: str) -> str:
        """``dsn`` with the server's port replaced by the proxy's."""
        return dsn.replace(f":{self.target_port}/", f":{self.port}/")

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst), name="proxy.pipe")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                await self._flowing.wait()
                dst.write(data)
                await dst.drain()
        dst.transport.abort()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture
async def proxy(pg_server: PgServer) -> AsyncIterator[TcpProxy]:
    p = TcpProxy(pg_server.port)
    await p.start()
    try:
        yield p
    finally:
        await p.close()
