"""``LISTEN``/``NOTIFY`` across nodes, kept up through reconnects.

A notice is **a wake-up, never the data**: a writer sends ``notify(conn, channel,
payload)`` in the transaction that changed something (PostgreSQL delivers it at commit,
and only if the transaction commits), and a reader that wakes re-reads what changed from
its own cursor (the event log after its last seq). So nothing depends on a notice
arriving, which matters because **PostgreSQL keeps no notices for a listener that is not
connected**: during a reconnect they are simply lost.

What the :class:`Notifier` guarantees instead: after every (re)connect, once ``LISTEN``
is in place on every channel, each subscriber gets a ``missed`` notice for each of its
channels — the first connect included (anything committed before ``LISTEN`` took
effect) — and a subscriber whose queue overflows gets ``missed`` instead of the notices
it could not take. A reader that re-reads from its last seq on ``missed`` skips nothing.

The listening connection is dedicated (``LISTEN`` is session state: never through a
transaction-pooling proxy, docs/SCALE.md), pinged every ``ping_s`` so that a connection
that silently stopped answering is noticed, and reconnected with capped full-jitter
backoff. Payloads come from anyone who may ``NOTIFY`` on the database: they are passed on
as text and must not be trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import structlog

from memwarden.cluster._ddl import SESSION_ERRORS, connect, translated
from memwarden.errors import ConfigError, StorageError, ValidationInputError
from memwarden.memory import sleep_on
from memwarden.plugins import Backoff

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from types import TracebackType

    import asyncpg

    from memwarden.cluster._ddl import Executor
    from memwarden.memory import Clock

__all__ = ["MAX_PAYLOAD_BYTES", "Notice", "Notifier", "Subscription", "check_channel", "notify"]

log = structlog.get_logger("memwarden.cluster")

MAX_PAYLOAD_BYTES = 7999  # PostgreSQL refuses 8000 bytes and more
_CHANNEL = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_channel(channel: str) -> str:
    """``channel`` if it is a plain lower-case identifier (1-63 characters), else raise."""
    if not isinstance(channel, str) or not _CHANNEL.fullmatch(channel):
        raise ValidationInputError(
            [("channel", f"{channel!r} is not a channel name (a-z, 0-9 and '_', 1-63)")]
        )
    return channel


async def notify(conn: Executor, channel: str, payload: str = "") -> None:
    """Send a notice on ``channel`` (inside a transaction: delivered at its commit)."""
    check_channel(channel)
    if len(payload.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise ValidationInputError(
            [("payload", f"{len(payload.encode('utf-8'))} bytes (at most {MAX_PAYLOAD_BYTES})")]
        )
    with translated(f"cannot notify {channel!r}"):
        await conn.execute("SELECT pg_notify($1, $2)", channel, payload)


@dataclass(frozen=True, slots=True)
class Notice:
    """A notice on ``channel``; ``missed``: notices may have been lost, re-read."""

    channel: str
    payload: str = ""
    missed: bool = False


class Subscription:
    """The notices of some channels, in order: ``async for notice in sub`` or
    ``await sub.get()``. Bounded: past ``maxsize`` waiting, they are replaced by one
    ``missed`` notice per channel."""

    def __init__(self, channels: Iterable[str], *, maxsize: int) -> None:
        self.channels = tuple(dict.fromkeys(channels))
        self.maxsize = max(1, maxsize)
        self.overflows = 0
        self._queue: deque[Notice] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    def put(self, notice: Notice) -> None:
        """Queue a notice (the Notifier does; a test may too)."""
        if self._closed:
            return
        if len(self._queue) >= self.maxsize:
            self._queue.clear()
            self.overflows += 1
            self._queue.extend(Notice(ch, missed=True) for ch in self.channels)
        else:
            self._queue.append(notice)
        self._ready.set()

    def mark_missed(self) -> None:
        """Notices may have been lost: a `missed` notice for each channel."""
        for ch in self.channels:
            self.put(Notice(ch, missed=True))

    def pending(self) -> int:
        """Notices waiting to be taken."""
        return len(self._queue)

    async def get(self) -> Notice:
        """The next notice (waits for one)."""
        while not self._queue:
            if self._closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Notice:
        return await self.get()


class Notifier:
    """Listen on ``channels`` over one dedicated connection; an async context manager.

    ``notifier.subscribe("a", "b")`` gives a :class:`Subscription`; ``await
    notifier.connected()`` waits until ``LISTEN`` is in place; ``connects`` counts
    (re)connections.
    """

    def __init__(
        self,
        dsn: str,
        *,
        channels: Sequence[str],
        clock: Clock | None = None,
        ping_s: float = 5.0,
        ping_timeout_s: float = 2.0,
        backoff: Backoff | None = None,
        queue_max: int = 1000,
        connect_timeout_s: float = 5.0,
        application_name: str = "memwarden notifier",
    ) -> None:
        if not channels:
            raise ConfigError("a Notifier needs at least one channel")
        self.dsn = dsn
        self.channels = tuple(check_channel(c) for c in dict.fromkeys(channels))
        self.clock = clock
        self.ping_s = ping_s
        self.ping_timeout_s = ping_timeout_s
        self._backoff = backoff or Backoff(base_s=0.1, cap_s=5.0)
        self._queue_max = queue_max
        self._connect_timeout_s = connect_timeout_s
        self.application_name = application_name
        self._subs: set[Subscription] = set()
        self._connected = asyncio.Event()
        self._conn: asyncpg.Connection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self.connects = 0

    def subscribe(self, *channels: str) -> Subscription:
        """A subscription to ``channels`` (default: all of the notifier's)."""
        wanted = channels or self.channels
        unknown = [c for c in wanted if c not in self.channels]
        if unknown:
            raise ValidationInputError(
                [("channels", f"{unknown} are not listened to (only {list(self.channels)})")]
            )
        sub = Subscription(wanted, maxsize=self._queue_max)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)
        sub.close()

    @property
    def is_connected(self) -> bool:
        return self._connected.is_set()

    async def connected(self) -> None:
        """Wait until ``LISTEN`` is in place."""
        await self._connected.wait()

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(), name="notifier.run")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for sub in list(self._subs):
            self.unsubscribe(sub)

    # ------------------------------------------------------------------ the work

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            began = loop.time()
            try:
                await self._session()
            except SESSION_ERRORS as err:
                log.warning("notifier_disconnected", error=f"{type(err).__name__}: {err}")
            except Exception as err:  # a bug here must not end the listening for good
                log.error(
                    "notifier_session_failed", error=f"{type(err).__name__}: {err}", exc_info=err
                )
            finally:
                self._connected.clear()
                conn, self._conn = self._conn, None
                if conn is not None and not conn.is_closed():
                    conn.terminate()
            if loop.time() - began >= 30.0:  # a healthy session: start the backoff again
                attempt = 0
            attempt += 1
            await self._sleep(self._backoff.delay(attempt))

    async def _sleep(self, seconds: float) -> None:
        if self.clock is None:
            await asyncio.sleep(seconds)
        else:
            await sleep_on(self.clock, seconds)

    async def _session(self) -> None:
        conn = self._conn = await connect(
            self.dsn, timeout_s=self._connect_timeout_s, application_name=self.application_name
        )
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        with translated("cannot LISTEN"):
            for channel in self.channels:
                await conn.add_listener(channel, self._on_notice)
        self.connects += 1
        self._connected.set()
        log.info("notifier_listening", channels=list(self.channels), connects=self.connects)
        # Whatever was sent before LISTEN took effect (or while we were away) is lost.
        for sub in list(self._subs):
            sub.mark_missed()
        while True:
            waiter = asyncio.ensure_future(lost.wait())
            try:
                await asyncio.wait({waiter}, timeout=self.ping_s)
            finally:
                waiter.cancel()
            if lost.is_set() or conn.is_closed():
                raise StorageError("the listening connection was closed")
            with translated("the listening connection does not answer"):
                await conn.fetchval("SELECT 1", timeout=self.ping_timeout_s)

    def _on_notice(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        notice = Notice(channel, str(payload))
        for sub in list(self._subs):
            if channel in sub.channels:
                sub.put(notice)
