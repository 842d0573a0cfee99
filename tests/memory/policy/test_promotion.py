# Copyright 2026 memwarden contributors. MIT License.
"""Promotion: the composite and multi-axis scorers, the consolidation pass, core (docs/RULES.md)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.memory.gradual_example import CONTENT as GRADUAL_CONTENT
from tests.memory.gradual_example import DAYS as GRADUAL_DAYS
from tests.memory.gradual_example import SEMANTIC as GRADUAL_SEMANTIC
from tests.memory.gradual_example import STEADY_SIGNALS, Day

from memwarden.memory import BlockRecord
from memwarden.memory.policy import (
    PolicyConfig,
    PromotionInputs,
    ScoreResult,
    check_core_promotion,
    consolidation_verdict,
    content_markers,
    core_promotion_blockers,
    demote_core,
    record_access,
    retention,
    score,
    score_composite,
    score_multi_axis,
)

M = 60.0
H = 3600.0
D = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
CFG = PolicyConfig()
PYTHON = GRADUAL_CONTENT


def _rec(**overrides: Any) -> BlockRecord:
    fields: dict[str, Any] = {
        "id": "b1",
        "title": "",
        "content": "plain note",
        "tags": [],
        "source": "user",
        "category": "semantic",
        "info_type": "semi_static",
        "volatility": "medium",
        "tier": "short_term",
        "state": "fresh",
        "stale_reasons": [],
        "reliability": 0.9,
        "importance": 0.5,
        "validated_by": "review",
        "validated_at": T0,
        "validity_window_s": 365 * D,
        "stale_at": T0 + 365 * D,
        "half_life_s": 14 * D,
        "created_at": T0,
        "updated_at": T0,
        "session_count": 1,
    }
    fields.update(overrides)
    return BlockRecord(**fields)


def _candidate(**overrides: Any) -> ScoreResult:
    fields: dict[str, Any] = {
        "scorer": "composite",
        "block_id": "b1",
        "total": 8.0,
        "threshold": 7.0,
        "breakdown": {},
        "candidate": True,
    }
    fields.update(overrides)
    return ScoreResult(**fields)


# ------------------------------------------------------------------ the composite scorer, example 1


def _gradual_day(n: int) -> tuple[BlockRecord, PromotionInputs, Day]:
    """Day ``n`` (1-3) of the gradual example as the scorer sees it."""
    day = GRADUAL_DAYS[n - 1]
    reads = [read for d in GRADUAL_DAYS[:n] for read in d.reads]
    rec = _rec(
        content=GRADUAL_CONTENT,
        access_count=len(reads),
        reinforcement_count=day.reinforcements,
        signals={
            **STEADY_SIGNALS,
            "user_initiated_mentions": day.mentions,
            "user_confirmations": day.confirmations,
        },
    )
    times = [T0 + hours * H for hours, _ in reads]
    sessions = len({session for _, session in reads})
    return rec, PromotionInputs(rec, T0 + day.scored_at_h * H, times, sessions), day


def test_the_gradual_example_worked_by_hand_gives_its_stated_totals():
    """The hand arithmetic of tests/memory/gradual_example.py gives 4.2, 6.1 and 7.8."""
    assert [round(day.total, 1) for day in GRADUAL_DAYS] == [4.2, 6.1, 7.8]
    assert [day.stated_total for day in GRADUAL_DAYS] == [4.2, 6.1, 7.8]
    assert [day.total >= CFG.promotion.composite.threshold for day in GRADUAL_DAYS] == [
        False,
        False,
        True,
    ]


@pytest.mark.parametrize(
    "n",
    [1, 2, 3],
    ids=[
        "day 1: mentioned, 2 reads in one session",
        "day 2: referenced again, 4 reads in 2 sessions",
        "day 3: user confirms, crosses 7.0",
    ],
)
def test_gradual_promotion_scores_as_worked_by_hand(n):
    """The composite scorer gives each day of the gradual example its hand-worked
    components and total (4.2, 6.1, 7.8): promoted on day 3 by the threshold."""
    rec, inputs, day = _gradual_day(n)
    result = score_composite(inputs, CFG)
    assert result.breakdown["access_pattern"] == pytest.approx(day.access, abs=1e-9)
    assert result.breakdown["content_stability"] == pytest.approx(day.stability, abs=1e-9)
    assert result.breakdown["user_engagement"] == pytest.approx(day.engagement, abs=1e-9)
    assert result.breakdown["semantic_importance"] == pytest.approx(GRADUAL_SEMANTIC, abs=1e-9)
    assert result.total == pytest.approx(day.total, abs=1e-9)
    assert round(result.total, 1) == day.stated_total
    assert result.candidate is day.promoted
    assert result.trigger is None  # the threshold decides, not a fast track
    assert consolidation_verdict(rec, result, inputs.now, CFG)[0] is day.promoted
    if n == 1:
        assert result.blocked == ["access 2 < 3"]


def test_seed_001_immediate_promotion_by_correction():
    """Composite scorer, example 2: 'Actually, I prefer React over Vue' is a candidate at once."""
    now = T0 + 5 * M
    react = _rec(
        content="Actually, I prefer React over Vue",
        access_count=1,
        signals={"user_corrections": 1},
    )
    result = score_composite(PromotionInputs(react, now, [now], 1), CFG)
    assert result.total < CFG.promotion.composite.threshold
    assert result.candidate
    assert result.trigger == "user_correction"
    assert result.blocked == []
    assert result.as_dict()["trigger"] == "user_correction"
    assert consolidation_verdict(react, result, now, CFG) == (True, [])


def test_seed_001_promotion_blocked_by_contradiction():
    """Composite scorer, example 3: a preference near 6.8 is contradicted and cannot be promoted."""
    times = [T0 + 2 * H, T0 + 20 * H, T0 + D + 4 * H, T0 + 2 * D + 3 * H]
    before = _rec(
        content="I like working late at night. I love the quiet; I prefer my evenings for focus.",
        access_count=4,
        signals={"user_initiated_mentions": 3, "consistency": 1.0, "emotional_weight": 1.0},
        reinforcement_count=2,
    )
    now = T0 + 2 * D + 6 * H
    built_up = score_composite(PromotionInputs(before, now, times, 2), CFG)
    assert round(built_up.total, 1) == 6.8  # the example's "builds to 6.8"
    assert not built_up.candidate

    # "I actually prefer morning work now": a contradiction 3 hours ago
    before.contradiction_count = 1
    before.last_contradiction_at = now - 3 * H
    before.signals["user_confirmations"] = 2  # even pushed past 7.0 ...
    after = score_composite(PromotionInputs(before, now, times, 2), CFG)
    assert after.breakdown["stability.contradiction"] == -2.0
    assert after.total >= CFG.promotion.composite.threshold
    assert not after.candidate  # ... the cooldown holds
    assert after.blocked == ["contradiction 3.0h ago (cooldown 24h)"]

    later = score_composite(PromotionInputs(before, now + 22 * H, times, 2), CFG)
    assert later.blocked == []
    assert later.candidate


@pytest.mark.parametrize(
    ("signals", "sessions", "access", "trigger"),
    [
        ({"user_corrections": 1}, 1, 1, "user_correction"),
        ({"explicit_importance": 1}, 1, 0, "explicit_importance"),
        ({}, 3, 3, "cross_session"),
        ({"emotional_weight": 1.8}, 1, 3, "emotional_repeated_access"),
        ({"emotional_weight": 1.8}, 1, 2, None),
        ({"emotional_weight": 1.0}, 1, 5, None),
        ({}, 2, 3, None),
    ],
    ids=[
        "user correction",
        "explicit importance",
        "seen in 3 sessions",
        "emotional and read 3 times",
        "emotional but read twice",
        "mildly emotional",
        "two sessions only",
    ],
)
def test_immediate_triggers(signals, sessions, access, trigger):
    """Four fast tracks make a 10-minute-old block a candidate regardless of score."""
    rec = _rec(signals=signals, access_count=access)
    result = score_composite(PromotionInputs(rec, T0 + 10 * M, [], sessions), CFG)
    assert result.trigger == trigger
    assert result.candidate is (trigger is not None)


def test_trigger_respects_contradiction_cooldown():
    """A fast track still waits out the 24-hour cooldown after a contradiction."""
    rec = _rec(signals={"user_corrections": 1}, last_contradiction_at=T0 + H)
    result = score_composite(PromotionInputs(rec, T0 + 2 * H, [], 1), CFG)
    assert result.trigger == "user_correction"
    assert not result.candidate
    assert result.blocked == ["contradiction 1.0h ago (cooldown 24h)"]


@pytest.mark.parametrize(
    ("age_h", "access", "blocked"),
    [
        (2.0, 5, ["age 2.0h < 6h"]),
        (30.0, 2, ["access 2 < 3"]),
        (1.0, 1, ["age 1.0h < 6h", "access 1 < 3"]),
        (6.0, 3, []),
    ],
)
def test_minimum_requirements(age_h, access, blocked):
    """Without a trigger a block must be 6 h old and read 3 times, whatever it scores."""
    rec = _rec(
        content=PYTHON,
        access_count=access,
        signals={"user_confirmations": 3, "consistency": 2, "emotional_weight": 1},
        reinforcement_count=5,
    )
    now = T0 + age_h * H
    result = score_composite(PromotionInputs(rec, now, [now - M] * access, 2), CFG)
    assert result.blocked == blocked
    assert result.candidate is (not blocked and result.total >= 7.0)


def test_distributed_access_beats_clustered():
    """Composite: 4 reads over 3 days earn the full spread bonus; 5 reads in an hour earn none."""
    now = T0 + 4 * D
    clustered = [T0 + 3 * D + i * 15 * M for i in range(5)]
    spread = [T0 + i * D for i in range(4)]
    rec = _rec(access_count=5)
    a = score_composite(PromotionInputs(rec, now, clustered, 1), CFG)
    rec.access_count = 4
    b = score_composite(PromotionInputs(rec, now, spread, 1), CFG)
    assert a.breakdown["access.time_spread"] == 0.0
    assert b.breakdown["access.time_spread"] == pytest.approx(2.0)
    assert b.breakdown["access_pattern"] > a.breakdown["access_pattern"]


def test_recent_access_weighs_more():
    """The same reads count less when the last of them was weeks ago."""
    times = [T0 + i * D for i in range(4)]
    rec = _rec(access_count=4)
    fresh = score_composite(PromotionInputs(rec, T0 + 4 * D, times, 2), CFG)
    old = score_composite(PromotionInputs(rec, T0 + 60 * D, times, 2), CFG)
    assert old.breakdown["access.recency_factor"] < fresh.breakdown["access.recency_factor"]
    assert old.breakdown["access.recency_factor"] >= 0.5
    assert old.breakdown["access_pattern"] < fresh.breakdown["access_pattern"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("My name is Ada and I am a nurse", {"identity": 2, "pronouns": 2}),
        ("I prefer tea; I hate coffee", {"preference": 2, "pronouns": 2}),
        ("I think tabs are wrong, in my opinion", {"belief": 2, "pronouns": 2}),
        ("I live in Seattle; we chose SQLite", {"factual": 2, "pronouns": 1}),
        ("the API timeout is 30 s", {}),
    ],
)
def test_content_markers(content, expected):
    """Content analysis finds identity, preference, belief and factual markers."""
    counts = content_markers(_rec(content=content))
    assert {k: v for k, v in counts.items() if v} == expected


def test_semantic_importance_is_capped():
    """A wall of identity statements scores 10, not more."""
    rec = _rec(content="My name is Ada. " * 50, access_count=3)
    result = score_composite(PromotionInputs(rec, T0 + D, [], 1), CFG)
    assert result.breakdown["semantic_importance"] == 10.0


@pytest.mark.parametrize(
    ("overrides", "candidate", "blocked"),
    [
        (
            {"access_count": 8, "importance": 0.6, "reinforcement_count": 3},
            True,
            [],
        ),
        (
            {"access_count": 6, "importance": 0.4, "reinforcement_count": 3},
            False,
            ["access 6 < 7", "importance 4.0 < 5"],
        ),
        (
            {
                "access_count": 9,
                "importance": 0.9,
                "reinforcement_count": 1,
                "created_at": T0 + 2 * D - 2 * H,
                "last_contradiction_at": T0 + 2 * D - H,
            },
            False,
            [
                "reinforcement 1 < 3",
                "age 2.0h < 24h",
                "contradiction 1.0h ago (cooldown 24h)",
            ],
        ),
    ],
    ids=["passes the simple rule", "fails it", "too young, too little reinforced, contradicted"],
)
def test_fallback_when_scoring_fails(overrides, candidate, blocked):
    """A broken signal makes scoring fail; the simple fallback rule decides, and says so."""
    rec = _rec(signals={"emotional_weight": math.nan}, **overrides)
    result = score_composite(PromotionInputs(rec, T0 + 2 * D, [], 1), CFG)
    assert result.fallback_used
    assert result.error is not None
    assert "emotional_weight" in result.error
    assert result.candidate is candidate
    assert result.blocked == blocked


def test_fallback_result_logs_why():
    """A fallback result's log record says the rule decided, why, and what it read."""
    rec = _rec(signals={"consistency": math.inf}, access_count=2)
    data = score_composite(PromotionInputs(rec, T0 + D, [], 1), CFG).as_dict()
    assert data["fallback_used"] is True
    assert data["error"] == "ValueError: signals['consistency'] is inf, expected a finite number"
    assert data["blocked"][0] == "access 2 < 7"
    assert data["breakdown"]["fallback.age_hours"] == 24.0


def test_last_access_time_stands_in_for_missing_access_times():
    """Without access timestamps, recency counts from the record's last access."""
    rec = _rec(access_count=3, last_accessed_at=T0 + 2 * D)
    result = score_composite(PromotionInputs(rec, T0 + 9 * D), CFG)
    assert result.breakdown["access.recency_factor"] == pytest.approx(0.75)


def test_score_result_as_dict_is_json():
    """A score result serializes to plain JSON with its breakdown and verdict."""
    rec = _rec(content=PYTHON, access_count=3)
    data = score_composite(PromotionInputs(rec, T0 + D, [T0 + H], 2), CFG).as_dict()
    decoded = json.loads(json.dumps(data))
    assert decoded["scorer"] == "composite"
    assert decoded["block_id"] == "b1"
    assert set(decoded["breakdown"]) >= {
        "access_pattern",
        "content_stability",
        "user_engagement",
        "semantic_importance",
    }


# --------------------------------------------------------------- multi-axis (the multi-axis scorer)


def test_multi_axis_breakdown_and_candidate():
    """Six saturating axes, weighted: a well-used, validated decision scores above 0.5."""
    rec = _rec(
        content="We chose SQLite for storage",
        tags=["db", "storage"],
        reliability=0.95,
        importance=0.7,
        access_count=6,
        reinforcement_count=2,
        session_count=3,
        last_accessed_at=T0 + 2 * D,
    )
    result = score_multi_axis(PromotionInputs(rec, T0 + 2 * D + 2 * H), CFG)
    axes = {k: v for k, v in result.breakdown.items() if "." not in k}
    assert axes == {
        "frequency": pytest.approx(1 - math.exp(-6 / 5)),
        "relevance": pytest.approx(0.95 * 0.7),
        "diversity": pytest.approx(1 - math.exp(-2 / 2)),
        "recency": pytest.approx(math.exp(-2 / 72)),
        "consolidation": pytest.approx(1 - math.exp(-2 / 2)),
        "conceptual": pytest.approx(1 - math.exp(-3 / 3)),
    }
    assert result.total == pytest.approx(0.702, abs=0.001)
    assert result.candidate
    assert result.threshold == 0.5


def test_multi_axis_new_block_is_not_a_candidate():
    """A block nobody has read, reinforced or tagged stays below 0.5."""
    rec = _rec(reliability=0.6, importance=0.5)
    result = score_multi_axis(PromotionInputs(rec, T0 + H), CFG)
    assert result.total < 0.5
    assert not result.candidate


def test_multi_axis_uses_configured_weights():
    """Weights come from config: all weight on relevance makes the total the relevance."""
    weights = dict.fromkeys(
        ("frequency", "diversity", "recency", "consolidation", "conceptual"), 0.0
    )
    cfg = PolicyConfig.model_validate(
        {
            "promotion": {
                "scorer": "multi_axis",
                "multi_axis": {"weights": {**weights, "relevance": 1.0}},
            }
        }
    )
    rec = _rec(reliability=0.8, importance=0.75)
    result = score(PromotionInputs(rec, T0 + H), cfg)
    assert result.scorer == "multi_axis"
    assert result.total == pytest.approx(0.6)


def test_multi_axis_respects_the_cooldown():
    """A contradiction within 24 h blocks a multi-axis candidate too."""
    rec = _rec(
        reliability=1.0,
        importance=1.0,
        access_count=30,
        reinforcement_count=9,
        session_count=9,
        tags=["a", "b", "c", "d"],
        last_accessed_at=T0 + D,
        last_contradiction_at=T0 + 12 * H,
    )
    result = score_multi_axis(PromotionInputs(rec, T0 + D), CFG)
    assert result.total > 0.5
    assert not result.candidate
    assert result.blocked == ["contradiction 12.0h ago (cooldown 24h)"]


def test_score_dispatches_on_config():
    """promotion.scorer picks the scorer; composite is the default."""
    rec = _rec()
    assert score(PromotionInputs(rec, T0), CFG).scorer == "composite"


# ------------------------------------------------------------------ consolidation pass


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"state": "stale"}, "stale"),
        ({"stale_at": T0 + D}, "stale"),
        ({"reliability": 0.65}, "reliability 0.65 < 0.7"),
        ({"volatility": "ephemeral"}, "ephemeral"),
        ({"info_type": "ephemeral"}, "ephemeral"),
        ({"info_type": "dynamic", "volatility": "high"}, "dynamic with high volatility"),
        ({"flapping": True}, "flapping"),
        ({"state": "refuted"}, "state is refuted"),
        ({"state": "archived"}, "state is archived"),
        ({"tier": "long_term"}, "tier is long_term, not short_term"),
        ({"last_contradiction_at": T0 + 2 * D - H}, "contradiction 1.0h ago (cooldown 24h)"),
    ],
)
def test_consolidation_refuses(overrides, reason):
    """The final call refuses what is not known to be true and lasting, whatever the score."""
    promote, reasons = consolidation_verdict(_rec(**overrides), _candidate(), T0 + 2 * D, CFG)
    assert not promote
    assert reasons == [reason]


def test_consolidation_refuses_a_non_candidate_and_says_why():
    """A score below the threshold, or a blocked one, is not promoted."""
    low = _candidate(candidate=False, total=6.1)
    assert consolidation_verdict(_rec(), low, T0 + D, CFG) == (
        False,
        ["not a candidate (score 6.10 < 7)"],
    )
    blocked = _candidate(candidate=False, blocked=["age 2.0h < 6h"])
    assert consolidation_verdict(_rec(), blocked, T0 + D, CFG)[1] == [
        "not a candidate (age 2.0h < 6h)"
    ]


def test_consolidation_promotes_a_sound_candidate():
    """A fresh, reliable, lasting short_term candidate is promoted."""
    assert consolidation_verdict(_rec(), _candidate(), T0 + D, CFG) == (True, [])


# ------------------------------------------------------------------ core (the core rule)

# (time since creation, new session?) for each retrieval of "User is allergic to peanuts"
_LIFECYCLE = [
    (1 * D, True),  # session 2
    (1 * D + 5 * M, False),
    (2 * D, True),  # session 3
    (2 * D + 5 * M, False),
    (2 * D + 10 * M, False),  # access 5: stability ~0.6, 3 sessions
    (4 * D + 9 * H, True),  # session 4
    (4 * D + 12 * H, False),
    (4 * D + 12 * H + 10 * M, False),
    (6 * D + 9 * H, True),  # session 5
    (6 * D + 13 * H, False),  # access 10: stability still < 0.85
    (6 * D + 18 * H, False),  # access 11: promoted
]


def test_seed_000_core_lifecycle():
    """Core: 0.37 at start, ~0.6 after 5 reads in 3 sessions, core at read 11 (~0.88, 5)."""
    rec = _rec(
        content="User is allergic to peanuts",
        tier="long_term",
        importance=0.9,
        stability=0.37,
        session_count=1,
    )
    promoted_at = None
    for n, (dt, new_session) in enumerate(_LIFECYCLE, start=1):
        if record_access(rec, T0 + dt, new_session=new_session, cfg=CFG):
            promoted_at = n
        if n == 5:
            assert rec.stability == pytest.approx(0.6, abs=0.02)
            assert rec.session_count == 3
    assert promoted_at == 11
    assert rec.tier == "core"
    assert rec.stability == pytest.approx(0.88, abs=0.02)
    assert rec.session_count == 5
    assert rec.access_count == 11
    assert retention(rec, T0 + 3650 * D, CFG) == 0.6


@pytest.mark.parametrize(
    ("gap_s", "blockers"),
    [
        (10.0, ["stability 0.496 < 0.85", "sessions 1 < 3"]),
        (2 * H, ["sessions 1 < 3"]),
    ],
    ids=["a burst", "spaced, but one session"],
)
def test_seed_000_hundred_reads_in_one_session_do_not_promote(gap_s, blockers):
    """The core rule: a memory read 100 times in a single session never becomes core."""
    rec = _rec(tier="long_term", session_count=1)
    promoted = [
        record_access(rec, T0 + 2 * H + i * gap_s, new_session=False, cfg=CFG) for i in range(100)
    ]
    assert not any(promoted)
    assert rec.access_count == 100
    assert core_promotion_blockers(rec, CFG) == blockers


def test_only_spaced_reads_build_stability():
    """A read within an hour of the previous one adds no stability."""
    rec = _rec(tier="long_term", stability=0.37, last_accessed_at=T0)
    record_access(rec, T0 + 30 * M, new_session=False, cfg=CFG)
    assert rec.stability == pytest.approx(0.37)
    record_access(rec, T0 + 90 * M, new_session=False, cfg=CFG)
    assert rec.stability == pytest.approx(0.37 + 0.2 * 0.63)
    assert rec.recent_access_count == 2
    assert rec.last_accessed_at == T0 + 90 * M


def test_out_of_order_access_keeps_the_latest_time():
    """A late-arriving older access is counted but does not move last_accessed_at back."""
    rec = _rec(tier="long_term", last_accessed_at=T0 + D)
    record_access(rec, T0 + H, new_session=False, cfg=CFG)
    assert rec.last_accessed_at == T0 + D
    assert rec.access_count == 1


def test_new_record_starts_at_initial_stability():
    """A record with no stability yet starts from the core rule's 0.37."""
    rec = _rec(tier="long_term", stability=0.0)
    record_access(rec, T0 + 10 * M, new_session=False, cfg=CFG)
    assert rec.stability == pytest.approx(0.37)


@pytest.mark.parametrize(
    ("overrides", "blocker"),
    [
        ({"tier": "short_term"}, "tier is short_term, not long_term"),
        ({"tier": "core"}, "tier is core, not long_term"),
        ({"volatility": "ephemeral"}, "ephemeral"),
        ({"info_type": "ephemeral"}, "ephemeral"),
        ({"state": "refuted"}, "state is refuted"),
        ({"state": "stale"}, "state is stale"),
        ({"flapping": True}, "flapping"),
    ],
)
def test_core_needs_a_lasting_long_term_block(overrides, blocker):
    """Usage never lifts a short_term, ephemeral, doubtful or flapping block to core."""
    rec = _rec(
        **{
            "tier": "long_term",
            "access_count": 20,
            "stability": 0.95,
            "session_count": 6,
            **overrides,
        }
    )
    assert core_promotion_blockers(rec, CFG) == [blocker]
    assert not check_core_promotion(rec, CFG)
    assert rec.tier == overrides.get("tier", "long_term")


def test_seed_000_contradiction_demotes_core():
    """The core rule: 'moved from Portland to Seattle' demotes 'lives in Portland' from core."""
    rec = _rec(
        content="User lives in Portland",
        tier="core",
        access_count=15,
        stability=0.9,
        session_count=6,
    )
    assert demote_core(rec, CFG)
    assert rec.tier == "long_term"
    assert rec.stability == pytest.approx(0.37)
    assert retention(rec, T0 + 3650 * D, CFG) == 0.02
    # the next read does not put it straight back
    assert not record_access(rec, T0 + 10 * D, new_session=True, cfg=CFG)
    assert not demote_core(rec, CFG)


# ------------------------------------------------------------------ properties

_unit = st.floats(min_value=0, max_value=1)
_count = st.integers(min_value=0, max_value=1000)
_signal_values = st.floats(min_value=-5, max_value=1e6, allow_nan=False)


@st.composite
def _any_record(draw: st.DrawFn) -> BlockRecord:
    validated = draw(st.none() | st.floats(min_value=0, max_value=30 * D))
    return _rec(
        content=draw(st.sampled_from([PYTHON, "My name is Ada. " * 20, "x", "I think we chose"])),
        tags=draw(st.lists(st.text(max_size=3), max_size=5)),
        info_type=draw(st.sampled_from(["static", "semi_static", "dynamic", "ephemeral"])),
        volatility=draw(st.sampled_from(["low", "medium", "high", "ephemeral"])),
        tier=draw(st.sampled_from(["short_term", "long_term", "core"])),
        state=draw(st.sampled_from(["unverified", "fresh", "stale", "refuted", "archived"])),
        reliability=draw(_unit),
        importance=draw(_unit),
        validated_at=None if validated is None else T0 + validated,
        stale_at=None if validated is None else T0 + validated + draw(st.floats(0, 30 * D)),
        access_count=draw(_count),
        reinforcement_count=draw(_count),
        contradiction_count=draw(_count),
        session_count=draw(_count),
        flapping=draw(st.booleans()),
        last_contradiction_at=draw(st.none() | st.floats(min_value=T0, max_value=T0 + 30 * D)),
        signals=draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        "user_confirmations",
                        "user_corrections",
                        "user_initiated_mentions",
                        "emotional_weight",
                        "explicit_importance",
                        "consistency",
                    ]
                ),
                _signal_values,
            )
        ),
    )


_now = st.floats(min_value=T0, max_value=T0 + 60 * D)
_access_times = st.lists(st.floats(min_value=T0, max_value=T0 + 60 * D), max_size=30)


@given(rec=_any_record(), now=_now, times=_access_times)
def test_composite_total_is_between_0_and_10(rec, now, times):
    """Whatever the inputs, the composite total is in 0..10 and finite."""
    result = score_composite(PromotionInputs(rec, now, times), CFG)
    assert 0.0 <= result.total <= 10.0
    assert all(math.isfinite(v) for v in result.breakdown.values())


@given(rec=_any_record(), now=_now, times=_access_times)
def test_multi_axis_total_is_between_0_and_1(rec, now, times):
    """Whatever the inputs, the multi-axis total and every axis are in 0..1."""
    result = score_multi_axis(PromotionInputs(rec, now, times), CFG)
    assert 0.0 <= result.total <= 1.0
    assert all(0.0 <= v <= 1.0 for k, v in result.breakdown.items() if "." not in k)


@given(rec=_any_record(), now=_now, times=_access_times, scorer=st.sampled_from(["c", "m"]))
def test_consolidation_never_promotes_an_ephemeral_block(rec, now, times, scorer):
    """No score, trigger or signal gets an ephemeral block past the consolidation pass."""
    rec.volatility = "ephemeral" if rec.info_type != "ephemeral" else rec.volatility
    scorer_fn = score_composite if scorer == "c" else score_multi_axis
    result = scorer_fn(PromotionInputs(rec, now, times), CFG)
    promote, reasons = consolidation_verdict(rec, result, now, CFG)
    assert not promote
    assert "ephemeral" in reasons
    assert not consolidation_verdict(rec, _candidate(), now, CFG)[0]
