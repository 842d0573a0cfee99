"""What a validation event does to a block, and when a block is stale.

Pure functions over a :class:`BlockRecord` and an explicit ``now`` (POSIX seconds).
They mutate the record they are given and return an :class:`Effect` describing the
change, which the store writes to the event log in the same transaction.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memwarden.memory._model import BlockState, Outcome, StaleReason
from memwarden.memory.policy._promotion import demote_core

if TYPE_CHECKING:
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy._config import PolicyConfig

__all__ = [
    "Effect",
    "apply_event",
    "current_stale_reasons",
    "effective_state",
    "flap_score",
    "mark_stale",
    "state_as_of",
    "transitions",
]

# Plain strings on the hot path: enum attribute access costs more than the rule itself.
_FRESH = BlockState.FRESH.value
_UNVERIFIED = BlockState.UNVERIFIED.value
_STALE = BlockState.STALE.value
_REFUTED = BlockState.REFUTED.value
_ARCHIVED = BlockState.ARCHIVED.value
_CONFIRMED = Outcome.CONFIRMED.value
_REFUTED_OUTCOME = Outcome.REFUTED.value
_CHANGED = Outcome.CHANGED.value
_FRESHNESS_STATES = frozenset({_FRESH, _UNVERIFIED})
_EXPIRED = StaleReason.EXPIRED.value


@dataclass(slots=True)
class Effect:
    """What one event did to one block."""

    outcome: str
    state_before: str
    state_after: str
    reliability_before: float
    reliability_after: float
    ignored: str | None = None  # why nothing changed (outdated, archived)
    hard: bool = False  # a refutation that counts
    revalidate: str | None = None  # a RevalidationReason to queue
    revalidate_after_s: float = 0.0  # when to send it: a soft refutation's retry waits
    review: str | None = None  # a reason to queue human review
    demoted: bool = False
    flapping_changed: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "state": [self.state_before, self.state_after],
            "reliability": [round(self.reliability_before, 4), round(self.reliability_after, 4)],
        }
        for key in ("ignored", "revalidate", "review"):
            value = getattr(self, key)
            if value:
                d[key] = value
        if self.hard:
            d["hard"] = True
        if self.demoted:
            d["demoted"] = True
        if self.flapping_changed:
            d["flapping_changed"] = True
        if self.notes:
            d["notes"] = self.notes
        return d


def transitions(history: str) -> int:
    """How many times consecutive results in the window differ."""
    return sum(1 for a, b in itertools.pairwise(history) if a != b)


def flap_score(history: str) -> float:
    """Weighted share of state changes in the window, newest weighted most (0..1).

    Like Nagios: each transition between consecutive results carries a weight rising
    linearly from 0.75 (oldest) to 1.25 (newest); the score is the weighted transitions
    over the total weight.
    """
    n = len(history) - 1
    if n < 1:
        return 0.0
    total = changes = 0.0
    for i in range(n):
        w = 0.75 + 0.5 * (i / (n - 1) if n > 1 else 1.0)
        total += w
        if history[i] != history[i + 1]:
            changes += w
    return changes / total


# The score of a window, remembered: every observation scores its block's window, and the
# windows seen are few (a few letters, at most ``flap_window`` of them; mostly one letter
# repeated), so a flood of events scores each only once (it was 2-3 us an event).
_window_score = functools.lru_cache(maxsize=4096)(flap_score)


def _push_outcome(rec: BlockRecord, mark: str, cfg: PolicyConfig) -> bool:
    """Record a result in the flap window; returns True when ``flapping`` toggled."""
    ev = cfg.evidence
    rec.outcome_history = (rec.outcome_history + mark)[-ev.flap_window :]
    score = _window_score(rec.outcome_history)
    if (
        not rec.flapping
        and len(rec.outcome_history) >= 3
        and score >= ev.flap_high
        and transitions(rec.outcome_history) >= ev.flap_min_transitions
    ):
        rec.flapping = True
        return True
    if rec.flapping and score <= ev.flap_low:
        rec.flapping = False
        return True
    return False


def _add_reason(rec: BlockRecord, reason: StaleReason) -> None:
    if reason.value not in rec.stale_reasons:
        rec.stale_reasons = [*rec.stale_reasons, reason.value]


def apply_event(
    rec: BlockRecord,
    *,
    outcome: str,
    sensor: str,
    observed_at: float,
    now: float,
    cfg: PolicyConfig,
    reliability: float | None = None,
    validity_window_s: float | None = None,
    settled_by_binding: bool = True,
) -> Effect:
    """Apply one observation to a block.

    ``observed_at`` is the time that counts; an observation not newer than the block's
    last validation changes nothing (a replayed message never makes a fact fresh).
    ``settled_by_binding`` says whether the reporting sensor is bound to the block: a
    hard refutation from elsewhere has no sensor to settle it and goes to human review.
    """
    eff = Effect(outcome, rec.state, rec.state, rec.reliability, rec.reliability)
    if rec.state == _ARCHIVED:
        eff.ignored = "archived"
        return eff
    if rec.validated_at is not None and observed_at <= rec.validated_at:
        eff.ignored = "outdated"
        return eff

    ev = cfg.evidence
    if outcome == _CONFIRMED:
        _confirm(
            rec,
            eff,
            sensor=sensor,
            observed_at=observed_at,
            now=now,
            cfg=cfg,
            reliability=reliability,
            validity_window_s=validity_window_s,
        )
    elif outcome == _REFUTED_OUTCOME:
        hard_now = (
            rec.consecutive_refutations + 1 >= ev.hard_refutation_after
            or sensor in ev.authoritative_sensors
            or sensor.split(".", 1)[0] in ev.authoritative_sensors
            or (reliability is not None and reliability >= ev.authoritative_reliability)
        )
        rec.consecutive_refutations += 1
        rec.consecutive_errors = 0
        eff.flapping_changed = _push_outcome(rec, "R", cfg)
        if hard_now:
            _refute_hard(rec, eff, observed_at, cfg, settled_by_binding=settled_by_binding)
        else:
            rec.reliability *= ev.soft_refute_factor
            rec.state = _STALE
            _add_reason(rec, StaleReason.SOFT_REFUTED)
            eff.revalidate = "source_changed"
            # Not at once: a re-check fired immediately turned soft into hard within a
            # second. It waits a retry interval scaled to the block's window (Nagios).
            eff.revalidate_after_s = ev.retry_interval_s(rec.validity_window_s)
            eff.notes.append(
                f"soft refutation {rec.consecutive_refutations}/{ev.hard_refutation_after},"
                f" re-check in {eff.revalidate_after_s:g}s"
            )
    elif outcome == _CHANGED:
        rec.reliability *= ev.changed_factor
        if rec.state != _REFUTED:
            rec.state = _STALE
            _add_reason(rec, StaleReason.SOURCE_CHANGED)
        eff.revalidate = "source_changed"
    else:  # error: no truth changes; repeated errors escalate
        rec.consecutive_errors += 1
        if rec.consecutive_errors == ev.error_escalation_after:
            eff.review = f"{rec.consecutive_errors} consecutive check errors"

    if rec.reliability < cfg.staleness.low_reliability and rec.state in _FRESHNESS_STATES:
        rec.state = _STALE
    if rec.reliability < cfg.staleness.low_reliability and rec.state == _STALE:
        _add_reason(rec, StaleReason.LOW_RELIABILITY)
    if rec.flapping and rec.state == _STALE:
        _add_reason(rec, StaleReason.FLAPPING)
    eff.state_after = rec.state
    eff.reliability_after = rec.reliability
    if eff.state_after != eff.state_before or eff.reliability_after != eff.reliability_before:
        rec.updated_at = max(rec.updated_at, now)
    return eff


def _confirm(
    rec: BlockRecord,
    eff: Effect,
    *,
    sensor: str,
    observed_at: float,
    now: float,
    cfg: PolicyConfig,
    reliability: float | None,
    validity_window_s: float | None,
) -> None:
    sensor_rel = reliability if reliability is not None else cfg.sensor_reliability(sensor)
    window = validity_window_s if validity_window_s is not None else rec.validity_window_s
    rec.validated_at = observed_at
    rec.validated_by = sensor
    rec.reliability = sensor_rel
    rec.stale_at = observed_at + window
    rec.consecutive_refutations = 0
    rec.consecutive_errors = 0
    rec.reinforcement_count += 1
    eff.flapping_changed = _push_outcome(rec, "C", cfg)
    if rec.stale_at <= now:
        rec.state = _STALE
        rec.stale_reasons = [_EXPIRED]
        eff.notes.append("confirmation already older than its window")
    else:
        rec.state = _FRESH
        rec.stale_reasons = []


def _refute_hard(
    rec: BlockRecord,
    eff: Effect,
    observed_at: float,
    cfg: PolicyConfig,
    *,
    settled_by_binding: bool,
) -> None:
    rec.reliability *= cfg.evidence.refute_factor
    rec.state = _REFUTED
    rec.stale_reasons = []
    rec.contradiction_count += 1
    rec.last_contradiction_at = observed_at
    eff.hard = True
    if demote_core(rec, cfg):  # back to long_term, stability reset: core must be re-earned
        eff.demoted = True
    if not settled_by_binding:
        eff.review = "refuted by a sensor not bound to the block"


def effective_state(rec: BlockRecord, now: float) -> str:
    """The state as of ``now``: a fresh or unverified block past ``stale_at`` is stale."""
    return state_as_of(rec.state, rec.stale_at, now)


def state_as_of(state: str, stale_at: float | None, now: float) -> str:
    """:func:`effective_state` of a block stored with ``state`` and ``stale_at``."""
    if state in _FRESHNESS_STATES and stale_at is not None and stale_at <= now:
        return _STALE
    return state


def current_stale_reasons(rec: BlockRecord, now: float, cfg: PolicyConfig) -> list[str]:
    """Why the block is not fresh as of ``now`` (empty when it is fresh)."""
    reasons = list(rec.stale_reasons)
    if (
        rec.state not in (_ARCHIVED, _REFUTED)
        and rec.stale_at is not None
        and rec.stale_at <= now
        and StaleReason.EXPIRED not in reasons
    ):
        reasons.insert(0, _EXPIRED)
    if (
        rec.reliability < cfg.staleness.low_reliability
        and StaleReason.LOW_RELIABILITY not in reasons
    ):
        reasons.append(StaleReason.LOW_RELIABILITY.value)
    return reasons


def mark_stale(rec: BlockRecord, now: float, reason: StaleReason = StaleReason.EXPIRED) -> bool:
    """Move a fresh/unverified block to stale (the sweep); False if it was not due."""
    if rec.state not in _FRESHNESS_STATES:
        return False
    if reason == StaleReason.EXPIRED and (rec.stale_at is None or rec.stale_at > now):
        return False
    rec.state = _STALE
    _add_reason(rec, reason)
    rec.updated_at = max(rec.updated_at, now)
    return True
