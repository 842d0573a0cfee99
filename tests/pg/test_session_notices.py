"""Session notices across nodes on PostgreSQL (docs/SCALE.md): an ingestion that makes
blocks stale or refuted notifies ``memwarden_effects`` at commit (one that changes no
state does not), and :class:`~memwarden.daemon._cluster.EffectsFollower` reads the
effects log after its cursor on a notice or a ``missed`` signal (the Notifier's
reconnect, a queue overflow), telling the sessions that read those blocks, once each."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import asyncpg

from memwarden.cluster import Notice, Notifier, Subscription
from memwarden.daemon._cluster import EffectsFollower
from memwarden.daemon._sessions import SessionWatch
from memwarden.memory import Store, ValidationEvent, from_ts
from memwarden.memory._clock import FakeClock
from memwarden.memory.pg._apply import EFFECTS_CHANNEL, falls_after, falls_start, last_effect_seq
from tests.support import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.pgserver import PgServer

START = 1_750_000_000.0
WRITERS = (
    "SELECT pid, datname, backend_type, backend_xid, state, left(query, 80) AS query"
    " FROM pg_stat_activity WHERE backend_xid IS NOT NULL"
)


def _event(store: Store, subject: str, outcome: str, event_id: str) -> ValidationEvent:
    return ValidationEvent(
        event_id=event_id,
        sensor="fs",
        subject=subject,
        outcome=outcome,
        reliability=1.0,
        observed_at=from_ts(store.clock.time() - 1),
    )


async def _bound(store: Store, subject: str) -> str:
    block = await store.add(
        {
            "title": subject,
            "content": f"{subject} holds the setting",
            "bindings": [{"sensor": "fs", "path": subject}],
        }
    )
    return block.id


def _follower(store: Store, watch: SessionWatch, **kw: Any) -> EffectsFollower:
    @contextlib.asynccontextmanager
    async def conn() -> AsyncIterator[Any]:
        assert store.pg_db is not None
        async with store.pg_db.read() as c:
            yield c

    return EffectsFollower(conn, watch, store.clock, **kw)


async def test_a_missed_signal_makes_the_watch_read_the_effects_log_again(
    pg_server: PgServer,
) -> None:
    dsn = pg_server.create_database()
    async with Store(dsn, clock=FakeClock(START)) as store:
        first = await _bound(store, "etc/a.yaml")
        twin = await _bound(store, "etc/a.yaml")  # one event makes two blocks fall
        other = await _bound(store, "etc/b.yaml")
        watch = SessionWatch()
        watch.read("s-1", [first, twin])
        watch.read("s-2", [other])
        assert store.pg_db is not None
        async with store.pg_db.read() as c:
            start = await last_effect_seq(c)
        follower = _follower(store, watch, cursor=(start, 0), page=1)  # pages of one
        sub = Subscription([EFFECTS_CHANNEL], maxsize=2)
        task = asyncio.create_task(follower.run(sub))
        try:
            result = await store.apply_events([_event(store, "etc/a.yaml", "refuted", "e-1")])
            assert {c.block_id for c in result.changes} == {first, twin}
            assert follower.reads == 0  # no notice yet: nothing read
            assert watch.after("s-1", 0) == []
            sub.mark_missed()  # the Notifier reconnected: notices may have been lost
            await eventually(lambda: len(watch.after("s-1", 0)) == 2, what="the re-read")
            told = watch.after("s-1", 0)
            assert sorted(n["block_id"] for n in told) == sorted([first, twin])
            assert {n["event_id"] for n in told} == {"e-1"}
            assert watch.after("s-2", 0) == []  # s-2 read neither

            # The change this node applied itself is told once, however it arrives.
            assert watch.changed(first, before="fresh", after="refuted", at=0, event_id="e-1") == 0

            # A queue that overflows turns into `missed`: the re-read finds the new fall.
            await store.apply_events([_event(store, "etc/b.yaml", "refuted", "e-2")])
            for _ in range(5):
                sub.put(Notice(EFFECTS_CHANNEL, payload="junk; DROP TABLE effects"))
            assert sub.overflows >= 1
            [notice] = await eventually(lambda: watch.after("s-2", 0), what="after overflow")
            assert (notice["block_id"], notice["event_id"]) == (other, "e-2")
            assert len(watch.after("s-1", 0)) == 2  # nothing told twice
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_only_an_ingestion_that_makes_blocks_fall_notifies_memwarden_effects(
    pg_server: PgServer,
) -> None:
    dsn = pg_server.create_database()
    async with Store(dsn, clock=FakeClock(START)) as store:
        await _bound(store, "etc/c.yaml")
        async with Notifier(dsn, channels=[EFFECTS_CHANNEL]) as notifier:
            sub = notifier.subscribe()
            await notifier.connected()
            missed = await asyncio.wait_for(sub.get(), timeout=10)  # the first connect's
            assert missed.missed
            confirmed = await store.apply_events([_event(store, "etc/c.yaml", "confirmed", "ok-1")])
            assert all(c.after not in ("stale", "refuted") for c in confirmed.changes)
            assert isinstance(store.clock, FakeClock)
            store.clock.advance(60)  # the refutation is the later observation
            fell = await store.apply_events([_event(store, "etc/c.yaml", "refuted", "no-1")])
            assert [c.after for c in fell.changes] in (["refuted"], ["stale"])
            notice = await asyncio.wait_for(sub.get(), timeout=10)
            assert store.pg_db is not None
            async with store.pg_db.read() as c:
                seq = await c.fetchval("SELECT seq FROM events WHERE event_id = 'no-1'")
            # The first notice is the fall's: the confirmation sent none.
            assert (notice.missed, notice.payload) == (False, str(seq))


# ------------------------------------------------------------------ falls of no event


async def test_the_sweeps_and_a_dependencys_falls_are_told_from_block_falls(
    pg_server: PgServer,
) -> None:
    """The sweep's expirations and dependency propagation write no effects row: they go
    to ``block_falls`` (notifying ``memwarden_effects``), and a follower (another node's
    session notices) tells them, once, with their reason; an erasure takes them too."""
    dsn = pg_server.create_database()
    async with Store(dsn, clock=FakeClock(START)) as store:
        expiring = (
            await store.add(
                {"title": "expiring", "content": "valid a minute", "validity_window": "60s"}
            )
        ).id
        root = await _bound(store, "etc/root.yaml")
        dependent = (
            await store.add(
                {"title": "dependent", "content": "follows the root", "depends_on": [root]}
            )
        ).id
        watch = SessionWatch()
        watch.read("s-1", [expiring, dependent])  # not the root
        assert store.pg_db is not None
        async with store.pg_db.read() as c:
            start = await last_effect_seq(c)
            falls = await falls_start(c)
        follower = _follower(store, watch, cursor=(start, 0), falls_cursor=falls)
        async with Notifier(dsn, channels=[EFFECTS_CHANNEL]) as notifier:
            sub = notifier.subscribe()
            await notifier.connected()
            task = asyncio.create_task(follower.run(sub))
            try:
                await eventually(lambda: follower.reads >= 1, what="the connect's re-read")
                assert watch.after("s-1", 0) == []

                # The sweep (any node's): the notice comes from the log, woken by its notify.
                reads = follower.reads
                assert isinstance(store.clock, FakeClock)
                store.clock.advance(3600)
                assert await store.mark_stale([expiring]) == [expiring]
                [expired] = await eventually(lambda: watch.after("s-1", 0), what="expired")
                assert follower.reads > reads  # woken by the notice, not by a timer
                assert (expired["block_id"], expired["state"]) == (
                    expiring,
                    ["unverified", "stale"],
                )
                assert expired["reason"] == "expired"
                assert "event_id" not in expired
                assert expired["at"] == from_ts(START + 3600).isoformat()

                # A refutation's dependent goes stale by dependency: no effects row of its own.
                fell = await store.apply_events([_event(store, "etc/root.yaml", "refuted", "r-1")])
                assert dependent in {c.block_id for c in fell.changes}
                [dep] = await eventually(lambda: watch.after("s-1", 1), what="dependency")
                assert (dep["block_id"], dep["reason"], dep["state"][1]) == (
                    dependent,
                    "dependency",
                    "stale",
                )

                # A reconnect re-reads from the cursors: nothing told twice.
                reads = follower.reads
                sub.mark_missed()
                await eventually(lambda: follower.reads > reads, what="the re-read")
                assert [n["seq"] for n in watch.after("s-1", 0)] == [1, 2]
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        async with store.pg_db.read() as c:
            logged = await c.fetch("SELECT block_id, reason FROM block_falls ORDER BY id")
        assert [tuple(r) for r in logged] == [(expiring, "expired"), (dependent, "dependency")]
        await store.erase([dependent], actor="test")
        async with store.pg_db.read() as c:
            left = await c.fetch("SELECT block_id FROM block_falls")
        assert [r[0] for r in left] == [expiring]


async def test_a_fall_behind_an_older_open_transaction_is_read_when_that_one_ends(
    pg_server: PgServer,
) -> None:
    """A fall committed while an older transaction is still open is not read yet (that
    one could still commit a fall behind the cursor); the follower reads again on its own
    a little later, and tells it once the older transaction ended, with no new notice."""
    dsn = pg_server.create_database()
    async with Store(dsn, clock=FakeClock(START)) as store:
        block = (
            await store.add(
                {"title": "held", "content": "behind an older one", "validity_window": "60s"}
            )
        ).id
        watch = SessionWatch()
        watch.read("s-1", [block])
        assert store.pg_db is not None
        async with store.pg_db.read() as c:
            falls = await falls_start(c)
        follower = _follower(store, watch, falls_cursor=falls, retry_s=0.05)
        older = await asyncpg.connect(dsn)
        try:
            tx = older.transaction()
            await tx.start()
            await older.fetchval("SELECT pg_current_xact_id()")  # an xid older than the fall's
            assert isinstance(store.clock, FakeClock)
            store.clock.advance(3600)
            assert await store.mark_stale([block]) == [block]
            assert await follower.catch_up() == 0  # committed, but not readable yet
            assert follower.held
            sub = Subscription([EFFECTS_CHANNEL], maxsize=8)
            task = asyncio.create_task(follower.run(sub))
            try:
                sub.put(Notice(EFFECTS_CHANNEL, payload="falls"))
                reads = follower.reads
                await eventually(lambda: follower.reads > reads + 2, what="reading again")
                assert watch.after("s-1", 0) == []  # still held back
                await tx.rollback()
                try:  # generous: any other writing transaction on the server delays it too
                    [notice] = await eventually(
                        lambda: watch.after("s-1", 0), timeout_s=30, what="the fall"
                    )
                except BaseException:
                    async with store.pg_db.read() as c:  # who still holds the horizon back
                        print(await c.fetch(WRITERS))  # noqa: T201 - the failure's cause
                    raise
                assert (notice["block_id"], notice["reason"]) == (block, "expired")
                await eventually(lambda: not follower.held, what="nothing held")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            await older.close()


async def test_a_fall_freed_between_the_read_and_the_check_is_read_again(
    pg_server: PgServer,
) -> None:
    """The older transaction ends just after the read that skipped its successor's fall
    and before the check for falls left unread: the check still says to read again (it
    looked at every fall after the cursor, not only those still held back), so the fall
    is not left unread until some later notice."""
    dsn = pg_server.create_database()
    async with Store(dsn, clock=FakeClock(START)) as store:
        block = (
            await store.add(
                {"title": "raced", "content": "freed in between", "validity_window": "60s"}
            )
        ).id
        assert store.pg_db is not None
        async with store.pg_db.read() as c:
            cursor = await falls_start(c)
        older = await asyncpg.connect(dsn)
        try:
            tx = older.transaction()
            await tx.start()
            await older.fetchval("SELECT pg_current_xact_id()")
            assert isinstance(store.clock, FakeClock)
            store.clock.advance(3600)
            assert await store.mark_stale([block]) == [block]

            class EndsTheOlderAfterTheRead:
                def __init__(self, conn: Any) -> None:
                    self.conn = conn

                async def fetch(self, *args: Any) -> Any:
                    rows = await self.conn.fetch(*args)
                    await tx.rollback()  # the older one ends right after the read
                    return rows

                async def fetchval(self, *args: Any) -> Any:
                    return await self.conn.fetchval(*args)

            async with store.pg_db.read() as c:
                falls, held = await falls_after(EndsTheOlderAfterTheRead(c), cursor)
                assert (falls, held) == ([], True)
                [fall], held = await falls_after(c, cursor)  # the next read finds it
            assert (fall.block_id, fall.reason, held) == (block, "expired", False)
        finally:
            await older.close()
