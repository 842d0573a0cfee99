# Copyright 2026 memwarden contributors. MIT License.
"""No staleness storm after downtime: spread, Nagios reset, rate limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.memory.policy import (
    PolicyConfig,
    next_check_in,
    plan_revalidations,
    put_back_in,
    take_due,
)

M = 60.0
H = 3600.0
D = 86400.0
T0 = 1_767_225_600.0
CFG = PolicyConfig()
SPREAD = CFG.staleness.spread_window.total_seconds()  # 10 minutes
LIMIT = CFG.staleness.max_requests_per_tick  # 200


def test_restart_after_long_downtime_does_not_storm():
    """5000 blocks that fell due during 8 h of downtime go out over 10 min, <= 200 a tick."""
    down_since = T0
    now = T0 + 8 * H
    due = [(f"b{i:04d}", down_since + (i % 480) * M) for i in range(5000)]
    plan = plan_revalidations(due, now=now, down_since=down_since, cfg=CFG)

    assert len(plan) == 5000
    send_times = [t for _, t in plan]
    assert min(send_times) == now
    assert max(send_times) < now + SPREAD
    assert sum(1 for t in send_times if t == now) == 1  # not all at once

    # uniform: each minute of the window carries a tenth of the load
    per_minute = [
        sum(1 for t in send_times if now + k * M <= t < now + (k + 1) * M) for k in range(10)
    ]
    assert per_minute == [500] * 10

    # one tick per second, at most LIMIT requests each
    sent: list[str] = []
    tick = now
    while plan:
        batch, plan = take_due(plan, tick, limit=LIMIT)
        assert len(batch) <= LIMIT
        sent.extend(block_id for block_id, _ in batch)
        tick += 1.0
    assert sorted(sent) == sorted(block_id for block_id, _ in due)
    assert tick <= now + SPREAD + 1


def test_oldest_deadline_goes_first():
    """Within the spread, blocks are sent in the order they fell due."""
    due = [("late", T0 + 5 * H), ("early", T0 + 1 * H), ("middle", T0 + 3 * H)]
    plan = plan_revalidations(due, now=T0 + 6 * H, down_since=T0, cfg=CFG)
    assert [block_id for block_id, _ in plan] == ["early", "middle", "late"]
    assert [t for _, t in plan] == [
        T0 + 6 * H,
        T0 + 6 * H + SPREAD / 3,
        T0 + 6 * H + 2 * SPREAD / 3,
    ]


@pytest.mark.parametrize(
    ("downtime", "stale_in", "window", "send_in"),
    [
        (1 * H, 2 * H, 6 * H, 2 * H),
        (4 * H, 1 * H, 6 * H, 0.0),
        (3.7 * H, 1 * H, 6 * H, 1 * H),
        (1 * D, 100 * D, 180 * D, 100 * D),
        (1 * D, 3 * D, None, 3 * D),
    ],
    ids=[
        "short downtime: resume with the remaining time",
        "downtime > 0.618 x window: deadline reset into the spread",
        "just under 0.618 x window: resume",
        "a long window shrugs off a day of downtime",
        "no window given: resume",
    ],
)
def test_nagios_reset(downtime, stale_in, window, send_in):
    """A block not yet due is reset into the spread only when downtime > 0.618 x its window."""
    now = T0 + downtime
    item = ("b1", now + stale_in) if window is None else ("b1", now + stale_in, window)
    assert plan_revalidations([item], now=now, down_since=T0, cfg=CFG) == [("b1", now + send_in)]


def test_normal_running_sends_overdue_now_and_the_rest_on_time():
    """Without downtime, overdue blocks are due now and the others at their deadline."""
    now = T0 + D
    due = [("overdue", T0), ("soon", now + 5 * M), ("now", now)]
    plan = plan_revalidations(due, now=now, down_since=None, cfg=CFG)
    assert plan == [("now", now), ("overdue", now), ("soon", now + 5 * M)]


def test_plan_is_deterministic():
    """The same blocks in any order give the same plan (no randomness)."""
    due = [(f"b{i}", T0 + i * M) for i in range(50)]
    a = plan_revalidations(due, now=T0 + D, down_since=T0, cfg=CFG)
    b = plan_revalidations(list(reversed(due)), now=T0 + D, down_since=T0, cfg=CFG)
    assert a == b


def test_take_due_rate_limits_earliest_first():
    """A tick takes at most `limit` due items, earliest first; the rest wait their turn."""
    plan = [("c", T0 + 3), ("a", T0 + 1), ("later", T0 + 100), ("b", T0 + 2)]
    batch, rest = take_due(plan, T0 + 10, limit=2)
    assert batch == [("a", T0 + 1), ("b", T0 + 2)]
    assert rest == [("c", T0 + 3), ("later", T0 + 100)]
    batch, rest = take_due(rest, T0 + 10, limit=2)
    assert batch == [("c", T0 + 3)]
    assert rest == [("later", T0 + 100)]


def test_take_due_with_nothing_due():
    """Before anything is due, a tick sends nothing and keeps the plan."""
    plan = [("a", T0 + 60)]
    assert take_due(plan, T0, limit=LIMIT) == ([], plan)


def test_rate_limit_holds_when_the_spread_is_too_short():
    """With a 10 s spread, 5000 overdue requests still leave at most 200 per tick."""
    cfg = PolicyConfig.model_validate({"staleness": {"spread_window": "10s"}})
    due = [(f"b{i:04d}", T0 + i) for i in range(5000)]
    plan = plan_revalidations(due, now=T0 + D, down_since=T0, cfg=cfg)
    sizes = []
    tick = T0 + D
    while plan:
        batch, plan = take_due(plan, tick, limit=LIMIT)
        sizes.append(len(batch))
        tick += 1.0
    assert max(sizes) == LIMIT
    assert sum(sizes) == 5000
    assert sizes[:2] == [1, LIMIT]  # one due at the first tick, then the limit binds


def test_next_check_in_doubles_per_error_up_to_the_cap():
    """The interval; 2x, 4x after errors; capped at backoff_max; the jitter draw scales it."""
    waits = [next_check_in(60, n, backoff_max_s=300) for n in (0, 1, 2, 3, 50)]
    assert waits == [60, 120, 240, 300, 300]
    assert next_check_in(60, 1, backoff_max_s=300, spread=0.9) == pytest.approx(108)


@given(
    st.floats(min_value=0.01, max_value=1e6),
    st.integers(min_value=0, max_value=10_000),
    st.floats(min_value=0.01, max_value=1e6),
)
def test_next_check_in_never_polls_faster_than_the_interval(interval_s, failures, cap_s):
    """Errors never shorten the wait: between the interval and max(interval, backoff_max),
    and more errors never wait less."""
    wait = next_check_in(interval_s, failures, backoff_max_s=cap_s)
    assert interval_s <= wait <= max(interval_s, cap_s)
    assert next_check_in(interval_s, failures + 1, backoff_max_s=cap_s) >= wait


def test_a_put_back_request_waits_doubling_up_to_the_cap():
    """Two dispatch intervals, doubling per put-back, capped at retry_max; a dispatch
    interval longer than the cap is the floor (never faster than a tick)."""
    waits = [put_back_in(n, dispatch_s=1.0, cap_s=300.0) for n in range(1, 10)]
    assert waits == [4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert put_back_in(10_000, dispatch_s=1.0, cap_s=300.0) == 300
    assert put_back_in(0, dispatch_s=3600.0, cap_s=300.0) == 3600
