"""A node's local durable spool: the events it could not commit to PostgreSQL.

docs/SCALE.md, "A node cut off from the database". :class:`Spool` is a small SQLite file
in the node's home (the agent queue's file, :class:`~memwarden.memory._localfile.LocalFile`):

- :meth:`Spool.put` commits events to the file before it returns (the caller may then
  acknowledge them); past ``max_unsent`` the oldest are dropped, counted and logged;
- :meth:`Spool.deliver` hands the oldest events, in batches, to an ``apply_events``
  callable (the store's ingestion) and deletes a batch only after that call returned,
  that is after the PostgreSQL transaction committed. A crash between the commit and the
  local delete sends the batch again, and the event log's unique ``event_id`` drops the
  second copy: exactly once by event id.

:class:`SpoolingIngest` puts the spool in front of the store: an event goes to the store
while the spool is empty; when the store cannot be reached (connection refused, lost,
timed out, server shutting down: a commit whose outcome is unknown included) it goes to
the spool and the answer says ``spooled``; while anything is spooled, new events queue
behind it, so a node's events reach the log in the order they came. Its
:meth:`SpoolingIngest.run` task delivers the spool, retrying with capped full-jitter
backoff until the database answers again.

How the daemon uses it on PostgreSQL (``daemon/_cluster.py``), in essence::

    async with Spool(home / "spool.db", clock=clock) as spool:
        ingest = SpoolingIngest(store.apply_events, spool)
        tg.create_task(ingest.run())                  # delivers after a reconnect
        answer = await ingest.apply_events(events)    # answer.spooled, answer.result
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import asyncpg
import structlog

from memwarden.memory import LocalFile, ValidationEvent
from memwarden.plugins import Backoff

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path

    import aiosqlite

    from memwarden.memory import ApplyResult, Clock

__all__ = [
    "ApplyEvents",
    "Ingested",
    "Spool",
    "SpoolStats",
    "SpooledEvent",
    "SpoolingIngest",
    "is_unavailable",
]

log = structlog.get_logger("memwarden.cluster")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
    id INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL,
    bound_only INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL,
    spooled_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (key, value) VALUES ('dropped', 0), ('delivered', 0);
"""

# What says the database could not be reached or the outcome of a commit is unknown (as
# opposed to an error in the events): the connection refused or lost, a timeout, the
# server shutting down, starting up or crashed, a connection-class SQLSTATE (08...).
_UNAVAILABLE = (
    OSError,  # refused, reset, unreachable; TimeoutError is one
    asyncpg.InterfaceError,  # the connection is closed / does not exist
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
)


def is_unavailable(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) says the database could not be
    reached or the outcome is unknown: the events should be spooled, not refused."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, _UNAVAILABLE):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


@dataclass(frozen=True, slots=True)
class SpooledEvent:
    """One event in the spool."""

    id: int
    event: ValidationEvent
    bound_only: bool


@dataclass(frozen=True, slots=True)
class SpoolStats:
    unsent: int  # events in the spool
    dropped: int  # dropped (oldest first) past max_unsent, ever
    delivered: int  # delivered to the store and removed, ever


class Spool(LocalFile):
    """The spool file; an async context manager (``async with Spool(path, clock=)``)."""

    schema = _SCHEMA
    what = "spool"

    def __init__(self, path: str | Path, *, clock: Clock, max_unsent: int = 100_000) -> None:
        super().__init__(path)
        if max_unsent < 1:
            raise ValueError("max_unsent must be at least 1")
        self.clock = clock
        self.max_unsent = max_unsent
        self.pending = 0  # rows in the file, kept in step by put, deliver and open
        self.changed = asyncio.Event()  # set when events were spooled

    async def _opened(self) -> None:
        rows = list(await self._reader().execute_fetchall("SELECT count(*) FROM spool"))
        self.pending = int(rows[0][0])
        if self.pending:
            self.changed.set()

    async def put(self, events: Sequence[ValidationEvent], *, bound_only: bool = False) -> int:
        """Spool ``events`` (in order); returns once committed, with how many of the
        oldest were dropped to stay within ``max_unsent``."""
        if not events:
            return 0
        now = self.clock.time()
        rows = [(e.event_id, int(bound_only), e.model_dump_json(), now) for e in events]
        limit = self.max_unsent

        async def job(conn: aiosqlite.Connection) -> int:
            await conn.executemany(
                "INSERT INTO spool (event_id, bound_only, payload, spooled_at) VALUES (?, ?, ?, ?)",
                rows,
            )
            async with conn.execute("SELECT count(*) FROM spool") as cur:
                depth = (await cur.fetchone() or (0,))[0]
            excess = depth - limit
            if excess <= 0:
                return 0
            await conn.execute(
                "DELETE FROM spool WHERE id IN (SELECT id FROM spool ORDER BY id LIMIT ?)",
                (excess,),
            )
            await conn.execute(
                "UPDATE counters SET value = value + ? WHERE key = 'dropped'", (excess,)
            )
            return int(excess)

        dropped = await self._write(job)
        self.pending += len(rows) - dropped
        if dropped:
            log.warning("spool_full", dropped=dropped, max_unsent=limit)
        self.changed.set()
        return dropped

    async def oldest(self, limit: int = 500) -> list[SpooledEvent]:
        """The oldest spooled events, at most ``limit``."""
        rows = await self._reader().execute_fetchall(
            "SELECT id, payload, bound_only FROM spool ORDER BY id LIMIT ?", (limit,)
        )
        return [
            SpooledEvent(int(r[0]), ValidationEvent.model_validate_json(r[1]), bool(r[2]))
            for r in rows
        ]

    async def remove(self, ids: Sequence[int]) -> None:
        """Delete delivered events (their PostgreSQL transaction committed)."""
        if not ids:
            return
        rows = [(i,) for i in ids]

        async def job(conn: aiosqlite.Connection) -> int:
            before = conn.total_changes
            await conn.executemany("DELETE FROM spool WHERE id = ?", rows)
            removed = conn.total_changes - before
            await conn.execute(
                "UPDATE counters SET value = value + ? WHERE key = 'delivered'", (removed,)
            )
            return removed

        removed = await self._write(job)  # then subtract: a put may have run meanwhile
        self.pending -= removed

    async def deliver(
        self,
        apply_events: ApplyEvents,
        *,
        batch: int = 500,
    ) -> int:
        """Deliver the whole spool, oldest first, ``batch`` events a call (a run of one
        ``bound_only`` flag each); returns how many were delivered. An error of
        ``apply_events`` propagates, the undelivered events stay."""
        delivered = 0
        while True:
            spooled = await self.oldest(batch)
            if not spooled:
                return delivered
            run = _leading(spooled)
            flag = run[0].bound_only
            await apply_events([s.event for s in run], bound_only=flag)
            await self.remove([s.id for s in run])
            delivered += len(run)

    async def stats(self) -> SpoolStats:
        rows = await self._reader().execute_fetchall("SELECT key, value FROM counters")
        counts = {k: int(v) for k, v in rows}
        return SpoolStats(
            unsent=self.pending,
            dropped=counts.get("dropped", 0),
            delivered=counts.get("delivered", 0),
        )


def _leading(spooled: list[SpooledEvent]) -> list[SpooledEvent]:
    """The first events of ``spooled`` that share the first one's ``bound_only``."""
    flag = spooled[0].bound_only
    run: list[SpooledEvent] = []
    for s in spooled:
        if s.bound_only != flag:
            break
        run.append(s)
    return run


class ApplyEvents(Protocol):
    """The store's ingestion: ``Store.apply_events`` / ``PgEventLog.apply_events``."""

    def __call__(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = ...
    ) -> Awaitable[ApplyResult]: ...


@dataclass(frozen=True, slots=True)
class Ingested:
    """The answer of :meth:`SpoolingIngest.apply_events`: the store's result, or
    ``spooled`` (committed to the spool, to be delivered; ``result`` is None)."""

    result: ApplyResult | None
    spooled: bool = False
    dropped: int = 0  # oldest spooled events dropped to make room


class SpoolingIngest:
    """The store's ingestion with the spool in front (see the module's note)."""

    def __init__(
        self,
        apply_events: ApplyEvents,
        spool: Spool,
        *,
        batch: int = 500,
        backoff: Backoff | None = None,
        unavailable: Callable[[BaseException], bool] = is_unavailable,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        on_delivered: Callable[[ApplyResult], Awaitable[None]] | None = None,
    ) -> None:
        self._apply = apply_events
        # Told the store's result of each delivered batch (after its commit; the daemon's
        # bus bookkeeping: answered requests, session notices). An error there is logged:
        # the batch is committed and leaves the spool all the same.
        self._on_delivered = on_delivered
        self.spool = spool
        self.batch = batch
        self._backoff = backoff or Backoff(base_s=0.2, cap_s=10.0)
        self._unavailable = unavailable
        self._sleep = sleep
        self.failures = 0  # deliveries that failed (then retried)
        self.last_error: str | None = None

    async def apply_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> Ingested:
        """Apply ``events`` through the store, or spool them: when the spool is not empty
        (they queue behind it) or the store cannot be reached. Other errors (an event
        the store refuses) propagate as from the store."""
        if self.spool.pending == 0:
            try:
                return Ingested(await self._apply(events, bound_only=bound_only))
            except Exception as err:
                if not self._unavailable(err):
                    raise
                self.last_error = str(err)
                log.warning("ingest_spooled", events=len(events), error=str(err))
        dropped = await self.spool.put(events, bound_only=bound_only)
        return Ingested(None, spooled=True, dropped=dropped)

    async def _delivering(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> ApplyResult:
        result = await self._apply(events, bound_only=bound_only)
        if self._on_delivered is not None:
            try:
                await self._on_delivered(result)
            except Exception as err:  # noqa: BLE001 - committed: never delivered twice for it
                log.error("spool_on_delivered_failed", error=f"{type(err).__name__}: {err}")
        return result

    async def run(self) -> None:
        """Deliver the spool whenever it holds events, until cancelled; an unreachable
        store is tried again after a backoff (any other error too, logged: the events
        stay in the spool, nothing is dropped for it)."""
        attempt = 0
        while True:
            if self.spool.pending == 0:
                self.spool.changed.clear()
                if self.spool.pending == 0:
                    await self.spool.changed.wait()
                continue
            try:
                delivered = await self.spool.deliver(self._delivering, batch=self.batch)
            except Exception as err:  # noqa: BLE001 - retried: the events stay spooled
                self.failures += 1
                self.last_error = str(err)
                level = log.info if self._unavailable(err) else log.error
                level("spool_delivery_failed", pending=self.spool.pending, error=str(err))
                await self._sleep(self._backoff.delay(attempt))
                attempt += 1
                continue
            attempt = 0
            if delivered:
                log.info("spool_delivered", events=delivered)
