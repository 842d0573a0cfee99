"""This daemon as one node of several on one PostgreSQL database (docs/SCALE.md).

Built only when the store is on PostgreSQL (it imports ``memwarden.cluster``, which
needs the ``postgres`` extra); on SQLite the daemon always leads and has no spool.

- the node's row in ``cluster_nodes`` (:class:`~memwarden.cluster.NodeRegistry`): refused
  at start while another live instance has this node name; heartbeats; freed on a clean
  stop;
- the leader's lease (:class:`~memwarden.cluster.Leader`): the scheduler's singleton
  passes run while this node holds it; released on a clean stop;
- the ``memwarden_events`` listener (:class:`~memwarden.cluster.Notifier`): a commit of
  events on any node wakes this node's followers of the log (``GET /v1/events?wait=``);
- the ``memwarden_effects`` listener: an ingestion on any node that made blocks stale or
  refuted, or a sweep or dependency that made blocks stale (``block_falls``), wakes
  :class:`EffectsFollower`, which reads both logs after its cursors and tells this
  node's :class:`~memwarden.daemon._sessions.SessionWatch`;
- the local spool (:class:`~memwarden.cluster.SpoolingIngest` over ``<home>/spool.db``):
  the bus's ingestion, so events are kept while the database cannot be reached, and
  delivered after it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Self

import structlog

from memwarden.cluster import (
    BEAT_S,
    SESSION_ERRORS,
    Leader,
    LeaseTimes,
    NodeRegistry,
    Notifier,
    Spool,
    SpoolingIngest,
    is_unavailable,
    lease_holder,
)
from memwarden.errors import ConfigError
from memwarden.memory import sleep_on
from memwarden.memory.pg._apply import (
    EFFECTS_CHANNEL,
    EVENTS_CHANNEL,
    fallen_effects_after,
    falls_after,
    falls_start,
    last_effect_seq,
)
from memwarden.memory.pg._serving import served_fingerprint

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from types import TracebackType

    from memwarden.cluster import Subscription
    from memwarden.daemon._config import Settings
    from memwarden.daemon._sessions import SessionWatch
    from memwarden.memory import ApplyResult, Clock, Store

__all__ = ["ClusterNode", "EffectsFollower", "is_unavailable"]

log = structlog.get_logger("memwarden.cluster")


class ClusterNode:
    """Registration, lease and spool of one node; an async context manager."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        clock: Clock,
        dsn: str,
        on_delivered: Callable[[ApplyResult], Awaitable[None]] | None = None,
    ) -> None:
        c = settings.cluster
        self.node = c.node
        self.store = store
        self.clock = clock
        self.registry = NodeRegistry(dsn, node=c.node)
        self.leader = Leader(
            dsn,
            node=c.node,
            times=LeaseTimes(
                ttl_s=c.lease_ttl.total_seconds(),
                renew_s=c.lease_renew.total_seconds(),
                poll_s=c.lease_poll.total_seconds(),
                safety_s=c.lease_safety.total_seconds(),
            ),
        )
        self.spool = Spool(settings.home / "spool.db", clock=clock, max_unsent=c.spool_max_unsent)
        self.ingest = SpoolingIngest(store.apply_events, self.spool, on_delivered=on_delivered)
        # Wake-ups when any node commits events (the log's followers re-read after them).
        self.notifier = Notifier(
            dsn,
            channels=[EVENTS_CHANNEL, EFFECTS_CHANNEL],
            application_name=f"memwarden notifier {c.node}",
        )
        self.failure: ConfigError | None = None  # the node's name taken over meanwhile

    @staticmethod
    def unavailable(err: BaseException) -> bool:
        """Whether ``err`` says the database cannot be reached just now (the spool's test),
        for callers that hold a node without importing the postgres extra's modules."""
        return is_unavailable(err)

    async def __aenter__(self) -> Self:
        await self.registry.register()  # ConfigError: another live instance has the name
        await self.spool.__aenter__()
        try:
            await self.leader.__aenter__()
            await self.notifier.__aenter__()
        except BaseException:
            await self.leader.stop()
            await self.spool.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.notifier.__aexit__(exc_type, exc, tb)
        await self.leader.stop()  # the lease released: the next node leads at its next poll
        try:
            async with self._conn() as conn:
                await self.registry.stopped(conn)
        except SESSION_ERRORS as err:  # the database away: the name frees in 30 s
            log.warning("cluster_node_not_unregistered", node=self.node, error=str(err))
        await self.spool.__aexit__(exc_type, exc, tb)

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        pg = self.store.pg_db
        if pg is None:  # pragma: no cover - built only on PostgreSQL
            raise ConfigError("the cluster needs a PostgreSQL store")
        async with pg.read() as conn:
            yield conn

    async def heartbeat(self, on_lost: Callable[[ConfigError], None]) -> None:
        """Heartbeat every few seconds until cancelled; ``on_lost`` once the name was
        taken over by another instance (then this node must stop)."""
        while True:
            await sleep_on(self.clock, BEAT_S)
            try:
                async with self._conn() as conn:
                    ours = await self.registry.beat(conn)
            except SESSION_ERRORS as err:  # the database away: tried again
                log.info("cluster_heartbeat_failed", node=self.node, error=str(err))
                continue
            if not ours:
                self.failure = ConfigError(
                    f"cluster.node: another daemon took the node name {self.node!r} while"
                    " this one could not heartbeat; stopping"
                )
                on_lost(self.failure)
                return

    async def watch_served(self, on_change: Callable[[], None]) -> None:
        """Until cancelled: every few seconds, ``on_change`` when the set of bindings this
        node serves changed (the leader moved some to or from it): its sensors learn
        their bindings again."""
        last: tuple[int, int] | None = None
        while True:
            try:
                async with self._conn() as conn:
                    now = await served_fingerprint(conn, self.node)
            except SESSION_ERRORS as err:  # the database away: tried again
                log.info("served_bindings_not_read", node=self.node, error=str(err))
            else:
                if last is not None and now != last:
                    on_change()
                last = now
            await sleep_on(self.clock, BEAT_S)

    async def wake_on_events(self, wake: Callable[[], Awaitable[None]]) -> None:
        """Call ``wake`` whenever a node (this one too) committed events, or notices may
        have been lost (a reconnect): the log's long-polls re-read after their cursor."""
        sub = self.notifier.subscribe(EVENTS_CHANNEL)
        try:
            async for _notice in sub:
                await wake()
        finally:
            self.notifier.unsubscribe(sub)

    async def tell_sessions(self, watch: SessionWatch) -> None:
        """Until cancelled: blocks made stale or refuted on any node (this one too) are
        told to the sessions that read them through this node."""
        sub = self.notifier.subscribe(EFFECTS_CHANNEL)  # first: nothing after `start` lost
        try:
            while True:
                try:
                    async with self._conn() as conn:
                        start = await last_effect_seq(conn)  # sessions read nothing before
                        falls = await falls_start(conn)
                    break
                except SESSION_ERRORS as err:  # the database away: tried again
                    log.info("session_notices_not_started", error=str(err))
                    await sleep_on(self.clock, BEAT_S)
            follower = EffectsFollower(
                self._conn, watch, self.clock, cursor=(start, 0), falls_cursor=falls
            )
            await follower.run(sub)
        finally:
            self.notifier.unsubscribe(sub)

    async def health(self) -> dict[str, Any]:
        """``cluster`` of ``/v1/health``: the node, whether it leads, the lease's holder
        (``<node>/<random>``, never an address or a password) and the spool."""
        holder: str | None = None
        try:
            async with self._conn() as conn:
                row = await lease_holder(conn)
            holder = row.holder if row.valid else None
        except Exception as err:
            if not is_unavailable(err):
                raise
        stats = await self.spool.stats()
        return {
            "node": self.node,
            "instance": self.registry.instance,
            "leader": self.leader.term is not None,
            "leader_holder": holder,
            "spool": {
                "unsent": stats.unsent,
                "dropped": stats.dropped,
                "delivered": stats.delivered,
            },
        }


class EffectsFollower:
    """Reads the effects log and ``block_falls`` after its cursors on each
    ``memwarden_effects`` notice or ``missed`` signal, and tells the watch of each block
    made stale or refuted.

    A fall in ``block_falls`` is read only once every transaction older than its own has
    ended (so none can commit behind the cursor): while one is held back so, the follower
    reads again every ``retry_s`` seconds without waiting for a notice."""

    def __init__(
        self,
        conn: Callable[[], contextlib.AbstractAsyncContextManager[Any]],
        watch: SessionWatch,
        clock: Clock,
        *,
        cursor: tuple[int, int] = (0, 0),
        falls_cursor: tuple[str, int] = ("0", 0),
        page: int = 500,
        retry_s: float = 0.2,
    ) -> None:
        self._conn = conn
        self.watch = watch
        self.clock = clock
        self.cursor = cursor  # (event seq, block rid) of the last effect read
        self.falls_cursor = falls_cursor  # (xid, id) of the last fall read
        self.page = page
        self.retry_s = retry_s
        self.reads = 0
        self.held = False  # falls committed but not readable yet

    async def run(self, sub: Subscription) -> None:
        while True:
            try:
                # A notice or `missed`: either way, re-read; falls held back: soon anyway.
                async with asyncio.timeout(self.retry_s if self.held else None):
                    await sub.get()
            except TimeoutError:
                pass
            except StopAsyncIteration:  # the subscription closed
                return
            try:
                await self.catch_up()
            except SESSION_ERRORS as err:  # the database away: the reconnect's
                log.info("session_notices_not_read", error=str(err))  # `missed` re-reads

    async def catch_up(self) -> int:
        """Tell the watch of every fallen block after the cursors; how many were read."""
        self.reads += 1
        read = 0
        while True:
            async with self._conn() as conn:
                rows = await fallen_effects_after(conn, self.cursor, limit=self.page)
            now = self.clock.time()
            for row in rows:
                self.watch.changed(
                    row.block_id,
                    before=row.before,
                    after=row.after,
                    at=now,
                    reliability=row.reliability,
                    event_id=row.event_id,
                )
                self.cursor = (row.seq, row.rid)
            read += len(rows)
            if len(rows) < self.page:
                break
        while True:
            async with self._conn() as conn:
                falls, self.held = await falls_after(conn, self.falls_cursor, limit=self.page)
            for fall in falls:
                self.watch.changed(
                    fall.block_id,
                    before=fall.before,
                    after=fall.after,
                    at=fall.at,
                    reliability=fall.reliability,
                    reason=fall.reason,
                )
                self.falls_cursor = (fall.xid, fall.id)
            read += len(falls)
            if len(falls) < self.page:
                return read
