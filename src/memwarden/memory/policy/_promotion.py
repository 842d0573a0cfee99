# Copyright 2026 memwarden contributors. MIT License.
"""Promotion: short_term -> long_term by a scorer and a consolidation pass; long_term -> core.

A scorer (``composite`` or ``multi_axis``, docs/RULES.md) turns a block into a
:class:`ScoreResult`: a total, its full breakdown and whether the block is a *candidate*.
A high score is necessary, never sufficient: :func:`consolidation_verdict` makes the
final call and refuses whatever is not known to be true and lasting. Core promotion
(the core rule, docs/RULES.md) is checked on retrieval by :func:`record_access`.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memwarden.memory._model import BlockState, InfoType, Tier, Volatility
from memwarden.memory.policy._decay import is_stale

if TYPE_CHECKING:
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy._config import Axis, CompositeConfig, PolicyConfig

__all__ = [
    "PromotionInputs",
    "ScoreResult",
    "check_core_promotion",
    "consolidation_verdict",
    "content_markers",
    "core_promotion_blockers",
    "demote_core",
    "record_access",
    "score",
    "score_composite",
    "score_multi_axis",
]

_HOUR = 3600.0
# Plain strings on the hot path: enum attribute access costs more than the comparison.
_SHORT_TERM = Tier.SHORT_TERM.value
_LONG_TERM = Tier.LONG_TERM.value
_CORE = Tier.CORE.value
_EPHEMERAL_VOLATILITY = Volatility.EPHEMERAL.value
_HIGH = Volatility.HIGH.value
_EPHEMERAL_INFO = InfoType.EPHEMERAL.value
_DYNAMIC = InfoType.DYNAMIC.value
_GONE = frozenset({BlockState.ARCHIVED.value, BlockState.REFUTED.value})
_DOUBTFUL = frozenset({BlockState.STALE.value, BlockState.REFUTED.value, BlockState.ARCHIVED.value})
_SCAN_CHARS = 4096  # content analysis reads the title and the start of the content

# The composite scorer's content analysis, run over lowercased text (faster than IGNORECASE). Each
# pattern counts occurrences; the weights live in config.
_MARKERS: dict[str, re.Pattern[str]] = {
    "identity": re.compile(r"\bmy name is\b|\bi(?: am|'m) (?:a|an)\b|\bi was born\b|\bi work as\b"),
    "preference": re.compile(
        r"\bi (?:really )?(?:like|love|prefer|enjoy|hate|dislike)\b|\bmy fav(?:ou)?rite\b",
    ),
    "belief": re.compile(r"\bi (?:believe|think|feel)\b|\bin my (?:opinion|view)\b"),
    "factual": re.compile(
        r"\bi (?:live|work|study|use|have)\b"
        r"|\bmy (?:job|team|company|home|city|wife|husband|partner|son|daughter|family)\b"
        r"|\bwe (?:chose|decided|use|switched to)\b",
    ),
    "pronouns": re.compile(r"\b(?:i|me|my|mine)\b"),
}


@dataclass(slots=True)
class PromotionInputs:
    """What a scorer looks at: the block, when it was read, in how many sessions, and now.

    ``access_times`` are the timestamps of the block's accesses (any order; those after
    ``now`` are ignored). ``sessions`` is the number of distinct sessions that used it;
    ``None`` takes the record's ``session_count``.
    """

    record: BlockRecord
    now: float
    access_times: list[float] = field(default_factory=list)
    sessions: int | None = None

    @property
    def session_total(self) -> int:
        return self.record.session_count if self.sessions is None else self.sessions


@dataclass(slots=True)
class ScoreResult:
    """One scoring of one block, as appended to the score log."""

    scorer: str
    block_id: str
    total: float
    threshold: float
    breakdown: dict[str, float]
    candidate: bool
    trigger: str | None = None  # an immediate trigger that bypassed the score
    blocked: list[str] = field(default_factory=list)  # why a good score is not enough
    fallback_used: bool = False  # scoring failed; the composite scorer's simple rule decided
    error: str | None = None  # what made scoring fail

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "block_id": self.block_id,
            "scorer": self.scorer,
            "total": round(self.total, 4),
            "threshold": self.threshold,
            "candidate": self.candidate,
            "breakdown": {k: round(v, 4) for k, v in self.breakdown.items()},
        }
        if self.trigger:
            d["trigger"] = self.trigger
        if self.blocked:
            d["blocked"] = list(self.blocked)
        if self.fallback_used:
            d["fallback_used"] = True
        if self.error:
            d["error"] = self.error
        return d


# ----------------------------------------------------------------------- helpers


def _signal(rec: BlockRecord, name: str) -> float:
    """An engagement signal, never negative; a non-finite one makes scoring fail."""
    value = float(rec.signals.get(name, 0.0))
    if not math.isfinite(value):
        raise ValueError(f"signals[{name!r}] is {value!r}, expected a finite number")
    return max(0.0, value)


def _saturate(x: float, scale: float) -> float:
    """``1 - e^(-x/scale)``: 0 at 0, 0.63 at ``scale``, approaching 1."""
    return 1.0 - math.exp(-max(0.0, x) / max(scale, 1e-9))


def content_markers(rec: BlockRecord) -> dict[str, int]:
    """How often each content marker occurs in the block's title and text."""
    text = f"{rec.title}\n{rec.content}"[:_SCAN_CHARS].lower()
    return {name: len(pattern.findall(text)) for name, pattern in _MARKERS.items()}


def _hours(seconds: float) -> str:
    return f"{seconds / _HOUR:g}h"


def _cooldown_block(rec: BlockRecord, now: float, cooldown_s: float) -> str | None:
    last = rec.last_contradiction_at
    if last is None or now - last >= cooldown_s:
        return None
    return f"contradiction {(now - last) / _HOUR:.1f}h ago (cooldown {_hours(cooldown_s)})"


# ------------------------------------------------------------- composite (the composite scorer)


def _time_spread(times: list[float], c: CompositeConfig) -> float:
    """0..cap: the access span (saturating at ``spread_full``) times the share of spaced gaps.

    Five reads in one hour earn nothing; four reads over three days earn the full bonus.
    """
    if len(times) < 2:  # a spread needs two points
        return 0.0
    gap_s = c.spread_gap.total_seconds()
    spaced = sum(1 for a, b in itertools.pairwise(times) if b - a >= gap_s)
    span = times[-1] - times[0]
    full = max(c.spread_full.total_seconds(), 1e-9)
    return c.time_spread_cap * min(1.0, span / full) * spaced / (len(times) - 1)


def _access_pattern(inputs: PromotionInputs, c: CompositeConfig, out: dict[str, float]) -> float:
    rec, now = inputs.record, inputs.now
    times = sorted(t for t in inputs.access_times if t <= now)
    accesses = max(rec.access_count, len(times))
    base = min(accesses * c.access_multiplier, c.access_cap)
    spread = _time_spread(times, c)
    sessions = min(inputs.session_total * c.cross_session_bonus, c.cross_session_cap)
    if times:
        last = times[-1]
    elif rec.last_accessed_at is not None:
        last = rec.last_accessed_at
    else:
        last = rec.created_at
    half = max(c.recency_half_life.total_seconds(), 1e-9)
    recency = c.recency_floor + (1.0 - c.recency_floor) * math.pow(
        2.0, -max(0.0, now - last) / half
    )
    out["access.base"] = base
    out["access.time_spread"] = spread
    out["access.cross_session"] = sessions
    out["access.recency_factor"] = recency
    return min(10.0, (base + spread + sessions) * recency)


def _content_stability(inputs: PromotionInputs, c: CompositeConfig, out: dict[str, float]) -> float:
    rec = inputs.record
    age_h = max(0.0, inputs.now - rec.created_at) / _HOUR
    age = min(age_h / 24.0, 3.0)
    reinforcement = rec.reinforcement_count * c.reinforcement_bonus
    consistency = min(_signal(rec, "consistency"), c.consistency_cap)
    contradiction = rec.contradiction_count * c.contradiction_penalty
    out["stability.age"] = age
    out["stability.reinforcement"] = reinforcement
    out["stability.consistency"] = consistency
    out["stability.contradiction"] = contradiction
    return min(10.0, max(0.0, age + reinforcement + consistency + contradiction))


def _user_engagement(inputs: PromotionInputs, c: CompositeConfig, out: dict[str, float]) -> float:
    rec = inputs.record
    parts = {
        "engagement.confirmations": _signal(rec, "user_confirmations") * c.confirmation_bonus,
        "engagement.mentions": _signal(rec, "user_initiated_mentions") * c.user_mention_bonus,
        "engagement.corrections": _signal(rec, "user_corrections") * c.correction_bonus,
        "engagement.emotional": min(_signal(rec, "emotional_weight"), c.emotional_cap),
    }
    out.update(parts)
    return min(10.0, sum(parts.values()))


def _semantic_importance(
    inputs: PromotionInputs, c: CompositeConfig, out: dict[str, float]
) -> float:
    counts = content_markers(inputs.record)
    weights = {
        "identity": c.identity_marker_weight,
        "preference": c.preference_weight,
        "belief": c.belief_weight,
        "factual": c.factual_weight,
        "pronouns": c.pronoun_weight,
    }
    parts = {f"semantic.{name}": counts[name] * w for name, w in weights.items()}
    out.update(parts)
    return min(10.0, sum(parts.values()))


def _immediate_trigger(inputs: PromotionInputs, c: CompositeConfig) -> str | None:
    rec = inputs.record
    if _signal(rec, "user_corrections") > 0:
        return "user_correction"
    if _signal(rec, "explicit_importance") > 0:
        return "explicit_importance"
    if inputs.session_total >= c.immediate_session_count:
        return "cross_session"
    if (
        _signal(rec, "emotional_weight") >= c.emotional_trigger
        and rec.access_count >= c.minimum_access_count
    ):
        return "emotional_repeated_access"
    return None


def _fallback(inputs: PromotionInputs, cfg: PolicyConfig, error: str) -> ScoreResult:
    """The composite scorer's simple rule, used when scoring fails (the cooldown still applies)."""
    c = cfg.promotion.composite
    rec = inputs.record
    age_s = inputs.now - rec.created_at
    importance = rec.importance * 10.0  # the rule reads importance on a 0..10 scale
    min_age_s = c.fallback_age.total_seconds()
    blocked: list[str] = []
    if rec.access_count < c.fallback_access_count:
        blocked.append(f"access {rec.access_count} < {c.fallback_access_count}")
    if importance < c.fallback_importance:
        blocked.append(f"importance {importance:.1f} < {c.fallback_importance:g}")
    if rec.reinforcement_count < c.fallback_reinforcement:
        blocked.append(f"reinforcement {rec.reinforcement_count} < {c.fallback_reinforcement}")
    if age_s < min_age_s:
        blocked.append(f"age {age_s / _HOUR:.1f}h < {_hours(min_age_s)}")
    cooldown = _cooldown_block(rec, inputs.now, c.contradiction_cooldown.total_seconds())
    if cooldown:
        blocked.append(cooldown)
    return ScoreResult(
        scorer="composite",
        block_id=rec.id,
        total=0.0,  # no score: the rule decided
        threshold=c.threshold,
        breakdown={
            "fallback.access_count": float(rec.access_count),
            "fallback.importance": importance,
            "fallback.reinforcement": float(rec.reinforcement_count),
            "fallback.age_hours": age_s / _HOUR,
        },
        candidate=not blocked,
        blocked=blocked,
        fallback_used=True,
        error=error,
    )


def score_composite(inputs: PromotionInputs, cfg: PolicyConfig) -> ScoreResult:
    """The composite scorer's four-part score, 0..10; candidate at >= 7.0 once the minimums hold.

    access pattern 30 %, content stability 25 %, user engagement 25 %, semantic
    importance 20 %. Minimums: age >= 6 h, access >= 3, no contradiction within 24 h.
    An immediate trigger (user correction, explicit importance, >= 3 sessions, emotional
    weight with repeated access) makes a candidate whatever the score, but not within
    the contradiction cooldown. When scoring fails, the composite scorer's fallback rule decides.
    """
    c = cfg.promotion.composite
    rec, now = inputs.record, inputs.now
    breakdown: dict[str, float] = {}
    try:
        access = _access_pattern(inputs, c, breakdown)
        stability = _content_stability(inputs, c, breakdown)
        engagement = _user_engagement(inputs, c, breakdown)
        semantic = _semantic_importance(inputs, c, breakdown)
        trigger = _immediate_trigger(inputs, c)
    except (ArithmeticError, TypeError, ValueError) as err:
        return _fallback(inputs, cfg, f"{type(err).__name__}: {err}")
    breakdown["access_pattern"] = access
    breakdown["content_stability"] = stability
    breakdown["user_engagement"] = engagement
    breakdown["semantic_importance"] = semantic
    total = (
        access * c.access_pattern_weight
        + stability * c.content_stability_weight
        + engagement * c.user_engagement_weight
        + semantic * c.semantic_importance_weight
    )

    blocked: list[str] = []
    cooldown = _cooldown_block(rec, now, c.contradiction_cooldown.total_seconds())
    if cooldown:
        blocked.append(cooldown)
    if trigger is None:
        age_s = now - rec.created_at
        if age_s < c.minimum_age.total_seconds():
            blocked.append(f"age {age_s / _HOUR:.1f}h < {_hours(c.minimum_age.total_seconds())}")
        if rec.access_count < c.minimum_access_count:
            blocked.append(f"access {rec.access_count} < {c.minimum_access_count}")
        candidate = total >= c.threshold and not blocked
    else:
        candidate = not blocked
    return ScoreResult(
        scorer="composite",
        block_id=rec.id,
        total=total,
        threshold=c.threshold,
        breakdown=breakdown,
        candidate=candidate,
        trigger=trigger,
        blocked=blocked,
    )


# ------------------------------------------------------------ multi-axis (the multi-axis scorer)


def score_multi_axis(inputs: PromotionInputs, cfg: PolicyConfig) -> ScoreResult:
    """Six axes, each 0..1 through a saturating curve; a weighted sum in 0..1.

    frequency     accesses, ``1 - e^(-n/5)``
    relevance     reliability x importance (already 0..1)
    diversity     sessions beyond the first, ``1 - e^(-(s-1)/2)``
    recency       time since the last access (or creation), ``e^(-t/3d)``
    consolidation survived validations net of contradictions, ``1 - e^(-(r-c)/2)``
    conceptual    tags plus content markers, ``1 - e^(-k/3)``

    Candidate at >= 0.5, never inside the promotion cooldown after a contradiction.
    """
    m = cfg.promotion.multi_axis
    rec, now = inputs.record, inputs.now
    times = [t for t in inputs.access_times if t <= now]
    accesses = max(rec.access_count, len(times))
    if times:
        last = max(times)
    elif rec.last_accessed_at is not None:
        last = rec.last_accessed_at
    else:
        last = rec.created_at
    markers = content_markers(rec)
    raw: dict[Axis, float] = {
        "frequency": float(accesses),
        "relevance": rec.reliability * rec.importance,
        "diversity": float(max(0, inputs.session_total - 1)),
        "recency": max(0.0, now - last),
        "consolidation": float(max(0, rec.reinforcement_count - rec.contradiction_count)),
        "conceptual": float(len(rec.tags) + sum(markers.values()) - markers["pronouns"]),
    }
    axes: dict[Axis, float] = {
        "frequency": _saturate(raw["frequency"], m.frequency_scale),
        "relevance": min(1.0, max(0.0, raw["relevance"])),
        "diversity": _saturate(raw["diversity"], m.diversity_scale),
        "recency": math.exp(-raw["recency"] / max(m.recency_scale.total_seconds(), 1e-9)),
        "consolidation": _saturate(raw["consolidation"], m.consolidation_scale),
        "conceptual": _saturate(raw["conceptual"], m.conceptual_scale),
    }
    breakdown: dict[str, float] = {}
    for axis, value in axes.items():
        breakdown[axis] = value
        breakdown[f"{axis}.input"] = raw[axis]
    total = min(1.0, sum(m.weights[axis] * value for axis, value in axes.items()))
    blocked: list[str] = []
    cooldown = _cooldown_block(rec, now, cfg.evidence.promotion_cooldown.total_seconds())
    if cooldown:
        blocked.append(cooldown)
    return ScoreResult(
        scorer="multi_axis",
        block_id=rec.id,
        total=total,
        threshold=m.threshold,
        breakdown=breakdown,
        candidate=total >= m.threshold and not blocked,
        blocked=blocked,
    )


def score(inputs: PromotionInputs, cfg: PolicyConfig) -> ScoreResult:
    """Score with the scorer the config names (``promotion.scorer``)."""
    if cfg.promotion.scorer == "multi_axis":
        return score_multi_axis(inputs, cfg)
    return score_composite(inputs, cfg)


# --------------------------------------------------------------- consolidation pass


def _is_ephemeral(rec: BlockRecord) -> bool:
    return rec.volatility == _EPHEMERAL_VOLATILITY or rec.info_type == _EPHEMERAL_INFO


def _lasting_truth_refusals(rec: BlockRecord, now: float, cfg: PolicyConfig) -> list[str]:
    """What keeps a block out of long-term memory whatever its score."""
    reasons: list[str] = []
    if rec.tier != _SHORT_TERM:
        reasons.append(f"tier is {rec.tier}, not short_term")
    if rec.state in _GONE:
        reasons.append(f"state is {rec.state}")
    elif is_stale(rec, now):
        reasons.append("stale")
    if rec.reliability < cfg.promotion.min_reliability:
        reasons.append(f"reliability {rec.reliability:.2f} < {cfg.promotion.min_reliability:g}")
    if _is_ephemeral(rec):
        reasons.append("ephemeral")
    elif rec.info_type == _DYNAMIC and rec.volatility == _HIGH:
        reasons.append("dynamic with high volatility")
    if rec.flapping:
        reasons.append("flapping")
    cooldown = _cooldown_block(rec, now, cfg.evidence.promotion_cooldown.total_seconds())
    if cooldown:
        reasons.append(cooldown)
    return reasons


def consolidation_verdict(
    rec: BlockRecord, result: ScoreResult, now: float, cfg: PolicyConfig
) -> tuple[bool, list[str]]:
    """The consolidation pass's final call on short_term -> long_term.

    Promotes a candidate unless it is stale, below reliability 0.7, ephemeral, dynamic
    with high volatility, flapping, refuted or archived, within the contradiction
    cooldown, or not short_term. Returns ``(promote, reasons_against)``; the caller
    writes the tier change.
    """
    reasons = _lasting_truth_refusals(rec, now, cfg)
    if not result.candidate:
        why = "; ".join(result.blocked) or f"score {result.total:.2f} < {result.threshold:g}"
        reasons.append(f"not a candidate ({why})")
    return not reasons, reasons


# ---------------------------------------------------------------- core (the core rule)


def record_access(rec: BlockRecord, now: float, *, new_session: bool, cfg: PolicyConfig) -> bool:
    """Count one retrieval and check core promotion; True when the block became core.

    Stability starts at 0.37 and grows only with *spaced* retrievals: one less than
    ``core.spacing`` (1 h) after the previous access (or creation) adds nothing; a spaced
    one moves stability ``stability_gain`` (0.2) of the way to 1. A burst of reads in
    one sitting therefore cannot make a block core.
    """
    core = cfg.promotion.core
    previous = rec.last_accessed_at if rec.last_accessed_at is not None else rec.created_at
    rec.access_count += 1
    rec.recent_access_count += 1
    if new_session:
        rec.session_count += 1
    if rec.last_accessed_at is None or now > rec.last_accessed_at:
        rec.last_accessed_at = now
    rec.stability = max(rec.stability, core.initial_stability)
    if now - previous >= core.spacing.total_seconds():
        rec.stability += core.stability_gain * (1.0 - rec.stability)
    return check_core_promotion(rec, cfg)


def core_promotion_blockers(rec: BlockRecord, cfg: PolicyConfig) -> list[str]:
    """Why the block is not (yet) core; empty when it qualifies.

    Only ``long_term`` blocks are considered: a ``short_term`` block must first pass the
    consolidation pass, so usage alone never skips it straight to core.
    """
    core = cfg.promotion.core
    if rec.tier != _LONG_TERM:
        return [f"tier is {rec.tier}, not long_term"]
    reasons: list[str] = []
    if _is_ephemeral(rec):
        reasons.append("ephemeral")
    if rec.state in _DOUBTFUL:
        reasons.append(f"state is {rec.state}")
    if rec.flapping:
        reasons.append("flapping")
    if rec.access_count < core.access_threshold:
        reasons.append(f"access {rec.access_count} < {core.access_threshold}")
    if rec.stability < core.stability_threshold:
        reasons.append(f"stability {rec.stability:.3f} < {core.stability_threshold:g}")
    if rec.session_count < core.session_threshold:
        reasons.append(f"sessions {rec.session_count} < {core.session_threshold}")
    return reasons


def check_core_promotion(rec: BlockRecord, cfg: PolicyConfig) -> bool:
    """Make a qualifying long_term block core (access >= 10, stability >= 0.85, sessions >= 3)."""
    if core_promotion_blockers(rec, cfg):
        return False
    rec.tier = _CORE
    return True


def demote_core(rec: BlockRecord, cfg: PolicyConfig) -> bool:
    """Demote a core block that was contradicted or updated; True when it was core.

    It drops to ``long_term`` (its retention floor falls from 0.60 to 0.02) and its
    stability falls back to the initial value, so it has to earn core again through
    spaced retrievals instead of being re-promoted on the next read.
    """
    if rec.tier != _CORE:
        return False
    rec.tier = _LONG_TERM
    rec.stability = min(rec.stability, cfg.promotion.core.initial_stability)
    return True
