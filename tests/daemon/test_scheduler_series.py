"""The console's time series: one row per 5 minutes per metric, pruned after 14 days."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from memwarden.memory import FakeClock, Store, ValidationEvent, from_ts
from memwarden.memory._series import KEEP_S, STEP_S, slot_of
from memwarden.plugins.testing import FakeClock as KitClock


def _event(clock: FakeClock, subject: str, outcome: str, sensor: str = "fs") -> ValidationEvent:
    return ValidationEvent(
        sensor=sensor, subject=subject, outcome=outcome, observed_at=from_ts(clock.time())
    )


async def test_a_sample_counts_blocks_backlog_and_events(tmp_path):
    """One pass writes blocks by state and tier, the backlog and each sensor's events and
    errors of the slot; a second pass in the same slot replaces the first's rows."""
    clock = FakeClock()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        a = await store.add({"content": "a", "bindings": [{"sensor": "fs", "path": "a"}]})
        await store.add({"content": "b", "validity_window": "1m", "tier": "core"})
        clock.advance(1)
        await store.apply_events([_event(clock, "a", "confirmed"), _event(clock, "a", "error")])
        await store.request_revalidation(a.id)
        await store.record_series()
        slot = slot_of(clock.time())
        states = await store.series("state", since=0)
        assert states == {"fresh": [(slot, 1)], "unverified": [(slot, 1)]}
        tiers = await store.series("tier", since=0)
        assert tiers["core"] == [(slot, 1)]
        assert sum(v for s in tiers.values() for _, v in s) == 2
        assert await store.series("backlog", since=0) == {"": [(slot, 1)]}
        assert await store.series("events", since=0) == {"fs": [(slot, 2)]}
        assert await store.series("errors", since=0) == {"fs": [(slot, 1)]}

        clock.advance(61)  # "b" expires within the same slot (or the next)
        await store.record_series()
        now_slot = slot_of(clock.time())
        states = await store.series("state", since=now_slot)
        assert states["stale"] == [(now_slot, 1)]
        assert "unverified" not in states  # a count gone to zero does not linger
        # the events' slot is counted once, not once per pass
        assert sum(v for _, v in (await store.series("events", since=0))["fs"]) == 2


async def test_slots_follow_the_clock_and_old_rows_are_pruned(tmp_path):
    """A pass every 5 minutes leaves one row per slot; rows older than 14 days go."""
    clock = FakeClock()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        await store.add({"content": "a"})
        first = slot_of(clock.time())
        for _ in range(4):
            await store.record_series()
            clock.advance(STEP_S)
        backlog = (await store.series("backlog", since=0))[""]
        assert [at for at, _ in backlog] == [first + i * STEP_S for i in range(4)]
        clock.advance(timedelta(seconds=KEEP_S))
        await store.record_series()
        backlog = (await store.series("backlog", since=0))[""]
        assert [at for at, _ in backlog] == [slot_of(clock.time())]


async def test_the_daemon_samples_the_series_on_its_clock(
    running_daemon, make_settings, eventually
):
    """The scheduler's series pass runs at start and then every 5 minutes of its clock."""
    clock = KitClock()  # wakes the scheduler's sleepers when advanced
    settings = make_settings()
    daemon = (await running_daemon(settings, clock=clock)).daemon
    await daemon.store.add({"content": "a fact"})

    def slots() -> list[float]:
        with sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT at FROM metric_series WHERE metric = 'backlog'")
            return sorted(r[0] for r in rows)

    await eventually(lambda: len(slots()) == 1)
    clock.advance(STEP_S)
    await eventually(lambda: len(slots()) == 2)
    assert slots()[1] - slots()[0] == STEP_S


async def test_events_by_outcome_and_a_pass_after_a_gap_completes_the_slots(tmp_path):
    """The outcome metric counts each sensor's events by outcome; events received after
    a pass and before a long gap (the daemon stopped) are counted by the next pass, in
    their own slot, and a slot is never counted twice."""
    clock = FakeClock()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        await store.add({"content": "a", "bindings": [{"sensor": "fs", "path": "a"}]})
        await store.record_series()
        first = slot_of(clock.time())
        clock.advance(1)
        await store.apply_events([_event(clock, "a", "confirmed"), _event(clock, "a", "refuted")])
        clock.advance(30 * 60.0)  # no pass for half an hour
        await store.apply_events([_event(clock, "a", "error")])
        await store.record_series()
        now_slot = slot_of(clock.time())
        outcomes = await store.series("outcome", since=0)
        assert outcomes == {
            "fs confirmed": [(first, 1)],
            "fs refuted": [(first, 1)],
            "fs error": [(now_slot, 1)],
        }
        assert await store.series("events", since=0) == {"fs": [(first, 2), (now_slot, 1)]}
        assert await store.series("errors", since=0) == {"fs": [(first, 0), (now_slot, 1)]}
        await store.record_series()  # again in the same slot: nothing counted twice
        assert await store.series("outcome", since=0) == outcomes


async def test_recent_event_counts_match_the_full_scan(tmp_path):
    """The binary search for the first recent event gives the same counts as scanning
    the log, for a since before everything, between any two events, and after all."""
    clock = FakeClock()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        assert await store.recent_event_counts(since=0, bucket_s=STEP_S) == {}
        start = clock.time()
        for i in range(37):
            clock.advance(17.0)
            outcome = ("confirmed", "refuted", "error")[i % 3]
            await store.apply_events([_event(clock, f"s{i}", outcome, sensor=("fs", "git")[i % 2])])
        for since in [start - 1, *(start + 17 * k + 8 for k in range(38)), clock.time() + 1]:
            full = await store.event_counts(since=since, bucket_s=STEP_S)
            assert await store.recent_event_counts(since=since, bucket_s=STEP_S) == full, since
