"""Several writers on one database: two :class:`PgDatabase` instances (two pools, as two
nodes) writing at once. Block rids and event seqs come from the identities' sequences,
and an event id is stored and applied exactly once whichever node delivers it, without a
StorageError: the event log's unique id is the arbiter (``ON CONFLICT DO NOTHING``), the
blocks an event reaches are locked before their evidence is read (no lost update), and a
transaction chosen as a deadlock victim is run again."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.memory._clock import FakeClock, from_ts
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._model import ValidationEvent
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg._apply import PgEventLog
from memwarden.memory.pg._blocks import DEDUPE_KEYS_MAX, PgBlocks, _lock_for_dedupe
from memwarden.memory.policy import PolicyConfig

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from memwarden.memory._results import ApplyResult
    from tests.pgserver import PgServer

START = 1_767_225_600.0
SUBJECTS = 8
EVENTS = 600


class Node:
    """One node's view of the shared database: its own pool, writer and clock."""

    def __init__(self, db: PgDatabase) -> None:
        cfg = PolicyConfig()
        clock = FakeClock(START)
        self.db = db
        self.blocks = PgBlocks(db, clock, cfg)
        self.events = PgEventLog(db, clock, cfg, CompactionConfig(dead_letters_max_rows=100))


@pytest.fixture
async def nodes(pg_server: PgServer) -> AsyncIterator[tuple[Node, Node]]:
    dsn = pg_server.create_database()
    # Small transactions (three jobs at most), so the two nodes' interleave many times.
    async with (
        PgDatabase(dsn, max_jobs_per_commit=3) as a,
        PgDatabase(dsn, max_jobs_per_commit=3) as b,
    ):
        yield Node(a), Node(b)


def _error(i: int) -> ValidationEvent:
    """An error report: it counts on its block (consecutive_errors + 1) whatever came
    before it, so a lost update shows in the count."""
    return ValidationEvent(
        event_id=f"e{i:04d}",
        sensor="fs",
        subject=f"s{i % SUBJECTS}",
        outcome="error",
        observed_at=from_ts(START - 1000 + i * 0.01),
    )


async def _ingest(node: Node, batches: list[list[ValidationEvent]]) -> list[ApplyResult]:
    """Every batch submitted at once: the node's writer groups them into transactions."""
    return list(await asyncio.gather(*(node.events.apply_events(b) for b in batches)))


async def test_two_nodes_ingesting_overlapping_batches_apply_each_event_once(
    nodes: tuple[Node, Node],
) -> None:
    """Both nodes deliver all 600 events, in batches of different sizes and orders, at
    once: each event is stored once with its own seq and applied once (one effect; each
    block's error count is exactly its events), no call fails, and the accepted and
    duplicate counts add up across the nodes."""
    a, b = nodes
    await a.blocks.add_many(
        [
            {"content": f"fact {i}", "bindings": [{"sensor": "fs", "subject": f"s{i}"}]}
            for i in range(SUBJECTS)
        ]
    )
    events = [_error(i) for i in range(EVENTS)]
    forward = [events[i : i + 25] for i in range(0, EVENTS, 25)]
    backward = [list(reversed(events))[i : i + 40] for i in range(0, EVENTS, 40)]
    # A batch with an id twice and one the other node also sends at the same moment.
    backward.append([events[7], events[7], events[300]])
    got_a, got_b = await asyncio.gather(_ingest(a, forward), _ingest(b, backward))
    results = got_a + got_b
    sent = sum(len(batch) for batch in forward + backward)
    assert sum(r.accepted for r in results) == EVENTS
    assert sum(r.accepted + r.duplicates for r in results) == sent
    assert not any(r.rejected for r in results)

    async with a.db.read() as conn:
        stored = await conn.fetch("SELECT seq, event_id FROM events ORDER BY seq")
        effects = await conn.fetch("SELECT block_rid, event_seq FROM effects")
        errors = await conn.fetch("SELECT content, consecutive_errors FROM blocks")
    assert sorted(r["event_id"] for r in stored) == [e.event_id for e in events]
    seqs = {r["seq"] for r in stored}
    assert len(effects) == EVENTS
    assert Counter(r["event_seq"] for r in effects) == Counter(dict.fromkeys(seqs, 1))
    assert {r["content"]: r["consecutive_errors"] for r in errors} == {
        f"fact {i}": EVENTS // SUBJECTS for i in range(SUBJECTS)
    }
    # Within one call the seqs follow the observation order, as on SQLite.
    by_id = {r["event_id"]: r["seq"] for r in stored}
    for result, batch in zip(results, forward + backward, strict=True):
        if result.duplicates == 0:
            mine = [by_id[e.event_id] for e in sorted(batch, key=lambda e: e.observed_at)]
            assert mine == sorted(mine)


async def test_two_nodes_adding_blocks_at_once_get_distinct_rids(
    nodes: tuple[Node, Node],
) -> None:
    """Two nodes adding blocks with bindings and dependencies at once: every block is
    stored with a rid of its own and its bindings and dependencies name that rid."""
    a, b = nodes
    (root,) = await a.blocks.add_many([{"content": "root"}])

    def news(node: str, n: int) -> list[dict[str, object]]:
        return [
            {
                "content": f"{node} {i}",
                "bindings": [{"sensor": "fs", "subject": f"{node}/{i}"}],
                "depends_on": [root],
            }
            for i in range(n)
        ]

    calls = [a.blocks.add_many(news(f"a{j}", 7)) for j in range(10)]
    calls += [b.blocks.add_many(news(f"b{j}", 5)) for j in range(10)]
    ids = [i for part in await asyncio.gather(*calls) for i in part]
    assert len(set(ids)) == 120
    async with b.db.read() as conn:
        rows = await conn.fetch(
            "SELECT k.content, g.subject, count(d.*) AS deps FROM blocks k"
            " JOIN bindings g ON g.block_rid = k.rid"
            " LEFT JOIN dependencies d ON d.block_rid = k.rid GROUP BY k.rid, k.content, g.subject"
        )
        blocks = await conn.fetchval("SELECT count(*) FROM blocks")
    assert blocks == 121
    assert len(rows) == 120
    for row in rows:  # each binding and dependency belongs to its own block
        assert row["subject"] == row["content"].replace(" ", "/")
        assert row["deps"] == 1


async def test_two_nodes_adding_one_fact_with_dedupe_store_it_once(
    nodes: tuple[Node, Node],
) -> None:
    """``add_many(dedupe=True)`` from two nodes at once: each fact is stored exactly once
    (the duplicate check runs under a transaction-level advisory lock per namespace and
    content key), and the other node's call answers the stored id as a duplicate. The
    facts differ in case and spacing between the nodes (one normalised content), and a
    second namespace keeps its own copy."""
    a, b = nodes
    rounds, per_call = 12, 6

    def facts(r: int, *, shout: bool, namespace: str = "default") -> list[dict[str, object]]:
        return [
            {
                "content": f"  FACT {r}-{i} holds  " if shout else f"fact {r}-{i} holds",
                "namespace": namespace,
            }
            for i in range(per_call)
        ]

    for r in range(rounds):
        dup_a: set[str] = set()
        dup_b: set[str] = set()
        dup_c: set[str] = set()
        got_a, got_b, got_c = await asyncio.gather(
            a.blocks.add_many(facts(r, shout=False), dedupe=True, duplicates=dup_a),
            b.blocks.add_many(facts(r, shout=True), dedupe=True, duplicates=dup_b),
            b.blocks.add_many(
                facts(r, shout=True, namespace="other"), dedupe=True, duplicates=dup_c
            ),
        )
        assert got_a == got_b, f"round {r}: the nodes stored different blocks for one fact"
        assert dup_c == set()
        assert not set(got_c) & set(got_a)
        # One of the two calls stored each fact, the other answered it as a duplicate.
        assert dup_a | dup_b == set(got_a)
        assert not dup_a & dup_b
    async with a.db.read() as conn:
        counts = await conn.fetch(
            "SELECT namespace, count(*) AS n, count(DISTINCT content_key) AS keys FROM blocks"
            " GROUP BY namespace ORDER BY namespace"
        )
    assert [tuple(r) for r in counts] == [
        ("default", rounds * per_call, rounds * per_call),
        ("other", rounds * per_call, rounds * per_call),
    ]


async def test_a_large_dedupe_add_and_small_ones_from_the_other_node_store_each_fact_once(
    nodes: tuple[Node, Node],
) -> None:
    """An add of more facts than ``DEDUPE_KEYS_MAX`` takes one lock for all duplicate
    checks (never one slot of the shared lock table per fact) and still takes turns with
    small adds on the other node: each fact stored once."""
    a, b = nodes
    n = 3 * DEDUPE_KEYS_MAX
    facts = [{"content": f"shared fact {i}"} for i in range(n)]
    dup_a: set[str] = set()
    small: list[Any] = [b.blocks.add_many(facts[i : i + 3], dedupe=True) for i in range(0, n, 3)]
    got_a, *got_b = await asyncio.gather(
        a.blocks.add_many(facts, dedupe=True, duplicates=dup_a), *small
    )
    assert [i for part in got_b for i in part] == got_a  # the same block for each fact
    async with a.db.read() as conn:
        assert await conn.fetchval("SELECT count(*) FROM blocks") == n

    # The locks a transaction holds for it: one for 2 000 keys, one shared plus one per
    # key for three.
    def counting(keys: list[int]) -> Any:
        async def job(conn: Any) -> int:
            await _lock_for_dedupe(conn, keys)
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                    " AND pid = pg_backend_pid()"
                )
            )

        return job

    assert await a.db.write(counting(list(range(2000)))) == 1
    assert await a.db.write(counting([1, 2, 3])) == 4


async def test_a_deadlock_victim_is_run_again(nodes: tuple[Node, Node]) -> None:
    """Two nodes' jobs lock two rows in opposite orders: PostgreSQL aborts one as the
    deadlock victim; its writer runs the transaction again, and both writes land."""
    a, b = nodes
    async with a.db.read() as conn:
        await conn.execute("INSERT INTO meta (key, value) VALUES ('x', ''), ('y', '')")
    arrived = 0
    both = asyncio.Event()

    def job(first: str, second: str, value: str):
        async def run(conn: Any) -> None:
            nonlocal arrived
            await conn.execute("UPDATE meta SET value = value || $1 WHERE key = $2", value, first)
            if not both.is_set():
                arrived += 1
                if arrived == 2:
                    both.set()
                await both.wait()  # each holds its first row: the next lock closes the cycle
            await conn.execute("UPDATE meta SET value = value || $1 WHERE key = $2", value, second)

        return run

    await asyncio.wait_for(
        asyncio.gather(a.db.write(job("x", "y", "a")), b.db.write(job("y", "x", "b"))), 60
    )
    async with a.db.read() as conn:
        rows = dict(await conn.fetch("SELECT key, value FROM meta WHERE key IN ('x', 'y')"))
    assert sorted(rows["x"]) == ["a", "b"]
    assert sorted(rows["y"]) == ["a", "b"]
    writers = [a.db.writer, b.db.writer]
    assert sum(w.conflicts for w in writers if w is not None) == 1
