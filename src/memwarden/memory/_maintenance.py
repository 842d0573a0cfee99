"""The store's maintenance passes: accesses, decay, the heuristic cycle, consolidation,
explanations and health.

Each is an async function of a :class:`~memwarden.memory._store.Store` (which exposes
them as thin methods). The periodic passes are set-based: they walk the blocks in
ranges of ``rid`` (``decay.chunk_rows`` rows), one writer job per range, so other writes
interleave between ranges and no pass does one Python round trip per block. The SQL
twins of the rules live in :mod:`memwarden.memory._sqlrules`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.errors import NotFoundError
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._model import BlockState
from memwarden.memory._record import BlockRecord
from memwarden.memory._sqlrules import (
    effective_half_life_sql,
    last_touched_sql,
    retention_sql,
    rule_params,
    stale_sql,
)
from memwarden.memory.policy import (
    HealthInputs,
    HealthReport,
    PromotionInputs,
    ScoreResult,
    archive_reason,
    consolidation_verdict,
    core_promotion_blockers,
    current_stale_reasons,
    effective_half_life_s,
    effective_state,
    health_report,
    is_stale,
    record_access,
    retention,
    score,
    score_composite,
    score_multi_axis,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence
    from contextlib import AbstractAsyncContextManager

    import aiosqlite

    from memwarden.memory._results import Explanation
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory._store import Store
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "ConsolidationReport",
    "DecayReport",
    "consolidate",
    "decay_cycle",
    "explain",
    "health",
    "heuristic_cycle",
    "record_accesses",
]

log = structlog.get_logger("memwarden.store")

_IN_CHUNK = 500  # host parameters per IN (...) list
_REPORT_LIMIT = 1000  # archived blocks listed by id in a DecayReport
_EXPLAIN_HISTORY = 20  # reliability changes shown by explain
_EXPLAIN_EVENTS = 10  # events shown by explain
_DAY = 86400.0

# The columns record_access reads and writes (a partial record: no text).
_ACCESS_COLUMNS = (
    "rid",
    "id",
    "tier",
    "state",
    "volatility",
    "info_type",
    "flapping",
    "created_at",
    "last_accessed_at",
    "access_count",
    "recent_access_count",
    "session_count",
    "stability",
)
_BLOCK_SELECT = ", ".join(f"b.{c}" for c in BLOCK_COLUMNS)


def _ops(
    store: Store,
) -> tuple[
    Callable[[Any], Awaitable[Any]],
    Callable[[], AbstractAsyncContextManager[aiosqlite.Connection]],
]:
    # These passes are the store's own methods, kept in a module of their own; they use
    # its database's writer and reader pool like the store's other parts do.
    return store.db.write, store.db.read


def _chunks(items: Sequence[Any], size: int = _IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _in(n: int) -> str:
    return "(" + ",".join("?" * n) + ")"


async def _rid_ranges(store: Store, chunk_rows: int) -> list[tuple[int, int]]:
    """Consecutive ``(lo, hi)`` ranges of ``chunk_rows`` rids covering every block now."""
    _, read = _ops(store)
    async with read() as conn, conn.execute("SELECT min(rid), max(rid) FROM blocks") as cur:
        row = await cur.fetchone()
    if row is None or row[0] is None:
        return []
    lo, hi = int(row[0]), int(row[1])
    step = max(1, chunk_rows)
    return [(start, min(hi, start + step - 1)) for start in range(lo, hi + 1, step)]


def _iso(ts: float | None) -> str | None:
    return None if ts is None else from_ts(ts).isoformat()


async def _append_lines(score_log: ScoreLog | None, lines: list[dict[str, Any]]) -> None:
    """Write score-log lines off the event loop (file I/O)."""
    if score_log is None or not lines:
        return

    def write_all() -> None:
        for line in lines:
            score_log.write(line)

    await asyncio.to_thread(write_all)


def _score_line(result: ScoreResult, *, at: float, event: str, **extra: Any) -> dict[str, Any]:
    line: dict[str, Any] = {"at": from_ts(at).isoformat(), "event": event}
    line.update(result.as_dict())
    line.update(extra)
    return line


# ------------------------------------------------------------------ accesses


def _access_record(row: Sequence[Any]) -> BlockRecord:
    (
        rid,
        id_,
        tier,
        state,
        volatility,
        info_type,
        flapping,
        created_at,
        last_accessed_at,
        access_count,
        recent,
        sessions,
        stability,
    ) = row
    return BlockRecord(
        id=id_,
        title="",
        content="",
        tags=[],
        source="",
        category="",
        info_type=info_type,
        volatility=volatility,
        tier=tier,
        state=state,
        stale_reasons=[],
        reliability=0.0,
        importance=0.0,
        validated_by=None,
        validated_at=None,
        validity_window_s=0.0,
        stale_at=None,
        half_life_s=0.0,
        created_at=created_at,
        updated_at=created_at,
        last_accessed_at=last_accessed_at,
        access_count=access_count,
        recent_access_count=recent,
        session_count=sessions,
        flapping=bool(flapping),
        stability=stability,
        rid=rid,
    )


async def record_accesses(
    store: Store, block_ids: Sequence[str], *, session: str | None = None
) -> list[str]:
    """Count one retrieval of each block (the core rule); returns the ids promoted to core.

    In one writer job: an ``accesses`` row per retrieval, the ``(block, session)`` pair
    upserted in ``sessions`` (the first time a pair is seen counts a new session; no
    session counts none), :func:`policy.record_access` on each block, and the access
    columns (and tier) written back. Unknown ids are skipped. A block named twice is
    counted twice. Core promotions are audited and appended to the score log.
    """
    ids = list(block_ids)
    if not ids:
        return []
    write, _ = _ops(store)
    now = store.clock.time()
    cfg = store.policy

    async def job(conn: aiosqlite.Connection) -> list[BlockRecord]:
        unique = list(dict.fromkeys(ids))
        records: dict[str, BlockRecord] = {}
        seen: set[str] = set()
        select = f"SELECT {', '.join(_ACCESS_COLUMNS)} FROM blocks WHERE id IN "
        for part in _chunks(unique):
            async with conn.execute(select + _in(len(part)), part) as cur:
                for row in await cur.fetchall():
                    records[row[1]] = _access_record(row)
            if session is not None:
                async with conn.execute(
                    "SELECT block_id FROM sessions WHERE session_id = ? AND block_id IN "
                    + _in(len(part)),
                    (session, *part),
                ) as cur:
                    seen.update(r[0] for r in await cur.fetchall())
        promoted: list[BlockRecord] = []
        accesses: list[tuple[Any, ...]] = []
        for block_id in ids:
            rec = records.get(block_id)
            if rec is None:
                continue
            new_session = session is not None and block_id not in seen
            if new_session:
                seen.add(block_id)
            accesses.append((block_id, session, now))
            if record_access(rec, now, new_session=new_session, cfg=cfg):
                promoted.append(rec)
        if not accesses:
            return []
        await conn.executemany(
            "INSERT INTO accesses (block_id, session_id, at) VALUES (?, ?, ?)", accesses
        )
        if session is not None:
            await conn.executemany(
                "INSERT INTO sessions (block_id, session_id, first_at, last_at, count)"
                " VALUES (?, ?, ?, ?, 1) ON CONFLICT (block_id, session_id) DO UPDATE SET"
                " last_at = max(last_at, excluded.last_at), count = count + 1",
                [(block_id, session, now, now) for block_id, _, _ in accesses],
            )
        await conn.executemany(
            "UPDATE blocks SET access_count = ?, recent_access_count = ?,"
            " last_accessed_at = ?, session_count = ?, stability = ?, tier = ? WHERE rid = ?",
            [
                (
                    r.access_count,
                    r.recent_access_count,
                    r.last_accessed_at,
                    r.session_count,
                    r.stability,
                    r.tier,
                    r.rid,
                )
                for r in records.values()
            ],
        )
        if promoted:
            await conn.executemany(
                "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, ?, ?, ?)",
                [
                    (now, "memwarden", "promote", r.id, json.dumps(_core_detail(r)))
                    for r in promoted
                ],
            )
        return promoted

    promoted: list[BlockRecord] = await write(job)
    if promoted:
        log.info("core_promoted", blocks=[r.id for r in promoted])
        core = cfg.promotion.core
        lines = [
            _score_line(
                ScoreResult(
                    scorer="core",
                    block_id=r.id,
                    total=r.stability,
                    threshold=core.stability_threshold,
                    breakdown={k: float(v) for k, v in _core_detail(r).items() if k != "to"},
                    candidate=True,
                ),
                at=now,
                event="core_promotion",
                promoted=True,
            )
            for r in promoted
        ]
        await _append_lines(store.score_log, lines)
    return [r.id for r in promoted]


def _core_detail(rec: BlockRecord) -> dict[str, Any]:
    return {
        "to": "core",
        "access_count": rec.access_count,
        "stability": round(rec.stability, 4),
        "sessions": rec.session_count,
    }


# ------------------------------------------------------------------ decay


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


def _archivable_sql() -> str:
    """Twin of the ``policy.archive_reason`` guards, over the just-stored retention."""
    return (
        "state <> 'archived' AND tier <> 'core'"
        " AND (validated_at IS NULL OR stale_at IS NULL OR stale_at <= :now)"
        " AND retention < :archive_below"
    )


def _archive_reason_sql() -> str:
    """Twin of the text of ``policy.archive_reason``."""
    return (
        "printf('retention %.3f < %s (untouched %.1fd, half-life %.3gd%s)',"
        f" retention, :archive_below_text, (:now - {last_touched_sql('')}) / {_DAY},"
        f" {effective_half_life_sql('')} / {_DAY},"
        f" CASE WHEN {stale_sql('')} THEN ', stale' ELSE '' END)"
    )


async def decay_cycle(store: Store, *, chunk_rows: int | None = None) -> DecayReport:
    """Recompute every block's retention and archive what fell below the threshold.

    Set-based, in ranges of ``chunk_rows`` rids (``decay.chunk_rows``), one writer job
    per range: one ``UPDATE`` stores the retention as of now (the same SQL as search's;
    only rows whose value changes are rewritten), an ``INSERT ... SELECT`` writes an
    audit row per block to archive and one ``UPDATE`` archives them with a reason.
    Never ``core``, never a block validated inside its window (the archival rule, docs/RULES.md).

    Measured on 1 000 000 blocks (2 cores, WAL): about 1-3 s when a few thousand
    blocks decay out; a first cycle that archives 650 000 at once takes about 14 s,
    mostly the FTS index and the ``blocks_due`` index dropping the archived rows.
    """
    write, _ = _ops(store)
    cfg = store.policy
    started = time.perf_counter()
    now = store.clock.time()
    params = {
        **rule_params(cfg, now),
        "archive_below": cfg.decay.archive_below,
        "archive_below_text": format(cfg.decay.archive_below, "g"),
    }
    live = "rid BETWEEN :lo AND :hi AND state <> 'archived'"
    count = f"SELECT count(*) FROM blocks WHERE {live}"
    recompute = (  # rows whose value would not change are not rewritten
        f"UPDATE blocks SET retention = {retention_sql('')}"
        f" WHERE {live} AND retention IS NOT {retention_sql('')}"
    )
    where = f"rid BETWEEN :lo AND :hi AND {_archivable_sql()}"
    audit = (
        "INSERT INTO audit (at, actor, action, block_id, detail)"
        f" SELECT :now, 'decay', 'archive', id, json_object('reason', {_archive_reason_sql()})"
        f" FROM blocks WHERE {where}"
    )
    archive = (
        f"UPDATE blocks SET state = 'archived', archived_at = :now, updated_at = :now,"
        f" archive_reason = {_archive_reason_sql()}"
        f" WHERE {where} RETURNING id, archive_reason"
    )
    report = DecayReport()

    async def chunk_job(conn: aiosqlite.Connection, lo: int, hi: int) -> tuple[int, int, list[Any]]:
        bounds = {**params, "lo": lo, "hi": hi}
        async with conn.execute(count, bounds) as cur:
            (scanned,) = await cur.fetchone() or (0,)
        async with conn.execute(recompute, bounds) as cur:
            changed = cur.rowcount
        await conn.execute(audit, bounds)
        async with conn.execute(archive, bounds) as cur:
            archived = list(await cur.fetchall())
        return int(scanned), int(changed), archived

    for lo, hi in await _rid_ranges(store, chunk_rows or cfg.decay.chunk_rows):

        async def job(conn: aiosqlite.Connection, lo: int = lo, hi: int = hi) -> Any:
            return await chunk_job(conn, lo, hi)

        scanned, changed, archived = await write(job)
        report.chunks += 1
        report.scanned += scanned
        report.retention_updated += changed
        report.archived += len(archived)
        room = _REPORT_LIMIT - len(report.archived_blocks)
        report.archived_blocks.extend((r[0], r[1]) for r in archived[: max(0, room)])
    report.duration_s = time.perf_counter() - started
    log.info(
        "decay_cycle_done", **{k: v for k, v in report.as_dict().items() if k != "archived_blocks"}
    )
    return report


# ------------------------------------------------------------------ heuristic cycle


async def heuristic_cycle(store: Store, *, chunk_rows: int | None = None) -> dict[str, Any]:
    """The self-tuning rules' self-tuning pass, set-based (the twin of ``policy.heuristic_cycle``).

    Over the blocks read since the previous cycle: >= 10 reads raise importance by 0.15,
    >= 5 by 0.05 (capped at 1.0); >= ``extend_min_accesses`` stretch the half-life x 1.3
    toward the cap (90 d episodic, 180 d otherwise; a ``< cap`` guard; never for
    ephemeral blocks); then the recent count is reset. Returns counts.
    """
    write, _ = _ops(store)
    d = store.policy.decay
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
        f" recent_access_count = 0 WHERE {where}"
    )
    totals = {"blocks": 0, "importance_raised": 0, "half_life_extended": 0, "chunks": 0}

    for lo, hi in await _rid_ranges(store, chunk_rows or d.chunk_rows):

        async def job(conn: aiosqlite.Connection, lo: int = lo, hi: int = hi) -> Any:
            bounds = {**params, "lo": lo, "hi": hi}
            async with conn.execute(counts, bounds) as cur:
                row = await cur.fetchone() or (0, 0, 0)
            if row[0]:
                await conn.execute(update, bounds)
            return row

        blocks, raised, extended = await write(job)
        totals["blocks"] += int(blocks)
        totals["importance_raised"] += int(raised)
        totals["half_life_extended"] += int(extended)
        totals["chunks"] += 1
    out: dict[str, Any] = {**totals, "duration_s": round(time.perf_counter() - started, 3)}
    log.info("heuristic_cycle_done", **out)
    return out


# ------------------------------------------------------------------ consolidation


@dataclass(slots=True)
class ConsolidationReport:
    """What one consolidation pass did (short_term -> long_term)."""

    scorer: str
    considered: int = 0  # blocks scored (past the SQL prefilter)
    candidates: int = 0  # of those, how many the scorer made candidates
    fallback_used: int = 0  # scorings that fell back to the composite scorer's simple rule
    promoted: list[str] = field(default_factory=list)
    refused: dict[str, list[str]] = field(default_factory=dict)  # candidates refused, why
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "considered": self.considered,
            "candidates": self.candidates,
            "fallback_used": self.fallback_used,
            "promoted": list(self.promoted),
            "refused": dict(self.refused),
            "duration_s": round(self.duration_s, 3),
        }


def _prefilter_sql(cfg: PolicyConfig) -> tuple[str, dict[str, Any]]:
    """Blocks the consolidation pass scores: short_term, not gone, not ephemeral, and
    (for the composite scorer) with enough reads or an immediate trigger.

    A cheap SQL cut: whatever it drops could never be promoted. Stale, unreliable,
    flapping and cooling-down blocks pass it and are refused by the verdict, with the
    reasons in the score log.
    """
    where = (
        "b.tier = 'short_term' AND b.state NOT IN ('archived', 'refuted')"
        " AND b.volatility <> 'ephemeral' AND b.info_type <> 'ephemeral'"
    )
    params: dict[str, Any] = {}
    if cfg.promotion.scorer == "composite":
        c = cfg.promotion.composite
        where += (
            " AND (b.access_count >= :min_access OR b.session_count >= :trigger_sessions"
            " OR coalesce(json_extract(b.signals, '$.user_corrections'), 0) > 0"
            " OR coalesce(json_extract(b.signals, '$.explicit_importance'), 0) > 0)"
        )
        params["min_access"] = min(c.minimum_access_count, c.fallback_access_count)
        params["trigger_sessions"] = c.immediate_session_count
    return where, params


async def _load_candidates(
    conn: aiosqlite.Connection, where: str, params: dict[str, Any], limit: int
) -> tuple[list[BlockRecord], dict[str, list[float]], dict[str, int]]:
    """The prefiltered records of one rid range, their access times and session counts."""
    async with conn.execute(
        f"SELECT {_BLOCK_SELECT} FROM blocks b WHERE {where} ORDER BY b.rid LIMIT :limit",
        {**params, "limit": limit},
    ) as cur:
        records = [record_from_row(r) for r in await cur.fetchall()]
    times: dict[str, list[float]] = defaultdict(list)
    sessions: dict[str, int] = {}
    if not records:
        return records, times, sessions
    last = {"last_rid": records[-1].rid}
    async with conn.execute(
        "SELECT a.block_id, a.at FROM blocks b JOIN accesses a ON a.block_id = b.id"
        f" WHERE {where} AND b.rid <= :last_rid",
        {**params, **last},
    ) as cur:
        for block_id, at in await cur.fetchall():
            times[block_id].append(at)
    async with conn.execute(
        "SELECT s.block_id, count(*) FROM blocks b JOIN sessions s ON s.block_id = b.id"
        f" WHERE {where} AND b.rid <= :last_rid GROUP BY s.block_id",
        {**params, **last},
    ) as cur:
        sessions = {r[0]: r[1] for r in await cur.fetchall()}
    return records, times, sessions


async def consolidate(store: Store, *, limit: int | None = None) -> ConsolidationReport:
    """The periodic consolidation pass: score short_term blocks, promote what passes.

    Range by range of rids: a SQL prefilter selects the blocks worth scoring; their
    records, access times and sessions are read in three queries; each is scored with
    the configured scorer and every score (with its breakdown and the verdict) goes to
    the score log; :func:`policy.consolidation_verdict` makes the final call, and the
    accepted blocks are promoted to long_term in one ``UPDATE`` (re-checking in SQL that
    they are still fresh, reliable and not flapping) with an audit row each.
    ``limit`` caps how many blocks are scored.
    """
    write, read = _ops(store)
    cfg = store.policy
    started = time.perf_counter()
    now = store.clock.time()
    report = ConsolidationReport(scorer=cfg.promotion.scorer)
    prefilter, base = _prefilter_sql(cfg)
    guard = {
        "now": now,
        "min_reliability": cfg.promotion.min_reliability,
        "cooldown_start": now - cfg.evidence.promotion_cooldown.total_seconds(),
    }
    remaining = limit if limit is not None else -1  # LIMIT -1: no limit
    for lo, hi in await _rid_ranges(store, cfg.decay.chunk_rows):
        if remaining == 0:
            break
        where = f"b.rid BETWEEN :lo AND :hi AND {prefilter}"
        async with read() as conn:
            records, times, sessions = await _load_candidates(
                conn, where, {**base, "lo": lo, "hi": hi}, remaining
            )
        if remaining > 0:
            remaining -= len(records)
        verdicts: list[tuple[BlockRecord, ScoreResult, bool, list[str]]] = []
        for rec in records:
            result = score(
                PromotionInputs(rec, now, times.get(rec.id, []), sessions.get(rec.id)), cfg
            )
            promote, reasons = consolidation_verdict(rec, result, now, cfg)
            verdicts.append((rec, result, promote, reasons))
        accepted = [rec for rec, _, promote, _ in verdicts if promote]
        promoted: set[str] = set()
        if accepted:
            promoted = await write(_promote_job(accepted, guard))
        lines = []
        for rec, result, promote, refusals in verdicts:
            report.considered += 1
            report.candidates += result.candidate
            report.fallback_used += result.fallback_used
            done = rec.id in promoted
            reasons = refusals
            if done:
                report.promoted.append(rec.id)
            elif result.candidate:
                reasons = refusals if not promote else ["changed since it was scored"]
                report.refused[rec.id] = reasons
            lines.append(
                _score_line(result, at=now, event="consolidation", promoted=done, reasons=reasons)
            )
        await _append_lines(store.score_log, lines)
    report.duration_s = time.perf_counter() - started
    log.info(
        "consolidation_done",
        considered=report.considered,
        candidates=report.candidates,
        promoted=len(report.promoted),
        refused=len(report.refused),
    )
    return report


def _promote_job(
    accepted: list[BlockRecord], guard: dict[str, Any]
) -> Callable[[aiosqlite.Connection], Awaitable[set[str]]]:
    async def job(conn: aiosqlite.Connection) -> set[str]:
        done: set[str] = set()
        for part in _chunks([r.rid for r in accepted]):
            async with conn.execute(
                "UPDATE blocks SET tier = 'long_term', updated_at = ?"
                f" WHERE rid IN {_in(len(part))} AND tier = 'short_term'"
                " AND state IN ('fresh', 'unverified') AND coalesce(stale_at > ?, 1)"
                " AND reliability >= ? AND flapping = 0"
                " AND coalesce(last_contradiction_at <= ?, 1) RETURNING id",
                (
                    guard["now"],
                    *part,
                    guard["now"],
                    guard["min_reliability"],
                    guard["cooldown_start"],
                ),
            ) as cur:
                done.update(r[0] for r in await cur.fetchall())
        await conn.executemany(
            "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, ?, ?, ?)",
            [
                (guard["now"], "consolidation", "promote", block_id, '{"to":"long_term"}')
                for block_id in sorted(done)
            ],
        )
        return done

    return job


# ------------------------------------------------------------------ explain


def _freshness(state: str, cfg: PolicyConfig) -> float:
    rank = cfg.ranking
    return {
        BlockState.FRESH.value: rank.fresh,
        BlockState.UNVERIFIED.value: rank.unverified,
        BlockState.STALE.value: rank.stale,
        BlockState.REFUTED.value: rank.refuted,
    }.get(state, 0.0)


async def explain(store: Store, block_id: str) -> Explanation:
    """Everything that decides how a block is treated now, and why (JSON-serializable)."""
    _, read = _ops(store)
    cfg = store.policy
    now = store.clock.time()
    async with read() as conn:
        async with conn.execute(
            f"SELECT {_BLOCK_SELECT} FROM blocks b WHERE b.id = ?", (block_id,)
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError("block", block_id)
        rec = record_from_row(row)
        async with conn.execute(
            "SELECT at FROM accesses WHERE block_id = ? ORDER BY at", (block_id,)
        ) as cur:
            times = [r[0] for r in await cur.fetchall()]
        async with conn.execute(
            "SELECT count(*) FROM sessions WHERE block_id = ?", (block_id,)
        ) as cur:
            sessions = (await cur.fetchone() or (0,))[0]
    events = await store.events_for(block_id, limit=max(_EXPLAIN_HISTORY, _EXPLAIN_EVENTS))

    state = effective_state(rec, now)
    stale = is_stale(rec, now)
    kept = retention(rec, now, cfg)
    freshness = _freshness(state, cfg)
    inputs = PromotionInputs(rec, now, times, sessions)
    configured = score(inputs, cfg)
    promote, refusals = consolidation_verdict(rec, configured, now, cfg)
    other = score_multi_axis if cfg.promotion.scorer == "composite" else score_composite
    core = cfg.promotion.core
    return {
        "id": rec.id,
        "title": rec.title,
        "now": _iso(now),
        "state": {
            "stored": rec.state,
            "effective": state,
            "stale": stale,
            "stale_reasons": current_stale_reasons(rec, now, cfg) if stale else [],
            "stale_at": _iso(rec.stale_at),
            "archived_at": _iso(rec.archived_at),
            "archive_reason": rec.archive_reason,
        },
        "reliability": {
            "current": rec.reliability,
            "history": [
                {
                    "observed_at": _iso(e.observed_at),
                    "sensor": e.sensor,
                    "outcome": e.outcome,
                    "before": e.reliability_before,
                    "after": e.reliability_after,
                    "ignored": (e.detail or {}).get("ignored"),
                    "event_id": e.event_id,
                }
                for e in events[:_EXPLAIN_HISTORY]
            ],
        },
        "validation": {
            "validated_by": rec.validated_by,
            "validated_at": _iso(rec.validated_at),
            "validity_window_s": rec.validity_window_s,
            "inside_window": rec.validated_at is not None
            and rec.stale_at is not None
            and rec.stale_at > now,
            "reinforcements": rec.reinforcement_count,
            "contradictions": rec.contradiction_count,
            "last_contradiction_at": _iso(rec.last_contradiction_at),
            "flapping": rec.flapping,
            "outcome_history": rec.outcome_history,
        },
        "retention": {
            "value": kept,
            "stored": rec.retention,
            "importance": rec.importance,
            "last_touched": _iso(rec.last_touched()),
            "age_s": max(0.0, now - rec.last_touched()),
            "half_life_s": rec.half_life_s,
            "half_life_effective_s": effective_half_life_s(rec, now, cfg),
            "floor": cfg.decay.core_floor if rec.tier == "core" else cfg.decay.floor,
            "archive_below": cfg.decay.archive_below,
            "would_archive": archive_reason(rec, now, cfg),
        },
        "rank": {
            "freshness": freshness,
            "reliability": rec.reliability,
            "retention": kept,
            "product": freshness * rec.reliability * kept,
            "searchable": state != BlockState.ARCHIVED.value,
        },
        "promotion": {
            "tier": rec.tier,
            "scorer": cfg.promotion.scorer,
            "score": configured.as_dict(),
            "other_score": other(inputs, cfg).as_dict(),
            "consolidation": {"promote": promote, "reasons": refusals},
            "core": {
                "blockers": core_promotion_blockers(rec, cfg),
                "access_count": rec.access_count,
                "stability": rec.stability,
                "sessions": rec.session_count,
                "thresholds": {
                    "access_count": core.access_threshold,
                    "stability": core.stability_threshold,
                    "sessions": core.session_threshold,
                },
            },
            "access_times": [_iso(t) for t in times[-_EXPLAIN_EVENTS:]],
            "events": [e.as_dict() for e in events[:_EXPLAIN_EVENTS]],
        },
    }


# ------------------------------------------------------------------ health


async def health(
    store: Store, *, failing_sensors: Iterable[str] = (), sensors_total: int = 0
) -> HealthReport:
    """The health report (the self-tuning rules) from two aggregate queries over the store."""
    _, read = _ops(store)
    cfg = store.policy
    now = store.clock.time()
    async with read() as conn:
        async with conn.execute(
            "SELECT eff, count(*), sum(kept), sum(access_count), sum(flapping) FROM ("
            " SELECT CASE WHEN b.state IN ('fresh', 'unverified') AND b.stale_at <= :now"
            f" THEN 'stale' ELSE b.state END AS eff, {retention_sql('b')} AS kept,"
            " b.access_count AS access_count, b.flapping AS flapping"
            " FROM blocks b WHERE b.state <> 'archived') GROUP BY eff",
            rule_params(cfg, now),
        ) as cur:
            rows = await cur.fetchall()
        async with conn.execute(
            "SELECT (SELECT count(*) FROM revalidations WHERE status IN ('pending', 'sent')),"
            " (SELECT count(*) FROM reviews WHERE status = 'pending')"
        ) as cur:
            backlog, reviews = await cur.fetchone() or (0, 0)
    by_state = {r[0]: int(r[1]) for r in rows}
    total = sum(by_state.values())
    inputs = HealthInputs(
        total=total,
        by_state=by_state,
        avg_retention=sum(r[2] or 0.0 for r in rows) / total if total else 1.0,
        avg_access_count=sum(r[3] or 0 for r in rows) / total if total else 0.0,
        stale_share=by_state.get(BlockState.STALE.value, 0) / total if total else 0.0,
        failing_sensors=list(failing_sensors),
        sensors_total=sensors_total,
        revalidation_backlog=int(backlog),
        pending_reviews=int(reviews),
        flapping_count=sum(int(r[4] or 0) for r in rows),
    )
    return health_report(inputs, cfg)
