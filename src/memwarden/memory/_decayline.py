"""Retention over time: the decay formula's inputs as they changed, and the line they draw.

Retention is not stored as it decays (the decay cycle keeps only the value as of its
last pass); what is stored (``retention_points``, schema 13) is each change of its
*inputs*: importance, the last touch (creation, validation, read), half-life, tier,
state and ``stale_at``. A trigger writes a point when a block is added or one of them
changes, whichever code path changed it. Between two points the inputs are constant,
so retention at any moment is the formula itself (:func:`retention_at`, the twin of
``policy.retention``, tested against it): the line is exact, not an interpolation,
given the ``[decay]`` floor and stale factor of the policy it is drawn with (today's).

At most :data:`MAX_POINTS` points per block are kept (the newest; the trigger trims
the older ones at each insert), so a block read or confirmed very often keeps a shorter
history; the page says from when it has one. A point is 8 values, about 60 bytes with
its key: at most about 30 KB per block, typically a few points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from memwarden.memory._database import Database
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "MAX_POINTS",
    "POINTS_SELECT",
    "RetentionPoint",
    "points_of",
    "read_points",
    "retention_at",
    "retention_line",
]

MAX_POINTS = 500  # per block, the newest (the schema's trigger trims past this)
_FRESHNESS_STATES = frozenset({"fresh", "unverified"})


@dataclass(frozen=True, slots=True)
class RetentionPoint:
    """The decay formula's inputs from ``at`` until the next point."""

    at: float
    importance: float
    touched_at: float
    half_life_s: float
    tier: str
    state: str
    stale_at: float | None

    def retention(self, t: float, cfg: PolicyConfig) -> float | None:
        """Retention at ``t`` under these inputs; None while archived (no decay)."""
        return retention_at(self, t, cfg)


def retention_at(p: RetentionPoint, t: float, cfg: PolicyConfig) -> float | None:
    """``max(floor, importance * 2 ** (-age / half_life))`` with these inputs at ``t``:
    age from the last touch, the half-life scaled while stale (the stored state, or a
    fresh or unverified block past ``stale_at``). None for an archived block."""
    if p.state == "archived":
        return None
    decay = cfg.decay
    return _value(
        p, t, decay.core_floor if p.tier == "core" else decay.floor, decay.stale_half_life_factor
    )


def _value(p: RetentionPoint, t: float, floor: float, stale_factor: float) -> float:
    age = t - p.touched_at
    if age <= 0.0:
        return max(floor, p.importance)
    stale = p.state == "stale" or (
        p.state in _FRESHNESS_STATES and p.stale_at is not None and p.stale_at <= t
    )
    half_life = p.half_life_s * stale_factor if stale else p.half_life_s
    if half_life <= 0.0:
        return floor
    return max(floor, p.importance * math.pow(2.0, -age / half_life))


def retention_line(
    points: list[RetentionPoint],
    *,
    start: float,
    end: float,
    cfg: PolicyConfig,
    samples: int = 120,
) -> list[list[tuple[float, float]]]:
    """The retention line from ``start`` to ``end`` as segments of (time, value), oldest
    first: a segment breaks where the block was archived. Each stretch between points
    has its two ends, the times of a grid of ``samples`` steps over the whole span that
    fall inside it, and both sides of the moment it turns stale (where the half-life
    changes, the line jumps). Before the first point there is no line."""
    if not points or end <= start:
        return []
    step = (end - start) / max(1, samples)
    decay = cfg.decay
    factor = decay.stale_half_life_factor
    segments: list[list[tuple[float, float]]] = [[]]
    last = len(points) - 1
    for i, p in enumerate(points):
        lo = max(start, p.at)
        hi = min(end, points[i + 1].at) if i < last else end
        if hi < lo or (hi == lo and i < last):
            continue
        if p.state == "archived":
            if segments[-1]:
                segments.append([])
            continue
        floor = decay.core_floor if p.tier == "core" else decay.floor
        times = [lo]
        k = math.floor((lo - start) / step) + 1
        while (t := start + k * step) < hi:
            times.append(t)
            k += 1
        if p.stale_at is not None and p.state in _FRESHNESS_STATES and lo < p.stale_at < hi:
            times += [math.nextafter(p.stale_at, -math.inf), p.stale_at]
            times.sort()
        if hi > lo:
            times.append(hi)
        segments[-1].extend((t, _value(p, t, floor, factor)) for t in times)
    return [s for s in segments if s]


async def read_points(
    db: Database, block_id: str, *, limit: int = MAX_POINTS
) -> list[RetentionPoint]:
    """A block's retention points, oldest first (the newest ``limit``)."""
    async with db.read() as conn:
        rows = await conn.execute_fetchall(POINTS_SELECT, (block_id, limit))
    return points_of(rows)


# A block's points, newest first (parameters: the block's id, how many).
POINTS_SELECT = (
    "SELECT at, importance, touched_at, half_life_s, tier, state, stale_at"
    " FROM retention_points WHERE block_rid = (SELECT rid FROM blocks WHERE id = ?)"
    " ORDER BY at DESC LIMIT ?"
)


def points_of(rows: Iterable[Sequence[Any]]) -> list[RetentionPoint]:
    """``POINTS_SELECT``'s rows (newest first) as points, oldest first."""
    return [
        RetentionPoint(
            at=float(r[0]),
            importance=float(r[1]),
            touched_at=float(r[2]),
            half_life_s=float(r[3]),
            tier=str(r[4]),
            state=str(r[5]),
            stale_at=None if r[6] is None else float(r[6]),
        )
        for r in reversed(list(rows))
    ]
