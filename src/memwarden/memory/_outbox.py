"""The outbox: what the MQTT bridge must publish while the broker is away.

Reads here are single ``execute_fetchall`` calls: a read cancelled between ``execute`` and
its fetch leaves a statement active on the pooled connection, whose next read then sees
an old snapshot (the bridge cancels its outbox flush whenever the connection drops).

A bounded table in the store's own database (so it survives a restart). When it is
full the oldest messages go first and are counted (``meta`` key
:data:`DROPPED_KEY`): a consumer of state changes may miss old ones, never new ones.
Also here: where each remote agent run got to in the event log, for gap detection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database

__all__ = ["DROPPED_KEY", "OutboxMessage", "OutboxStats"]

DROPPED_KEY = "mqtt_outbox_dropped"


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One message waiting to be published."""

    id: int
    topic: str
    payload: bytes
    qos: int
    retain: bool


@dataclass(frozen=True, slots=True)
class OutboxStats:
    """How many messages wait, and how many were dropped (ever) because it was full."""

    queued: int
    dropped: int


async def put(
    db: Database, clock: Clock, messages: Sequence[tuple[str, bytes, int, bool]], *, max_rows: int
) -> int:
    """Append ``(topic, payload, qos, retain)`` messages; returns how many old ones it dropped."""
    if not messages:
        return 0
    now = clock.time()
    rows = [(now, topic, payload, qos, int(retain)) for topic, payload, qos, retain in messages]

    async def job(conn: aiosqlite.Connection) -> int:
        await conn.executemany(
            "INSERT INTO outbox (created_at, topic, payload, qos, retain) VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        async with conn.execute("SELECT count(*) FROM outbox") as cur:
            total = (await cur.fetchone() or (0,))[0]
        excess = total - max_rows
        if excess <= 0:
            return 0
        await conn.execute(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT ?)", (excess,)
        )
        await conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE"
            " SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT)",
            (DROPPED_KEY, str(excess), excess),
        )
        return int(excess)

    return await db.write(job)


async def peek(db: Database, *, limit: int = 500) -> list[OutboxMessage]:
    """The oldest waiting messages, in the order they were put."""
    async with db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT id, topic, payload, qos, retain FROM outbox ORDER BY id LIMIT ?", (limit,)
        )
    return [
        OutboxMessage(
            id=r[0],
            topic=r[1],
            payload=bytes(r[2]) if not isinstance(r[2], str) else r[2].encode(),
            qos=r[3],
            retain=bool(r[4]),
        )
        for r in rows
    ]


async def delete(db: Database, ids: Sequence[int]) -> None:
    """Forget messages that were published (their PUBACK arrived)."""
    if not ids:
        return
    keys = list(ids)

    async def job(conn: aiosqlite.Connection) -> None:
        await conn.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in keys])

    await db.write(job)


async def stats(db: Database) -> OutboxStats:
    async with db.read() as conn:
        rows = list(
            await conn.execute_fetchall(
                "SELECT (SELECT count(*) FROM outbox), (SELECT value FROM meta WHERE key = ?)",
                (DROPPED_KEY,),
            )
        )
    queued, dropped = rows[0]
    return OutboxStats(queued=int(queued), dropped=int(dropped or 0))


async def agent_high_water(db: Database, agents: Sequence[str]) -> dict[str, int]:
    """The highest sequence number stored for each agent run (absent: none stored)."""
    if not agents:
        return {}
    out: dict[str, int] = {}
    async with db.read() as conn:
        for agent in dict.fromkeys(agents):  # one index seek each (events_agent_seq)
            rows = list(
                await conn.execute_fetchall(
                    "SELECT max(agent_seq) FROM events WHERE agent = ?", (agent,)
                )
            )
            if rows and rows[0][0] is not None:
                out[agent] = int(rows[0][0])
    return out
