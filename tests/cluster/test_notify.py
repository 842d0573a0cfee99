"""LISTEN/NOTIFY across connections and processes on a real server, and what a reader
is told after a reconnect: ``missed``, so it re-reads from its last seq."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import asyncpg
import pytest

from memwarden.cluster import MAX_PAYLOAD_BYTES, Notice, Notifier, check_channel, notify
from memwarden.errors import ConfigError, ValidationInputError
from memwarden.plugins import Backoff
from tests.support import eventually

if TYPE_CHECKING:
    from memwarden.cluster import Subscription
    from tests.cluster.conftest import TcpProxy

CH = "memwarden_events"


async def _next(sub: Subscription, timeout_s: float = 10.0) -> Notice:
    return await asyncio.wait_for(sub.get(), timeout_s)


def _notifier(dsn: str, **kw) -> Notifier:
    return Notifier(
        dsn,
        channels=[CH, "memwarden_effects"],
        backoff=Backoff(base_s=0.01, cap_s=0.05),
        application_name="memwarden notifier test",
        **kw,
    )


async def test_notices_from_another_process_and_the_first_missed(dsn, pg_server):
    """A subscriber first hears `missed` (anything sent before LISTEN is lost), then the
    notices psql sends from its own process, in order, on its channels only."""
    async with _notifier(dsn) as notifier:
        events = notifier.subscribe(CH)
        both = notifier.subscribe()
        await asyncio.wait_for(notifier.connected(), 30)
        assert await _next(events) == Notice(CH, missed=True)
        assert {await _next(both), await _next(both)} == {
            Notice(CH, missed=True),
            Notice("memwarden_effects", missed=True),
        }
        database = dsn.rsplit("/", 1)[1]
        await asyncio.to_thread(
            pg_server.psql,
            f"SELECT pg_notify('{CH}', '41'); SELECT pg_notify('memwarden_effects', 'e');"
            f" NOTIFY {CH}, '42'",
            database,
        )
        assert await _next(events) == Notice(CH, "41")
        assert await _next(events) == Notice(CH, "42")
        assert [await _next(both) for _ in range(3)] == [
            Notice(CH, "41"),
            Notice("memwarden_effects", "e"),
            Notice(CH, "42"),
        ]
        assert events.pending() == 0


async def test_sent_at_commit_and_never_on_rollback(dsn):
    """notify() in a transaction is delivered when it commits, not before, and not at
    all when it rolls back."""
    conn = await asyncpg.connect(dsn)
    async with _notifier(dsn) as notifier:
        sub = notifier.subscribe(CH)
        await asyncio.wait_for(notifier.connected(), 30)
        assert (await _next(sub)).missed
        tx = conn.transaction()
        await tx.start()
        await notify(conn, CH, "rolled back")
        await tx.rollback()
        async with conn.transaction():
            await notify(conn, CH, "committed")
            await conn.execute("SELECT pg_sleep(0.05)")
            assert sub.pending() == 0  # not before the commit
        assert await _next(sub) == Notice(CH, "committed")
        assert sub.pending() == 0
    await conn.close()


async def test_after_the_connection_is_killed_missed_then_notices_again(dsn):
    """The listener's backend is terminated: the notifier reconnects, tells every
    subscriber `missed` (what was sent meanwhile is gone), and hears what comes next."""
    conn = await asyncpg.connect(dsn)
    async with _notifier(dsn) as notifier:
        sub = notifier.subscribe(CH)
        await asyncio.wait_for(notifier.connected(), 30)
        assert (await _next(sub)).missed
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'memwarden notifier test'"
        )
        assert killed == 1
        await eventually(lambda: notifier.connects == 2, what="reconnected")
        assert await _next(sub) == Notice(CH, missed=True)
        await notify(conn, CH, "after")
        assert await _next(sub) == Notice(CH, "after")
    await conn.close()


async def test_a_silent_line_is_noticed_by_the_ping(dsn, proxy: TcpProxy):
    """The line goes silent (packets dropped, nothing closed): the ping times out, the
    notifier reconnects once the line is back and says `missed`."""
    conn = await asyncpg.connect(dsn)
    async with _notifier(proxy.dsn(dsn), ping_s=0.1, ping_timeout_s=0.3) as notifier:
        sub = notifier.subscribe(CH)
        await asyncio.wait_for(notifier.connected(), 30)
        assert (await _next(sub)).missed
        proxy.pause()
        await notify(conn, CH, "lost")  # sent while the line is silent
        await eventually(lambda: not notifier.is_connected, what="the ping failed")
        proxy.resume()
        await eventually(lambda: notifier.connects >= 2, what="reconnected")
        got = [await _next(sub)]
        while got[-1] != Notice(CH, missed=True):
            got.append(await _next(sub))
        assert set(got) <= {Notice(CH, "lost"), Notice(CH, missed=True)}
        await notify(conn, CH, "next")
        assert await _next(sub) == Notice(CH, "next")
    await conn.close()


async def test_a_subscriber_that_falls_behind_gets_missed(dsn):
    """Past its queue's bound a subscriber's waiting notices become one `missed`."""
    conn = await asyncpg.connect(dsn)
    async with _notifier(dsn, queue_max=3) as notifier:
        sub = notifier.subscribe(CH)
        await asyncio.wait_for(notifier.connected(), 30)
        assert (await _next(sub)).missed
        for i in range(5):
            await notify(conn, CH, str(i))
        # 0, 1, 2 fill the queue; 3 overflows it (all become one `missed`); 4 follows.
        await eventually(
            lambda: sub.overflows == 1 and sub.pending() == 2, what="overflowed, then 4"
        )
        assert [await _next(sub), await _next(sub)] == [
            Notice(CH, missed=True),
            Notice(CH, "4"),
        ]
    await conn.close()


async def test_hostile_payloads_pass_as_text(dsn):
    """Quotes, backslashes, SQL and a maximal payload travel verbatim; a longer one and
    bad channel names are refused before anything is sent."""
    conn = await asyncpg.connect(dsn)
    async with _notifier(dsn) as notifier:
        sub = notifier.subscribe(CH)
        await asyncio.wait_for(notifier.connected(), 30)
        assert (await _next(sub)).missed
        odd = "'); NOTIFY memwarden_effects, 'x'; -- \\ \" \u00fc"
        await notify(conn, CH, odd)
        assert await _next(sub) == Notice(CH, odd)
        big = "x" * MAX_PAYLOAD_BYTES
        await notify(conn, CH, big)
        assert await _next(sub) == Notice(CH, big)
        with pytest.raises(ValidationInputError):
            await notify(conn, CH, "\u00fc" * (MAX_PAYLOAD_BYTES // 2 + 1))
        for bad in ("", "Events", "a-b", "x; LISTEN y", "a" * 64):
            with pytest.raises(ValidationInputError):
                await notify(conn, bad, "")
            with pytest.raises(ValidationInputError):
                check_channel(bad)
        with pytest.raises(ValidationInputError):
            notifier.subscribe("not_listened")
    with pytest.raises(ConfigError):
        Notifier(dsn, channels=[])
    await conn.close()
