"""The compact time series behind the console's charts over time.

One row per 5-minute slot per metric and key (``metric_series``, schema 12): blocks by
state and by tier, the revalidation backlog (open requests), and the events and errors
each sensor's events brought in during the slot, and those events by outcome (metric
``outcome``, key ``"<sensor> <outcome>"``: what the Sensors page's bars draw). The
scheduler's series pass (:meth:`~memwarden.daemon._scheduler.Scheduler.series_once`,
every 5 minutes on the daemon's clock) calls :func:`record`; a sample of a slot replaces
an earlier one, so the pass may run more often than that, and a slot nobody sampled (the
daemon was down) has no rows; the event counts are rewritten from the previous pass's
slot on, so a slot is complete once a pass ran after it, even across a restart. Rows
older than :data:`KEEP_S` (14 days) go in the same transaction: at most
about 4 000 slots times a few dozen keys, a few hundred kilobytes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database

__all__ = [
    "KEEP_S",
    "METRICS",
    "SCAN",
    "STEP_S",
    "count_start",
    "outcome_key",
    "read",
    "record",
    "sample_rows",
    "series_of",
    "slot_of",
]

STEP_S = 300.0  # one sample per 5 minutes
KEEP_S = 14 * 86400.0  # the series' retention: 14 days
SCAN = 50_000  # the newest events read to count a slot's events (bounded cost)
METRICS = ("state", "tier", "backlog", "events", "errors", "outcome")


def slot_of(ts: float) -> float:
    """The start of the 5-minute slot ``ts`` falls in."""
    return (ts // STEP_S) * STEP_S


async def _counted_from(conn: aiosqlite.Connection, now: float) -> float:
    """Where this pass's event counts start: the slot before this one, or the slot of
    the previous pass if that is older (the daemon was down or a pass was late: the
    counts since are rewritten whole), never past the retention."""
    slot = slot_of(now)
    async with conn.execute(
        "SELECT max(at) FROM metric_series WHERE metric = 'backlog' AND at < ?", (slot,)
    ) as cur:
        row = await cur.fetchone()
    return count_start(now, row[0] if row else None)


def count_start(now: float, last_backlog: float | None) -> float:
    """Where a pass at ``now`` starts counting events, given the newest ``backlog`` slot
    before this one (None: none)."""
    slot = slot_of(now)
    last = slot - STEP_S if last_backlog is None else float(last_backlog)
    return max(min(last, slot - STEP_S), slot_of(now - KEEP_S))


async def _sample(
    conn: aiosqlite.Connection, now: float, counted_from: float
) -> list[tuple[str, str, float, int]]:
    slot = slot_of(now)
    async with conn.execute(
        "SELECT CASE WHEN state IN ('fresh','unverified') AND stale_at <= ?"
        " THEN 'stale' ELSE state END AS s, tier, count(*) FROM blocks GROUP BY s, tier",
        (now,),
    ) as cur:
        states = list(await cur.fetchall())
    async with conn.execute(
        "SELECT count(*) FROM revalidations WHERE status IN ('pending', 'sent')"
    ) as cur:
        backlog = (await cur.fetchone() or (0,))[0]
    # This slot so far and the ones since the previous pass (at least the one before,
    # complete now that it is over): they replace what an earlier pass wrote, so every
    # slot is complete once a pass ran after it.
    async with conn.execute(
        "SELECT sensor, outcome, CAST((received_at - ?) / ? AS INTEGER) AS b, count(*)"
        " FROM (SELECT sensor, outcome, received_at FROM events"
        " ORDER BY seq DESC LIMIT ?) WHERE received_at >= ? AND received_at < ?"
        " GROUP BY sensor, outcome, b",
        (counted_from, STEP_S, SCAN, counted_from, slot + STEP_S),
    ) as cur:
        counted = list(await cur.fetchall())
    return sample_rows(now, counted_from, states, int(backlog), counted)


def sample_rows(
    now: float,
    counted_from: float,
    states: Iterable[Sequence[Any]],
    backlog: int,
    counted: Iterable[Sequence[Any]],
) -> list[tuple[str, str, float, int]]:
    """The rows of one sample: ``states`` are (state as of now, tier, count), ``counted``
    (sensor, outcome, slot number from ``counted_from``, count)."""
    slot = slot_of(now)
    rows: list[tuple[str, str, float, int]] = []
    by_state: dict[str, int] = defaultdict(int)
    by_tier: dict[str, int] = defaultdict(int)
    for state, tier, n in states:
        by_state[str(state)] += int(n)
        by_tier[str(tier)] += int(n)
    rows += [("state", k, slot, v) for k, v in by_state.items()]
    rows += [("tier", k, slot, v) for k, v in by_tier.items()]
    rows.append(("backlog", "", slot, backlog))
    events: dict[tuple[str, float], int] = defaultdict(int)
    errors: dict[tuple[str, float], int] = defaultdict(int)
    for sensor, outcome, bucket, n in counted:
        at = counted_from + int(bucket) * STEP_S
        events[(str(sensor), at)] += int(n)
        errors[(str(sensor), at)] += int(n) if outcome == "error" else 0
        rows.append(("outcome", outcome_key(str(sensor), str(outcome)), at, int(n)))
    rows += [("events", sensor, at, n) for (sensor, at), n in events.items()]
    rows += [("errors", sensor, at, errors[(sensor, at)]) for (sensor, at) in events]
    return rows


def outcome_key(sensor: str, outcome: str) -> str:
    """The ``outcome`` metric's key: ``"<sensor> <outcome>"`` (a sensor name has no space)."""
    return f"{sensor} {outcome}"


async def record(db: Database, clock: Clock) -> int:
    """Sample the metrics into the current slot and drop rows past the retention, in
    one transaction; returns how many rows were written."""
    now = clock.time()

    async def job(conn: aiosqlite.Connection) -> int:
        counted_from = await _counted_from(conn, now)
        rows = await _sample(conn, now, counted_from)
        await conn.execute("DELETE FROM metric_series WHERE at < ?", (now - KEEP_S,))
        # A slot's sample replaces the slot's rows from an earlier pass (a count that
        # went to zero must not linger).
        await conn.execute(
            "DELETE FROM metric_series WHERE at = ? AND metric IN ('state','tier','backlog')",
            (slot_of(now),),
        )
        await conn.execute(
            "DELETE FROM metric_series WHERE at >= ? AND metric IN ('events','errors','outcome')",
            (counted_from,),
        )
        await conn.executemany(
            "INSERT OR REPLACE INTO metric_series (metric, key, at, value) VALUES (?, ?, ?, ?)",
            rows,
        )
        return len(rows)

    return await db.write(job)


async def read(db: Database, metric: str, *, since: float) -> dict[str, list[tuple[float, int]]]:
    """One metric's series since ``since``: by key, (slot start, value) oldest first."""
    async with db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT key, at, value FROM metric_series WHERE metric = ? AND at >= ?"
            " ORDER BY key, at",
            (metric, since),
        )
    return series_of(rows)


def series_of(rows: Iterable[Sequence[Any]]) -> dict[str, list[tuple[float, int]]]:
    """(key, at, value) rows, ordered by key and time, as a series by key."""
    out: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for key, at, value in rows:
        out[str(key)].append((float(at), int(value)))
    return dict(out)
