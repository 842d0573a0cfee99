"""The event jobs of one run on the writer's thread write each block's evidence once, at
the run's end (``memory._eventbatch.PendingEvidence``): the store ends exactly as if the
jobs had committed one by one, and what reads or rewrites a block's row inside the run
(the dependency propagation, a demotion) never sees it out of date."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from memwarden.memory import (
    Binding,
    BlockState,
    FakeClock,
    NewBlock,
    Outcome,
    Store,
    ValidationEvent,
    from_ts,
)
from memwarden.memory._codec import EVIDENCE_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    import aiosqlite

    from memwarden.memory import ApplyResult

BLOCKS = 12
JOBS = 30
OUTCOMES = (Outcome.CONFIRMED, Outcome.CONFIRMED, Outcome.CHANGED, Outcome.REFUTED, Outcome.ERROR)


def _flood(start: float) -> list[list[ValidationEvent]]:
    """JOBS calls of 1-8 events over few blocks (so jobs share blocks), outcomes mixed;
    observation times mostly rising, some behind (outdated for a block seen since)."""
    rng = random.Random(16)
    jobs = []
    for j in range(JOBS):
        events = [
            ValidationEvent(
                sensor="fs",
                subject=f"f/{rng.randrange(BLOCKS)}.txt",
                outcome=rng.choice(OUTCOMES),
                observed_at=from_ts(start + j * 10 + rng.uniform(-15, 8)),
            )
            for _ in range(rng.randint(1, 8))
        ]
        jobs.append(events)
    return jobs


async def _seeded(make_store: Callable[..., Awaitable[Store]]) -> Store:
    """A store with BLOCKS bound blocks, and a trigger that logs every write of a block's
    row (the test's own table: the store never reads it)."""
    store = await make_store()
    await store.add_many(
        [
            NewBlock(content=f"setting {i}", bindings=[Binding(sensor="fs", path=f"f/{i}.txt")])
            for i in range(BLOCKS)
        ]
    )

    async def count_writes(conn: aiosqlite.Connection) -> None:
        await conn.execute("CREATE TABLE row_writes (rid INTEGER NOT NULL)")
        await conn.execute(
            "CREATE TRIGGER row_writes AFTER UPDATE ON blocks"
            " BEGIN INSERT INTO row_writes VALUES (new.rid); END"
        )

    await store.db.write(count_writes)
    return store


async def _table(store: Store, sql: str) -> list[tuple[Any, ...]]:
    async with store.db.read() as conn:
        return [tuple(r) for r in await conn.execute_fetchall(sql)]


async def _end_state(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """What both ways must agree on, by rid (block ids are random per store)."""
    columns = ", ".join(c for c in EVIDENCE_COLUMNS if c != "id")
    return {
        "blocks": await _table(store, f"SELECT {columns}, tier FROM blocks ORDER BY rid"),
        "events": await _table(
            store, "SELECT seq, event_id, subject, outcome, observed_at FROM events ORDER BY seq"
        ),
        "effects": await _table(
            store,
            "SELECT block_rid, event_seq, state_before, state_after, reliability_before,"
            " reliability_after, detail FROM effects ORDER BY event_seq, block_rid",
        ),
        "requests": await _table(
            store,
            "SELECT k.rid, r.sensor, r.subject, r.reason, r.status, r.created_at, r.send_at,"
            " r.outcome FROM revalidations r JOIN blocks k ON k.id = r.block_id"
            " ORDER BY k.rid, r.created_at, r.status",
        ),
    }


async def _rids(store: Store) -> dict[str, int]:
    return dict(await _table(store, "SELECT id, rid FROM blocks"))


def _summary(results: Sequence[ApplyResult], rid_of: dict[str, int]) -> list[Any]:
    """Each call's result with block ids as rids."""
    return [
        (
            r.accepted,
            r.duplicates,
            r.unmatched,
            r.revalidations,
            [(rid_of[c.block_id], c.before, c.after, c.reliability) for c in r.changes],
        )
        for r in results
    ]


async def test_one_run_ends_as_the_jobs_one_by_one_writing_each_block_once(
    make_store: Callable[..., Awaitable[Store]], clock: FakeClock
):
    """Thirty calls gathered (one transaction, one run) against the same calls awaited one
    after the other: the same blocks, event log, effects, requests and per-call results;
    but each block's row written once in the run, where one by one wrote it once per call
    that touched it."""
    together, apart = await _seeded(make_store), await _seeded(make_store)
    clock.advance(3600)
    jobs = _flood(clock.time() - 600)
    writer = together.db.writer
    assert writer is not None
    commits = writer.commits
    gathered = await asyncio.gather(*(together.apply_events(j) for j in jobs))
    assert writer.commits - commits == 1  # one transaction: one run on the writer's thread
    one_by_one = [await apart.apply_events(j) for j in jobs]

    assert _summary(gathered, await _rids(together)) == _summary(one_by_one, await _rids(apart))
    assert await _end_state(together) == await _end_state(apart)
    writes = await _table(together, "SELECT rid, count(*) FROM row_writes GROUP BY rid")
    assert writes
    assert {n for _, n in writes} == {1}  # each block's row once
    assert len(await _table(apart, "SELECT rid FROM row_writes")) > len(writes)


def _one(subject: str, outcome: str, at: float) -> list[ValidationEvent]:
    return [ValidationEvent(sensor="fs", subject=subject, outcome=outcome, observed_at=from_ts(at))]


async def _in_one_run(store: Store, *calls: list[ValidationEvent]) -> list[ApplyResult]:
    """The calls gathered, and checked to have shared one transaction (one run)."""
    writer = store.db.writer
    assert writer is not None
    commits = writer.commits
    results = await asyncio.gather(*(store.apply_events(c) for c in calls))
    assert writer.commits - commits == 1
    return results


async def _refute_twice(store: Store, clock: FakeClock, subject: str) -> None:
    """Two soft refutations, each its own transaction: the next one is hard."""
    for _ in range(2):
        clock.advance(10)
        await store.apply_events(_one(subject, "refuted", clock.time()))
    clock.advance(10)


async def test_a_dependent_the_run_changed_falls_with_its_root(
    make_store: Callable[..., Awaitable[Store]], clock: FakeClock
):
    """One call confirms a dependent, the next (same run) refutes its root for the third
    time: the propagation finds the dependent pending in the run, writes it first, and the
    row ends stale (reason dependency) with the confirmation in it, not fresh."""
    store = await make_store()
    root = await store.add(
        NewBlock(content="db port 5432", bindings=[Binding(sensor="fs", path="a")])
    )
    leaf = await store.add(
        NewBlock(
            content="app uses 5432",
            depends_on=[root.id],
            bindings=[Binding(sensor="fs", path="b")],
        )
    )
    await _refute_twice(store, clock, "a")
    confirmed_at = clock.time() - 2
    confirm, refute = await _in_one_run(
        store, _one("b", "confirmed", confirmed_at), _one("a", "refuted", clock.time())
    )
    assert [(c.block_id, c.after) for c in confirm.changes] == [(leaf.id, "fresh")]
    assert (leaf.id, "fresh", "stale") in [(c.block_id, c.before, c.after) for c in refute.changes]
    got = await store.get(leaf.id)
    assert got.state == BlockState.STALE
    assert [r.value for r in got.stale_reasons] == ["dependency"]
    assert got.validation.validated_at == from_ts(confirmed_at)
    assert got.reinforcement_count == 1
    assert (await store.get(root.id)).state == BlockState.REFUTED


async def test_a_demotion_in_a_run_never_splits_the_row(
    make_store: Callable[..., Awaitable[Store]], clock: FakeClock
):
    """A core block with an error from one call and its third refutation from the next,
    in the same run: the demotion writes the row after the block's pending evidence, so
    every retention point of the block as long_term already says refuted."""
    store = await make_store()
    core = await store.add(
        NewBlock(
            content="the api key lives in vault",
            tier="core",
            bindings=[Binding(sensor="fs", path="k")],
        )
    )
    await _refute_twice(store, clock, "k")
    first, second = await _in_one_run(
        store, _one("k", "error", clock.time() - 2), _one("k", "refuted", clock.time())
    )
    assert first.accepted == second.accepted == 1
    got = await store.get(core.id)
    assert (got.tier.value, got.state) == ("long_term", BlockState.REFUTED)
    points = await _table(
        store,
        "SELECT p.tier, p.state FROM retention_points p JOIN blocks k ON k.rid = p.block_rid"
        f" WHERE k.id = '{core.id}' AND p.tier = 'long_term'",
    )
    assert points
    assert {state for _, state in points} == {"refuted"}
