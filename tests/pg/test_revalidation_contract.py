"""The revalidation queue as a contract both backends keep: the due blocks, the
staleness sweep's marking (dependents pulled stale), the requests and their life
(sent, answered, put back, requeued), requests by hand and by reads. The same script,
with the same ids and the same clock, runs on SQLite (the Store's ``Revalidations``) and
on PostgreSQL (``PgRevalidations``): each call's answer or error and the rows it leaves
(blocks, revalidations, effects, retention points) are equal on both. Hostile inputs
among the calls: unknown ids, NUL, an id twice, tens of thousands of ids, negative
limits. Concurrent requests for one binding leave one open request, on one node and
between two; two sweeps at once change each block once; the sweep's read is an index
range scan of ``blocks_due``."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import MemwardenError, ValidationInputError
from memwarden.memory import StateChange, Store
from memwarden.memory import _blocks as sqlite_blocks
from memwarden.memory import _dependencies as sqlite_dependencies
from memwarden.memory import _eventbatch as sqlite_eventbatch
from memwarden.memory import _revalidation as sqlite_revalidation
from memwarden.memory._clock import FakeClock, from_ts
from memwarden.memory._codec import BLOCK_COLUMNS
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._model import RevalidationReason, StaleReason, ValidationEvent
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg import _blocks as pg_blocks
from memwarden.memory.pg._apply import PgEventLog
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.pg._revalidation import DUE_SQL, PgRevalidations
from memwarden.memory.policy import PolicyConfig
from tests.pg.contract import dump_tables, sequential_ids

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

    import aiosqlite

    from memwarden.memory.pg._types import PgConnection
    from tests.pgserver import PgServer

START = 1_767_225_600.0
HOUR = 3600.0
TABLES = {
    "blocks": (", ".join(BLOCK_COLUMNS), "rid"),
    "revalidations": (
        (
            "id, block_id, sensor, subject, reason, status, created_at, send_at, deadline_s,"
            " attempts, finished_at, outcome"
        ),
        "id",
    ),
    "effects": (
        "block_rid, event_seq, state_before, state_after, reliability_before, reliability_after",
        "1, 2",
    ),
    "retention_points": ("block_rid, at, state, stale_at", "1, 2"),
}


class Backend:
    """One backend's block writes, events and revalidation queue, and its raw rows."""

    def __init__(  # noqa: PLR0917 - the parts of one backend
        self,
        blocks: Any,
        events: Any,
        queue: Any,
        clock: FakeClock,
        rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
        execute: Callable[[str], Awaitable[None]],
    ) -> None:
        self.blocks = blocks
        self.events = events
        self.queue = queue
        self.clock = clock
        self.rows = rows
        self.execute = execute

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await dump_tables(self.rows, TABLES)


def same_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids handed out alike from here on (blocks, requests)."""
    new_id = sequential_ids()
    # PostgreSQL's parts hand out request ids through the SQLite modules' shared steps.
    for module in (
        sqlite_blocks,
        sqlite_eventbatch,
        sqlite_dependencies,
        sqlite_revalidation,
        pg_blocks,
    ):
        monkeypatch.setattr(module, "new_id", new_id)


@pytest.fixture
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    async with Store(tmp_path / "m.db", clock=clock) as store:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with store.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        async def execute(sql: str) -> None:
            async def job(conn: aiosqlite.Connection) -> None:
                await conn.execute(sql)

            await store.db.write(job)

        yield Backend(store._blocks, store._events, store._revalidations, clock, rows, execute)


async def pg_parts(db: PgDatabase, clock: FakeClock) -> Backend:
    cfg = PolicyConfig()  # the Store's default

    async def rows(sql: str) -> list[tuple[Any, ...]]:
        async with db.read() as conn:
            return [tuple(r) for r in await conn.fetch(sql)]

    async def execute(sql: str) -> None:
        async def job(conn: PgConnection) -> None:
            await conn.execute(sql)

        await db.write(job)

    return Backend(
        PgBlocks(db, clock, cfg),
        PgEventLog(db, clock, cfg, CompactionConfig()),
        PgRevalidations(db, clock, cfg),
        clock,
        rows,
        execute,
    )


@pytest.fixture
async def pg_backend(pg_server: PgServer) -> AsyncIterator[Backend]:
    async with PgDatabase(pg_server.create_database()) as db:
        yield await pg_parts(db, FakeClock(START))


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    name = "sqlite_backend" if request.param == "sqlite" else "pg_backend"
    value: Backend = request.getfixturevalue(name)
    return value


async def outcome(call: Awaitable[Any]) -> Any:
    """A call's answer, or its error as (type, message, field errors)."""
    try:
        return await call
    except MemwardenError as err:
        fields = err.errors if isinstance(err, ValidationInputError) else None
        return (type(err).__name__, str(err), fields)


def event(clock: FakeClock, event_id: str, subject: str, result: str, **kw: Any) -> ValidationEvent:
    return ValidationEvent(
        event_id=event_id,
        sensor=kw.pop("sensor", "fs"),
        subject=subject,
        outcome=result,
        observed_at=from_ts(clock.time() - kw.pop("ago", 1)),
        **kw,
    )


def unknown_ids(n: int) -> list[str]:
    """``n`` well-formed ids no block has."""
    return [f"0190a0b0-0000-7000-9000-{i:012x}" for i in range(n)]


async def script(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:  # noqa: PLR0915 - one script
    """Blocks with bindings (one quarantined), a chain of dependents, confirmations; then
    every call of the queue with hostile inputs among them; the answers in order."""
    same_ids(monkeypatch)
    log: list[Any] = []
    c, q = b.clock, b.queue

    async def step(call: Awaitable[Any]) -> Any:
        result = await outcome(call)
        log.append(result)
        c.advance(3)
        return result

    fs = "fs"
    root, two, three, quar, unbound, low = await b.blocks.add_many(
        [
            {
                "content": "root fact",
                "volatility": "high",
                "bindings": [
                    {"sensor": fs, "subject": "a.yaml"},
                    {"sensor": "git", "subject": "r"},
                ],
            },
            {"content": "two", "volatility": "high", "bindings": [{"sensor": fs, "subject": "b"}]},
            {
                "content": "three",
                "volatility": "high",
                "bindings": [
                    {"sensor": fs, "subject": "ü 🐘.yaml", "selector": {"k": [1, "\u2028"]}}
                ],
            },
            {
                "content": "quarantined",
                "volatility": "high",
                "bindings": [
                    {"sensor": fs, "subject": "q.yaml"},
                    {"sensor": "http", "subject": "https://x/"},
                ],
            },
            {"content": "unbound", "volatility": "high"},
            {"content": "low", "volatility": "low", "bindings": [{"sensor": fs, "subject": "low"}]},
        ]
    )
    (dep,) = await b.blocks.add_many(
        [
            {
                "content": "rests on root",
                "volatility": "low",
                "depends_on": [root],
                "bindings": [{"sensor": "http", "subject": "https://y/"}],
            }
        ]
    )
    (dep2,) = await b.blocks.add_many(
        [{"content": "rests on that", "volatility": "low", "depends_on": [dep]}]
    )
    log.append([root, two, three, quar, unbound, low, dep, dep2])
    await b.execute(
        "UPDATE bindings SET quarantine = 'rule', quarantined_at = 1 WHERE subject = 'q.yaml'"
    )
    c.advance(10)
    confirmed = await b.events.apply_events(
        [
            event(c, "e1", "a.yaml", "confirmed"),
            event(c, "e2", "b", "confirmed", ago=5),
            event(c, "e3", "ü 🐘.yaml", "confirmed", ago=5),  # the same stale_at as two
            event(c, "e4", "low", "confirmed"),
        ]
    )
    log.append(confirmed.accepted)
    # Before anything is due; limits of every kind.
    await step(q.due_for_revalidation(limit=1000))
    await step(q.due_for_revalidation(limit=0))
    await step(q.due_for_revalidation(limit=-5))
    await step(q.due_for_revalidation(limit=1000, now=START + HOUR))
    c.advance(7 * HOUR)
    await step(q.due_for_revalidation(limit=2))  # ties in stale_at: by rid
    due = await step(q.due_for_revalidation())
    ids = [d.id for d in due]
    # The sweep: due blocks, an unknown id, a NUL, an id twice; a send time for one.
    send_at = {root: c.time() + 60, "a\x00b": 1.0}
    fell: list[StateChange] = []  # the dependents the sweep pulled down with them
    await step(q.mark_stale([*ids, "no-such", "a\x00b", ids[0]], send_at=send_at, dependents=fell))
    await step(q.mark_stale(ids))  # already stale: nothing changes
    await step(q.mark_stale([low], reason=StaleReason.DEPENDENCY, request=False))
    await step(q.mark_stale([]))
    # The requests' life.
    await step(q.due_revalidations(limit=1))
    await step(q.due_revalidations(limit=-1))
    await step(q.due_revalidations(now=START))
    requests = await step(q.due_revalidations())
    first, second, third = (r.id for r in requests[:3])
    await step(q.set_revalidation_status([first, first, second, "no-such", "x\x00"], "sent"))
    await step(q.set_revalidation_status([third], "done", outcome="confirmed «ü»"))
    await step(q.set_revalidation_status([second], "failed"))
    # Which are answered (done): third only; failed, sent, unknown and NUL are not.
    asked = [first, second, third, third, "no-such", "a\x00", ""]
    only_third = await q.answered_requests(asked) == {third}
    await step(q.set_revalidation_status([], "sent"))
    await step(q.put_back_revalidation(first, send_at=c.time() + 30))
    await step(q.put_back_revalidation(first, send_at=c.time() + 30))  # pending now: no
    await step(q.put_back_revalidation("no-such", send_at=1.0))
    await step(q.put_back_revalidation("a\x00", send_at=1.0))
    await step(q.set_revalidation_status([first], "sent"))
    await step(q.requeue_sent_revalidations())
    await step(q.requeue_sent_revalidations())
    await step(q.due_revalidations())
    # Requests by hand and by reads.
    await step(q.request_revalidation(root))
    await step(q.request_revalidation(root))  # the open ones stay
    await step(
        q.request_revalidation(two, reason=RevalidationReason.ON_READ, send_at=c.time() + 500)
    )
    await step(q.request_revalidation(two))  # manual: the waiting one goes now
    await step(q.request_revalidation(quar))  # its quarantined binding is not asked
    await step(q.request_revalidation(unbound))
    await step(q.request_revalidation("0190a0b0-0000-7000-8000-00000000dead"))
    await step(q.request_revalidation("a\x00b"))
    await step(q.request_revalidation("'; DROP TABLE revalidations; --"))
    reason = RevalidationReason.ON_READ
    await step(
        q.request_checks([root, three, quar, unbound, "no-such", "a\x00", root], reason=reason)
    )
    await step(q.request_checks([], reason=reason))
    await step(q.request_checks(["\x00"], reason=reason))
    # Huge lists.
    many = unknown_ids(30_000)
    await step(q.request_checks([*many[:5000], low], reason=reason))
    await step(q.mark_stale([*many, dep2, "\x00" * 1000]))
    await step(q.set_revalidation_status([*many[:20_000], third], "expired", outcome="late"))
    await step(q.due_for_revalidation(limit=10**6))
    await step(q.due_revalidations(limit=10**6))
    log.append((fell, only_third, await q.answered_requests([])))
    return log


async def test_queue_answers_as_specified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script's answers on one backend: what is due and in which order, what the
    sweep changed and asked, a request's life, one open request per binding."""
    log = await script(backend, monkeypatch)
    root, two, three, quar, unbound, low, dep, dep2 = log[0]
    assert log[1] == 4
    assert log[2:6] == [[], [], [], []]
    assert [d.id for d in log[6]] == [quar, unbound]  # the same stale_at: by rid
    due = [d.id for d in log[7]]
    assert due == [quar, unbound, two, three, root]  # unverified since START, then checked
    assert [d.stale_at for d in log[7]] == sorted(d.stale_at for d in log[7])
    assert sorted(log[8]) == sorted(due)  # unknown, NUL and the repeat changed nothing
    assert log[9] == []
    assert log[10] == [low]
    rows = await backend.dump()
    column = {name: i for i, name in enumerate(BLOCK_COLUMNS)}
    states = {r[column["id"]]: r[column["state"]] for r in rows["blocks"]}
    assert states[dep] == states[dep2] == "stale"  # pulled stale through the chain
    fell, only_third, none = log[-1]  # the dependents the sweep told its caller of
    assert only_third is True
    assert none == set()
    assert [(c.block_id, c.after, c.event_id, c.sensor) for c in fell] == [
        (dep, "stale", "", ""),
        (dep2, "stale", "", ""),
    ]
    assert states[low] == "stale"
    assert log[11] == []
    assert len(log[12]) == 1
    assert [r.id for r in log[13]] == [r.id for r in log[15]]  # a negative limit: none
    assert log[14] == []  # nothing was due at START
    requests = log[15]
    assert {(r.block_id, r.sensor, r.subject) for r in requests} == {
        (two, "fs", "b"),
        (three, "fs", "ü 🐘.yaml"),
        (quar, "http", "https://x/"),
        (dep, "http", "https://y/"),
    }  # root's waits its minute; the quarantined binding is not asked
    assert log[20] is True
    assert log[21] is log[22] is log[23] is False
    assert log[25] == 1  # the request sent again
    assert log[26] == 0
    assert log[28] == log[29]
    assert log[33] == []
    assert log[34][0] == log[35][0] == log[36][0] == "NotFoundError"
    checks = log[37]
    assert list(checks) == [root, three, quar, unbound, "no-such", "a\x00"]
    assert len(checks[root]) == 2
    assert checks[unbound] == checks["no-such"] == checks["a\x00"] == []
    assert log[38] == {}
    assert log[39] == {"\x00": []}
    assert len(log[40]) == 5001
    assert len(log[40][low]) == 1
    assert log[41] == []  # dep2 is stale already
    open_rows = [r for r in rows["revalidations"] if r[5] in ("pending", "sent")]
    keys = [r[1:4] for r in open_rows]
    assert len(keys) == len(set(keys))


async def test_both_backends_queue_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same script: equal answers and equal rows, table by table."""
    sqlite_log = await script(sqlite_backend, monkeypatch)
    pg_log = await script(pg_backend, monkeypatch)
    for i, (s, p) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert p == s, i
    sqlite_rows, pg_rows = await sqlite_backend.dump(), await pg_backend.dump()
    for table in TABLES:
        assert pg_rows[table] == sqlite_rows[table], table
    assert len(sqlite_rows["revalidations"]) == 10


async def _bound_block(b: Backend, subjects: int = 2) -> str:
    bindings = [{"sensor": "fs", "subject": f"s{i}"} for i in range(subjects)]
    (block_id,) = await b.blocks.add_many([{"content": "contended", "bindings": bindings}])
    return str(block_id)


async def test_concurrent_requests_share_one_check(backend: Backend) -> None:
    """Requests for one block at once (by hand and by reads): one open request per
    binding, and every caller is told the same ones."""
    block_id = await _bound_block(backend)
    answers = await asyncio.gather(
        *(backend.queue.request_revalidation(block_id) for _ in range(5)),
        *(
            backend.queue.request_checks([block_id], reason=RevalidationReason.ON_READ)
            for _ in range(5)
        ),
    )
    opened = answers[0]
    assert len(opened) == 2
    assert all(a == opened for a in answers[:5])
    assert all([r for r, _ in a[block_id]] == opened for a in answers[5:])
    rows = await backend.dump()
    assert sorted(r[0] for r in rows["revalidations"]) == sorted(opened)


async def test_two_nodes_request_one_check(pg_server: PgServer) -> None:
    """Two nodes (two databases of one PostgreSQL database, each with its writer) ask for
    a check of one binding at the same moment, twenty times over: each time one open
    request, and both are told its id (the partial unique index decides, the second
    insert waits for the first's commit and adds nothing)."""
    dsn = pg_server.create_database()
    clock = FakeClock(START)
    async with PgDatabase(dsn) as db_a, PgDatabase(dsn) as db_b:
        a, b = await pg_parts(db_a, clock), await pg_parts(db_b, clock)
        block_id = await _bound_block(a, subjects=1)
        for _ in range(20):
            one, other = await asyncio.gather(
                a.queue.request_revalidation(block_id),
                b.queue.request_checks([block_id], reason=RevalidationReason.ON_READ),
            )
            assert len(one) == 1
            assert [r for r, _ in other[block_id]] == one
            await b.queue.set_revalidation_status(one, "done")
        rows = await a.dump()
        assert len(rows["revalidations"]) == 20
        assert all(r[5] == "done" for r in rows["revalidations"])


async def test_two_sweeps_change_each_block_once(pg_server: PgServer) -> None:
    """Two nodes marking the same due blocks stale at once: each block is changed (and
    reported changed) by one of them, and one request per binding is queued."""
    dsn = pg_server.create_database()
    clock = FakeClock(START)
    async with PgDatabase(dsn) as db_a, PgDatabase(dsn) as db_b:
        a, b = await pg_parts(db_a, clock), await pg_parts(db_b, clock)
        ids = await a.blocks.add_many(
            [
                {
                    "content": f"fact {i}",
                    "volatility": "high",
                    "bindings": [{"sensor": "fs", "subject": f"f{i}"}],
                }
                for i in range(200)
            ]
        )
        clock.advance(7 * HOUR)
        due = [d.id for d in await a.queue.due_for_revalidation()]
        assert sorted(due) == sorted(ids)
        one, other = await asyncio.gather(
            a.queue.mark_stale(due), b.queue.mark_stale(list(reversed(due)))
        )
        assert sorted(one + other) == sorted(ids)
        rows = await a.dump()
        assert len(rows["revalidations"]) == 200
        assert await a.queue.due_for_revalidation() == []


async def test_the_sweep_reads_the_partial_index(pg_server: PgServer) -> None:
    """The sweep's statement, planned for its parameters and generically (as a prepared
    statement run often is), is a range scan of ``blocks_due`` over 20 000 blocks of
    which 2 % are due, never a scan of the table."""
    rng = random.Random(22)
    now = START + 400 * 86400.0
    columns = [
        *("rid", "id", "content", "source", "category", "info_type", "volatility", "tier"),
        *("state", "reliability", "importance", "validity_window_s", "stale_at"),
        *("half_life_s", "created_at", "updated_at"),
    ]
    records = []
    for rid in range(1, 20_001):
        x = rng.random()
        state = "fresh" if x < 0.7 else "stale" if x < 0.9 else "refuted"
        stale_at = now - 1 if rng.random() < 0.02 else now + rng.uniform(1, 1e6)
        if state != "fresh":
            stale_at = now - rng.uniform(1, 1e6)
        records.append(
            (
                *(rid, f"0190a0b0-0000-7000-8000-{rid:012x}", "n", "agent", "semantic"),
                *("dynamic", "high", "short_term", state, 0.9, 0.5, 3600.0, stale_at),
                *(86400.0, START, START),
            )
        )
    async with PgDatabase(pg_server.create_database()) as db:

        async def load(conn: PgConnection) -> None:
            await conn.copy_records_to_table("blocks", records=records, columns=columns)

        await db.write(load)
        async with db.read() as conn:
            await conn.execute("ANALYZE blocks")
            custom = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + DUE_SQL, now, 1000))
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            generic = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + DUE_SQL, now, 1000))
            await conn.execute("RESET plan_cache_mode")
        queue = PgRevalidations(db, FakeClock(now), PolicyConfig())
        due = await queue.due_for_revalidation(limit=1000)
    for plan in (custom, generic):
        assert "blocks_due" in plan, plan
        assert "Seq Scan" not in plan, plan
    expected = sorted((r[12], r[0]) for r in records if r[8] == "fresh" and r[12] <= now)
    assert [d.stale_at for d in due] == [s for s, _ in expected[:1000]]
    assert 0 < len(due) <= 1000
