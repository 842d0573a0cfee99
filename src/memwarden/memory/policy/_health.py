# Copyright 2026 memwarden contributors. MIT License.
"""The 0-100 health score and its categorized warnings (docs/RULES.md, "Health").

The score starts at 100 and each warning takes off its penalty (:data:`HEALTH_PENALTIES`);
it never goes below 0. Status: green at >= 80, amber at >= 50, red below. Every
critical warning costs more than 50 points, so a critical alone turns the status red.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from typing_extensions import TypedDict  # pydantic validates these on Python 3.11 too

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from memwarden.memory.policy._config import PolicyConfig

__all__ = [
    "COVERAGE_MAX_SOURCES",
    "HEALTH_PENALTIES",
    "CoverageDict",
    "CoverageShareDict",
    "HealthInputs",
    "HealthReport",
    "HealthReportDict",
    "HealthWarning",
    "HealthWarningDict",
    "coverage_of",
    "health_report",
]

Severity = Literal["critical", "warning", "info"]

HEALTH_PENALTIES: Mapping[str, int] = MappingProxyType(
    {
        "all_stale": 60,  # critical: every block is stale
        "sensors_down": 60,  # critical: every configured sensor is failing
        "majority_stale": 25,  # warning: more than half of the blocks are stale
        "low_retention": 15,  # warning: average retention below 0.3 (more than 10 blocks)
        "sensors_failing": 15,  # warning: some sensors are failing
        "revalidation_backlog": 10,  # warning: more queued revalidations than backlog_warning
        "low_access": 5,  # info: average access count below 0.5 (more than 20 blocks)
        "pending_reviews": 5,  # info: human reviews are waiting
        "flapping": 5,  # info: blocks alternate between confirmed and refuted
    }
)
"""Points each warning category takes off the score."""

_GREEN = 80


class HealthWarningDict(TypedDict):
    """A :class:`HealthWarning` as JSON."""

    category: str
    severity: Severity
    message: str


class HealthReportDict(TypedDict):
    """A :class:`HealthReport` as JSON (the start of ``GET /v1/health``'s answer)."""

    score: int
    status: Literal["green", "amber", "red"]
    warnings: list[HealthWarningDict]


_AMBER = 50


@dataclass(slots=True, frozen=True)
class HealthWarning:
    """One finding: a snake_case category, how bad it is, and what to do about it."""

    category: str
    severity: Severity
    message: str

    def as_dict(self) -> HealthWarningDict:
        return {"category": self.category, "severity": self.severity, "message": self.message}


@dataclass(slots=True)
class HealthInputs:
    """Aggregates the store computes (blocks that are not archived) for the report."""

    total: int
    by_state: Mapping[str, int] = field(default_factory=dict)
    avg_retention: float = 1.0
    avg_access_count: float = 0.0
    stale_share: float = 0.0  # 0..1, stale as of now (stored state or past stale_at)
    failing_sensors: list[str] = field(default_factory=list)
    sensors_total: int = 0
    revalidation_backlog: int = 0
    pending_reviews: int = 0
    flapping_count: int = 0


@dataclass(slots=True)
class HealthReport:
    """The score, its colour, and the warnings that explain it (worst first)."""

    score: int
    status: Literal["green", "amber", "red"]
    warnings: list[HealthWarning]

    def as_dict(self) -> HealthReportDict:
        return {
            "score": self.score,
            "status": self.status,
            "warnings": [w.as_dict() for w in self.warnings],
        }


def _stale_warnings(inputs: HealthInputs) -> list[HealthWarning]:
    if inputs.total <= 0:
        return []
    if inputs.stale_share >= 1.0:
        return [
            HealthWarning(
                "all_stale",
                "critical",
                f"all {inputs.total} blocks are stale: are the sensors running?",
            )
        ]
    if inputs.stale_share > 0.5:  # the health and self-tuning rules: "majority", not a tunable
        return [
            HealthWarning(
                "majority_stale",
                "warning",
                f"{inputs.stale_share:.0%} of {inputs.total} blocks are stale",
            )
        ]
    return []


def _sensor_warnings(inputs: HealthInputs) -> list[HealthWarning]:
    failing = sorted(inputs.failing_sensors)
    if not failing:
        return []
    names = ", ".join(failing)
    if inputs.sensors_total > 0 and len(failing) >= inputs.sensors_total:
        return [HealthWarning("sensors_down", "critical", f"every sensor is failing: {names}")]
    return [HealthWarning("sensors_failing", "warning", f"{len(failing)} failing: {names}")]


def health_report(inputs: HealthInputs, cfg: PolicyConfig) -> HealthReport:
    """Score the memory's health 0..100 and say why (docs/RULES.md)."""
    h = cfg.health
    warnings = _stale_warnings(inputs) + _sensor_warnings(inputs)
    if inputs.total > h.low_retention_min_blocks and inputs.avg_retention < h.low_retention:
        warnings.append(
            HealthWarning(
                "low_retention",
                "warning",
                f"average retention {inputs.avg_retention:.2f} < {h.low_retention:g}",
            )
        )
    if inputs.revalidation_backlog > h.backlog_warning:
        warnings.append(
            HealthWarning(
                "revalidation_backlog",
                "warning",
                f"{inputs.revalidation_backlog} revalidations queued (> {h.backlog_warning})",
            )
        )
    if inputs.total > h.low_access_min_blocks and inputs.avg_access_count < h.low_access:
        warnings.append(
            HealthWarning(
                "low_access",
                "info",
                f"average access count {inputs.avg_access_count:.2f} < {h.low_access:g}",
            )
        )
    if inputs.pending_reviews > 0:
        warnings.append(
            HealthWarning(
                "pending_reviews", "info", f"{inputs.pending_reviews} human reviews pending"
            )
        )
    if inputs.flapping_count > 0:
        warnings.append(
            HealthWarning("flapping", "info", f"{inputs.flapping_count} blocks are flapping")
        )
    score = max(0, 100 - sum(HEALTH_PENALTIES[w.category] for w in warnings))
    if score >= _GREEN:
        status: Literal["green", "amber", "red"] = "green"
    elif score >= _AMBER:
        status = "amber"
    else:
        status = "red"
    return HealthReport(score=score, status=status, warnings=warnings)


COVERAGE_MAX_SOURCES = 20  # sources shown by name; the others are summed as "(other)"
OTHER_SOURCES = "(other)"


class CoverageShareDict(TypedDict):
    """Of ``live`` facts (not archived), ``checkable`` have a binding whose sensor runs;
    ``share`` is their ratio (``None`` when there are no live facts)."""

    live: int
    checkable: int
    share: float | None


class CoverageDict(CoverageShareDict):
    """The share of memory that can be checked at all, overall and by source and tier."""

    by_source: dict[str, CoverageShareDict]
    by_tier: dict[str, CoverageShareDict]


def _share(live: int, checkable: int) -> CoverageShareDict:
    return {
        "live": live,
        "checkable": checkable,
        "share": round(checkable / live, 4) if live else None,
    }


def coverage_of(
    rows: Iterable[tuple[str, str, int, int]], *, max_sources: int = COVERAGE_MAX_SOURCES
) -> CoverageDict:
    """Coverage from ``(source, tier, live, checkable)`` counts (one grouped query's rows).

    ``source`` is free text a caller chose: the ``max_sources`` with the most live facts
    are shown by name, the rest summed under ``"(other)"``, so the answer (and the metric
    labels made from it) stays bounded whatever callers write.
    """
    sources: dict[str, list[int]] = {}
    tiers: dict[str, list[int]] = {}
    for source, tier, live, checkable in rows:
        for key, into in ((source, sources), (tier, tiers)):
            counts = into.setdefault(key, [0, 0])
            counts[0] += live
            counts[1] += checkable
    ranked = sorted(sources.items(), key=lambda kv: (-kv[1][0], kv[0]))
    shown = dict(ranked[:max_sources])
    if len(ranked) > max_sources:
        rest = ranked[max_sources:]
        shown[OTHER_SOURCES] = [sum(c[0] for _, c in rest), sum(c[1] for _, c in rest)]
    live = sum(c[0] for c in tiers.values())
    checkable = sum(c[1] for c in tiers.values())
    return {
        **_share(live, checkable),
        "by_source": {k: _share(*c) for k, c in sorted(shown.items())},
        "by_tier": {k: _share(*c) for k, c in sorted(tiers.items())},
    }
