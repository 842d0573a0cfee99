"""Session notices across nodes on PostgreSQL (docs/SCALE.md): an ingestion that makes
blocks stale or refuted notifies ``memwarden_effects`` at commit (one that changes no
state does not), and :class:`~memwarden.daemon._cluster.EffectsFollower` reads the
effects log after its cursor on a notice or a ``missed`` signal (the Notifier's
reconnect, a queue overflow), telling the sessions that read those blocks, once each."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from memwarden.cluster import Notice, Notifier, Subscription
from memwarden.daemon._cluster import EffectsFollower
from memwarden.daemon._sessions import SessionWatch
from memwarden.memory import Store, ValidationEvent, from_ts
from memwarden.memory._clock import FakeClock
from memwarden.memory.pg._apply import EFFECTS_CHANNEL, last_effect_seq
from tests.support import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.pgserver import PgServer

START = 1_750_000_000.0


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
