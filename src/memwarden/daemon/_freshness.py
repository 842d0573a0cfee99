"""The freshness contract of reads: which results a read re-checks, and the receipt of each.

A read with ``max_age`` re-checks, before it answers, every result whose last validation
is older than that and whose check is *quick*. Quick is measured, not declared: each
binding (sensor, subject) keeps its last few check durations (:class:`CheckStats`), and a
binding whose median is under ``[read_through] quick`` is quick. A binding never measured
falls back on its sensor's ``quick_check`` hint until its first check is timed. A binding
a read had checked less than ``recheck_floor`` ago is not checked again for a read: reads
cannot turn a sensor into a load generator (the sweep and manual checks are paced apart).

Every result carries a receipt (:func:`receipt`): who verified it, when, how old that
is, whether it was checked for this read, the confirming observation, and a verdict an
agent can act on: ``verified``, ``checking``, ``unverified``, ``stale``, ``unreachable``
or ``refuted``.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwarden.memory import from_ts

if TYPE_CHECKING:
    from collections.abc import Callable

    from memwarden.daemon._config import ReadThroughSettings
    from memwarden.memory import Block, FactEvidence

__all__ = [
    "VERDICTS",
    "CheckStats",
    "Liveness",
    "receipt",
    "verdict_factor",
]

VERDICTS = ("verified", "checking", "unverified", "stale", "unreachable", "refuted")
_SAMPLES = 8  # durations kept per binding
_UNREACHABLE_FACTOR = 0.5  # what an unreachable verdict does to the rank


@dataclass(slots=True)
class _BindingStat:
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=_SAMPLES))
    last_started: float | None = None


class CheckStats:
    """Recent check durations and the last check time of each binding (sensor, subject)."""

    def __init__(self, *, max_bindings: int = 100_000) -> None:
        self._stats: dict[tuple[str, str], _BindingStat] = {}
        self._max = max_bindings
        self.observe: Callable[[str, float], None] | None = None  # (sensor, seconds): metrics

    def _get(self, sensor: str, subject: str) -> _BindingStat:
        key = (sensor, subject)
        stat = self._stats.get(key)
        if stat is None:
            if len(self._stats) >= self._max:  # forget the oldest half (insertion order)
                for old in list(self._stats)[: self._max // 2]:
                    del self._stats[old]
            stat = self._stats[key] = _BindingStat()
        return stat

    def started(self, sensor: str, subject: str, now: float) -> None:
        """A read asked for a check of the binding at ``now`` (clock time)."""
        self._get(sensor, subject).last_started = now

    def finished(self, sensor: str, subject: str, seconds: float) -> None:
        """A check of the binding took ``seconds``."""
        self._get(sensor, subject).durations.append(max(0.0, seconds))
        if self.observe is not None:
            self.observe(sensor, max(0.0, seconds))

    def median_s(self, sensor: str, subject: str) -> float | None:
        stat = self._stats.get((sensor, subject))
        if stat is None or not stat.durations:
            return None
        return statistics.median(stat.durations)

    def quick(self, sensor: str, subject: str, *, limit_s: float, prior: bool) -> bool:
        """Whether a read may wait for this binding's check: its median check time is at
        most ``limit_s``; ``prior`` (the sensor's hint) until it has been measured."""
        median = self.median_s(sensor, subject)
        return prior if median is None else median <= limit_s

    def checked_within(self, sensor: str, subject: str, now: float, floor_s: float) -> bool:
        """A read asked for a check of the binding less than ``floor_s`` ago."""
        stat = self._stats.get((sensor, subject))
        last = stat.last_started if stat is not None else None
        return last is not None and now - last < floor_s

    def summary(self, sensor: str) -> dict[str, Any]:
        """Per sensor: how many bindings are measured and their median check time."""
        medians = [
            statistics.median(s.durations)
            for (name, _), s in self._stats.items()
            if name == sensor and s.durations
        ]
        return {
            "measured_bindings": len(medians),
            "median_check_s": round(statistics.median(medians), 4) if medians else None,
        }


@dataclass(frozen=True, slots=True)
class Liveness:
    """Whether a sensor can check anything now."""

    alive: bool
    since: float | None = None  # when it stopped being alive (None: unknown, or alive)
    why: str = ""


def verdict_factor(verdict: str) -> float:
    """What the verdict does to a result's rank (an unreachable fact ranks lower)."""
    return _UNREACHABLE_FACTOR if verdict == "unreachable" else 1.0


def receipt(
    block: Block,
    *,
    now: float,
    evidence: FactEvidence | None,
    liveness: dict[str, Liveness],
    settings: ReadThroughSettings,
    checked_now: bool = False,
    checking: bool = False,
) -> dict[str, Any]:
    """The receipt of one result: how we know, and the verdict an agent can act on.

    ``checking`` says a check for this read is pending (timed out, or a retry waiting
    its interval); ``liveness`` maps each bound sensor's name to whether it is up.
    """
    validated = block.validation.validated_at
    out: dict[str, Any] = {
        "verified_by": block.validation.validated_by,
        "verified_at": validated.isoformat() if validated is not None else None,
        "age_s": round(now - validated.timestamp(), 3) if validated is not None else None,
        "checked_now": checked_now,
        "observation": evidence.confirmation if evidence is not None else None,
    }
    verdict, why, since = _verdict(
        block, now=now, evidence=evidence, liveness=liveness, settings=settings, checking=checking
    )
    out["verdict"] = verdict
    if why:
        out["why"] = why
    if since is not None:
        out["since"] = from_ts(since).isoformat()
    return out


def _verdict(  # noqa: PLR0911 - one return per verdict reads best
    block: Block,
    *,
    now: float,
    evidence: FactEvidence | None,
    liveness: dict[str, Liveness],
    settings: ReadThroughSettings,
    checking: bool,
) -> tuple[str, str, float | None]:
    state = block.state.value
    if state == "refuted":
        return "refuted", "a sensor refuted it", None
    errors = evidence.consecutive_errors if evidence is not None else 0
    if evidence is not None and errors >= settings.unreachable_after:
        why = f"{errors} consecutive check errors"
        if evidence.last_error:
            why += f", last: {evidence.last_error}"
        return "unreachable", why, evidence.errors_since
    sensors = list(dict.fromkeys(b.sensor for b in block.bindings))
    grace = settings.unreachable_grace.total_seconds()
    down = [
        (name, liveness[name]) for name in sensors if name in liveness and not liveness[name].alive
    ]
    if sensors and len(down) == len(sensors):  # no bound sensor can check it
        lapsed = [(n, lv) for n, lv in down if lv.since is None or now - lv.since >= grace]
        if len(lapsed) == len(down):
            name, lv = lapsed[0]
            return "unreachable", f"sensor {name!r} is down: {lv.why}", lv.since
    open_check = evidence is not None and bool(evidence.open_checks)
    if state == "stale" or (block.stale_at is not None and block.stale_at.timestamp() <= now):
        if checking or open_check:
            return "checking", "a change or refutation was seen; its re-check is pending", None
        reasons = ", ".join(r.value for r in block.stale_reasons) or "expired"
        return "stale", reasons, None
    if state == "unverified":
        return "unverified", "no sensor has confirmed it yet", None
    if checking:
        return "checking", "its re-check for this read has not answered yet", None
    return "verified", "", None
