"""The store's periodic maintenance on PostgreSQL: decay, the heuristic cycle, and the
reads of retention (its history and its histogram); :class:`PgMaintenance` gathers
them with consolidation, compaction and the time series behind the ``Store``'s method
names and signatures.

The same contract as SQLite's :mod:`~memwarden.memory._maintenance`, pass for pass:
set-based, in ranges of ``decay.chunk_rows`` rids, one writer job (one short
transaction) per range, so other writes interleave and the writer is never held long.
The rules are SQLite's own SQL twins (:mod:`~memwarden.memory._sqlrules`) turned into
PostgreSQL's (:mod:`~memwarden.memory.pg._sqlrules`), and the words of an archive
reason are written by the rule's own
:func:`~memwarden.memory.policy._decay.archive_reason_text` (SQLite writes them with
``printf``, which PostgreSQL has no twin of). The contract test
(``tests/pg/test_maintenance_contract.py``) runs one script on both backends and
compares the answers and the rows.

PostgreSQL refuses a float that underflows where SQLite rounds to 0: see
:func:`~memwarden.memory.pg._sqlrules.retention_sql` for the one difference that makes.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.memory._answers import check_bins
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._decayline import MAX_POINTS, RetentionPoint, points_of
from memwarden.memory._maintenance import DecayReport
from memwarden.memory._sqlrules import (
    effective_half_life_sql,
    last_touched_sql,
    rule_params,
    stale_sql,
)
from memwarden.memory.pg import _compaction, _promotion, _series
from memwarden.memory.pg._sqlrules import (
    arguments,
    pg_named,
    pg_rule,
    retention_sql,
    rid_ranges,
)
from memwarden.memory.policy._decay import archive_reason_text

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from memwarden.memory._clock import Clock
    from memwarden.memory._compaction import CompactionReport
    from memwarden.memory._promotion import ConsolidationReport
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "PgMaintenance",
    "decay_cycle",
    "heuristic_cycle",
    "read_points",
    "retention_histogram",
]

log = structlog.get_logger("memwarden.store")

_REPORT_LIMIT = 1000  # archived blocks listed by id in a DecayReport (as on SQLite)
_DAY = 86400.0

# ------------------------------------------------------------------ decay


async def decay_cycle(
    db: PgDatabase, clock: Clock, policy: PolicyConfig, *, chunk_rows: int | None = None
) -> DecayReport:
    """Recompute every block's retention and archive what fell below the threshold
    (SQLite's ``decay_cycle``, the same report).

    Range by range of rids, one transaction each, as on SQLite (two ranges at once by
    default, on the writer's connection and one of the pass's own:
    :meth:`PgDatabase.write_each`): the blocks to archive are
    read first (``FOR UPDATE``) with their retention as of now and their reason's
    numbers; one ``UPDATE`` archives them and stores that retention in the same row
    version (each archived row written once), one statement writes their retention
    points (the row trigger stands aside for this transaction: ``SET LOCAL
    memwarden.retention_points``, schema migration 7) and one their audit rows, from
    arrays (never a statement per block); then one statement stores the retention of
    the blocks left where it changes and counts them. Never ``core``, never a block
    validated inside its window.
    """
    cfg = policy
    started = time.perf_counter()
    now = clock.time()
    below = cfg.decay.archive_below
    params = {**rule_params(cfg, now), "lo": 0, "hi": 0, "archive_below": below}
    retention = retention_sql()
    live = "rid BETWEEN :lo AND :hi AND state <> 'archived'"
    recompute, recompute_names = pg_named(
        f"WITH changed AS (UPDATE blocks SET retention = {retention}"
        f" WHERE {live} AND retention IS DISTINCT FROM {retention} RETURNING 1)"
        " SELECT (SELECT count(*) FROM changed)",
        params,
    )
    count, count_names = pg_named(f"SELECT count(*) FROM blocks WHERE {live}", params)
    # The archival rule (policy.archive_reason's guards) over the retention as of now,
    # with the numbers its reason names and whether the stored value changes.
    archivable, archivable_names = pg_named(
        f"SELECT rid, id, {retention}, (:now - {pg_rule(last_touched_sql(''))}) / {_DAY},"
        f" {pg_rule(effective_half_life_sql(''))} / {_DAY}, {pg_rule(stale_sql(''))},"
        f" retention IS DISTINCT FROM {retention}"
        " FROM blocks WHERE rid BETWEEN :lo AND :hi AND state <> 'archived'"
        " AND tier <> 'core' AND (validated_at IS NULL OR stale_at IS NULL OR stale_at <= :now)"
        f" AND {retention} < :archive_below ORDER BY rid FOR UPDATE",
        params,
    )
    # By rid, inside the range: the primary key's range, never a scan of the table. The
    # retention is the expression's (the same value the SELECT read), over the old row.
    archive, archive_names = pg_named(
        f"WITH archived AS (UPDATE blocks b SET retention = {retention}, state = 'archived',"
        " archived_at = :now, updated_at = :now, archive_reason = v.reason"
        " FROM unnest(:rids::bigint[], :reasons::text[]) AS v(rid, reason)"
        " WHERE b.rid = v.rid AND b.rid BETWEEN :lo AND :hi"
        " RETURNING b.rid, b.updated_at, b.last_accessed_at, b.validated_at, b.created_at,"
        " b.importance, b.half_life_s, b.tier, b.state, b.stale_at)"
        # The trigger's point (memwarden_retention_point), for every archived block.
        " INSERT INTO retention_points"
        " SELECT rid, greatest(updated_at, coalesce(last_accessed_at, 0),"
        " coalesce(validated_at, 0)), importance, greatest(created_at,"
        " coalesce(validated_at, created_at), coalesce(last_accessed_at, created_at)),"
        " half_life_s, tier, state, stale_at FROM archived ORDER BY rid"
        " ON CONFLICT (block_rid, at) DO UPDATE SET importance = EXCLUDED.importance,"
        " touched_at = EXCLUDED.touched_at, half_life_s = EXCLUDED.half_life_s,"
        " tier = EXCLUDED.tier, state = EXCLUDED.state, stale_at = EXCLUDED.stale_at",
        {**params, "rids": [], "reasons": []},
    )
    # The trigger's trim: past the newest MAX_POINTS of a block, its points go. The cut
    # is looked up once per block (one index probe; none for most), and only the blocks
    # with one are joined (a subquery per point row cost 2 s per 50 000 blocks).
    trim = (
        "WITH cut AS MATERIALIZED (SELECT v.rid, (SELECT p.at FROM retention_points p"
        f" WHERE p.block_rid = v.rid ORDER BY p.at DESC LIMIT 1 OFFSET {MAX_POINTS - 1}) AS at"
        " FROM unnest($1::bigint[]) AS v(rid))"
        " DELETE FROM retention_points r USING cut"
        " WHERE cut.at IS NOT NULL AND r.block_rid = cut.rid AND r.at < cut.at"
    )

    async def chunk_job(conn: PgConnection, lo: int, hi: int) -> tuple[int, int, list[Any]]:
        bounds = {**params, "lo": lo, "hi": hi}
        scanned = int(await conn.fetchval(count, *arguments(count_names, bounds)) or 0)
        rows = await conn.fetch(archivable, *arguments(archivable_names, bounds))
        changed = sum(1 for r in rows if r[6])
        ids = [str(r[1]) for r in rows]
        reasons = [
            archive_reason_text(float(r[2]), below, float(r[3]), float(r[4]), stale=bool(r[5]))
            for r in rows
        ]
        if rows:
            rids = [int(r[0]) for r in rows]
            await conn.execute("SET LOCAL memwarden.retention_points = 'by-statement'")
            await conn.execute(
                archive, *arguments(archive_names, {**bounds, "rids": rids, "reasons": reasons})
            )
            await conn.execute("SET LOCAL memwarden.retention_points = ''")
            await conn.execute(trim, rids)
            await conn.execute(
                "INSERT INTO audit (at, actor, action, block_id, detail)"
                " SELECT $1, 'decay', 'archive', v.id, v.detail"
                " FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS v(id, detail, n)"
                " ORDER BY v.n",
                now,
                ids,
                [json.dumps({"reason": r}, separators=(",", ":")) for r in reasons],
            )
        changed += int(await conn.fetchval(recompute, *arguments(recompute_names, bounds)) or 0)
        return scanned, changed, list(zip(ids, reasons, strict=True))

    report = DecayReport()
    async with db.read() as conn:
        ranges = await rid_ranges(conn, chunk_rows or cfg.decay.chunk_rows)

    def job(lo: int, hi: int) -> Callable[[PgConnection], Awaitable[Any]]:
        async def run(conn: PgConnection) -> Any:
            return await chunk_job(conn, lo, hi)

        return run

    # The ranges are disjoint: up to db.maintenance_connections of them at once.
    done = await db.write_each([job(lo, hi) for lo, hi in ranges])
    for scanned, changed, archived in done:
        report.chunks += 1
        report.scanned += scanned
        report.retention_updated += changed
        report.archived += len(archived)
        room = _REPORT_LIMIT - len(report.archived_blocks)
        report.archived_blocks.extend(archived[: max(0, room)])
    report.duration_s = time.perf_counter() - started
    log.info(
        "decay_cycle_done",
        backend="postgresql",
        **{k: v for k, v in report.as_dict().items() if k != "archived_blocks"},
    )
    return report


# ------------------------------------------------------------------ heuristic cycle


async def heuristic_cycle(
    db: PgDatabase, policy: PolicyConfig, *, now: float, chunk_rows: int | None = None
) -> dict[str, Any]:
    """SQLite's ``heuristic_cycle`` on PostgreSQL (the same counts): over the blocks read
    since the previous cycle, >= 10 reads raise importance by 0.15, >= 5 by 0.05 (capped
    at 1.0); >= ``extend_min_accesses`` stretch the half-life x 1.3 toward the cap (90 d
    episodic, 180 d otherwise; never for ephemeral blocks); the recent count is reset; a
    block whose importance or half-life changed gets ``updated_at = now``."""
    d = policy.decay
    started = time.perf_counter()
    params: dict[str, Any] = {
        "high_n": d.bump_high_accesses,
        "high": float(d.bump_high),
        "low_n": d.bump_low_accesses,
        "low": float(d.bump_low),
        "extend_n": d.extend_min_accesses,
        "factor": float(d.extend_factor),
        "cap_episodic": d.max_half_life_episodic.total_seconds(),
        "cap_other": d.max_half_life_semantic.total_seconds(),
        "now": now,
        "lo": 0,
        "hi": 0,
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
    counts, counts_names = pg_named(
        f"SELECT count(*), count(*) FILTER (WHERE {raises}), count(*) FILTER (WHERE {extends})"
        f" FROM blocks WHERE {where}",
        params,
    )
    update, update_names = pg_named(
        f"UPDATE blocks SET"
        f" importance = CASE WHEN {raises} THEN least(1.0, importance + {bump})"
        f" ELSE importance END,"
        f" half_life_s = CASE WHEN {extends} THEN least({cap}, half_life_s * :factor)"
        f" ELSE half_life_s END,"
        f" updated_at = CASE WHEN ({raises}) OR ({extends}) THEN :now ELSE updated_at END,"
        f" recent_access_count = 0 WHERE {where}",
        params,
    )
    totals = {"blocks": 0, "importance_raised": 0, "half_life_extended": 0, "chunks": 0}
    async with db.read() as conn:
        ranges = await rid_ranges(conn, chunk_rows or d.chunk_rows)
    for lo, hi in ranges:

        async def job(conn: PgConnection, lo: int = lo, hi: int = hi) -> tuple[int, int, int]:
            bounds = {**params, "lo": lo, "hi": hi}
            row = await conn.fetchrow(counts, *arguments(counts_names, bounds))
            found = (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)
            if found[0]:
                await conn.execute(update, *arguments(update_names, bounds))
            return found

        blocks, raised, extended = await db.write(job)
        totals["blocks"] += blocks
        totals["importance_raised"] += raised
        totals["half_life_extended"] += extended
        totals["chunks"] += 1
    out: dict[str, Any] = {**totals, "duration_s": round(time.perf_counter() - started, 3)}
    log.info("heuristic_cycle_done", backend="postgresql", **out)
    return out


# ------------------------------------------------------------------ retention reads


async def read_points(
    db: PgDatabase, block_id: str, *, limit: int = MAX_POINTS
) -> list[RetentionPoint]:
    """A block's retention points, oldest first (the newest ``limit``); none for an
    unknown id (SQLite's ``_decayline.read_points``)."""
    async with db.read() as conn:
        rows = await conn.fetch(
            "SELECT at, importance, touched_at, half_life_s, tier, state, stale_at"
            " FROM retention_points WHERE block_rid = (SELECT rid FROM blocks WHERE id = $1)"
            " ORDER BY at DESC LIMIT $2",
            block_id,
            limit,
        )
    return points_of([tuple(r) for r in rows])


async def retention_histogram(db: PgDatabase, *, bins: int = 10) -> list[int]:
    """How many live (not archived) blocks have a retention in each of ``bins`` equal
    ranges of 0-1, lowest first (retention as the last decay cycle left it); a
    ``ValueError`` unless ``bins`` is 1 to 1000, as on SQLite."""
    check_bins(bins)
    async with db.read() as conn:
        rows = await conn.fetch(
            # trunc, not a cast: PostgreSQL's cast to an integer rounds, SQLite's truncates.
            "SELECT trunc(least(greatest(retention, 0.0), 0.999999) * $1::bigint)::bigint,"
            " count(*) FROM blocks WHERE state <> 'archived' GROUP BY 1",
            bins,
        )
    out = [0] * bins
    for b, n in rows:
        out[int(b)] = int(n)
    return out


# ------------------------------------------------------------------ the façade's part


class PgMaintenance:
    """The ``Store``'s maintenance methods on a :class:`PgDatabase`, with their names,
    signatures and answers: ``decay_cycle``, ``heuristic_cycle``, ``consolidate``,
    ``compact_events``, ``record_series``, ``series``, ``retention_points``,
    ``retention_histogram``.

    ``score_log`` is read at each consolidation (the store opens its log after this is
    made: set the attribute then), like ``Store.score_log``.
    """

    def __init__(
        self,
        db: PgDatabase,
        clock: Clock,
        policy: PolicyConfig,
        compaction: CompactionConfig | None = None,
        *,
        score_log: ScoreLog | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        self.compaction = compaction or CompactionConfig()
        self.score_log = score_log

    async def decay_cycle(self, *, chunk_rows: int | None = None) -> DecayReport:
        """Recompute retention set-based and archive what decayed below the threshold."""
        return await decay_cycle(self.db, self.clock, self.policy, chunk_rows=chunk_rows)

    async def heuristic_cycle(self, *, chunk_rows: int | None = None) -> dict[str, Any]:
        """The self-tuning rules' self-tuning pass over the blocks read since the previous one."""
        return await heuristic_cycle(
            self.db, self.policy, chunk_rows=chunk_rows, now=self.clock.time()
        )

    async def consolidate(self, *, limit: int | None = None) -> ConsolidationReport:
        """The consolidation pass: score short_term blocks, promote the ones that pass."""
        return await _promotion.consolidate(
            self.db, self.clock, self.policy, limit=limit, score_log=self.score_log
        )

    async def compact_events(self, cfg: CompactionConfig | None = None) -> CompactionReport:
        """Compact old runs of identical outcomes in the event log; prune dead letters."""
        return await _compaction.compact(self.db, self.clock, cfg or self.compaction)

    async def record_series(self) -> int:
        """Sample blocks by state and tier, the revalidation backlog and each sensor's
        events and errors into the current 5-minute slot of the time series."""
        return await _series.record(self.db, self.clock)

    async def series(self, metric: str, *, since: float) -> dict[str, list[tuple[float, int]]]:
        """One metric of the time series since ``since``, by key: (slot start, value)."""
        return await _series.read(self.db, metric, since=since)

    async def retention_points(self, block_id: str) -> list[RetentionPoint]:
        """The block's retention history, oldest first; none for an unknown id."""
        return await read_points(self.db, block_id)

    async def retention_histogram(self, *, bins: int = 10) -> list[int]:
        """Live blocks by retention, in ``bins`` equal ranges of 0-1."""
        return await retention_histogram(self.db, bins=bins)
