"""Core and long-term promotion: counting retrievals (the core rule) and the
consolidation pass (short_term -> long_term), each audited and written to the score log.

Both are functions of the :class:`~memwarden.memory._database.Database`; the store
exposes them as :meth:`Store.record_access` and :meth:`Store.consolidate`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.memory._clock import from_ts
from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._record import BlockRecord
from memwarden.memory._sql import chunks, placeholders, rid_ranges
from memwarden.memory.policy import (
    PromotionInputs,
    ScoreResult,
    consolidation_verdict,
    record_access,
    score,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "ConsolidationReport",
    "Verdict",
    "append_lines",
    "consolidate",
    "judge",
    "prefilter_sql",
    "promotion_guard",
    "record_accesses",
    "settle",
]

log = structlog.get_logger("memwarden.store")

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


async def append_lines(score_log: ScoreLog | None, lines: list[dict[str, Any]]) -> None:
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
    db: Database,
    clock: Clock,
    policy: PolicyConfig,
    block_ids: Sequence[str],
    *,
    session: str | None = None,
    score_log: ScoreLog | None = None,
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
    now = clock.time()
    cfg = policy

    async def job(conn: aiosqlite.Connection) -> list[BlockRecord]:
        unique = list(dict.fromkeys(ids))
        records: dict[str, BlockRecord] = {}
        seen: set[str] = set()
        select = f"SELECT {', '.join(_ACCESS_COLUMNS)} FROM blocks WHERE id IN "
        for part in chunks(unique):
            async with conn.execute(select + placeholders(len(part)), part) as cur:
                for row in await cur.fetchall():
                    records[row[1]] = _access_record(row)
            if session is not None:
                async with conn.execute(
                    "SELECT block_id FROM sessions WHERE session_id = ? AND block_id IN "
                    + placeholders(len(part)),
                    (session, *part),
                ) as cur:
                    seen.update(r[0] for r in await cur.fetchall())
        writes = count_accesses(ids, records, seen, session=session, now=now, cfg=cfg)
        if not writes.accesses:
            return []
        await conn.executemany(
            "INSERT INTO accesses (block_id, session_id, at) VALUES (?, ?, ?)", writes.accesses
        )
        await conn.executemany(
            "INSERT INTO sessions (block_id, session_id, first_at, last_at, count)"
            " VALUES (?, ?, ?, ?, 1) ON CONFLICT (block_id, session_id) DO UPDATE SET"
            " last_at = max(last_at, excluded.last_at), count = count + 1",
            writes.sessions,
        )
        await conn.executemany(
            "UPDATE blocks SET access_count = ?, recent_access_count = ?,"
            " last_accessed_at = ?, session_count = ?, stability = ?, tier = ? WHERE rid = ?",
            writes.blocks,
        )
        await conn.executemany(
            "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, ?, ?, ?)",
            writes.audits,
        )
        return writes.promoted

    promoted: list[BlockRecord] = await db.write(job)
    await tell_core_promotions(promoted, cfg=cfg, now=now, score_log=score_log)
    return [r.id for r in promoted]


@dataclass(frozen=True, slots=True)
class AccessWrites:
    """What one retrieval writes (both backends run the same rows through their SQL)."""

    promoted: list[BlockRecord]
    accesses: list[tuple[Any, ...]]  # (block_id, session, at)
    sessions: list[tuple[Any, ...]]  # (block_id, session, first_at, last_at)
    blocks: list[tuple[Any, ...]]  # the access columns and tier, then the rid
    audits: list[tuple[Any, ...]]  # (at, actor, action, block_id, detail)


def count_accesses(
    ids: Sequence[str],
    records: Mapping[str, BlockRecord],
    seen: set[str],
    *,
    session: str | None,
    now: float,
    cfg: PolicyConfig,
) -> AccessWrites:
    """Apply one retrieval to each found block's record (both backends) and say what to
    write: the access rows, the session rows, each record's access columns, and the audit
    rows of the blocks it promoted to core. ``seen``: the blocks this session had already
    read (a first read in a session counts more); updated in place."""
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
    return AccessWrites(
        promoted=promoted,
        accesses=accesses,
        sessions=[] if session is None else [(b, session, now, now) for b, _, _ in accesses],
        blocks=[
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
        audits=[(now, "memwarden", "promote", r.id, json.dumps(_core_detail(r))) for r in promoted],
    )


async def tell_core_promotions(
    promoted: Sequence[BlockRecord],
    *,
    cfg: PolicyConfig,
    now: float,
    score_log: ScoreLog | None,
) -> None:
    """Log blocks an access promoted to core, and write their explained scores to the
    score log (both backends, after the promotion committed)."""
    if not promoted:
        return
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
    await append_lines(score_log, lines)


def _core_detail(rec: BlockRecord) -> dict[str, Any]:
    return {
        "to": "core",
        "access_count": rec.access_count,
        "stability": round(rec.stability, 4),
        "sessions": rec.session_count,
    }


# ------------------------------------------------------------------ decay


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


def _json_signal(key: str) -> str:
    return f"coalesce(json_extract(b.signals, '$.{key}'), 0) > 0"


def prefilter_sql(
    cfg: PolicyConfig, *, signal: Callable[[str], str] = _json_signal
) -> tuple[str, dict[str, Any]]:
    """Blocks the consolidation pass scores: short_term, not gone, not ephemeral, and
    (for the composite scorer) with enough reads or an immediate trigger.

    A cheap SQL cut: whatever it drops could never be promoted. Stale, unreliable,
    flapping and cooling-down blocks pass it and are refused by the verdict, with the
    reasons in the score log. ``signal(key)`` is the backend's test "the block's signal
    ``key`` is above 0" (SQLite: ``json_extract``).
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
            f" OR {signal('user_corrections')} OR {signal('explicit_importance')})"
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


Verdict = tuple[BlockRecord, ScoreResult, bool, list[str]]
"""A scored block: its record, its score, whether the verdict promotes it, the refusals."""


def promotion_guard(cfg: PolicyConfig, now: float) -> dict[str, Any]:
    """The values the promoting ``UPDATE`` re-checks (fresh, reliable, not cooling down)."""
    return {
        "now": now,
        "min_reliability": cfg.promotion.min_reliability,
        "cooldown_start": now - cfg.evidence.promotion_cooldown.total_seconds(),
    }


def judge(
    records: Sequence[BlockRecord],
    times: dict[str, list[float]],
    sessions: dict[str, int],
    now: float,
    cfg: PolicyConfig,
) -> list[Verdict]:
    """Score each record with the configured scorer and give the consolidation verdict."""
    verdicts: list[Verdict] = []
    for rec in records:
        result = score(PromotionInputs(rec, now, times.get(rec.id, []), sessions.get(rec.id)), cfg)
        promote, reasons = consolidation_verdict(rec, result, now, cfg)
        verdicts.append((rec, result, promote, reasons))
    return verdicts


def settle(
    report: ConsolidationReport, verdicts: Sequence[Verdict], promoted: set[str], now: float
) -> list[dict[str, Any]]:
    """Count the verdicts into ``report`` (``promoted``: the ids the ``UPDATE`` promoted)
    and return the score-log lines, one per scoring."""
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
    return lines


async def consolidate(
    db: Database,
    clock: Clock,
    policy: PolicyConfig,
    *,
    limit: int | None = None,
    score_log: ScoreLog | None = None,
) -> ConsolidationReport:
    """The periodic consolidation pass: score short_term blocks, promote what passes.

    Range by range of rids: a SQL prefilter selects the blocks worth scoring; their
    records, access times and sessions are read in three queries; each is scored with
    the configured scorer and every score (with its breakdown and the verdict) goes to
    the score log; :func:`policy.consolidation_verdict` makes the final call, and the
    accepted blocks are promoted to long_term in one ``UPDATE`` (re-checking in SQL that
    they are still fresh, reliable and not flapping) with an audit row each.
    ``limit`` caps how many blocks are scored.
    """
    cfg = policy
    started = time.perf_counter()
    now = clock.time()
    report = ConsolidationReport(scorer=cfg.promotion.scorer)
    prefilter, base = prefilter_sql(cfg)
    guard = promotion_guard(cfg, now)
    remaining = limit if limit is not None else -1  # LIMIT -1: no limit
    async with db.read() as conn:
        ranges = await rid_ranges(conn, cfg.decay.chunk_rows)
    for lo, hi in ranges:
        if remaining == 0:
            break
        where = f"b.rid BETWEEN :lo AND :hi AND {prefilter}"
        async with db.read() as conn:
            records, times, sessions = await _load_candidates(
                conn, where, {**base, "lo": lo, "hi": hi}, remaining
            )
        if remaining > 0:
            remaining -= len(records)
        verdicts = judge(records, times, sessions, now, cfg)
        accepted = [rec for rec, _, promote, _ in verdicts if promote]
        promoted: set[str] = set()
        if accepted:
            promoted = await db.write(_promote_job(accepted, guard))
        lines = settle(report, verdicts, promoted, now)
        await append_lines(score_log, lines)
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
        for part in chunks([r.rid for r in accepted]):
            async with conn.execute(
                "UPDATE blocks SET tier = 'long_term', updated_at = ?"
                f" WHERE rid IN {placeholders(len(part))} AND tier = 'short_term'"
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
