"""A node's local durable spool (docs/SCALE.md, "A node cut off from the database"): events
the store cannot take are committed to a SQLite file, answered ``spooled``, queue new
events behind them and are delivered oldest first after the database is back, exactly
once by event id, also when the node dies between the PostgreSQL commit and the local
delete. On a server of the test's own, stopped and started mid-stream."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from memwarden.cluster import Spool, SpoolingIngest, is_unavailable
from memwarden.errors import StorageError, ValidationInputError
from memwarden.memory._clock import FakeClock, from_ts
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._model import ValidationEvent
from memwarden.memory._results import ApplyResult
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg._apply import PgEventLog
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.policy import PolicyConfig
from memwarden.plugins import Backoff
from tests.pgserver import PgServer, require_pg
from tests.support import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence
    from pathlib import Path

START = 1_767_225_600.0


def _ev(i: int, subject: str = "s") -> ValidationEvent:
    return ValidationEvent(
        event_id=f"e{i:04d}",
        sensor="fs",
        subject=subject,
        outcome="error",
        observed_at=from_ts(START - 1000 + i),
    )


class FakeStore:
    """apply_events that fails as an unreachable database while ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.refuse: Exception | None = None
        self.calls: list[tuple[list[str], bool]] = []
        self.seen: set[str] = set()

    async def apply_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> ApplyResult:
        if self.refuse is not None:
            raise self.refuse
        if self.down:
            raise StorageError("commit failed: connection refused") from ConnectionRefusedError()
        ids = [e.event_id for e in events]
        self.calls.append((ids, bound_only))
        new = [i for i in ids if i not in self.seen]
        self.seen.update(ids)
        return ApplyResult(accepted=len(new), duplicates=len(ids) - len(new))


@pytest.fixture
async def spool(tmp_path: Path) -> AsyncIterator[Spool]:
    async with Spool(tmp_path / "spool.db", clock=FakeClock(START), max_unsent=1000) as s:
        yield s


async def test_spool_is_bounded_oldest_dropped_and_counted(tmp_path: Path) -> None:
    """Past max_unsent the oldest go, counted; the file keeps the rest across a reopen."""
    path = tmp_path / "spool.db"
    async with Spool(path, clock=FakeClock(START), max_unsent=5) as s:
        assert await s.put([_ev(i) for i in range(4)]) == 0
        assert await s.put([_ev(i) for i in range(4, 8)]) == 3
        assert [x.event.event_id for x in await s.oldest()] == [f"e{i:04d}" for i in range(3, 8)]
        stats = await s.stats()
        assert (stats.unsent, stats.dropped, stats.delivered) == (5, 3, 0)
    async with Spool(path, clock=FakeClock(START), max_unsent=5) as s:
        assert s.pending == 5
        assert s.changed.is_set()  # a delivery task starts at once
        assert (await s.oldest(1))[0].event == _ev(3)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(ValueError, match="max_unsent"):
        Spool(path, clock=FakeClock(START), max_unsent=0)


async def test_deliver_oldest_first_in_batches_by_bound_only(spool: Spool) -> None:
    """Batches of at most ``batch``, oldest first, each of one bound_only flag; a failing
    call leaves its batch and everything after it in the spool."""
    store = FakeStore()
    await spool.put([_ev(i) for i in range(5)])
    await spool.put([_ev(i) for i in range(5, 7)], bound_only=True)
    await spool.put([_ev(7)])
    assert await spool.deliver(store.apply_events, batch=3) == 8
    assert store.calls == [
        (["e0000", "e0001", "e0002"], False),
        (["e0003", "e0004"], False),
        (["e0005", "e0006"], True),
        (["e0007"], False),
    ]
    assert spool.pending == 0
    await spool.put([_ev(i) for i in range(8, 12)])
    store.down = True
    with pytest.raises(StorageError):
        await spool.deliver(store.apply_events, batch=2)
    assert spool.pending == 4
    assert (await spool.stats()).delivered == 8


async def test_ingest_spools_while_down_queues_behind_and_delivers(spool: Spool) -> None:
    """Down: answered ``spooled``. Up again: a new event still queues behind the spool
    (order kept) until the delivery task emptied it; then events go straight in. An
    event the store refuses is refused, not spooled."""
    store = FakeStore()
    sleeps: list[float] = []
    woken = asyncio.Event()

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        woken.set()
        await asyncio.sleep(0)

    ingest = SpoolingIngest(
        store.apply_events, spool, batch=2, backoff=Backoff(0.01, 0.02), sleep=sleep
    )
    first = await ingest.apply_events([_ev(0)])
    assert first.result is not None
    assert first.result.accepted == 1
    assert not first.spooled
    store.down = True
    answers = [await ingest.apply_events([_ev(i)]) for i in (1, 2, 3)]
    assert all(a.spooled and a.result is None for a in answers)
    task = asyncio.create_task(ingest.run())
    try:
        await asyncio.wait_for(woken.wait(), 10)  # a delivery failed: backing off
        store.down = False
        queued = await ingest.apply_events([_ev(4)])  # behind the spool
        await eventually(lambda: spool.pending == 0, what="the spool delivered")
        assert queued.spooled
        direct = await ingest.apply_events([_ev(5)])
        assert not direct.spooled
        delivered = [i for ids, _ in store.calls for i in ids]
        assert delivered == [f"e{i:04d}" for i in range(6)]
        assert ingest.failures >= 1
        assert sleeps
        store.refuse = ValidationInputError([("subject", "bad")])
        with pytest.raises(ValidationInputError):
            await ingest.apply_events([_ev(6)])
        assert spool.pending == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_unavailable_is_told_from_a_refusal() -> None:
    """Connection failures anywhere in the cause chain spool; errors in the events do not."""

    def raised(err: Exception, cause: BaseException) -> Exception:
        err.__cause__ = cause
        return err

    assert is_unavailable(raised(StorageError("commit failed"), ConnectionRefusedError()))
    assert is_unavailable(raised(StorageError("x"), asyncpg.ConnectionDoesNotExistError("gone")))
    assert is_unavailable(asyncpg.AdminShutdownError("terminating"))
    assert is_unavailable(asyncpg.CannotConnectNowError("starting up"))
    assert is_unavailable(TimeoutError())
    assert not is_unavailable(StorageError("duplicate key"))
    assert not is_unavailable(raised(StorageError("x"), asyncpg.UniqueViolationError("dup")))
    assert not is_unavailable(ValueError("bad"))
    loop = StorageError("a")
    loop.__cause__ = loop  # a cycle ends the walk
    assert not is_unavailable(loop)


# ---------------------------------------------------------------- on a real server


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of this test's own: it is stopped and started mid-test."""
    server = PgServer(require_pg())
    try:
        yield server.start()
    finally:
        server.remove()


class Node:
    def __init__(self, db: PgDatabase) -> None:
        cfg = PolicyConfig()
        self.db = db
        self.blocks = PgBlocks(db, FakeClock(START), cfg)
        self.events = PgEventLog(db, FakeClock(START), cfg, CompactionConfig())

    async def log(self) -> list[tuple[Any, ...]]:
        async with self.db.read() as conn:
            return [
                tuple(r) for r in await conn.fetch("SELECT seq, event_id FROM events ORDER BY seq")
            ]

    async def errors(self) -> int:
        async with self.db.read() as conn:
            return int(await conn.fetchval("SELECT consecutive_errors FROM blocks"))


async def test_server_stopped_mid_stream_then_delivered_once_in_order(
    own_server: PgServer, tmp_path: Path
) -> None:
    """Events stream in; the server is stopped (pg_ctl stop): the next ones are answered
    ``spooled``; it starts again: the delivery task sends the spool, and afterwards the
    log holds each event once, in the order they came, each applied once."""
    dsn = own_server.create_database()
    async with (
        PgDatabase(dsn, connect_timeout_s=2, command_timeout_s=10) as db,
        Spool(tmp_path / "spool.db", clock=FakeClock(START)) as spool,
    ):
        node = Node(db)
        await node.blocks.add_many(
            [{"content": "f", "bindings": [{"sensor": "fs", "subject": "s"}]}]
        )
        ingest = SpoolingIngest(
            node.events.apply_events, spool, batch=7, backoff=Backoff(0.05, 0.2)
        )
        task = asyncio.create_task(ingest.run())
        try:
            answers = [await ingest.apply_events([_ev(2 * i), _ev(2 * i + 1)]) for i in range(10)]
            assert not any(a.spooled for a in answers)
            await asyncio.to_thread(own_server.stop, "fast")
            answers = [
                await ingest.apply_events([_ev(2 * i), _ev(2 * i + 1)]) for i in range(10, 25)
            ]
            assert all(a.spooled for a in answers)
            assert spool.pending == 30
            await asyncio.to_thread(own_server.start)
            await eventually(lambda: spool.pending == 0, timeout_s=60, what="spool delivered")
            after = await ingest.apply_events([_ev(50)])
            assert not after.spooled
            log = await node.log()
            assert [e for _, e in log] == [f"e{i:04d}" for i in range(51)]
            assert await node.errors() == 51  # each applied once
            assert ingest.failures >= 1
            assert (await spool.stats()).delivered == 30
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_death_between_commit_and_local_delete_redelivers_once(
    own_server: PgServer, tmp_path: Path
) -> None:
    """The node dies after PostgreSQL committed a delivered batch but before the spool
    deleted it: the restarted node sends it again, the event log's unique id drops the
    copies (duplicates, not applied), and the spool ends empty."""
    dsn = own_server.create_database()
    path = tmp_path / "spool.db"
    async with PgDatabase(dsn) as db:
        node = Node(db)
        await node.blocks.add_many(
            [{"content": "f", "bindings": [{"sensor": "fs", "subject": "s"}]}]
        )
        async with Spool(path, clock=FakeClock(START)) as spool:
            await spool.put([_ev(i) for i in range(10)])

            class DiedError(Exception):
                pass

            async def die(ids: Sequence[int]) -> None:
                raise DiedError

            spool.remove = die  # type: ignore[method-assign]
            with pytest.raises(DiedError):
                await spool.deliver(node.events.apply_events, batch=4)
        assert [e for _, e in await node.log()] == [f"e{i:04d}" for i in range(4)]
        results: list[ApplyResult] = []

        async def recorded(
            events: Sequence[ValidationEvent], *, bound_only: bool = False
        ) -> ApplyResult:
            result = await node.events.apply_events(events, bound_only=bound_only)
            results.append(result)
            return result

        async with Spool(path, clock=FakeClock(START)) as spool:  # the node restarted
            assert spool.pending == 10
            assert await spool.deliver(recorded, batch=4) == 10
            assert spool.pending == 0
        assert [(r.accepted, r.duplicates) for r in results] == [(0, 4), (4, 0), (2, 0)]
        assert [e for _, e in await node.log()] == [f"e{i:04d}" for i in range(10)]
        assert await node.errors() == 10
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM spool").fetchone() == (0,)
