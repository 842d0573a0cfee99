# Copyright 2026 memwarden contributors. MIT License.
"""Retention, archival and the heuristic cycle."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.memory import BlockRecord
from memwarden.memory.policy import (
    PolicyConfig,
    archive_reason,
    effective_half_life_s,
    heuristic_cycle,
    is_stale,
    retention,
)

H = 3600.0
D = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
CFG = PolicyConfig()


def _rec(**overrides: Any) -> BlockRecord:
    fields: dict[str, Any] = {
        "id": "b1",
        "title": "",
        "content": "the API timeout is 30 s",
        "tags": [],
        "source": "agent",
        "category": "semantic",
        "info_type": "semi_static",
        "volatility": "medium",
        "tier": "long_term",
        "state": "unverified",
        "stale_reasons": [],
        "reliability": 0.9,
        "importance": 0.8,
        "validated_by": None,
        "validated_at": None,
        "validity_window_s": 7 * D,
        "stale_at": None,
        "half_life_s": 14 * D,
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(overrides)
    return BlockRecord(**fields)


@pytest.mark.parametrize(
    ("overrides", "now", "expected"),
    [
        ({}, T0, 0.8),
        ({}, T0 + 14 * D, 0.4),
        ({}, T0 + 28 * D, 0.2),
        ({"state": "stale"}, T0 + 14 * D, 0.2),
        ({"stale_at": T0 + 7 * D}, T0 + 14 * D, 0.2),
        ({"stale_at": T0 + 30 * D}, T0 + 14 * D, 0.4),
        ({"last_accessed_at": T0 + 14 * D}, T0 + 28 * D, 0.4),
        ({"validated_at": T0 + 14 * D, "stale_at": T0 + 21 * D}, T0 + 28 * D, 0.2),
        ({"importance": 0.01}, T0, 0.02),
        ({"tier": "core"}, T0 + 365 * D, 0.6),
        ({"tier": "core", "importance": 0.9}, T0, 0.9),
        ({}, T0 + 365 * D, 0.02),
        ({"half_life_s": 0.0}, T0 + 1, 0.02),
    ],
    ids=[
        "new block keeps its importance",
        "one half-life halves it",
        "two half-lives quarter it",
        "stale state halves the half-life",
        "past stale_at halves the half-life",
        "before stale_at the half-life is whole",
        "an access restarts the clock",
        "age counts from the later of validation and access",
        "never below the 0.02 floor",
        "core never below 0.60",
        "core above its floor decays normally",
        "a year-old medium block sits on the floor",
        "a zero half-life forgets at once",
    ],
)
def test_retention_formula(overrides, now, expected):
    """retention = max(floor, importance x 2^(-age/half_life)), half-life halved while stale."""
    assert retention(_rec(**overrides), now, CFG) == pytest.approx(expected)


def test_effective_half_life_halves_only_while_stale():
    """The half-life is the block's own until stale_at, then half of it."""
    rec = _rec(state="fresh", validated_at=T0, stale_at=T0 + 7 * D)
    assert not is_stale(rec, T0 + 7 * D - 1)
    assert effective_half_life_s(rec, T0 + 7 * D - 1, CFG) == 14 * D
    assert is_stale(rec, T0 + 7 * D)
    assert effective_half_life_s(rec, T0 + 7 * D, CFG) == 7 * D


def test_refuted_block_decays_at_its_own_pace():
    """Refuted is not stale: the stale halving does not apply (the rank factor handles it)."""
    rec = _rec(state="refuted", stale_at=T0)
    assert not is_stale(rec, T0 + D)
    assert retention(rec, T0 + 14 * D, CFG) == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("overrides", "now", "archived"),
    [
        ({}, T0 + 60 * D, True),
        ({}, T0 + 50 * D, False),
        ({"state": "stale"}, T0 + 30 * D, True),
        ({"tier": "core"}, T0 + 3650 * D, False),
        ({"state": "archived"}, T0 + 3650 * D, False),
        ({"validated_at": T0, "stale_at": T0 + 365 * D, "state": "fresh"}, T0 + 200 * D, False),
        ({"validated_at": T0, "stale_at": T0 + 7 * D, "state": "fresh"}, T0 + 200 * D, True),
        ({"stale_at": T0 + 365 * D}, T0 + 200 * D, True),
    ],
    ids=[
        "medium block untouched for 60 days goes",
        "at 50 days it is still above 0.05",
        "stale blocks go twice as fast",
        "never core",
        "never twice",
        "never one validated inside its window",
        "validated long ago, window over: goes",
        "a window without a validation does not protect",
    ],
)
def test_archive_reason(overrides, now, archived):
    """Below retention 0.05 a block goes to cold storage, except core and validated blocks."""
    reason = archive_reason(_rec(**overrides), now, CFG)
    assert (reason is not None) is archived
    if reason is not None:
        assert reason.startswith("retention ")
        assert "< 0.05" in reason


def test_archive_reason_explains_itself():
    """The reason names the retention, the idle time and the half-life used."""
    reason = archive_reason(_rec(state="stale"), T0 + 30 * D, CFG)
    assert reason == "retention 0.041 < 0.05 (untouched 30.0d, half-life 7d, stale)"


@pytest.mark.parametrize(
    ("overrides", "importance", "half_life_d"),
    [
        ({"recent_access_count": 12}, 0.65, 14 * 1.3),
        ({"recent_access_count": 10}, 0.65, 14 * 1.3),
        ({"recent_access_count": 7}, 0.55, 14 * 1.3),
        ({"recent_access_count": 5}, 0.55, 14 * 1.3),
        ({"recent_access_count": 4}, 0.5, 14),
        ({"recent_access_count": 0}, 0.5, 14),
        ({"recent_access_count": 10, "importance": 0.95}, 1.0, 14 * 1.3),
        ({"recent_access_count": 5, "category": "episodic", "half_life_s": 80 * D}, 0.55, 90),
        ({"recent_access_count": 5, "category": "episodic", "half_life_s": 89.9 * D}, 0.55, 90),
        ({"recent_access_count": 5, "category": "episodic", "half_life_s": 180 * D}, 0.55, 180),
        ({"recent_access_count": 5, "half_life_s": 150 * D}, 0.55, 180),
        ({"recent_access_count": 5, "half_life_s": 180 * D}, 0.55, 180),
        (
            {"recent_access_count": 9, "volatility": "ephemeral", "half_life_s": 600.0},
            0.55,
            600 / D,
        ),
    ],
    ids=[
        ">= 10 accesses: +0.15 and a longer half-life",
        "exactly 10",
        ">= 5: +0.05",
        "exactly 5",
        "4 changes nothing",
        "no access changes nothing",
        "importance is capped at 1.0",
        "episodic half-life capped at 90 days",
        "the < max guard lets it reach the ceiling",
        "an episodic block above the cap is not cut back",
        "semantic capped at 180 days",
        "at the cap nothing grows",
        "ephemeral blocks keep their half-life",
    ],
)
def test_heuristic_cycle(overrides, importance, half_life_d):
    """Self-tuning: importance bumps at 5 and 10 accesses, half-life x 1.3 up to a cap."""
    rec = _rec(**{"importance": 0.5, **overrides})
    heuristic_cycle(rec, CFG)
    assert rec.importance == pytest.approx(importance)
    assert rec.half_life_s == pytest.approx(half_life_d * D)
    assert rec.recent_access_count == 0


def test_heuristic_cycle_reports_what_changed():
    """The cycle returns [before, after] for each field it changed, and nothing else."""
    rec = _rec(importance=0.5, recent_access_count=10)
    changed = heuristic_cycle(rec, CFG)
    assert changed == {
        "importance": [0.5, pytest.approx(0.65)],
        "half_life_s": [14 * D, pytest.approx(14 * 1.3 * D)],
        "recent_access_count": [10, 0],
    }
    assert heuristic_cycle(rec, CFG) == {}


def test_heuristic_cycle_grows_toward_the_ceiling_over_cycles():
    """Repeated busy cycles stretch a 14-day half-life to exactly the 180-day cap."""
    rec = _rec()
    for _ in range(20):
        rec.recent_access_count = 6
        heuristic_cycle(rec, CFG)
    assert rec.half_life_s == 180 * D


_states = st.sampled_from(["unverified", "fresh", "stale", "refuted"])
_tiers = st.sampled_from(["short_term", "long_term", "core"])
_times = st.floats(min_value=0, max_value=400 * D, allow_nan=False)


@st.composite
def _records(draw: st.DrawFn) -> BlockRecord:
    validated = draw(st.none() | _times)
    stale_at = None if validated is None else validated + draw(_times)
    if draw(st.booleans()):
        stale_at = draw(st.none() | _times)
    return _rec(
        state=draw(_states),
        tier=draw(_tiers),
        importance=draw(st.floats(min_value=0, max_value=1)),
        half_life_s=draw(st.floats(min_value=60, max_value=400 * D)),
        validated_at=None if validated is None else T0 + validated,
        stale_at=None if stale_at is None else T0 + stale_at,
        last_accessed_at=draw(st.none() | _times.map(lambda t: T0 + t)),
    )


@given(rec=_records(), t1=_times, dt=_times)
def test_retention_never_rises_without_an_event(rec, t1, dt):
    """As time passes with no event and no access, retention can only fall or stay."""
    earlier = retention(rec, T0 + t1, CFG)
    later = retention(rec, T0 + t1 + dt, CFG)
    assert later <= earlier


@given(rec=_records(), t=_times)
def test_retention_stays_between_floor_and_importance(rec, t):
    """Retention never drops below its floor and never exceeds max(floor, importance)."""
    floor = 0.60 if rec.tier == "core" else 0.02
    value = retention(rec, T0 + t, CFG)
    assert floor <= value <= max(floor, rec.importance)
    assert math.isfinite(value)
