"""The console's time series on PostgreSQL: SQLite's :mod:`~memwarden.memory._series`
(one row per 5-minute slot per metric and key, 14 days kept), with this backend's
queries. What a sample holds, where a pass starts counting events and how rows read
back are the SQLite module's functions (:func:`~memwarden.memory._series.sample_rows`,
:func:`~memwarden.memory._series.count_start`,
:func:`~memwarden.memory._series.series_of`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwarden.memory._series import (
    KEEP_S,
    SCAN,
    STEP_S,
    count_start,
    sample_rows,
    series_of,
    slot_of,
)

if TYPE_CHECKING:
    from memwarden.memory._clock import Clock
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["read", "record"]


async def _sample(conn: PgConnection, now: float) -> tuple[float, list[tuple[Any, ...]]]:
    slot = slot_of(now)
    last = await conn.fetchval(
        "SELECT max(at) FROM metric_series WHERE metric = 'backlog' AND at < $1", slot
    )
    counted_from = count_start(now, last)
    states = await conn.fetch(
        "SELECT CASE WHEN state IN ('fresh','unverified') AND stale_at <= $1"
        " THEN 'stale' ELSE state END AS s, tier, count(*) FROM blocks GROUP BY 1, 2",
        now,
    )
    backlog = await conn.fetchval(
        "SELECT count(*) FROM revalidations WHERE status IN ('pending', 'sent')"
    )
    # The slot number: trunc, not a cast (PostgreSQL's cast rounds, SQLite's truncates).
    counted = await conn.fetch(
        "SELECT sensor, outcome, trunc((received_at - $1) / $2)::bigint AS b, count(*)"
        " FROM (SELECT sensor, outcome, received_at FROM events"
        " ORDER BY seq DESC LIMIT $3) e WHERE received_at >= $1 AND received_at < $4"
        " GROUP BY 1, 2, 3",
        counted_from,
        STEP_S,
        SCAN,
        slot + STEP_S,
    )
    return counted_from, sample_rows(
        now,
        counted_from,
        [tuple(r) for r in states],
        int(backlog or 0),
        [tuple(r) for r in counted],
    )


async def record(db: PgDatabase, clock: Clock) -> int:
    """Sample the metrics into the current slot and drop rows past the retention, in
    one transaction; returns how many rows were written."""
    now = clock.time()

    async def job(conn: PgConnection) -> int:
        counted_from, rows = await _sample(conn, now)
        await conn.execute("DELETE FROM metric_series WHERE at < $1", now - KEEP_S)
        # A slot's sample replaces the slot's rows from an earlier pass (a count that
        # went to zero must not linger).
        await conn.execute(
            "DELETE FROM metric_series WHERE at = $1 AND metric IN ('state','tier','backlog')",
            slot_of(now),
        )
        await conn.execute(
            "DELETE FROM metric_series WHERE at >= $1 AND metric IN ('events','errors','outcome')",
            counted_from,
        )
        await conn.executemany(
            "INSERT INTO metric_series (metric, key, at, value) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT (metric, key, at) DO UPDATE SET value = excluded.value",
            rows,
        )
        return len(rows)

    return await db.write(job)


async def read(db: PgDatabase, metric: str, *, since: float) -> dict[str, list[tuple[float, int]]]:
    """One metric's series since ``since``: by key, (slot start, value) oldest first."""
    async with db.read() as conn:
        rows = await conn.fetch(
            "SELECT key, at, value FROM metric_series WHERE metric = $1 AND at >= $2"
            " ORDER BY key, at",
            metric,
            since,
        )
    return series_of([tuple(r) for r in rows])
