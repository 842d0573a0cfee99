"""The rules the store evaluates set-based in SQL, next to each other.

Each function returns an SQL expression over one ``blocks`` row that mirrors a pure rule
of :mod:`memwarden.memory.policy`; search, the decay cycle and the health query use
them, and ``tests/memory/test_maintenance.py`` compares them with the rules. The
expressions use named parameters; :func:`rule_params` gives their values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "effective_half_life_sql",
    "last_touched_sql",
    "retention_sql",
    "rule_params",
    "stale_sql",
]


def _col(table: str, name: str) -> str:
    return f"{table}.{name}" if table else name


def stale_sql(table: str = "b") -> str:
    """Twin of ``policy.is_stale``: stored ``stale``, or fresh/unverified past ``stale_at``."""
    state, stale_at = _col(table, "state"), _col(table, "stale_at")
    return (
        f"({state} = 'stale' OR ({state} IN ('fresh', 'unverified')"
        f" AND coalesce({stale_at} <= :now, 0)))"
    )


def last_touched_sql(table: str = "b") -> str:
    """Twin of ``BlockRecord.last_touched``: the later of creation, validation and access."""
    created = _col(table, "created_at")
    return (
        f"max({created}, coalesce({_col(table, 'validated_at')}, {created}),"
        f" coalesce({_col(table, 'last_accessed_at')}, {created}))"
    )


def effective_half_life_sql(table: str = "b") -> str:
    """Twin of ``policy.effective_half_life_s``: the block's half-life, scaled while stale."""
    return (
        f"({_col(table, 'half_life_s')}"
        f" * CASE WHEN {stale_sql(table)} THEN :stale_factor ELSE 1.0 END)"
    )


def retention_sql(table: str = "b") -> str:
    """Twin of ``policy.retention``: ``max(floor, importance * 2^(-age / half_life_eff))``.

    Age counts from the last touch; no age keeps the full importance; a zero half-life
    forgets at once (the floor). Parameters ``:now``, ``:floor``, ``:core_floor``,
    ``:stale_factor``.
    """
    touched = last_touched_sql(table)
    half_life = effective_half_life_sql(table)
    importance = _col(table, "importance")
    return (
        f"max(CASE WHEN {_col(table, 'tier')} = 'core' THEN :core_floor ELSE :floor END,"
        f" CASE WHEN :now <= {touched} THEN {importance}"
        f" WHEN {half_life} <= 0.0 THEN 0.0"
        f" ELSE {importance} * pow(2.0, ({touched} - :now) / {half_life}) END)"
    )


def rule_params(cfg: PolicyConfig, now: float) -> dict[str, Any]:
    """Values for the named parameters the expressions above use."""
    decay = cfg.decay
    return {
        "now": now,
        "floor": decay.floor,
        "core_floor": decay.core_floor,
        "stale_factor": decay.stale_half_life_factor,
    }
