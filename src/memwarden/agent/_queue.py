"""The agent's durable queue: a small SQLite file in its state directory.

An event is written (and committed, in groups) before ``emit`` returns, and leaves the
queue only when the broker acknowledged it (PUBACK): a broker outage or a crash of the
agent loses nothing that was emitted. Sent events are kept a while (``history_max``)
to answer the daemon's re-send requests for a gap. When more than ``max_unsent``
events wait, the oldest are dropped and counted (the daemon sees the gap).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from memwarden.memory import LocalFile

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import aiosqlite

    from memwarden.memory import Clock

__all__ = ["AgentQueue", "QueuedEvent"]

log = structlog.get_logger("memwarden.agent")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    id INTEGER PRIMARY KEY,
    agent TEXT NOT NULL,
    seq INTEGER NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    queued_at REAL NOT NULL,
    sent_at REAL
);
CREATE INDEX IF NOT EXISTS queue_unsent ON queue(id) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS queue_sent ON queue(id) WHERE sent_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS queue_seq ON queue(agent, seq);
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (key, value) VALUES ('unsent', 0), ('sent', 0), ('dropped', 0);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    """One event waiting to be published (or kept for a re-send)."""

    id: int
    agent: str
    seq: int
    topic: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class QueueStats:
    unsent: int
    sent_kept: int
    dropped: int


class AgentQueue(LocalFile):
    """The durable queue; an async context manager (``async with AgentQueue(path)``)."""

    schema = _SCHEMA
    what = "agent queue"

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock,
        max_unsent: int = 100_000,
        history_max: int = 10_000,
    ) -> None:
        super().__init__(path)
        self.clock = clock
        self.max_unsent = max_unsent
        self.history_max = history_max
        self.changed = asyncio.Event()  # set when events were queued (or re-queued)

    # ------------------------------------------------------------------ writes

    async def put(self, agent: str, seq: int, topic: str, payload: bytes) -> int:
        """Queue an event; returns once committed, with how many old ones were dropped."""
        now = self.clock.time()
        limit = self.max_unsent

        async def job(conn: aiosqlite.Connection) -> int:
            await conn.execute(
                "INSERT INTO queue (agent, seq, topic, payload, queued_at) VALUES (?, ?, ?, ?, ?)",
                (agent, seq, topic, payload, now),
            )
            async with conn.execute(
                "UPDATE counters SET value = value + 1 WHERE key = 'unsent' RETURNING value"
            ) as cur:
                unsent = (await cur.fetchone() or (0,))[0]
            excess = unsent - limit
            if excess <= 0:
                return 0
            await conn.execute(
                "DELETE FROM queue WHERE id IN"
                " (SELECT id FROM queue WHERE sent_at IS NULL ORDER BY id LIMIT ?)",
                (excess,),
            )
            await conn.execute(
                "UPDATE counters SET value = value + (CASE key WHEN 'dropped' THEN ? ELSE -? END)"
                " WHERE key IN ('dropped', 'unsent')",
                (excess, excess),
            )
            return int(excess)

        dropped = await self._write(job)
        if dropped:
            log.warning("agent_queue_full", dropped=dropped, max_unsent=limit)
        self.changed.set()
        return dropped

    async def mark_sent(self, ids: Sequence[int]) -> None:
        """The broker acknowledged these: keep them as history (bounded), not as work."""
        if not ids:
            return
        now = self.clock.time()
        keep = self.history_max
        rows = [(now, i) for i in ids]

        async def job(conn: aiosqlite.Connection) -> None:
            before = conn.total_changes
            await conn.executemany(
                "UPDATE queue SET sent_at = ? WHERE id = ? AND sent_at IS NULL", rows
            )
            moved = conn.total_changes - before
            await conn.execute(
                "UPDATE counters SET value = value + (CASE key WHEN 'sent' THEN ? ELSE -? END)"
                " WHERE key IN ('sent', 'unsent')",
                (moved, moved),
            )
            async with conn.execute("SELECT value FROM counters WHERE key = 'sent'") as cur:
                sent = (await cur.fetchone() or (0,))[0]
            excess = sent - keep
            if excess > 0:
                await conn.execute(
                    "DELETE FROM queue WHERE id IN"
                    " (SELECT id FROM queue WHERE sent_at IS NOT NULL ORDER BY id LIMIT ?)",
                    (excess,),
                )
                await conn.execute(
                    "UPDATE counters SET value = value - ? WHERE key = 'sent'", (excess,)
                )

        await self._write(job)

    async def requeue(self, agent: str, first: int, last: int, *, limit: int = 100_000) -> int:
        """Queue again the kept events of ``agent`` numbered ``first..last`` (a re-send)."""
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> int:
            before = conn.total_changes
            await conn.execute(
                "INSERT INTO queue (agent, seq, topic, payload, queued_at)"
                " SELECT agent, seq, topic, payload, ? FROM queue"
                " WHERE agent = ? AND seq BETWEEN ? AND ? AND sent_at IS NOT NULL"
                " GROUP BY seq ORDER BY seq LIMIT ?",
                (now, agent, first, last, limit),
            )
            added = conn.total_changes - before
            await conn.execute(
                "UPDATE counters SET value = value + ? WHERE key = 'unsent'", (added,)
            )
            return int(added)

        added = await self._write(job)
        if added:
            self.changed.set()
        return added

    async def set_meta(self, key: str, value: str) -> None:
        async def job(conn: aiosqlite.Connection) -> None:
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

        await self._write(job)

    # ------------------------------------------------------------------ reads
    # Each read is one execute_fetchall: it runs to the end in aiosqlite's thread even when
    # the caller is cancelled. A cancelled execute() + fetch leaves its statement active,
    # and the connection's next read then sees the snapshot from before (measured: a
    # reconnecting publisher missed every event queued during the outage).

    async def unsent(self, *, after_id: int = 0, limit: int = 500) -> list[QueuedEvent]:
        """Events waiting to be published, oldest first, after ``after_id``."""
        rows = await self._reader().execute_fetchall(
            "SELECT id, agent, seq, topic, payload FROM queue"
            " WHERE sent_at IS NULL AND id > ? ORDER BY id LIMIT ?",
            (after_id, limit),
        )
        return [QueuedEvent(r[0], r[1], r[2], r[3], bytes(r[4])) for r in rows]

    async def get_meta(self, key: str) -> str | None:
        rows = list(
            await self._reader().execute_fetchall("SELECT value FROM meta WHERE key = ?", (key,))
        )
        return str(rows[0][0]) if rows else None

    async def stats(self) -> QueueStats:
        rows = await self._reader().execute_fetchall("SELECT key, value FROM counters")
        counts = {k: int(v) for k, v in rows}
        return QueueStats(
            unsent=counts.get("unsent", 0),
            sent_kept=counts.get("sent", 0),
            dropped=counts.get("dropped", 0),
        )
