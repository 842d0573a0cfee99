"""Retention over time: the stored points of the decay formula's inputs and the line."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import pytest

from memwarden.memory import RetentionPoint, ValidationEvent, from_ts, retention_line
from memwarden.memory._decayline import MAX_POINTS
from memwarden.memory.policy import PolicyConfig, retention

if TYPE_CHECKING:
    from memwarden.memory import FakeClock, Store

CFG = PolicyConfig()
H = 3600.0
D = 86400.0


def _confirm(at: float, subject: str = "cron.yaml") -> ValidationEvent:
    return ValidationEvent(
        sensor="fs", subject=subject, outcome="confirmed", observed_at=from_ts(at)
    )


async def _bound(store: Store, **fields: object) -> str:
    block = await store.add(
        {
            "content": "the billing cron runs at noon",
            "bindings": [{"sensor": "fs", "subject": "cron.yaml"}],
            **fields,
        }
    )
    return block.id


async def test_each_change_of_an_input_is_a_point(store: Store, clock: FakeClock):
    """Adding, confirming and reading a block each store a point at that moment, with
    the inputs the block then has; a change of nothing else stores none."""
    t0 = clock.time()
    block_id = await _bound(store, importance=0.8)
    clock.advance(2 * H)
    await store.apply_events([_confirm(clock.time())])
    clock.advance(3 * H)
    await store.record_access([block_id])
    points = await store.retention_points(block_id)
    assert [p.at for p in points] == [t0, t0 + 2 * H, t0 + 5 * H]
    assert [p.touched_at for p in points] == [t0, t0 + 2 * H, t0 + 5 * H]
    assert [p.state for p in points] == ["unverified", "fresh", "fresh"]
    assert {p.importance for p in points} == {0.8}
    await store.apply_events(
        [
            ValidationEvent(
                sensor="fs", subject="other", outcome="confirmed", observed_at=from_ts(clock.time())
            )
        ]
    )
    assert len(await store.retention_points(block_id)) == 3


async def test_the_line_is_the_rule_at_every_moment(store: Store, clock: FakeClock):
    """At any moment after its first point the line's value is policy.retention of the
    block as it then stood (checked against the live record at several moments)."""
    block_id = await _bound(store, importance=0.9)
    checks: list[tuple[float, float]] = []
    for step in (3 * D, 6 * D, 10 * D):  # past the 7-day window: stale, faster decay
        clock.advance(step)
        rec = await store.get_record(block_id)
        checks.append((clock.time() - 1, retention(rec, clock.time() - 1, CFG)))
        if step == 3 * D:
            await store.apply_events([_confirm(clock.time())])
            rec = await store.get_record(block_id)
            checks.append((clock.time() + 1, retention(rec, clock.time() + 1, CFG)))
    points = await store.retention_points(block_id)
    for at, expected in checks:
        current = [p for p in points if p.at <= at][-1]
        assert current.retention(at, CFG) == pytest.approx(expected, rel=1e-12), at


def test_the_line_jumps_where_the_block_turns_stale():
    """Crossing stale_at halves the half-life: the line has a value on both sides of it,
    each equal to the rule, and nothing before the first point."""
    p = RetentionPoint(
        at=1000.0,
        importance=1.0,
        touched_at=1000.0,
        half_life_s=10 * D,
        tier="short_term",
        state="fresh",
        stale_at=1000.0 + 2 * D,
    )
    [segment] = retention_line([p], start=0.0, end=1000.0 + 4 * D, cfg=CFG, samples=8)
    assert segment[0] == (1000.0, 1.0)
    before = [v for t, v in segment if t < p.stale_at][-1]
    after = next(v for t, v in segment if t >= p.stale_at)
    assert before == pytest.approx(2 ** (-2 / 10))
    assert after == pytest.approx(2 ** (-2 / (10 * CFG.decay.stale_half_life_factor)))
    assert after < before


def test_an_archived_stretch_breaks_the_line():
    """While a block is archived it does not decay: the line has a gap there."""
    base = {"importance": 1.0, "half_life_s": D, "tier": "short_term", "stale_at": None}
    points = [
        RetentionPoint(at=0.0, touched_at=0.0, state="fresh", **base),  # type: ignore[arg-type]
        RetentionPoint(at=D, touched_at=0.0, state="archived", **base),  # type: ignore[arg-type]
        RetentionPoint(at=2 * D, touched_at=2 * D, state="unverified", **base),  # type: ignore[arg-type]
    ]
    segments = retention_line(points, start=0.0, end=3 * D, cfg=CFG, samples=6)
    assert len(segments) == 2
    assert segments[0][-1] == (D, pytest.approx(0.5))
    assert segments[1][0] == (2 * D, 1.0)


async def test_points_per_block_are_bounded(store: Store, clock: FakeClock):
    """A block read more often than MAX_POINTS times keeps only its newest points."""
    block_id = await _bound(store)
    for _ in range(MAX_POINTS + 20):
        clock.advance(60)
        await store.record_access([block_id])
    points = await store.retention_points(block_id)
    assert len(points) == MAX_POINTS
    assert points[-1].at == clock.time()
    assert points[0].at == clock.time() - (MAX_POINTS - 1) * 60


async def test_heuristic_cycle_dates_its_change(store: Store, clock: FakeClock):
    """The heuristic cycle's importance bump is a point at the cycle's time (it sets
    updated_at), not at the block's last read."""
    block_id = await _bound(store, importance=0.5)
    for _ in range(12):
        await store.record_access([block_id])
    clock.advance(H)
    await store.heuristic_cycle()
    last = (await store.retention_points(block_id))[-1]
    assert last.at == clock.time()
    assert last.importance > 0.5


async def test_erasing_a_block_removes_its_points(store: Store):
    """A block erased for good leaves no retention point behind."""
    block_id = await _bound(store)
    await store.erase([block_id], actor="me", reason="test")
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("SELECT count(*) FROM retention_points").fetchone() == (0,)
    finally:
        conn.close()
