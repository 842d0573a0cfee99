# Copyright 2026 memwarden contributors. MIT License.
"""Every threshold the rules use, with the documented numbers as defaults."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memwarden.memory._durations import Duration, parse_duration
from memwarden.memory._model import Volatility

__all__ = [
    "CompositeConfig",
    "CoreConfig",
    "DecayConfig",
    "EvidenceConfig",
    "HealthConfig",
    "MultiAxisConfig",
    "PolicyConfig",
    "PromotionConfig",
    "RankingConfig",
    "StalenessConfig",
]

Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]

_FROZEN = ConfigDict(extra="forbid", frozen=True)


def _per_volatility(
    low: str, medium: str, high: str, ephemeral: str
) -> dict[Volatility, timedelta]:
    return {
        Volatility.LOW: parse_duration(low),
        Volatility.MEDIUM: parse_duration(medium),
        Volatility.HIGH: parse_duration(high),
        Volatility.EPHEMERAL: parse_duration(ephemeral),
    }


class EvidenceConfig(BaseModel):
    """What an event does to a block."""

    model_config = _FROZEN

    sensor_reliability: dict[str, Unit] = Field(
        default_factory=lambda: {
            "code_test": 1.0,
            "tests": 1.0,
            "http": 0.95,
            "api": 0.95,
            "review": 0.95,
            "human": 0.95,
            "runtime": 0.9,
            "fs": 0.9,
        },
        description="Reliability of a confirmation per sensor, when the event carries none.",
    )
    default_sensor_reliability: Unit = 0.9
    source_reliability: dict[str, Unit] = Field(
        default_factory=lambda: {"agent": 0.6, "user": 0.8, "human": 0.8, "import": 0.6},
        description="Initial reliability of an unverified block, by its source.",
    )
    default_source_reliability: Unit = 0.6
    refute_factor: Unit = 0.3
    soft_refute_factor: Unit = 0.7
    changed_factor: Unit = 0.7
    hard_refutation_after: Annotated[int, Field(ge=1)] = 3
    authoritative_sensors: frozenset[str] = frozenset({"review"})
    authoritative_reliability: Unit = Field(
        default=1.0,
        description="A refutation that carries at least this reliability (a code test's "
        "1.0) is hard at once, like one from an authoritative sensor.",
    )
    error_escalation_after: Annotated[int, Field(ge=1)] = 3
    promotion_cooldown: Duration = timedelta(hours=24)
    flap_window: Annotated[int, Field(ge=3, le=64)] = 10
    flap_high: Unit = 0.5
    flap_low: Unit = 0.25
    flap_min_transitions: Annotated[int, Field(ge=1)] = Field(
        default=3,
        description="Changes between consecutive results needed in the window before a "
        "block can flag flapping: one change and its restore (2) is not flapping.",
    )
    retry_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        default=1 / 720,
        description="A soft refutation's re-check waits this share of the block's validity "
        "window (Nagios' retry_interval), clamped to retry_min..retry_max.",
    )
    retry_min: Duration = timedelta(seconds=5)
    retry_max: Duration = timedelta(minutes=5)

    @model_validator(mode="after")
    def _hysteresis(self) -> EvidenceConfig:
        if self.flap_low >= self.flap_high:
            raise ValueError("flap_low must be below flap_high (hysteresis)")
        if self.retry_min > self.retry_max:
            raise ValueError("retry_min must not exceed retry_max")
        return self

    def retry_interval_s(self, window_s: float) -> float:
        """How long a soft refutation's re-check waits, for a block with this window."""
        low, high = self.retry_min.total_seconds(), self.retry_max.total_seconds()
        return min(high, max(low, window_s * self.retry_fraction))


class StalenessConfig(BaseModel):
    """When a block stops being trusted, and how revalidation is paced."""

    model_config = _FROZEN

    validity_window: dict[Volatility, Duration] = Field(
        default_factory=lambda: _per_volatility("180d", "7d", "6h", "10m")
    )
    low_reliability: Unit = 0.4
    warn_reliability: Unit = 0.7
    downtime_reset_fraction: Unit = 0.618
    spread_window: Duration = timedelta(minutes=10)
    max_requests_per_tick: Annotated[int, Field(ge=1)] = 200
    revalidation_timeout: Duration = timedelta(seconds=30)


class DecayConfig(BaseModel):
    """Retention, archival and the heuristic cycle (docs/RULES.md)."""

    model_config = _FROZEN

    half_life: dict[Volatility, Duration] = Field(
        default_factory=lambda: _per_volatility("180d", "14d", "12h", "10m")
    )
    stale_half_life_factor: Positive = 0.5
    core_floor: Unit = 0.60
    floor: Unit = 0.02
    archive_below: Unit = 0.05
    bump_high_accesses: Annotated[int, Field(ge=1)] = 10
    bump_high: Unit = 0.15
    bump_low_accesses: Annotated[int, Field(ge=1)] = 5
    bump_low: Unit = 0.05
    extend_factor: Annotated[float, Field(ge=1.0)] = 1.3
    extend_min_accesses: Annotated[int, Field(ge=1)] = 5
    max_half_life_episodic: Duration = timedelta(days=90)
    max_half_life_semantic: Duration = timedelta(days=180)
    chunk_rows: Annotated[int, Field(ge=100)] = 50_000


class CompositeConfig(BaseModel):
    """The default short-term → long-term scorer (the composite scorer, docs/RULES.md)."""

    model_config = _FROZEN

    access_pattern_weight: Unit = 0.30
    content_stability_weight: Unit = 0.25
    user_engagement_weight: Unit = 0.25
    semantic_importance_weight: Unit = 0.20
    threshold: Annotated[float, Field(ge=0, le=10)] = 7.0
    minimum_age: Duration = timedelta(hours=6)
    minimum_access_count: Annotated[int, Field(ge=0)] = 3
    contradiction_cooldown: Duration = timedelta(hours=24)
    access_multiplier: float = 1.5
    access_cap: float = 6.0
    cross_session_bonus: float = 0.5
    cross_session_cap: float = 2.0
    time_spread_cap: float = 2.0
    contradiction_penalty: float = -2.0
    reinforcement_bonus: float = 1.0
    correction_bonus: float = 3.0
    confirmation_bonus: float = 2.0
    user_mention_bonus: float = 1.5
    identity_marker_weight: float = 2.5
    preference_weight: float = 2.0
    belief_weight: float = 2.0
    factual_weight: float = 1.5
    pronoun_weight: float = 0.5
    immediate_session_count: Annotated[int, Field(ge=1)] = 3
    fallback_access_count: Annotated[int, Field(ge=0)] = 7
    fallback_importance: Annotated[float, Field(ge=0, le=10)] = 5.0
    fallback_reinforcement: Annotated[int, Field(ge=0)] = 3
    fallback_age: Duration = timedelta(hours=24)
    # Not numbered in the composite scorer; our choices (docs/RULES.md, "Composite scorer").
    spread_gap: Duration = timedelta(hours=1)  # a gap this long counts as "distributed"
    spread_full: Duration = timedelta(days=3)  # an access span this long earns the full bonus
    recency_half_life: Duration = timedelta(days=7)  # access score x recency factor
    recency_floor: Unit = 0.5  # the recency factor never drops below this
    consistency_cap: float = 2.0  # signals["consistency"] is clamped to 0..cap
    emotional_cap: float = 2.0  # signals["emotional_weight"] is clamped to 0..cap
    emotional_trigger: float = 1.5  # emotional weight that, with repeated access, fast-tracks

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> CompositeConfig:
        total = (
            self.access_pattern_weight
            + self.content_stability_weight
            + self.user_engagement_weight
            + self.semantic_importance_weight
        )
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"composite weights must sum to 1.0, they sum to {total:g}")
        return self


Axis = Literal["frequency", "relevance", "diversity", "recency", "consolidation", "conceptual"]


def _default_axis_weights() -> dict[Axis, float]:
    return {
        "frequency": 0.18,
        "relevance": 0.20,
        "diversity": 0.14,
        "recency": 0.15,
        "consolidation": 0.18,
        "conceptual": 0.15,
    }


class MultiAxisConfig(BaseModel):
    """The six-axis scorer (docs/RULES.md): weights must sum to one or the config is rejected."""

    model_config = _FROZEN

    weights: dict[Axis, Unit] = Field(default_factory=_default_axis_weights)
    threshold: Unit = 0.5
    # Each axis is 1 - exp(-x / scale) of its raw measure (see _promotion.py, docs/RULES.md).
    frequency_scale: Positive = 5.0  # accesses
    diversity_scale: Positive = 2.0  # sessions beyond the first
    recency_scale: Duration = timedelta(days=3)  # time since the last access (exp decay)
    consolidation_scale: Positive = 2.0  # net survived validations
    conceptual_scale: Positive = 3.0  # tags + content markers

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> MultiAxisConfig:
        axes = {"frequency", "relevance", "diversity", "recency", "consolidation", "conceptual"}
        missing = axes - set(self.weights)
        if missing:
            raise ValueError(f"multi_axis weights miss {sorted(missing)}")
        total = sum(self.weights.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"multi_axis weights must sum to 1.0, they sum to {total:g}")
        return self


class CoreConfig(BaseModel):
    """long_term → core on retrieval (the core rule, docs/RULES.md)."""

    model_config = _FROZEN

    access_threshold: Annotated[int, Field(ge=1)] = 10
    stability_threshold: Unit = 0.85
    session_threshold: Annotated[int, Field(ge=1)] = 3
    initial_stability: Unit = 0.37
    spacing: Duration = timedelta(hours=1)
    stability_gain: Unit = 0.2  # a spaced access moves stability this share of the way to 1


class PromotionConfig(BaseModel):
    """Which scorer makes candidates, and what the consolidation pass refuses."""

    model_config = _FROZEN

    scorer: Literal["composite", "multi_axis"] = "composite"
    composite: CompositeConfig = Field(default_factory=CompositeConfig)
    multi_axis: MultiAxisConfig = Field(default_factory=MultiAxisConfig)
    core: CoreConfig = Field(default_factory=CoreConfig)
    min_reliability: Unit = 0.7


class HealthConfig(BaseModel):
    """The 0-100 health score and its warnings (the health and self-tuning rules plus ours)."""

    model_config = _FROZEN

    low_retention: Unit = 0.3
    low_retention_min_blocks: int = 10
    low_access: float = 0.5
    low_access_min_blocks: int = 20
    backlog_warning: int = 1000


class RankingConfig(BaseModel):
    """relevance * freshness * reliability * retention, over the BM25 top candidates."""

    model_config = _FROZEN

    fresh: Unit = 1.0
    unverified: Unit = 0.85
    stale: Unit = 0.5
    refuted: Unit = 0.05
    candidates: Annotated[int, Field(ge=10, le=5000)] = 200


class PolicyConfig(BaseModel):
    """All rule settings; the ``[rules]`` table of the daemon config."""

    model_config = _FROZEN

    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig)
    staleness: StalenessConfig = Field(default_factory=StalenessConfig)
    decay: DecayConfig = Field(default_factory=DecayConfig)
    promotion: PromotionConfig = Field(default_factory=PromotionConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    ranking: RankingConfig = Field(default_factory=RankingConfig)

    def window_s(self, volatility: str) -> float:
        return self.staleness.validity_window[Volatility(volatility)].total_seconds()

    def half_life_s(self, volatility: str) -> float:
        return self.decay.half_life[Volatility(volatility)].total_seconds()

    def sensor_reliability(self, sensor: str) -> float:
        table = self.evidence.sensor_reliability
        if sensor in table:
            return table[sensor]
        kind = sensor.split(".", 1)[0]
        return table.get(kind, self.evidence.default_sensor_reliability)

    def source_reliability(self, source: str) -> float:
        return self.evidence.source_reliability.get(
            source, self.evidence.default_source_reliability
        )
