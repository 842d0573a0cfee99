"""A read's receipt (``receipts_for``), what we believed at a past time
(``believed_at``) and why a block stands where it does (``explain``) as a contract both
backends keep: the same blocks, events, edits, archives, requests and accesses, with
the same ids and clock, on SQLite (the Store) and on PostgreSQL (``PgEvidence``); every
answer or error is equal on both. Hostile inputs among the calls: unknown ids, NUL, an
id twice, a time before the block existed, thousands of ids."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from memwarden.memory import Store
from memwarden.memory._clock import FakeClock
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._model import RevalidationReason
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg._apply import PgEventLog
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.pg._evidence import PgEvidence
from memwarden.memory.pg._revalidation import PgRevalidations
from memwarden.memory.policy import PolicyConfig
from tests.pg.test_revalidation_contract import (
    START,
    event,
    outcome,
    same_ids,
    unknown_ids,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

    import aiosqlite

    from memwarden.memory.pg._types import PgConnection
    from tests.pgserver import PgServer

HOUR = 3600.0


class Backend:
    """One backend's writes and its evidence reads."""

    def __init__(  # noqa: PLR0917 - the parts of one backend
        self,
        blocks: Any,
        events: Any,
        queue: Any,
        evidence: Any,
        clock: FakeClock,
        execute: Callable[[str], Awaitable[None]],
    ) -> None:
        self.blocks = blocks
        self.events = events
        self.queue = queue
        self.evidence = evidence
        self.clock = clock
        self.execute = execute


@pytest.fixture
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    async with Store(tmp_path / "m.db", clock=clock) as store:

        async def execute(sql: str) -> None:
            async def job(conn: aiosqlite.Connection) -> None:
                await conn.execute(sql)

            await store.db.write(job)

        # The Store's own methods: receipts_for, believed_at, explain.
        yield Backend(store._blocks, store._events, store._revalidations, store, clock, execute)


@pytest.fixture
async def pg_backend(pg_server: PgServer) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    cfg = PolicyConfig()  # the Store's default
    async with PgDatabase(pg_server.create_database()) as db:

        async def execute(sql: str) -> None:
            async def job(conn: PgConnection) -> None:
                await conn.execute(sql)

            await db.write(job)

        yield Backend(
            PgBlocks(db, clock, cfg),
            PgEventLog(db, clock, cfg, CompactionConfig()),
            PgRevalidations(db, clock, cfg),
            PgEvidence(db, clock, cfg),
            clock,
            execute,
        )


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    name = "sqlite_backend" if request.param == "sqlite" else "pg_backend"
    value: Backend = request.getfixturevalue(name)
    return value


async def script(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A block's life (confirmed, edited, erring, requests open, read in sessions),
    another's (refuted, confirmed, archived, restored), one archived; then every
    evidence read at times before, during and after; the answers in order."""
    same_ids(monkeypatch)
    log: list[Any] = []
    c, ev = b.clock, b.evidence
    a, other, plain = await b.blocks.add_many(
        [
            {
                "title": "Café «naïve» 🐘",
                "content": "the deploy config is a.yaml",
                "tags": ["deploy", "ü"],
                "volatility": "high",
                "bindings": [
                    {"sensor": "fs", "subject": "a.yaml"},
                    {"sensor": "git", "subject": "r"},
                ],
            },
            {"content": "other fact", "bindings": [{"sensor": "fs", "subject": "b"}]},
            {"content": "plain, unbound", "namespace": "elsewhere"},
        ]
    )
    log.append([a, other, plain])
    times = [START - 1, START]

    async def apply(*events: Any) -> None:
        await b.events.apply_events(list(events))
        times.append(c.time())
        c.advance(10)

    c.advance(10)
    await apply(
        event(c, "e1", "a.yaml", "confirmed", observed={"port": 8080, "s": "ü \u2028"}),
        event(c, "e2", "b", "refuted", message="nope «x»"),
    )
    await b.blocks.update(a, {"content": "the deploy config is b.yaml"})
    times.append(c.time())
    c.advance(10)
    await apply(event(c, "e3", "a.yaml", "error", message="boom 1"))
    await apply(event(c, "e4", "a.yaml", "error", message="boom 2 \U0001f418"))
    await apply(event(c, "e5", "b", "confirmed", validity_window=60))
    await b.blocks.archive(other, reason="superseded")
    times.append(c.time())
    c.advance(10)
    await b.blocks.restore(other)
    await b.blocks.archive(plain, reason="old")
    times.append(c.time())
    c.advance(10)
    log.append(await b.queue.request_revalidation(a))
    log.append(await b.queue.request_checks([other], reason=RevalidationReason.ON_READ))
    for i, (session, at) in enumerate([("s1", 20.0), ("s1", 25.0), ("s2", 40.0)]):
        await b.execute(
            "INSERT INTO accesses (block_id, session_id, at)"
            f" VALUES ('{a}', '{session}', {START + at + i})"
        )
    await b.execute(
        "INSERT INTO sessions (block_id, session_id, first_at, last_at, count)"
        f" VALUES ('{a}', 's1', {START + 20}, {START + 26}, 2),"
        f" ('{a}', 's2', {START + 42}, {START + 42}, 1)"
    )
    c.advance(100)
    times += [c.time(), c.time() + 120, c.time() + 10 * HOUR]

    async def read(call: Awaitable[Any]) -> None:
        log.append(await outcome(call))

    await read(ev.receipts_for([a, other, plain, "no-such", "x\x00", a]))
    await read(ev.receipts_for([]))
    await read(ev.receipts_for(["\x00"]))
    await read(ev.receipts_for([*unknown_ids(5000), other]))
    for at in times:
        for block_id in (a, other, plain):
            await read(ev.believed_at(block_id, at))
    await read(ev.believed_at("no-such", START + 1))
    await read(ev.believed_at("a\x00b", START + 1))
    await read(ev.believed_at("'; DROP TABLE blocks; --", START + 1))
    for block_id in (a, other, plain, "no-such", "a\x00b"):
        await read(ev.explain(block_id))
    c.advance(10 * HOUR)  # a's window ran out: stale as of now, not stored so
    await read(ev.explain(a))
    return log


async def test_evidence_answers_as_specified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script's answers on one backend: the error streak and its first error, the
    open checks, the confirmation; the text and state believed at each time; why."""
    log = await script(backend, monkeypatch)
    a, other, plain = log[0]
    receipts = log[3]
    assert set(receipts) == {a, other, plain}
    assert receipts[a].consecutive_errors == 2
    assert receipts[a].last_error == "boom 2 \U0001f418"
    assert receipts[a].errors_since is not None
    assert len(receipts[a].open_checks) == 2
    assert receipts[other].confirmation is not None
    assert receipts[other].confirmation["sensor"] == "fs"
    assert receipts[a].last_event is not None
    assert receipts[a].last_event["outcome"] == "error"
    assert log[4] == log[5] == {}
    assert set(log[6]) == {other}
    beliefs = log[7 : 7 + 3 * 12]  # 12 times, 3 blocks
    before = beliefs[0]
    assert before[0] == "NotFoundError"
    confirmed = beliefs[2 * 3]  # a, when e1 was applied
    assert confirmed["state"] == "fresh"
    assert confirmed["content"] == "the deploy config is a.yaml"
    assert confirmed["last_evidence"]["observed"] == {"port": 8080, "s": "ü \u2028"}
    edited = beliefs[3 * 3]
    assert (edited["state"], edited["version"]) == ("unverified", 2)
    archived = beliefs[7 * 3 + 1]  # other, once archived
    assert archived["state"] == "archived"
    rest = log[7 + 36 :]
    assert [r[0] for r in rest[:3]] == ["NotFoundError"] * 3
    explained = rest[3]
    assert explained["id"] == a
    assert explained["promotion"]["core"]["sessions"] == 0  # the counter, not the table
    assert len(explained["promotion"]["access_times"]) == 3
    assert rest[6][0] == rest[7][0] == "NotFoundError"
    assert rest[8]["state"]["stale"] is True


async def test_both_backends_explain_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same script: equal answers, call by call."""
    sqlite_log = await script(sqlite_backend, monkeypatch)
    pg_log = await script(pg_backend, monkeypatch)
    assert len(sqlite_log) == len(pg_log)
    for i, (s, p) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert p == s, i
