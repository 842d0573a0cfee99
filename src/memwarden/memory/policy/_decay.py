# Copyright 2026 memwarden contributors. MIT License.
"""Retention, archival and the heuristic cycle (docs/RULES.md).

``retention = max(floor, importance * 2 ** (-age / half_life))``. Age counts from the
block's last touch (the later of validation, access and creation); the half-life is the
block's own (it starts at its volatility's default and grows in the heuristic cycle) and
is halved while the block is stale. The store computes the same formula set-based in
SQL and tests it against :func:`retention`, so keep the two in step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from memwarden.memory._model import BlockState, Category, Tier, Volatility

if TYPE_CHECKING:
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy._config import PolicyConfig

__all__ = [
    "archive_reason",
    "archive_reason_text",
    "effective_half_life_s",
    "heuristic_cycle",
    "is_stale",
    "retention",
    "retention_of",
]

# Plain strings on the hot path: enum attribute access costs more than the arithmetic.
_STALE = BlockState.STALE.value
_ARCHIVED = BlockState.ARCHIVED.value
_FRESHNESS_STATES = frozenset({BlockState.FRESH.value, BlockState.UNVERIFIED.value})
_CORE = Tier.CORE.value
_EPISODIC = Category.EPISODIC.value
_EPHEMERAL = Volatility.EPHEMERAL.value


def is_stale(rec: BlockRecord, now: float) -> bool:
    """Whether the block counts as stale at ``now`` (stored state, or past ``stale_at``)."""
    if rec.state == _STALE:
        return True
    return rec.state in _FRESHNESS_STATES and rec.stale_at is not None and rec.stale_at <= now


def effective_half_life_s(rec: BlockRecord, now: float, cfg: PolicyConfig) -> float:
    """The half-life that applies at ``now``: the block's own, halved while it is stale."""
    return _half_life(rec.half_life_s, is_stale(rec, now), cfg)


def _half_life(half_life_s: float, stale: bool, cfg: PolicyConfig) -> float:  # noqa: FBT001
    """A half-life of ``half_life_s`` as it applies: shortened while the block is stale."""
    return half_life_s * cfg.decay.stale_half_life_factor if stale else half_life_s


def retention(rec: BlockRecord, now: float, cfg: PolicyConfig) -> float:
    """How much of the block is kept at ``now``, in ``floor..importance``.

    Never rises while time passes without an event or an access: the age only grows and
    the half-life only shrinks (when the block turns stale).
    """
    return retention_of(
        rec.tier, rec.importance, rec.last_touched(), rec.half_life_s, is_stale(rec, now), now, cfg
    )


def retention_of(  # noqa: PLR0917 - a row's columns, on a search's hot path
    tier: str,
    importance: float,
    touched: float,
    half_life_s: float,
    stale: bool,  # noqa: FBT001
    now: float,
    cfg: PolicyConfig,
) -> float:
    """:func:`retention` from the columns it reads (``touched``: the block's
    ``last_touched()``; ``stale``: whether it is stale at ``now``), for a caller that
    holds a row and no record (PostgreSQL's search ranks its candidates with it)."""
    floor = cfg.decay.core_floor if tier == _CORE else cfg.decay.floor
    age = now - touched
    if age <= 0.0:
        return max(floor, importance)
    half_life = _half_life(half_life_s, stale, cfg)
    if half_life <= 0.0:  # a zero half-life forgets at once
        return floor
    return max(floor, importance * math.pow(2.0, -age / half_life))


def archive_reason(rec: BlockRecord, now: float, cfg: PolicyConfig) -> str | None:
    """Why the block should move to cold storage now, or ``None`` when it stays.

    Never for ``core`` (its floor sits above the threshold anyway), never for a block
    validated inside its window (the archival rule: validation prevents archiving), never twice.
    """
    if rec.state == _ARCHIVED or rec.tier == _CORE:
        return None
    if rec.validated_at is not None and rec.stale_at is not None and rec.stale_at > now:
        return None
    kept = retention(rec, now, cfg)
    if kept >= cfg.decay.archive_below:
        return None
    days = (now - rec.last_touched()) / 86400.0
    half_life_days = effective_half_life_s(rec, now, cfg) / 86400.0
    return archive_reason_text(
        kept, cfg.decay.archive_below, days, half_life_days, stale=is_stale(rec, now)
    )


def archive_reason_text(
    kept: float, archive_below: float, days: float, half_life_days: float, *, stale: bool
) -> str:
    """The words of :func:`archive_reason` (the store's SQL writes the same)."""
    return (
        f"retention {kept:.3f} < {archive_below:g} "
        f"(untouched {days:.1f}d, half-life {half_life_days:.3g}d{', stale' if stale else ''})"
    )


def heuristic_cycle(rec: BlockRecord, cfg: PolicyConfig) -> dict[str, object]:
    """The periodic self-tuning pass over one block (the self-tuning rules' heuristic cycle).

    Counts the accesses since the previous cycle: >= 10 raise importance by 0.15, >= 5 by
    0.05 (capped at 1.0); at least ``extend_min_accesses`` stretch the half-life by 1.3,
    up to 90 days for episodic blocks and 180 days for the others (a ``< cap`` guard, so
    a block keeps growing toward the ceiling on each cycle but is never cut back to it).
    Ephemeral blocks keep their half-life: they are never meant to last. The recent count
    is then reset. Returns ``{field: [before, after]}`` for each field that changed.
    """
    d = cfg.decay
    changed: dict[str, object] = {}
    recent = rec.recent_access_count
    if recent >= d.bump_high_accesses:
        bump = d.bump_high
    elif recent >= d.bump_low_accesses:
        bump = d.bump_low
    else:
        bump = 0.0
    if bump > 0.0 and rec.importance < 1.0:
        before = rec.importance
        rec.importance = min(1.0, rec.importance + bump)
        changed["importance"] = [before, rec.importance]

    if recent >= d.extend_min_accesses and rec.volatility != _EPHEMERAL:
        cap = (
            d.max_half_life_episodic if rec.category == _EPISODIC else d.max_half_life_semantic
        ).total_seconds()
        if rec.half_life_s < cap:
            before = rec.half_life_s
            rec.half_life_s = min(cap, rec.half_life_s * d.extend_factor)
            changed["half_life_s"] = [before, rec.half_life_s]

    if recent:
        rec.recent_access_count = 0
        changed["recent_access_count"] = [recent, 0]
    return changed
