"""The consolidation pass on PostgreSQL (short_term -> long_term), with its explained
scores in the score log: SQLite's :func:`~memwarden.memory._promotion.consolidate`.

Everything but the SQL is the SQLite module's: the prefilter (with PostgreSQL's test of
a signal), the scoring and verdicts (:func:`~memwarden.memory._promotion.judge`), the
report and the score-log lines (:func:`~memwarden.memory._promotion.settle`). Reads run
on a reader; the promoting ``UPDATE`` (re-checking in SQL that each block is still
fresh, reliable and not flapping) and its audit rows are one writer job per range.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._promotion import (
    ConsolidationReport,
    append_lines,
    judge,
    prefilter_sql,
    promotion_guard,
    settle,
)
from memwarden.memory.pg._sqlrules import arguments, pg_named, rid_ranges

if TYPE_CHECKING:
    from memwarden.memory._clock import Clock
    from memwarden.memory._record import BlockRecord
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = ["consolidate"]

log = structlog.get_logger("memwarden.store")

_BLOCK_SELECT = ", ".join(f"b.{c}" for c in BLOCK_COLUMNS)


def _signal(key: str) -> str:
    """Twin of SQLite's ``coalesce(json_extract(b.signals, '$.key'), 0) > 0``: a number
    above 0, true, or any string, object or array (SQLite ranks text above every
    number). ``json``, not ``jsonb``: it takes the ``\\u0000`` that jsonb refuses."""
    value = f"(b.signals::json -> '{key}')"
    return (
        f"(CASE json_typeof({value}) WHEN 'number' THEN ({value} #>> '{{}}')::numeric > 0"
        f" WHEN 'boolean' THEN ({value} #>> '{{}}')::boolean"
        " WHEN 'string' THEN true WHEN 'object' THEN true WHEN 'array' THEN true"
        " ELSE false END)"
    )


async def _load_candidates(
    conn: PgConnection, where: str, params: dict[str, Any]
) -> tuple[list[BlockRecord], dict[str, list[float]], dict[str, int]]:
    """The prefiltered records of one rid range, their access times and session counts."""
    sql, names = pg_named(
        f"SELECT {_BLOCK_SELECT} FROM blocks b WHERE {where} ORDER BY b.rid LIMIT :limit", params
    )
    records = [record_from_row(tuple(r)) for r in await conn.fetch(sql, *arguments(names, params))]
    times: dict[str, list[float]] = defaultdict(list)
    sessions: dict[str, int] = {}
    if not records:
        return records, times, sessions
    last = {**params, "last_rid": records[-1].rid}
    # In SQLite's order (its index on accesses is (block_id, at)).
    sql, names = pg_named(
        "SELECT a.block_id, a.at FROM blocks b JOIN accesses a ON a.block_id = b.id"
        f" WHERE {where} AND b.rid <= :last_rid ORDER BY b.rid, a.at, a.id",
        last,
    )
    for block_id, at in await conn.fetch(sql, *arguments(names, last)):
        times[block_id].append(float(at))
    sql, names = pg_named(
        "SELECT s.block_id, count(*) FROM blocks b JOIN sessions s ON s.block_id = b.id"
        f" WHERE {where} AND b.rid <= :last_rid GROUP BY s.block_id",
        last,
    )
    sessions = {r[0]: int(r[1]) for r in await conn.fetch(sql, *arguments(names, last))}
    return records, times, sessions


async def consolidate(
    db: PgDatabase,
    clock: Clock,
    policy: PolicyConfig,
    *,
    limit: int | None = None,
    score_log: ScoreLog | None = None,
) -> ConsolidationReport:
    """The periodic consolidation pass: score short_term blocks, promote what passes
    (SQLite's ``consolidate``: the same report, score-log lines, rows and audit).
    ``limit`` caps how many blocks are scored."""
    cfg = policy
    started = time.perf_counter()
    now = clock.time()
    report = ConsolidationReport(scorer=cfg.promotion.scorer)
    prefilter, base = prefilter_sql(cfg, signal=_signal)
    guard = promotion_guard(cfg, now)
    # None (or below 0, SQLite's LIMIT -1): no limit.
    remaining = None if limit is None or limit < 0 else limit
    async with db.read() as conn:
        ranges = await rid_ranges(conn, cfg.decay.chunk_rows)
    for lo, hi in ranges:
        if remaining == 0:
            break
        where = f"b.rid BETWEEN :lo AND :hi AND {prefilter}"
        async with db.read() as conn:
            records, times, sessions = await _load_candidates(
                conn, where, {**base, "lo": lo, "hi": hi, "limit": remaining}
            )
        if remaining is not None:
            remaining -= len(records)
        verdicts = judge(records, times, sessions, now, cfg)
        accepted = [rec.rid for rec, _, promote, _ in verdicts if promote]
        promoted: set[str] = set()
        if accepted:

            async def job(conn: PgConnection, rids: list[int] = accepted) -> set[str]:
                return await _promote(conn, rids, guard)

            promoted = await db.write(job)
        await append_lines(score_log, settle(report, verdicts, promoted, now))
    report.duration_s = time.perf_counter() - started
    log.info(
        "consolidation_done",
        backend="postgresql",
        considered=report.considered,
        candidates=report.candidates,
        promoted=len(report.promoted),
        refused=len(report.refused),
    )
    return report


async def _promote(conn: PgConnection, rids: list[int], guard: dict[str, Any]) -> set[str]:
    rows = await conn.fetch(
        "UPDATE blocks SET tier = 'long_term', updated_at = $1"
        " WHERE rid = ANY($2::bigint[]) AND tier = 'short_term'"
        " AND state IN ('fresh', 'unverified') AND coalesce(stale_at > $1, true)"
        " AND reliability >= $3 AND flapping = 0"
        " AND coalesce(last_contradiction_at <= $4, true) RETURNING id",
        guard["now"],
        rids,
        guard["min_reliability"],
        guard["cooldown_start"],
    )
    done = {str(r[0]) for r in rows}
    await conn.executemany(
        "INSERT INTO audit (at, actor, action, block_id, detail) VALUES ($1, $2, $3, $4, $5)",
        [
            (guard["now"], "consolidation", "promote", block_id, '{"to":"long_term"}')
            for block_id in sorted(done)
        ],
    )
    return done
