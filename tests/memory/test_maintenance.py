"""The store's maintenance passes: accesses and core promotion, decay, the heuristic cycle,
consolidation, explain and health, on real SQLite files."""

from __future__ import annotations

import copy
import json
import math
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.memory.gradual_example import CONTENT as GRADUAL_CONTENT
from tests.memory.gradual_example import DAYS as GRADUAL_DAYS
from tests.memory.gradual_example import STEADY_SIGNALS, Day

import memwarden.memory._maintenance as maintenance
from memwarden.memory import BlockRecord, Explanation, FakeClock, ValidationEvent, from_ts
from memwarden.memory._codec import BLOCK_COLUMNS, record_to_row
from memwarden.memory._results import ExplainRank, ExplainRetention, ExplainState, ExplainValidation
from memwarden.memory._schema import MIGRATIONS, split_statements
from memwarden.memory._scorelog import read as read_score_log
from memwarden.memory._sqlrules import retention_sql, rule_params
from memwarden.memory.policy import (
    PolicyConfig,
    archive_reason,
    heuristic_cycle,
    retention,
)

if TYPE_CHECKING:
    from pathlib import Path

    from memwarden.memory import ApplyResult, Store

M = 60.0
H = 3600.0
D = 86400.0
T0 = FakeClock().time()  # 2026-01-01T00:00:00Z, where every test clock starts
CFG = PolicyConfig()
_INSERT = (
    f"INSERT INTO blocks ({', '.join(BLOCK_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in BLOCK_COLUMNS)})"
)


def _rec(block_id: str, **overrides: Any) -> BlockRecord:
    fields: dict[str, Any] = {
        "id": block_id,
        "title": "",
        "content": f"note {block_id}",
        "tags": [],
        "source": "agent",
        "category": "semantic",
        "info_type": "semi_static",
        "volatility": "medium",
        "tier": "short_term",
        "state": "fresh",
        "stale_reasons": [],
        "reliability": 0.9,
        "importance": 0.8,
        "validated_by": "tests",
        "validated_at": T0 - D,
        "validity_window_s": 7 * D,
        "stale_at": T0 + 6 * D,
        "half_life_s": 14 * D,
        "created_at": T0 - 30 * D,
        "updated_at": T0 - D,
    }
    fields.update(overrides)
    return BlockRecord(**fields)


async def _insert(store: Store, records: list[BlockRecord]) -> None:
    """Write records as they are, bypassing the rules (to set up any shape of block)."""
    rows = [record_to_row(r) for r in records]

    async def job(conn: Any) -> None:
        await conn.executemany(_INSERT, rows)

    await store.db.write(job)


async def _sql_retention(store: Store, now: float) -> dict[str, float]:
    async with (
        store.db.read() as conn,
        conn.execute(
            f"SELECT b.id, {retention_sql('b')} FROM blocks b", rule_params(store.policy, now)
        ) as cur,
    ):
        return {r[0]: r[1] for r in await cur.fetchall()}


def _event(block_id: str, outcome: str, at: float, sensor: str = "human") -> ValidationEvent:
    return ValidationEvent(
        sensor=sensor, block_id=block_id, outcome=outcome, observed_at=from_ts(at)
    )


async def _apply(store: Store, event: ValidationEvent) -> ApplyResult:
    """Apply one event and check it reached its block (not rejected, not unmatched)."""
    result = await store.apply_events([event])
    assert (result.accepted, result.rejected, result.unmatched) == (1, [], 0)
    return result


# ------------------------------------------------------------------ retention in SQL

_RETENTION_CASES: dict[str, dict[str, Any]] = {
    "fresh, validated a day ago": {},
    "fresh in storage, past its window": {"validated_at": T0 - 10 * D, "stale_at": T0 - 3 * D},
    "stored stale": {"state": "stale", "stale_reasons": ["source_changed"]},
    "unverified, never validated": {
        "state": "unverified",
        "validated_at": None,
        "validated_by": None,
        "stale_at": T0 - 23 * D,
    },
    "unverified without stale_at": {"state": "unverified", "validated_at": None, "stale_at": None},
    "core, untouched for ten years": {
        "tier": "core",
        "validated_at": T0 - 3650 * D,
        "stale_at": T0 - 3643 * D,
        "created_at": T0 - 3700 * D,
    },
    "accessed after its validation": {"last_accessed_at": T0 - 2 * H, "validated_at": T0 - 9 * D},
    "accessed just now": {"last_accessed_at": T0},
    "validated in the future (no age)": {"validated_at": T0 + H, "stale_at": T0 + 8 * D},
    "zero half-life": {"half_life_s": 0.0},
    "zero half-life, touched now": {"half_life_s": 0.0, "last_accessed_at": T0},
    "refuted": {"state": "refuted", "reliability": 0.27},
    "episodic, stretched half-life": {"category": "episodic", "half_life_s": 90 * D},
    "low importance": {"importance": 0.01},
}


async def test_sql_retention_equals_the_rule(store):
    """The SQL retention (search, decay, health) equals policy.retention for every shape."""
    records = [_rec(name, **fields) for name, fields in _RETENTION_CASES.items()]
    await _insert(store, records)
    sql = await _sql_retention(store, T0)
    for rec in records:
        assert sql[rec.id] == pytest.approx(retention(rec, T0, CFG), rel=1e-12, abs=1e-15), rec.id


async def test_search_ranks_with_the_rule_retention(store, clock):
    """A search hit's retention factor is policy.retention of its block as of now."""
    block = await store.add({"content": "the deploy timeout is 30 seconds", "importance": 0.9})
    clock.advance(10 * D)
    [hit] = await store.search("timeout")
    rec = await store.get_record(block.id)
    assert hit.retention == pytest.approx(retention(rec, clock.time(), CFG), rel=1e-12)
    assert hit.stale  # unverified past its 7-day window: decays twice as fast
    assert hit.retention == pytest.approx(0.9 * 2 ** (-10 / 7), rel=1e-9)


def _schema(conn: sqlite3.Connection) -> None:
    for script in MIGRATIONS:  # every migration: the record's columns are the latest
        for statement in split_statements(script):
            conn.execute(statement)


_times = st.floats(min_value=0, max_value=400 * D)


@given(
    importance=st.floats(min_value=0, max_value=1),
    half_life=st.sampled_from([0.0, 1.0, H, 14 * D]) | _times,
    tier=st.sampled_from(["short_term", "long_term", "core"]),
    state=st.sampled_from(["fresh", "unverified", "stale", "refuted"]),
    validated_ago=st.none() | _times,
    window=_times,
    accessed_ago=st.none() | _times,
    steps=st.lists(st.floats(min_value=0, max_value=100 * D), min_size=1, max_size=8),
)
def test_sql_retention_never_rises_nor_drops_below_the_floor(  # noqa: PLR0917 - hypothesis
    importance, half_life, tier, state, validated_ago, window, accessed_ago, steps
):
    """Without events or accesses, SQL retention only falls as the clock advances, down to
    the floor and never below it."""
    clock = FakeClock()
    start = clock.time()
    validated_at = None if validated_ago is None else start - validated_ago
    created_at = start - 500 * D
    rec = _rec(
        "p",
        importance=importance,
        half_life_s=half_life,
        tier=tier,
        state=state,
        validated_at=validated_at,
        stale_at=(validated_at if validated_at is not None else created_at) + window,
        created_at=created_at,
        last_accessed_at=None if accessed_ago is None else start - accessed_ago,
    )
    floor = CFG.decay.core_floor if tier == "core" else CFG.decay.floor
    conn = sqlite3.connect(":memory:")
    try:
        _schema(conn)
        conn.execute(_INSERT, record_to_row(rec))
        previous = math.inf
        for step in steps:
            now = clock.advance(step)
            (value,) = conn.execute(
                f"SELECT {retention_sql('b')} FROM blocks b", rule_params(CFG, now)
            ).fetchone()
            assert value >= floor
            assert value <= previous
            assert value == pytest.approx(retention(rec, now, CFG), rel=1e-12, abs=1e-15)
            previous = value
    finally:
        conn.close()


# ------------------------------------------------------------------ core promotion (the core rule)

# (time since creation, session) of each retrieval of "User is allergic to peanuts"
_LIFECYCLE = [
    (1 * D, "s1"),
    (1 * D + 5 * M, "s2"),
    (2 * D, "s3"),
    (2 * D + 5 * M, "s3"),
    (2 * D + 10 * M, "s3"),  # access 5: stability ~0.6, 3 sessions
    (4 * D + 9 * H, "s4"),
    (4 * D + 12 * H, "s4"),
    (4 * D + 12 * H + 10 * M, "s4"),
    (6 * D + 9 * H, "s5"),
    (6 * D + 13 * H, "s5"),  # access 10: stability still < 0.85
    (6 * D + 18 * H, "s5"),  # access 11: promoted
]


async def test_seed_000_lifecycle_through_search(make_store, tmp_path, clock):
    """The core rule end to end: retrievals by search in 5 sessions make the block core at
    access 11 (stability ~0.87), and the promotion reaches the score log."""
    store = await make_store(score_log=tmp_path / "scores.jsonl")
    block = await store.add(
        {
            "content": "User is allergic to peanuts",
            "tier": "long_term",
            "importance": 0.9,
            "info_type": "static",
        }
    )
    promoted_at = None
    for n, (dt, session) in enumerate(_LIFECYCLE, start=1):
        clock.set(T0 + dt)
        if n < len(_LIFECYCLE):
            [hit] = await store.search("peanuts", session=session)
            assert hit.block.id == block.id
            now_core = (await store.get(block.id)).tier == "core"
        else:
            now_core = await store.record_access([block.id], session=session) == [block.id]
        if now_core and promoted_at is None:
            promoted_at = n
        if n == 5:
            at_five = await store.get(block.id)
            assert at_five.stability == pytest.approx(0.6, abs=0.01)
            assert at_five.session_count == 3
    assert promoted_at == 11
    core = await store.get(block.id)
    assert core.tier == "core"
    assert core.stability == pytest.approx(0.87, abs=0.01)
    assert core.session_count == 5
    assert core.access_count == 11

    async with store.db.read() as conn:
        async with conn.execute("SELECT count(*) FROM accesses") as cur:
            assert (await cur.fetchone())[0] == 11
        async with conn.execute("SELECT count(*), sum(count) FROM sessions") as cur:
            assert tuple(await cur.fetchone()) == (5, 11)
    [line] = read_score_log(tmp_path / "scores.jsonl")
    assert line["event"] == "core_promotion"
    assert line["block_id"] == block.id
    assert line["breakdown"] == {"access_count": 11.0, "stability": 0.8679, "sessions": 5.0}


@pytest.mark.parametrize(
    ("gap_s", "stability"), [(10.0, 0.37), (2 * H, 1.0)], ids=["burst", "spaced"]
)
async def test_seed_000_hundred_reads_in_one_session_do_not_promote(store, clock, gap_s, stability):
    """The core rule: a block read 100 times in a single session never becomes core."""
    block = await store.add({"content": "User prefers window seats", "tier": "long_term"})
    for _ in range(100):
        clock.advance(gap_s)
        assert await store.record_access([block.id], session="only") == []
    after = await store.get(block.id)
    assert after.tier == "long_term"
    assert after.access_count == 100
    assert after.session_count == 1
    assert after.stability == pytest.approx(stability, abs=0.01)


async def test_search_records_only_with_a_session(store, clock):
    """Search counts retrievals only when given a session (and record=True); no session
    counts an access but no session."""
    block = await store.add({"content": "the staging database is postgres"})
    await store.search("postgres")
    await store.search("postgres", session="s1", record=False)
    assert (await store.get(block.id)).access_count == 0
    await store.record_access([block.id, "no-such-block"])
    await store.search("postgres", session="s1")
    await store.search("postgres", session="s1")
    after = await store.get(block.id)
    assert after.access_count == 3
    assert after.session_count == 1
    assert after.last_accessed_at == from_ts(clock.time())


async def test_seed_000_hard_refutation_demotes_core(store, clock):
    """The core rule: 'User lives in Portland', core, refuted by a review goes back to
    long_term with its stability reset."""
    block = await store.add({"content": "User lives in Portland", "tier": "core"})
    for session in ("a", "b", "c"):
        clock.advance(2 * H)
        await store.record_access([block.id], session=session)
    assert (await store.get(block.id)).stability > 0.6
    clock.advance(H)
    result = await _apply(store, _event(block.id, "refuted", clock.time(), "review"))
    assert result.changes[0].after == "refuted"
    after = await store.get(block.id)
    assert after.tier == "long_term"
    assert after.stability == pytest.approx(CFG.promotion.core.initial_stability)
    explained = await store.explain(block.id)
    assert explained["promotion"]["core"]["blockers"] == [
        "state is refuted",
        "access 3 < 10",
        "stability 0.370 < 0.85",
    ]


# ------------------------------------------------------------------ decay


async def test_decay_cycle_archives_old_unvalidated_blocks_only(store, clock):
    """Decay archives an old unvalidated short_term block with a reason and an audit row,
    never a core block nor one validated inside its window; archived blocks leave search
    and restore brings them back."""
    old = await store.add({"content": "the kumquat service listens on 8080", "importance": 0.5})
    core = await store.add({"content": "the kumquat owner is Dana", "tier": "core"})
    vouched = await store.add(
        {"content": "the kumquat repo is on GitLab", "importance": 0.5, "validity_window": "365d"}
    )
    clock.advance(H)
    await _apply(store, _event(vouched.id, "confirmed", clock.time(), "tests"))
    clock.advance(100 * D)
    before = await store.get_record(old.id)
    expected_reason = archive_reason(before, clock.time(), CFG)
    assert expected_reason is not None

    report = await store.decay_cycle(chunk_rows=1)

    assert report.chunks == 3
    assert report.scanned == 3
    assert report.retention_updated == 3
    assert report.archived == 1
    assert report.archived_blocks == [(old.id, expected_reason)]
    assert expected_reason.startswith("retention 0.020 < 0.05 (untouched 100.0d, half-life 7d")
    archived = await store.get(old.id)
    assert archived.state == "archived"
    assert archived.archive_reason == expected_reason
    assert archived.archived_at == from_ts(clock.time())
    assert (await store.get(core.id)).retention == pytest.approx(0.6)
    kept = await store.get_record(vouched.id)
    assert kept.state == "fresh"
    assert kept.retention == pytest.approx(retention(kept, clock.time(), CFG))
    assert kept.retention < CFG.decay.archive_below  # kept only because a sensor vouches
    async with (
        store.db.read() as conn,
        conn.execute(
            "SELECT actor, action, detail FROM audit WHERE block_id = ?", (old.id,)
        ) as cur,
    ):
        audit = [tuple(r) for r in await cur.fetchall()]
    assert audit[-1] == (
        "decay",
        "archive",
        json.dumps({"reason": expected_reason}, separators=(",", ":")),
    )
    assert {h.block.id for h in await store.search("kumquat")} == {core.id, vouched.id}

    again = await store.decay_cycle()
    assert again.archived == 0
    assert again.retention_updated == 0  # nothing moved: the clock did not

    await store.restore(old.id)
    assert old.id in {h.block.id for h in await store.search("kumquat")}


async def test_decay_cycle_reports_the_first_archived_blocks_and_counts_them_all(
    store, clock, monkeypatch: pytest.MonkeyPatch
):
    """The report lists the first archived blocks (rid order, up to its limit, across
    chunks) with the reason each one stored, and counts every archived block; each has
    its audit row."""
    monkeypatch.setattr(maintenance, "_REPORT_LIMIT", 3)
    added = [
        await store.add({"content": f"decaying note {i}", "importance": 0.5}) for i in range(5)
    ]
    kept = await store.add({"content": "a core note", "tier": "core"})
    clock.advance(100 * D)

    report = await store.decay_cycle(chunk_rows=2)

    assert report.chunks == 3
    assert report.archived == 5
    assert [i for i, _ in report.archived_blocks] == [b.id for b in added[:3]]
    for block_id, reason in report.archived_blocks:
        assert (await store.get(block_id)).archive_reason == reason
    assert (await store.get(kept.id)).state != "archived"
    async with store.db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT block_id, json_extract(detail, '$.reason') FROM audit"
            " WHERE actor = 'decay' ORDER BY id"
        )
    assert [r[0] for r in rows] == [b.id for b in added]
    assert [tuple(r) for r in rows[:3]] == report.archived_blocks


async def test_decay_cycle_stores_the_rule_retention(store, clock):
    """After a decay cycle each block's stored retention is policy.retention at that time."""
    records = [_rec(name, **fields) for name, fields in _RETENTION_CASES.items()]
    await _insert(store, records)
    clock.set(T0)
    report = await store.decay_cycle()
    assert report.scanned == len(records)
    for rec in records:
        stored = await store.get_record(rec.id)
        assert stored.retention == pytest.approx(retention(rec, T0, CFG), rel=1e-12), rec.id
        assert (stored.state == "archived") is (archive_reason(rec, T0, CFG) is not None), rec.id


# ------------------------------------------------------------------ heuristic cycle

_HEURISTIC_CASES: dict[str, dict[str, Any]] = {
    "idle": {"recent_access_count": 0},
    "read 3 times": {"recent_access_count": 3},
    "read 5 times": {"recent_access_count": 5},
    "read 12 times": {"recent_access_count": 12, "importance": 0.5},
    "read 12 times, near full importance": {"recent_access_count": 12, "importance": 0.95},
    "episodic near its cap": {
        "recent_access_count": 6,
        "category": "episodic",
        "half_life_s": 80 * D,
    },
    "episodic above its cap": {
        "recent_access_count": 6,
        "category": "episodic",
        "half_life_s": 180 * D,
    },
    "semantic at its cap": {"recent_access_count": 20, "half_life_s": 180 * D},
    "ephemeral": {"recent_access_count": 20, "volatility": "ephemeral", "half_life_s": 600.0},
    "full importance": {"recent_access_count": 10, "importance": 1.0},
}


async def test_heuristic_cycle_agrees_with_the_rule(store):
    """The set-based heuristic cycle changes each block exactly as policy.heuristic_cycle."""
    records = [_rec(name, **fields) for name, fields in _HEURISTIC_CASES.items()]
    await _insert(store, records)
    expected = {}
    for rec in records:
        mine = copy.deepcopy(rec)
        expected[rec.id] = (heuristic_cycle(mine, CFG), mine)

    counts = await store.heuristic_cycle(chunk_rows=4)

    for rec in records:
        stored = await store.get_record(rec.id)
        want = expected[rec.id][1]
        assert stored.importance == pytest.approx(want.importance, rel=1e-12), rec.id
        assert stored.half_life_s == pytest.approx(want.half_life_s, rel=1e-12), rec.id
        assert stored.recent_access_count == 0
    changes = [c for c, _ in expected.values()]
    assert counts["blocks"] == sum("recent_access_count" in c for c in changes)
    assert counts["importance_raised"] == sum("importance" in c for c in changes)
    assert counts["half_life_extended"] == sum("half_life_s" in c for c in changes)
    assert counts["chunks"] == 3
    assert (await store.heuristic_cycle())["blocks"] == 0  # counts were reset


# ------------------------------------------------------------- consolidation (the composite scorer)


async def _live_day(store: Store, clock: FakeClock, block_id: str, day: Day) -> None:
    """The day's reads and signals, and its sensor confirmation, at their times."""
    for hours, session in day.reads:
        clock.set(T0 + hours * H)
        await store.record_access([block_id], session=session)
    signals = {"user_initiated_mentions": day.mentions, "user_confirmations": day.confirmations}
    await store.update(block_id, {"signals": signals})
    if day.confirmed_at_h is not None:
        await _apply(store, _event(block_id, "confirmed", T0 + day.confirmed_at_h * H))
    clock.set(T0 + day.scored_at_h * H)


async def test_consolidation_promotes_the_gradual_python_preference(make_store, tmp_path, clock):
    """The gradual example (tests/memory/gradual_example.py) through the store: the totals
    worked out by hand, 6.1 on day 2 (stays short_term) and 7.8 on day 3 (promoted);
    stale, unreliable and ephemeral candidates are refused; every score goes to the JSONL
    score log with its breakdown."""
    log_path = tmp_path / "scores.jsonl"
    store = await make_store(score_log=log_path)
    day1, day2, day3 = GRADUAL_DAYS
    python = await store.add(
        {
            "content": GRADUAL_CONTENT,
            "source": "user",
            "signals": {**STEADY_SIGNALS, "user_initiated_mentions": day1.mentions},
        }
    )
    fast_track = {"signals": {"user_corrections": 1}, "source": "user"}
    stale = await store.add({"content": "I prefer tabs", "validity_window": "1d", **fast_track})
    unreliable = await store.add({"content": "I prefer vim", **fast_track, "source": "agent"})
    ephemeral = await store.add(
        {"content": "I am in a meeting", **fast_track, "volatility": "ephemeral"}
    )

    await _live_day(store, clock, python.id, day1)
    await _live_day(store, clock, python.id, day2)
    on_day2 = await store.consolidate()
    assert on_day2.promoted == []
    assert (await store.get(python.id)).tier == "short_term"

    await _live_day(store, clock, python.id, day3)
    on_day3 = await store.consolidate()
    assert on_day3.promoted == [python.id]
    assert (await store.get(python.id)).tier == "long_term"
    assert on_day3.refused == {
        stale.id: ["stale"],
        unreliable.id: ["reliability 0.60 < 0.7"],
    }
    assert on_day3.considered == 3  # the ephemeral block never reaches the scorer
    assert (await store.get(ephemeral.id)).tier == "short_term"

    lines = read_score_log(log_path)
    by_day = [
        [ln for ln in lines if ln["at"] == from_ts(T0 + day.scored_at_h * H).isoformat()]
        for day in (day2, day3)
    ]
    [python_day2] = [ln for ln in by_day[0] if ln["block_id"] == python.id]
    assert python_day2["total"] == pytest.approx(day2.total, abs=1e-3)  # 6.102
    assert round(python_day2["total"], 1) == day2.stated_total == 6.1
    assert python_day2["promoted"] is False
    assert python_day2["reasons"] == [f"not a candidate (score {day2.total:.2f} < 7)"]
    day3_lines = {ln["block_id"]: ln for ln in by_day[1]}
    assert set(day3_lines) == {python.id, stale.id, unreliable.id}
    python_day3 = day3_lines[python.id]
    assert python_day3["total"] == pytest.approx(day3.total, abs=1e-3)  # 7.803
    assert round(python_day3["total"], 1) == day3.stated_total == 7.8
    assert python_day3["promoted"] is True
    assert python_day3["event"] == "consolidation"
    breakdown = python_day3["breakdown"]
    assert breakdown["access_pattern"] == pytest.approx(day3.access, abs=1e-3)  # 7.45
    assert breakdown["content_stability"] == pytest.approx(day3.stability, abs=1e-3)
    assert breakdown["user_engagement"] == pytest.approx(day3.engagement, abs=1e-3)
    assert day3_lines[stale.id]["reasons"] == ["stale"]
    assert day3_lines[stale.id]["trigger"] == "user_correction"

    assert (await store.consolidate()).promoted == []  # long_term now: not considered again


async def test_consolidation_limit_caps_the_blocks_scored(store):
    """``limit`` bounds how many blocks one pass scores."""
    for i in range(5):
        await store.add({"content": f"I prefer option {i}", "signals": {"explicit_importance": 1}})
    report = await store.consolidate(limit=2)
    assert report.considered == 2


# ------------------------------------------------------------------ explain and health


_EXPLAIN_SECTIONS = {
    "state": ExplainState,
    "validation": ExplainValidation,
    "retention": ExplainRetention,
    "rank": ExplainRank,
}


async def test_explain_has_every_section(store, clock):
    """explain shows state, reliability history, validation, retention inputs, rank factors,
    promotion scores and blockers and the events behind them, all JSON-serializable."""
    block = await store.add({"content": "I work as a nurse in Leeds", "source": "user"})
    clock.advance(H)
    await _apply(store, _event(block.id, "confirmed", clock.time(), "tests"))
    clock.advance(H)
    await store.record_access([block.id], session="s1")
    clock.advance(8 * D)  # past the 7-day window

    explained = await store.explain(block.id)

    json.dumps(explained)
    assert set(explained) == set(Explanation.__annotations__)  # the typed answer, no more
    for section in ("state", "validation", "retention", "rank"):
        assert set(explained[section]) == set(_EXPLAIN_SECTIONS[section].__annotations__)
    assert explained["state"]["effective"] == "stale"
    assert explained["state"]["stale_reasons"] == ["expired"]
    [change] = explained["reliability"]["history"]
    assert (change["sensor"], change["outcome"]) == ("tests", "confirmed")
    assert (change["before"], change["after"]) == (0.8, 1.0)
    assert explained["validation"]["inside_window"] is False
    rec = await store.get_record(block.id)
    kept = retention(rec, clock.time(), CFG)
    assert explained["retention"]["value"] == pytest.approx(kept)
    assert explained["retention"]["half_life_effective_s"] == 7 * D
    assert explained["retention"]["floor"] == 0.02
    assert explained["rank"]["freshness"] == CFG.ranking.stale
    assert explained["rank"]["product"] == pytest.approx(0.5 * 1.0 * kept)
    promotion = explained["promotion"]
    assert promotion["score"]["scorer"] == "composite"
    assert "access_pattern" in promotion["score"]["breakdown"]
    assert promotion["other_score"]["scorer"] == "multi_axis"
    assert promotion["consolidation"]["promote"] is False
    assert "stale" in promotion["consolidation"]["reasons"]
    assert promotion["core"]["blockers"] == ["tier is short_term, not long_term"]
    assert [e["outcome"] for e in promotion["events"]] == ["confirmed"]


async def test_explain_unknown_block_is_not_found(store):
    """explain of an id that does not exist raises NotFoundError."""
    from memwarden.errors import NotFoundError  # noqa: PLC0415 - only this test needs it

    with pytest.raises(NotFoundError):
        await store.explain("nope")


async def test_health_warns_when_most_blocks_are_stale(store, clock):
    """Health reports majority_stale when more than half the blocks are stale, and
    counts pending reviews and failing sensors."""
    for i in range(3):
        await store.add({"content": f"build {i} is green", "volatility": "high"})
    for i in range(2):
        await store.add({"content": f"the licence is MIT {i}", "volatility": "low"})
    assert (await store.health()).status == "green"
    clock.advance(D)  # the high-volatility blocks' 6 h windows have run out
    report = await store.health(failing_sensors=["http"], sensors_total=4)
    categories = {w.category for w in report.warnings}
    assert categories == {"majority_stale", "sensors_failing"}
    assert report.score == 100 - 25 - 15
    [stale_warning] = [w for w in report.warnings if w.category == "majority_stale"]
    assert stale_warning.message == "60% of 5 blocks are stale"


async def test_health_of_an_empty_store_is_green(store):
    """An empty store is healthy."""
    report = await store.health()
    assert (report.score, report.status, report.warnings) == (100, "green", [])


async def test_score_log_given_as_object_stays_open(make_store, tmp_path: Path):
    """A ScoreLog passed in is the caller's: the store uses it and does not close it."""
    from memwarden.memory import ScoreLog  # noqa: PLC0415 - only this test

    with ScoreLog(tmp_path / "mine.jsonl") as mine:
        store = await make_store(score_log=mine)
        assert store.score_log is mine
        await store.close()
        assert store.score_log is mine
