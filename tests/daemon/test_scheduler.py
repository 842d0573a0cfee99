"""The scheduler: no staleness storm after downtime, rate-limited dispatch, honest skips."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from memwarden.daemon._scheduler import ALIVE_KEY
from memwarden.memory import FakeClock, Store
from memwarden.plugins.testing import FakeClock as KitClock

SLOW_LOOPS = {"sweep_interval": "1h", "dispatch_interval": "1h", "heartbeat_interval": "1h"}


def _rows(db, sql, *args):
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


async def test_no_staleness_storm_after_downtime(running_daemon, make_settings, eventually):
    """After downtime 500 overdue checks spread over the window; a tick sends at most the cap."""
    clock = FakeClock()
    settings = make_settings(
        sensors={"silent": {}},
        scheduler=SLOW_LOOPS,  # only the first tick of each loop runs; the test drives the rest
        rules={"staleness": {"spread_window": "10m", "max_requests_per_tick": 100}},
    )
    async with Store(settings.db_path, clock=clock) as store:
        await store.add_many(
            [
                {
                    "content": f"fact {i}",
                    "validity_window": "1m",
                    "bindings": [{"sensor": "silent", "path": f"file-{i}"}],
                }
                for i in range(500)
            ]
        )
        await store.set_meta(ALIVE_KEY, repr(clock.time()))
    clock.advance(timedelta(days=1))  # down far longer than every window
    restarted_at = clock.time()

    daemon = (await running_daemon(settings, clock=clock)).daemon
    scheduler = daemon.scheduler
    assert scheduler.down_since == restarted_at - 86400 or scheduler.down_since is None
    await eventually(lambda: scheduler.swept == 500)
    send_at = sorted(r[0] for r in _rows(settings.db_path, "SELECT send_at FROM revalidations"))
    assert len(send_at) == 500
    spread = 600.0
    assert send_at[0] == restarted_at
    assert restarted_at + 0.99 * spread <= send_at[-1] < restarted_at + spread
    per_minute = [
        sum(1 for t in send_at if restarted_at + m * 60 <= t < restarted_at + (m + 1) * 60)
        for m in range(10)
    ]
    assert per_minute == [50] * 10  # evenly spread: no burst anywhere in the window
    await scheduler.wait_idle()
    assert scheduler.dispatched <= 1  # at restart only what is due now (the first) may go out

    clock.advance(timedelta(minutes=10))  # the whole window has come due
    sent = await scheduler.dispatch_once()
    assert sent == 100  # max_requests_per_tick, not 500
    await scheduler.wait_idle()

    async def answered():
        return (await daemon.store.counts())["by_state"].get("fresh", 0) >= 100

    await eventually(answered)
    assert await scheduler.dispatch_once() == 100  # the next tick sends the next hundred


async def test_check_still_running_is_not_overlapped(running_daemon, make_settings, eventually):
    """A request for a binding whose check still runs is skipped, counted and retried later."""
    settings = make_settings(
        sensors={"hang": {"revalidate_timeout": "300ms"}}, scheduler=SLOW_LOOPS
    )
    daemon = (await running_daemon(settings)).daemon
    block = await daemon.add_block(
        {"content": "b", "bindings": [{"sensor": "hang", "path": "slow/file"}]}
    )
    [request_id] = await daemon.store.request_revalidation(block.id)
    assert await daemon.scheduler.dispatch_once() == 1
    hang = daemon.runners["hang"]
    await eventually(lambda: hang.busy("slow/file", block.id))
    # Sent again while the first check runs (as after a restart that found it pending):
    await daemon.store.set_revalidation_status([request_id], "pending")
    assert await daemon.scheduler.dispatch_once() == 1
    await eventually(lambda: hang.counters.skipped == 1)
    assert hang.counters.revalidations == 1  # not overlapped: the second never started

    def status():
        [(value,)] = _rows(settings.db_path, "SELECT status FROM revalidations")
        return value

    await eventually(lambda: status() == "pending")  # skipped now, not lost
    await daemon.scheduler.wait_idle()  # the first check times out with an error event ...
    await eventually(lambda: status() == "done")  # ... which answers the request
    assert await daemon.scheduler.dispatch_once() == 0
    assert hang.counters.timeouts == 1


async def test_a_put_back_request_waits_longer_each_time(running_daemon, make_settings, eventually):
    """A request put back because its binding's check still runs is not re-sent every
    tick: it waits two dispatch intervals, doubling per put-back (up to retry_max)."""
    clock = FakeClock()
    settings = make_settings(
        sensors={"hang": {"revalidate_timeout": "10m"}},  # the first check outlives the test
        scheduler={**SLOW_LOOPS, "dispatch_interval": "1s"},
    )
    daemon = (await running_daemon(settings, clock=clock)).daemon
    scheduler, hang = daemon.scheduler, daemon.runners["hang"]
    block = await daemon.add_block(
        {"content": "b", "bindings": [{"sensor": "hang", "path": "slow/file"}]}
    )
    [request_id] = await daemon.store.request_revalidation(block.id)
    await scheduler.dispatch_once()
    await eventually(lambda: hang.busy("slow/file", block.id))
    await daemon.store.set_revalidation_status([request_id], "pending")  # due again now

    def row():
        [(status, send_at)] = _rows(settings.db_path, "SELECT status, send_at FROM revalidations")
        return status, send_at

    started = clock.time()
    sends = []
    for _ in range(61):  # a minute of ticks, one a second
        skipped = hang.counters.skipped
        await scheduler.dispatch_once()
        await eventually(lambda: row()[0] == "pending")  # put back (or never sent)
        if hang.counters.skipped > skipped:
            sends.append(clock.time() - started)
        clock.advance(1)
    assert sends == [0, 4, 12, 28, 60]  # waits of 4, 8, 16, 32 s: not 61 sends
    assert scheduler.put_back == 5
    assert row()[1] == started + 60 + 64
    assert hang.counters.revalidations == 1  # never overlapped
    assert await scheduler.cancel_checks() == 1  # the hanging first check


async def test_blocks_sharing_a_subject_are_checked_each(running_daemon, make_settings, eventually):
    """Two blocks bound to one subject get a check each (answers can differ per block)."""
    settings = make_settings(
        sensors={"hang": {"revalidate_timeout": "100ms"}}, scheduler=SLOW_LOOPS
    )
    daemon = (await running_daemon(settings)).daemon
    blocks = [
        await daemon.add_block(
            {"content": f"b{i}", "bindings": [{"sensor": "hang", "path": "same", "key": str(i)}]}
        )
        for i in range(2)
    ]
    for block in blocks:
        await daemon.store.request_revalidation(block.id)
    assert await daemon.scheduler.dispatch_once() == 2
    await daemon.scheduler.wait_idle()
    hang = daemon.runners["hang"]
    assert (hang.counters.revalidations, hang.counters.skipped, hang.counters.timeouts) == (2, 0, 2)

    def all_done():
        return _rows(settings.db_path, "SELECT DISTINCT status FROM revalidations") == [("done",)]

    await eventually(all_done)


async def test_answer_through_emit_is_not_resent(running_daemon, make_settings, eventually):
    """A sensor that answers through ctx.emit (returning None) is asked once, not every tick."""
    settings = make_settings(sensors={"silent": {}}, scheduler=SLOW_LOOPS)
    daemon = (await running_daemon(settings)).daemon
    block = await daemon.add_block(
        {"content": "x", "bindings": [{"sensor": "silent", "path": "p"}]}
    )
    result = await daemon.revalidate(block.id, wait_s=5)
    assert result["answered"] == result["requested"]
    await daemon.scheduler.wait_idle()
    assert await daemon.scheduler.dispatch_once() == 0
    assert daemon.runners["silent"].counters.revalidations == 1
    assert (await daemon.store.get(block.id)).state == "fresh"


async def test_request_for_an_unconfigured_sensor_fails(running_daemon, make_settings):
    """A request whose sensor is not configured is marked failed and counted, not retried."""
    settings = make_settings(sensors={"silent": {}}, scheduler=SLOW_LOOPS)
    daemon = (await running_daemon(settings)).daemon
    block = await daemon.store.add(  # straight into the store, as an import would
        {"content": "x", "bindings": [{"sensor": "retired", "path": "p"}]}
    )
    await daemon.store.request_revalidation(block.id)
    assert await daemon.scheduler.dispatch_once() == 0
    assert daemon.scheduler.unroutable == 1
    assert _rows(settings.db_path, "SELECT status, outcome FROM revalidations") == [
        ("failed", "no such sensor configured")
    ]


async def test_expired_blocks_are_revalidated_while_running(
    running_daemon, make_settings, eventually
):
    """In normal running a block whose window ran out is swept, checked and fresh again."""
    clock = FakeClock()
    settings = make_settings(sensors={"silent": {}})
    daemon = (await running_daemon(settings, clock=clock)).daemon
    block = await daemon.add_block(
        {"content": "x", "validity_window": "1m", "bindings": [{"sensor": "silent", "path": "p"}]}
    )
    clock.advance(120)

    async def fresh_again():
        b = await daemon.store.get(block.id)
        return b.state == "fresh" and b.validation.validated_by == "silent"

    await eventually(fresh_again)
    assert daemon.scheduler.swept == 1


async def test_the_daemon_compacts_the_log_on_schedule(running_daemon, make_settings, eventually):
    """The compaction pass is a scheduler loop: dead letters past their age go on their own."""
    clock = FakeClock()
    settings = make_settings(
        scheduler={"compaction_interval": "50ms"},
        store={"compaction": {"dead_letters_max_age": "1d"}},
    )
    r = await running_daemon(settings, clock=clock)
    store = r.daemon.store
    for i in range(3):
        await store.dead_letter(source="test", reason="old", payload=f"old {i}")
    clock.advance(timedelta(days=2))
    await store.dead_letter(source="test", reason="new", payload="new")

    async def pruned() -> bool:
        return int((await store.counts())["dead_letters"]) == 1

    await eventually(pruned, timeout_s=10)
    assert _rows(settings.db_path, "SELECT payload FROM dead_letters") == [("new",)]


async def test_the_passes_wait_on_the_daemons_clock(running_daemon, make_settings, eventually):
    """With a clock that sleeps (the test kit's), an hourly pass runs when the clock is
    advanced an hour, not when an hour of real time has passed: the scheduler and the
    polling sensors wait on one clock."""
    clock = KitClock()
    settings = make_settings(scheduler=SLOW_LOOPS)
    store = (await running_daemon(settings, clock=clock)).daemon.store
    started = clock.time()

    async def heartbeat_at(t: float) -> bool:
        return await store.get_meta(ALIVE_KEY) == repr(t)

    await eventually(lambda: heartbeat_at(started))  # the first tick runs at once
    await eventually(lambda: clock.sleepers >= 3)  # sweep, dispatch, heartbeat asleep
    clock.advance(timedelta(hours=1))
    await eventually(lambda: heartbeat_at(started + 3600))
