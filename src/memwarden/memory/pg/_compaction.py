"""Compaction of the event log on PostgreSQL: SQLite's
:func:`~memwarden.memory._compaction.compact`, with this backend's statements.

The pass itself (which blocks, the windows, the order of the steps, the report) is
:func:`~memwarden.memory._compaction.run_compaction`, and what to delete is planned by
the SQLite module's pure functions (:func:`~memwarden.memory._compaction.plan_window`,
:func:`~memwarden.memory._compaction.plan_unmatched`); only the reads and deletes are
here, each an array statement (``= ANY($n)``) instead of SQLite's ``IN`` lists. The
append-only triggers let a delete through only while the ``compaction_guard`` row
exists, which each job inserts and removes inside its own transaction, as on SQLite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwarden.memory._compaction import (
    UNMATCHED_KEY,
    WINDOW_SELECT,
    CompactionReport,
    CompactionSteps,
    Window,
    plan_unmatched,
    plan_window,
    run_compaction,
)
from memwarden.memory.pg._apply import pg_sql

if TYPE_CHECKING:
    from memwarden.memory._clock import Clock
    from memwarden.memory._compaction import CompactionConfig
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["PG_STEPS", "compact"]


def _count(status: str) -> int:
    """The row count of a command status (``DELETE 3``)."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


async def _busy_blocks(conn: PgConnection) -> list[int]:
    rows = await conn.fetch(
        "SELECT block_rid FROM effects GROUP BY block_rid HAVING count(*) >= 3 ORDER BY block_rid"
    )
    return [int(r[0]) for r in rows]


async def _block_window(
    conn: PgConnection, rid: int, start: int, *, cutoff: float, limit: int, now: float
) -> tuple[int | None, Window]:
    rows = [tuple(r) for r in await conn.fetch(pg_sql(WINDOW_SELECT), rid, start, limit)]
    resume, window = plan_window(rows, rid, cutoff=cutoff, limit=limit, now=now)
    if not window.effects:
        return resume, window
    await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
    try:
        if window.old_runs:
            await conn.execute(
                "DELETE FROM event_runs WHERE block_rid = $1 AND last_seq = ANY($2::bigint[])",
                rid,
                window.old_runs,
            )
        await conn.executemany(
            "INSERT INTO event_runs (block_rid, last_seq, first_seq, sensor, outcome, count,"
            " first_observed_at, last_observed_at, compacted_at)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            window.new_runs,
        )
        await conn.execute(
            "DELETE FROM effects WHERE block_rid = $1 AND event_seq = ANY($2::bigint[])",
            rid,
            window.effects,
        )
        status = await conn.execute(
            "DELETE FROM events WHERE seq = ANY($1::bigint[])"
            " AND NOT EXISTS (SELECT 1 FROM effects WHERE event_seq = events.seq)",
            window.effects,
        )
        window.events_deleted += _count(status)
    finally:
        await conn.execute("DELETE FROM compaction_guard")
    return resume, window


async def _unmatched(conn: PgConnection, *, cutoff: float, limit: int) -> tuple[int, int, bool]:
    found = await conn.fetchval("SELECT value FROM meta WHERE key = $1", UNMATCHED_KEY)
    start = int(found) if found is not None else 0
    rows = [
        tuple(r)
        for r in await conn.fetch(
            "SELECT e.seq, e.sensor, e.outcome, e.received_at,"
            " EXISTS (SELECT 1 FROM effects f WHERE f.event_seq = e.seq)"
            " FROM events e WHERE e.seq >= $1 ORDER BY e.seq LIMIT $2",
            start,
            limit,
        )
    ]
    newest = int(await conn.fetchval("SELECT coalesce(max(seq), 0) FROM events"))
    gone, counts, resume, done = plan_unmatched(
        rows, start=start, newest=newest, cutoff=cutoff, limit=limit
    )
    if gone:
        await conn.executemany(
            "INSERT INTO unmatched_counts (sensor, day, outcome, count, first_received_at,"
            " last_received_at) VALUES ($1, $2, $3, $4, $5, $6)"
            " ON CONFLICT (sensor, day, outcome) DO UPDATE SET"
            " count = unmatched_counts.count + excluded.count,"
            " first_received_at = least(unmatched_counts.first_received_at,"
            " excluded.first_received_at),"
            " last_received_at = greatest(unmatched_counts.last_received_at,"
            " excluded.last_received_at)",
            counts,
        )
        await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
        try:
            await conn.execute("DELETE FROM events WHERE seq = ANY($1::bigint[])", gone)
        finally:
            await conn.execute("DELETE FROM compaction_guard")
    if resume != start:
        await conn.execute(
            "INSERT INTO meta (key, value) VALUES ($1, $2)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            UNMATCHED_KEY,
            str(resume),
        )
    return len(rows), len(gone), done


async def _dead_letters(conn: PgConnection, cfg: CompactionConfig, now: float, limit: int) -> int:
    oldest = now - cfg.dead_letters_max_age.total_seconds()
    deleted = _count(
        await conn.execute(
            "DELETE FROM dead_letters WHERE id IN (SELECT id FROM dead_letters"
            " WHERE received_at < $1 ORDER BY id LIMIT $2)",
            oldest,
            limit,
        )
    )
    deleted += _count(
        await conn.execute(
            "DELETE FROM dead_letters WHERE id IN (SELECT id FROM dead_letters"
            " WHERE id <= (SELECT id FROM dead_letters ORDER BY id DESC LIMIT 1 OFFSET $1)"
            " ORDER BY id LIMIT $2)",
            cfg.dead_letters_max_rows,
            limit,
        )
    )
    return deleted


async def _revalidations(conn: PgConnection, cfg: CompactionConfig, now: float, limit: int) -> int:
    oldest = now - cfg.revalidations_max_age.total_seconds()
    return _count(
        await conn.execute(
            "DELETE FROM revalidations WHERE id IN (SELECT id FROM revalidations"
            " WHERE status NOT IN ('pending', 'sent') AND coalesce(finished_at, created_at) < $1"
            " ORDER BY id LIMIT $2)",
            oldest,
            limit,
        )
    )


PG_STEPS: CompactionSteps[PgConnection] = CompactionSteps(
    busy_blocks=_busy_blocks,
    block_window=_block_window,
    unmatched=_unmatched,
    dead_letters=_dead_letters,
    revalidations=_revalidations,
)


async def compact(db: PgDatabase, clock: Clock, cfg: CompactionConfig) -> CompactionReport:
    """One compaction pass over the whole event log, then the dead letters and the
    revalidation requests that are over (SQLite's ``compact``: the same report)."""
    return await run_compaction(db, clock, cfg, PG_STEPS)
