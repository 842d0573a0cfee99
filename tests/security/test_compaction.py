"""Issue 13 item 7: the event log is compacted, never truncated, and stays append-only.

A flood of identical outcomes older than ``compaction.after`` keeps its first and last
event and a count; every event that changed a block stays; dead letters are bounded by
age and count; every DELETE or UPDATE outside the compaction job is still refused.
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.memory import CompactionConfig, FakeClock, Store, ValidationEvent, from_ts
from memwarden.memory._schema import MIGRATIONS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

D = 86400.0
PATH = "config/app.yaml"
BINDING = {"sensor": "fs", "path": PATH, "key": "/a", "equals": 1}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    async with Store(tmp_path / "m.db", clock=clock) as s:
        yield s


@contextlib.contextmanager
def raw(store: Store) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def query(store: Store, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with raw(store) as conn:
        return conn.execute(sql, args).fetchall()


def ev(outcome: str, at: float, *, sensor: str = "fs", **kw: Any) -> ValidationEvent:
    return ValidationEvent(
        sensor=sensor, subject=PATH, outcome=outcome, observed_at=from_ts(at), **kw
    )


async def feed(store: Store, clock: FakeClock, outcomes: str, *, sensor: str = "fs") -> None:
    """One event per letter (C confirmed, R refuted, E error), a minute apart, one batch each."""
    names = {"C": "confirmed", "R": "refuted", "E": "error"}
    for letter in outcomes:
        clock.advance(60)
        await store.apply_events([ev(names[letter], clock.time(), sensor=sensor)])


def history(store: Store, block_id: str) -> list[tuple[Any, ...]]:
    """(seq, sensor, outcome, state_before, state_after) of the block, oldest first."""
    return query(
        store,
        "SELECT e.seq, e.sensor, e.outcome, f.state_before, f.state_after FROM effects f"
        " JOIN events e ON e.seq = f.event_seq JOIN blocks b ON b.rid = f.block_rid"
        " WHERE b.id = ? ORDER BY e.seq",
        block_id,
    )


def runs(store: Store) -> list[tuple[Any, ...]]:
    return query(
        store,
        "SELECT first_seq, last_seq, sensor, outcome, count, first_observed_at,"
        " last_observed_at FROM event_runs ORDER BY last_seq",
    )


async def add_block(store: Store) -> str:
    block = await store.add({"content": "timeout is 30s", "bindings": [BINDING]})
    return block.id


async def test_flood_of_confirmations_compacts_to_two_rows_and_a_count(store, clock):
    """1 + 500 confirmations: the first (unverified -> fresh) stays, the 499 identical
    ones after it keep their first and last event and the count; the rest leave both
    tables; the history still says 'confirmed x499 between t1 and t2'."""
    block_id = await add_block(store)
    await feed(store, clock, "C" * 500)
    before = history(store, block_id)
    assert len(before) == 500
    clock.advance(timedelta(days=8))

    report = await store.compact_events()

    after = history(store, block_id)
    assert [row[0] for row in after] == [before[0][0], before[1][0], before[-1][0]]
    assert after[0][3:] == ("unverified", "fresh")  # the state change is kept
    (run,) = runs(store)
    first_seq, last_seq, sensor, outcome, count, first_at, last_at = run
    assert (first_seq, last_seq, sensor, outcome, count) == (
        before[1][0],
        before[-1][0],
        "fs",
        "confirmed",
        499,
    )
    assert last_at - first_at == pytest.approx(498 * 60)
    assert query(store, "SELECT count(*) FROM events") == [(3,)]
    assert report.effects_deleted == 497
    assert report.events_deleted == 497
    assert query(store, "SELECT count(*) FROM compaction_guard") == [(0,)]  # never committed
    newest = (await store.events_for(block_id, limit=1))[0]
    assert newest.run == (499, first_at, last_at)
    assert newest.as_dict()["run"]["count"] == 499


async def test_a_refutation_in_the_middle_splits_the_run_and_is_kept(store, clock):
    """50 C, R, 50 C: the refutation and the confirmation that made the block fresh again
    are kept (they changed it), and the confirmations on either side are two runs."""
    block_id = await add_block(store)
    await feed(store, clock, "C" * 50 + "R" + "C" * 50)
    before = history(store, block_id)
    changing = [row for row in before if row[3] != row[4]]
    assert [row[2] for row in changing] == ["confirmed", "refuted", "confirmed"]
    clock.advance(timedelta(days=8))

    await store.compact_events()

    after = history(store, block_id)
    for row in changing:
        assert row in after
    assert [(r[3], r[4]) for r in runs(store)] == [("confirmed", 49), ("confirmed", 49)]
    refute_seq = changing[1][0]
    first, second = runs(store)
    assert first[1] < refute_seq < second[0]  # neither run spans the refutation
    assert len(after) == 3 + 2 * 2


async def test_young_events_and_short_runs_are_left_alone(store, clock):
    """Nothing younger than compaction.after is touched; a run of two saves nothing."""
    block_id = await add_block(store)
    await feed(store, clock, "C" * 20)
    clock.advance(timedelta(days=6))
    report = await store.compact_events()
    assert report.effects_deleted == 0
    assert len(history(store, block_id)) == 20

    other = await store.add(
        {"content": "x", "bindings": [{"sensor": "fs", "path": "b.yaml", "key": "/b"}]}
    )
    for _ in range(3):  # C (a state change) then two identical ones
        clock.advance(60)
        await store.apply_events(
            [
                ValidationEvent(
                    sensor="fs",
                    subject="b.yaml",
                    outcome="confirmed",
                    observed_at=from_ts(clock.time()),
                )
            ]
        )
    clock.advance(timedelta(days=30))
    await store.compact_events()
    assert len(history(store, other.id)) == 3


async def test_compacting_again_merges_into_one_run(store, clock):
    """A run compacted last week that went on since is one run with the summed count,
    still starting at the same event."""
    block_id = await add_block(store)
    await feed(store, clock, "C" * 30)
    clock.advance(timedelta(days=8))
    await store.compact_events()
    (run1,) = runs(store)
    assert run1[4] == 29

    await feed(store, clock, "C" * 40)
    clock.advance(timedelta(days=8))
    await store.compact_events()

    (run2,) = runs(store)
    assert run2[0] == run1[0]  # the same first event
    assert run2[4] == 29 + 40
    assert len(history(store, block_id)) == 3


async def test_small_windows_give_the_same_result(tmp_path, clock):
    """Chunked into writer jobs of 16 effects, the outcome is the same as in one job."""
    results = []
    for name, window in (("one", 100_000), ("many", 16)):
        cfg = CompactionConfig(window_rows=window)
        async with Store(tmp_path / f"{name}.db", clock=FakeClock(), compaction=cfg) as s:
            block_id = await add_block(s)
            await feed(s, s.clock, "C" * 120 + "E" * 30 + "C" * 60, sensor="fs")  # type: ignore[arg-type]
            s.clock.advance(timedelta(days=8))  # type: ignore[attr-defined]
            report = await s.compact_events()
            results.append(
                ([r[1:] for r in history(s, block_id)], [r[2:5] for r in runs(s)], report.jobs)
            )
    (rows1, runs1, jobs1), (rows2, runs2, jobs2) = results
    assert rows1 == rows2
    assert runs1 == runs2
    # The third error queued a review (kept): errors 4-30 are the run.
    assert runs1 == [("fs", "confirmed", 119), ("fs", "error", 27), ("fs", "confirmed", 60)]
    assert jobs2 > jobs1


async def test_two_sensors_are_two_runs_and_a_shared_event_stays(store, clock):
    """Runs are per sensor; an event that reached two blocks leaves the events table
    only when neither block's history holds it."""
    a = await add_block(store)
    b = await add_block(store)  # bound to the same subject: every event reaches both
    await feed(store, clock, "C" * 10)
    await store.apply_events(
        [
            ValidationEvent(
                sensor="fs",
                block_id=a,
                outcome="refuted",
                observed_at=from_ts(clock.time() + 30),
                reliability=1.0,
            )
        ]
    )
    clock.advance(60)
    await feed(store, clock, "C" * 10)
    clock.advance(timedelta(days=8))
    await store.compact_events()
    seqs_a = {r[0] for r in history(store, a)}
    seqs_b = {r[0] for r in history(store, b)}
    events = {r[0] for r in query(store, "SELECT seq FROM events")}
    assert seqs_a | seqs_b == events  # no orphan events, no effect without its event
    assert seqs_b < events or seqs_a < events
    assert len(history(store, b)) == 3  # C (state change), then a run of 19 confirmations
    assert len(history(store, a)) > 3  # the refutation split a's run


async def test_dead_letters_are_bounded_by_count_at_once_and_by_age(tmp_path, clock):
    """A flood of rejected input never holds more than dead_letters_max_rows rows, even
    between passes (the newest are kept); the pass removes what is older than the age."""
    cfg = CompactionConfig(dead_letters_max_rows=10, dead_letters_max_age=timedelta(days=30))
    async with Store(tmp_path / "d.db", clock=clock, compaction=cfg) as store:
        for i in range(40):
            await store.dead_letter(source="mqtt", reason="flood", payload=f"flood {i}")
        future = ev("confirmed", clock.time() + 3600)  # rejected: observed in the future
        await store.apply_events([future])
        rows = query(store, "SELECT reason, payload FROM dead_letters ORDER BY id")
        assert len(rows) == 10
        assert rows[:9] == [("flood", f"flood {i}") for i in range(31, 40)]
        assert rows[9][0] == "observed_at is in the future"

        clock.advance(timedelta(days=31))
        await store.dead_letter(source="mqtt", reason="recent", payload="recent")
        report = await store.compact_events()
        rows = query(store, "SELECT reason, payload FROM dead_letters ORDER BY id")
    assert report.dead_letters_deleted == 9  # the 11th row pushed one out at once
    assert rows == [("recent", "recent")]


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM events",
        "DELETE FROM effects",
        "DELETE FROM event_runs",
        "UPDATE events SET outcome = 'refuted'",
        "UPDATE effects SET state_after = 'fresh'",
        "UPDATE event_runs SET count = 1",
    ],
)
async def test_every_other_write_to_the_log_is_still_refused(store, clock, sql):
    """The append-only triggers stand for everything but the compaction job."""
    await add_block(store)
    await feed(store, clock, "C" * 5 + "R" + "C" * 5)
    clock.advance(timedelta(days=8))
    await store.compact_events()
    assert runs(store)
    before = query(store, "SELECT * FROM events"), query(store, "SELECT * FROM effects")
    with raw(store) as conn, pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute(sql)
    assert (query(store, "SELECT * FROM events"), query(store, "SELECT * FROM effects")) == before


async def test_compaction_after_a_migration_from_version_4(tmp_path, clock):
    """A database written by the previous schema (4) migrates to 5 and compacts."""
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:4]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    async with Store(path, clock=clock) as store:
        block_id = await add_block(store)
        await feed(store, clock, "C" * 40)
        clock.advance(timedelta(days=8))
        report = await store.compact_events()
        assert report.effects_deleted == 37
        assert len(history(store, block_id)) == 3
        assert query(store, "PRAGMA user_version") == [(len(MIGRATIONS),)]


async def test_a_flood_about_unbound_subjects_leaves_only_counts(tmp_path, clock):
    """Events that reached no block (any subject, none bound) are counted per sensor,
    outcome and day, then leave the log once older than compaction.after; the ones that
    reached a block and the young ones stay; a second pass counts nothing twice."""
    cfg = CompactionConfig(window_rows=64)
    async with Store(tmp_path / "u.db", clock=clock, compaction=cfg) as store:
        block_id = await add_block(store)
        await feed(store, clock, "CR")  # two events that reached the block (state changes)
        flood = [
            ValidationEvent(
                sensor="agent1",
                subject=f"nothing/{i}.txt",
                outcome="refuted" if i % 4 == 0 else "confirmed",
                observed_at=from_ts(clock.time()),
            )
            for i in range(1000)
        ]
        result = await store.apply_events(flood)
        assert result.unmatched == 1000
        clock.advance(timedelta(days=8))
        young = await store.apply_events(
            [
                ValidationEvent(
                    sensor="agent1",
                    subject="nothing/new",
                    outcome="confirmed",
                    observed_at=from_ts(clock.time()),
                )
            ]
        )
        assert young.unmatched == 1

        report = await store.compact_events()
        again = await store.compact_events()

        assert report.unmatched_deleted == 1000
        assert again.unmatched_deleted == 0
        day = from_ts(clock.time() - 8 * D).strftime("%Y-%m-%d")
        assert query(
            store, "SELECT sensor, day, outcome, count FROM unmatched_counts ORDER BY outcome"
        ) == [("agent1", day, "confirmed", 750), ("agent1", day, "refuted", 250)]
        assert query(store, "SELECT subject FROM events WHERE sensor = 'agent1'") == [
            ("nothing/new",)
        ]
        assert len(history(store, block_id)) == 2


async def test_the_newest_event_is_never_compacted_so_no_seq_is_reused(store, clock):
    """A log that went quiet for a week whose last event reached no block: that event
    stays (the next event's seq is max(seq) + 1, and a reader following the log by seq
    must never see a number twice)."""
    await store.apply_events(
        [
            ValidationEvent(
                sensor="agent1",
                subject=f"x/{i}",
                outcome="confirmed",
                observed_at=from_ts(clock.time()),
            )
            for i in range(3)
        ]
    )
    (last,) = query(store, "SELECT max(seq) FROM events")[0]
    clock.advance(timedelta(days=8))
    report = await store.compact_events()
    assert report.unmatched_deleted == 2
    assert query(store, "SELECT seq FROM events") == [(last,)]
    await store.apply_events(
        [
            ValidationEvent(
                sensor="agent1",
                subject="x/new",
                outcome="confirmed",
                observed_at=from_ts(clock.time()),
            )
        ]
    )
    assert query(store, "SELECT max(seq) FROM events") == [(last + 1,)]


def _requests(store: Store) -> dict[str, tuple[str, float | None, float]]:
    rows = query(store, "SELECT id, status, finished_at, created_at FROM revalidations")
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _kept_by_rule(
    rows: dict[str, tuple[str, float | None, float]], now: float, max_age_s: float
) -> set[str]:
    """The retention, stated on its own: an open request stays; one that is over stays
    until it ended (its creation, if it has no end) longer than max_age ago."""
    return {
        rid
        for rid, (status, finished, created) in rows.items()
        if status in ("pending", "sent")
        or (finished if finished is not None else created) >= now - max_age_s
    }


async def test_requests_that_are_over_are_deleted_after_their_retention(tmp_path, clock):
    """Done, failed and expired requests go revalidations_max_age after they ended, open
    ones never, in jobs of window_rows; the same rows as the rule says, on a fake clock."""
    cfg = CompactionConfig(window_rows=16, revalidations_max_age=timedelta(days=7))
    async with Store(tmp_path / "r.db", clock=clock, compaction=cfg) as store:
        blocks = [await store.add({"content": f"f{i}", "bindings": [BINDING]}) for i in range(3)]
        [done] = await store.request_revalidation(blocks[0].id)
        await store.set_revalidation_status([done], "done", outcome="confirmed")
        [still_open] = await store.request_revalidation(blocks[1].id)  # old, never answered
        t0 = clock.time()
        with raw(store) as conn:
            rows = [
                (f"x{i}", blocks[2].id, "expired", t0, t0, t0 + (i - 30) * 3600) for i in range(40)
            ]
            rows.append(("odd", blocks[2].id, "failed", t0, t0, None))  # over, no end
            conn.executemany(
                "INSERT INTO revalidations (id, block_id, sensor, subject, reason, status,"
                " created_at, send_at, deadline_s, finished_at) VALUES"
                " (?, ?, 'fs', 'config/app.yaml', 'manual', ?, ?, ?, 5, ?)",
                rows,
            )
        clock.advance(timedelta(days=7, seconds=1))
        before = _requests(store)
        expected = _kept_by_rule(before, clock.time(), 7 * D)
        report = await store.compact_events()
        after = _requests(store)
    assert set(after) == expected
    assert still_open in after
    assert done not in after
    assert "odd" not in after
    assert report.revalidations_deleted == len(before) - len(expected)
    assert report.revalidations_deleted > 16  # more than one job's worth


def test_a_bad_retention_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="revalidations_max_age"):
        CompactionConfig.model_validate({"revalidations_max_age": "a while"})
