# Copyright 2026 memwarden contributors. MIT License.
"""The rules: pure functions over a block record and an explicit ``now``.

Nothing here does I/O or reads the clock. Every threshold lives in :class:`PolicyConfig`,
whose defaults are the documented numbers; ``docs/RULES.md`` explains each rule.
"""

from __future__ import annotations

from memwarden.memory.policy._config import (
    CompositeConfig,
    CoreConfig,
    DecayConfig,
    EvidenceConfig,
    HealthConfig,
    MultiAxisConfig,
    PolicyConfig,
    PromotionConfig,
    RankingConfig,
    StalenessConfig,
)
from memwarden.memory.policy._decay import (
    archive_reason,
    effective_half_life_s,
    heuristic_cycle,
    is_stale,
    retention,
)
from memwarden.memory.policy._evidence import (
    Effect,
    apply_event,
    current_stale_reasons,
    effective_state,
    flap_score,
    mark_stale,
    transitions,
)
from memwarden.memory.policy._health import (
    HEALTH_PENALTIES,
    HealthInputs,
    HealthReport,
    HealthReportDict,
    HealthWarning,
    HealthWarningDict,
    health_report,
)
from memwarden.memory.policy._promotion import (
    PromotionInputs,
    ScoreResult,
    check_core_promotion,
    consolidation_verdict,
    content_markers,
    core_promotion_blockers,
    demote_core,
    record_access,
    score,
    score_composite,
    score_multi_axis,
)
from memwarden.memory.policy._schedule import (
    next_check_in,
    plan_revalidations,
    put_back_in,
    take_due,
)

__all__ = [
    "HEALTH_PENALTIES",
    "CompositeConfig",
    "CoreConfig",
    "DecayConfig",
    "Effect",
    "EvidenceConfig",
    "HealthConfig",
    "HealthInputs",
    "HealthReport",
    "HealthReportDict",
    "HealthWarning",
    "HealthWarningDict",
    "MultiAxisConfig",
    "PolicyConfig",
    "PromotionConfig",
    "PromotionInputs",
    "RankingConfig",
    "ScoreResult",
    "StalenessConfig",
    "apply_event",
    "archive_reason",
    "check_core_promotion",
    "consolidation_verdict",
    "content_markers",
    "core_promotion_blockers",
    "current_stale_reasons",
    "demote_core",
    "effective_half_life_s",
    "effective_state",
    "flap_score",
    "health_report",
    "heuristic_cycle",
    "is_stale",
    "mark_stale",
    "next_check_in",
    "plan_revalidations",
    "put_back_in",
    "record_access",
    "retention",
    "score",
    "score_composite",
    "score_multi_axis",
    "take_due",
    "transitions",
]
