"""Why a block stands where it does (:func:`explain`) and how healthy the whole store
is (:func:`health`): read-only reports built from the rules and a few queries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwarden.errors import NotFoundError
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._model import BlockState
from memwarden.memory._reads import Reads
from memwarden.memory._sqlrules import (
    retention_sql,
    rule_params,
)
from memwarden.memory.policy import (
    HealthInputs,
    HealthReport,
    PromotionInputs,
    archive_reason,
    consolidation_verdict,
    core_promotion_blockers,
    current_stale_reasons,
    effective_half_life_s,
    effective_state,
    health_report,
    is_stale,
    retention,
    score,
    score_composite,
    score_multi_axis,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._record import BlockRecord
    from memwarden.memory._results import EventRecord, Explanation
    from memwarden.memory.policy import PolicyConfig

__all__ = ["EXPLAIN_EVENT_LIMIT", "explain", "explanation", "health"]

_EXPLAIN_HISTORY = 20  # reliability changes shown by explain
_EXPLAIN_EVENTS = 10  # events shown by explain
EXPLAIN_EVENT_LIMIT = max(_EXPLAIN_HISTORY, _EXPLAIN_EVENTS)  # events explain reads
_DAY = 86400.0
_BLOCK_SELECT = ", ".join(f"b.{c}" for c in BLOCK_COLUMNS)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else from_ts(ts).isoformat()


# ------------------------------------------------------------------ explain


def _freshness(state: str, cfg: PolicyConfig) -> float:
    rank = cfg.ranking
    return {
        BlockState.FRESH.value: rank.fresh,
        BlockState.UNVERIFIED.value: rank.unverified,
        BlockState.STALE.value: rank.stale,
        BlockState.REFUTED.value: rank.refuted,
    }.get(state, 0.0)


async def explain(db: Database, clock: Clock, policy: PolicyConfig, block_id: str) -> Explanation:
    """Everything that decides how a block is treated now, and why (JSON-serializable)."""
    now = clock.time()
    async with db.read() as conn:
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
    events = await Reads(db, clock, policy).events_for(block_id, limit=EXPLAIN_EVENT_LIMIT)
    return explanation(rec, now, times=times, sessions=sessions, events=events, cfg=policy)


def explanation(
    rec: BlockRecord,
    now: float,
    *,
    times: Sequence[float],
    sessions: int,
    events: Sequence[EventRecord],
    cfg: PolicyConfig,
) -> Explanation:
    """The explanation of a block from its record, its access times (oldest first), its
    session count and its latest ``EXPLAIN_EVENT_LIMIT`` events (newest first): the
    rules only, shared by both backends."""
    state = effective_state(rec, now)
    stale = is_stale(rec, now)
    kept = retention(rec, now, cfg)
    freshness = _freshness(state, cfg)
    inputs = PromotionInputs(rec, now, list(times), sessions)
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
    db: Database,
    clock: Clock,
    policy: PolicyConfig,
    *,
    failing_sensors: Iterable[str] = (),
    sensors_total: int = 0,
    namespaces: Sequence[str] | None = None,
) -> HealthReport:
    """The health report (the self-tuning rules) from two aggregate queries over the
    store; with ``namespaces``, over their blocks (and their pending work) only."""
    cfg = policy
    now = clock.time()
    params: dict[str, Any] = dict(rule_params(cfg, now))
    names = sorted(set(namespaces)) if namespaces is not None else None
    if names is None:
        scope = owned = ""
    else:
        params.update({f"ns{i}": n for i, n in enumerate(names)})
        listed = ", ".join(f":ns{i}" for i in range(len(names))) or "NULL"
        scope = f" AND b.namespace IN ({listed})"
        owned = f" AND block_id IN (SELECT id FROM blocks WHERE namespace IN ({listed}))"
    async with db.read() as conn:
        async with conn.execute(
            "SELECT eff, count(*), sum(kept), sum(access_count), sum(flapping) FROM ("
            " SELECT CASE WHEN b.state IN ('fresh', 'unverified') AND b.stale_at <= :now"
            f" THEN 'stale' ELSE b.state END AS eff, {retention_sql('b')} AS kept,"
            " b.access_count AS access_count, b.flapping AS flapping"
            f" FROM blocks b WHERE b.state <> 'archived'{scope}) GROUP BY eff",
            params,
        ) as cur:
            rows = list(await cur.fetchall())
        async with conn.execute(
            "SELECT (SELECT count(*) FROM revalidations WHERE status IN ('pending', 'sent')"
            f"{owned}), (SELECT count(*) FROM reviews WHERE status = 'pending'{owned})",
            params,
        ) as cur:
            backlog, reviews = await cur.fetchone() or (0, 0)
    return health_from_counts(
        rows,
        backlog=backlog,
        reviews=reviews,
        failing_sensors=failing_sensors,
        sensors_total=sensors_total,
        cfg=cfg,
    )


def health_from_counts(
    rows: Sequence[Any],
    *,
    backlog: int,
    reviews: int,
    failing_sensors: Iterable[str],
    sensors_total: int,
    cfg: PolicyConfig,
) -> HealthReport:
    """The health report from the aggregate rows (state, count, sum of retention, sum of
    accesses, sum of flapping) and the pending counts, as both backends read them."""
    by_state = {str(r[0]): int(r[1]) for r in rows}
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
