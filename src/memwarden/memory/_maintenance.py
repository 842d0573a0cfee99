"""The store's periodic maintenance passes: decay (retention, archiving) and the
heuristic cycle (the self-tuning rules over recent reads).

Each is an async function of the :class:`~memwarden.memory._database.Database` (the
store exposes them as thin methods). The passes are set-based: they walk the blocks in
ranges of ``rid`` (``decay.chunk_rows`` rows), one writer job per range, so other writes
interleave between ranges and no pass does one Python round trip per block. The SQL
twins of the rules live in :mod:`memwarden.memory._sqlrules`. Promotion is in
:mod:`memwarden.memory._promotion`, explanations and health in
:mod:`memwarden.memory._explain`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.memory._sql import rid_ranges
from memwarden.memory._sqlrules import (
    effective_half_life_sql,
    last_touched_sql,
    retention_sql,
    rule_params,
    stale_sql,
)

if TYPE_CHECKING:
    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory.policy import PolicyConfig

__all__ = ["DecayReport", "decay_cycle", "heuristic_cycle"]

log = structlog.get_logger("memwarden.store")

_REPORT_LIMIT = 1000  # archived blocks listed by id in a DecayReport
_DAY = 86400.0


@dataclass(slots=True)
class DecayReport:
    """What one decay cycle did."""

    scanned: int = 0  # blocks not archived whose retention was recomputed
    retention_updated: int = 0  # of those, how many changed value
    archived: int = 0
    archived_blocks: list[tuple[str, str]] = field(default_factory=list)  # (id, reason), capped
    chunks: int = 0
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "retention_updated": self.retention_updated,
            "archived": self.archived,
            "archived_blocks": [{"id": i, "reason": r} for i, r in self.archived_blocks],
            "chunks": self.chunks,
            "duration_s": round(self.duration_s, 3),
        }


def _archivable_sql(retention: str = "retention") -> str:
    """Twin of the ``policy.archive_reason`` guards, over ``retention`` (a column or SQL)."""
    return (
        "state <> 'archived' AND tier <> 'core'"
        " AND (validated_at IS NULL OR stale_at IS NULL OR stale_at <= :now)"
        f" AND {retention} < :archive_below"
    )


def _archive_reason_sql(retention: str = "retention") -> str:
    """Twin of the text of ``policy.archive_reason``, for ``retention`` (a column or SQL)."""
    return (
        "printf('retention %.3f < %s (untouched %.1fd, half-life %.3gd%s)',"
        f" {retention}, :archive_below_text, (:now - {last_touched_sql('')}) / {_DAY},"
        f" {effective_half_life_sql('')} / {_DAY},"
        f" CASE WHEN {stale_sql('')} THEN ', stale' ELSE '' END)"
    )


# The blocks a chunk archives, picked once with their new retention and reason (the
# writer connection's own temporary table, in memory, emptied after each chunk).
_PICKED_TABLE = (
    "CREATE TEMP TABLE IF NOT EXISTS decay_picked ("
    " rid INTEGER PRIMARY KEY, id TEXT NOT NULL, reason TEXT NOT NULL, changed INTEGER NOT NULL)"
)


async def decay_cycle(
    db: Database, clock: Clock, policy: PolicyConfig, *, chunk_rows: int | None = None
) -> DecayReport:
    """Recompute every block's retention and archive what fell below the threshold.

    Set-based, in ranges of ``chunk_rows`` rids (``decay.chunk_rows``), one writer job
    per range. The blocks to archive are picked first, their retention as of now computed
    in the statement (the same SQL as search's), into a temporary table with their
    reason; an ``INSERT ... SELECT`` writes an audit row for each and one ``UPDATE``
    archives them, storing that retention in the same write. Then one ``UPDATE`` stores
    the retention of the blocks left (only rows whose value changes are rewritten).
    Never ``core``, never a block validated inside its window (the archival rule,
    docs/RULES.md).

    Measured on 1 000 000 blocks (2 cores, WAL): about 1-3 s when a few thousand
    blocks decay out; a first cycle that archives 244 000 at once costs 8-9 s of CPU
    on the shared VM (docs/BENCHMARKS.md, "Helper `decay`"): archiving those (3.6 s: the
    full-text and ``blocks_due`` entries, a retention point each), writing the other
    rows once (1.9 s), reading every row for the pick (1.3 s), the commits (2 s).
    """
    cfg = policy
    started = time.perf_counter()
    now = clock.time()
    params = {
        **rule_params(cfg, now),
        "archive_below": cfg.decay.archive_below,
        "archive_below_text": format(cfg.decay.archive_below, "g"),
    }
    retention = retention_sql("")
    live = "rid BETWEEN :lo AND :hi AND state <> 'archived'"
    count = f"SELECT count(*) FROM blocks WHERE {live}"
    # Archiving first writes each archived row once (retention and state together)
    # instead of twice; the retention is evaluated in the pick and again in the UPDATE
    # for those rows only. No RETURNING anywhere: SQLite keeps every returned row.
    pick = (
        "INSERT INTO temp.decay_picked (rid, id, reason, changed)"
        f" SELECT rid, id, {_archive_reason_sql(retention)}, retention IS NOT {retention}"
        f" FROM blocks WHERE rid BETWEEN :lo AND :hi AND {_archivable_sql(retention)}"
    )
    audit = (
        "INSERT INTO audit (at, actor, action, block_id, detail)"
        " SELECT :now, 'decay', 'archive', id, json_object('reason', reason)"
        " FROM temp.decay_picked ORDER BY rid"
    )
    archive = (
        f"UPDATE blocks SET retention = {retention}, state = 'archived', archived_at = :now,"
        f" updated_at = :now, archive_reason = {_archive_reason_sql(retention)}"
        " WHERE rid IN (SELECT rid FROM temp.decay_picked)"
    )
    picked = "SELECT count(*), coalesce(sum(changed), 0) FROM temp.decay_picked"
    listed = "SELECT id, reason FROM temp.decay_picked ORDER BY rid LIMIT :room"
    recompute = (  # rows whose value would not change are not rewritten
        f"UPDATE blocks SET retention = {retention} WHERE {live} AND retention IS NOT {retention}"
    )
    report = DecayReport()

    async def chunk_job(
        conn: aiosqlite.Connection, lo: int, hi: int, room: int
    ) -> tuple[int, int, int, list[Any]]:
        bounds = {**params, "lo": lo, "hi": hi}
        async with conn.execute(count, bounds) as cur:
            (scanned,) = await cur.fetchone() or (0,)
        await conn.execute(_PICKED_TABLE)
        await conn.execute(pick, bounds)  # a failed job rolls this back with the rest
        async with conn.execute(picked) as cur:
            archived, changed = await cur.fetchone() or (0, 0)
        shown: list[Any] = []
        if archived:
            if room > 0:
                async with conn.execute(listed, {"room": room}) as cur:
                    shown = list(await cur.fetchall())
            await conn.execute(audit, bounds)
            await conn.execute(archive, bounds)
            await conn.execute("DELETE FROM temp.decay_picked")
        async with conn.execute(recompute, bounds) as cur:
            changed += cur.rowcount
        return int(scanned), int(changed), int(archived), shown

    async with db.read() as conn:
        ranges = await rid_ranges(conn, chunk_rows or cfg.decay.chunk_rows)
    for lo, hi in ranges:
        room = _REPORT_LIMIT - len(report.archived_blocks)

        async def job(
            conn: aiosqlite.Connection, lo: int = lo, hi: int = hi, room: int = room
        ) -> Any:
            return await chunk_job(conn, lo, hi, room)

        scanned, changed, archived, shown = await db.write(job)
        report.chunks += 1
        report.scanned += scanned
        report.retention_updated += changed
        report.archived += archived
        report.archived_blocks.extend((r[0], r[1]) for r in shown)
    report.duration_s = time.perf_counter() - started
    log.info(
        "decay_cycle_done", **{k: v for k, v in report.as_dict().items() if k != "archived_blocks"}
    )
    return report


# ------------------------------------------------------------------ heuristic cycle


async def heuristic_cycle(
    db: Database,
    policy: PolicyConfig,
    *,
    now: float,
    chunk_rows: int | None = None,
) -> dict[str, Any]:
    """The self-tuning rules' self-tuning pass, set-based (the twin of ``policy.heuristic_cycle``).

    Over the blocks read since the previous cycle: >= 10 reads raise importance by 0.15,
    >= 5 by 0.05 (capped at 1.0); >= ``extend_min_accesses`` stretch the half-life x 1.3
    toward the cap (90 d episodic, 180 d otherwise; a ``< cap`` guard; never for
    ephemeral blocks); then the recent count is reset. A block whose importance or
    half-life changed gets ``updated_at = now`` (when its retention inputs changed, for
    the retention history). Returns counts.
    """
    d = policy.decay
    started = time.perf_counter()
    params: dict[str, Any] = {
        "high_n": d.bump_high_accesses,
        "high": d.bump_high,
        "low_n": d.bump_low_accesses,
        "low": d.bump_low,
        "extend_n": d.extend_min_accesses,
        "factor": d.extend_factor,
        "cap_episodic": d.max_half_life_episodic.total_seconds(),
        "cap_other": d.max_half_life_semantic.total_seconds(),
        "now": now,
    }
    bump = (
        "CASE WHEN recent_access_count >= :high_n THEN :high"
        " WHEN recent_access_count >= :low_n THEN :low ELSE 0.0 END"
    )
    cap = "CASE WHEN category = 'episodic' THEN :cap_episodic ELSE :cap_other END"
    raises = f"({bump}) > 0.0 AND importance < 1.0"
    extends = (
        f"recent_access_count >= :extend_n AND volatility <> 'ephemeral' AND half_life_s < {cap}"
    )
    where = "rid BETWEEN :lo AND :hi AND recent_access_count > 0"
    counts = (
        f"SELECT count(*), coalesce(sum({raises}), 0), coalesce(sum({extends}), 0)"
        f" FROM blocks WHERE {where}"
    )
    update = (
        f"UPDATE blocks SET"
        f" importance = CASE WHEN {raises} THEN min(1.0, importance + {bump}) ELSE importance END,"
        f" half_life_s = CASE WHEN {extends} THEN min({cap}, half_life_s * :factor)"
        f" ELSE half_life_s END,"
        f" updated_at = CASE WHEN ({raises}) OR ({extends}) THEN :now ELSE updated_at END,"
        f" recent_access_count = 0 WHERE {where}"
    )
    totals = {"blocks": 0, "importance_raised": 0, "half_life_extended": 0, "chunks": 0}

    async with db.read() as conn:
        ranges = await rid_ranges(conn, chunk_rows or d.chunk_rows)
    for lo, hi in ranges:

        async def job(conn: aiosqlite.Connection, lo: int = lo, hi: int = hi) -> Any:
            bounds = {**params, "lo": lo, "hi": hi}
            async with conn.execute(counts, bounds) as cur:
                row = await cur.fetchone() or (0, 0, 0)
            if row[0]:
                await conn.execute(update, bounds)
            return row

        blocks, raised, extended = await db.write(job)
        totals["blocks"] += int(blocks)
        totals["importance_raised"] += int(raised)
        totals["half_life_extended"] += int(extended)
        totals["chunks"] += 1
    out: dict[str, Any] = {**totals, "duration_s": round(time.perf_counter() - started, 3)}
    log.info("heuristic_cycle_done", **out)
    return out
