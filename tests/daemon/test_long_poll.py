"""Long-polls of the event log (``GET /v1/events?wait=``, ``memwarden tail``).

A long-poll reads the log, finds nothing new and waits for the next commit. A batch
committed between that read and the wait must end the wait at once: the poll takes a
mark before it reads, and the wait compares against it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime


def _event(subject: str) -> dict[str, str]:
    return {
        "sensor": "echo",
        "subject": subject,
        "outcome": "confirmed",
        "observed_at": datetime.now(UTC).isoformat(),
    }


async def test_a_commit_between_read_and_wait_ends_the_wait(
    running_daemon, make_settings, eventually
):
    daemon = (await running_daemon(make_settings(sensors={"echo": {}}))).daemon
    await daemon.add_block({"content": "x", "bindings": [{"sensor": "echo", "path": "p"}]})
    # The echo sensor confirms its new binding once: let that land before the poll starts.
    [first] = await eventually(lambda: daemon.store.events_after(0, limit=10))
    mark = daemon.events_mark()  # the poll's mark, taken before its (empty) read
    assert await daemon.store.events_after(first["seq"], limit=10) == []
    result = await daemon.bus.submit("remote:http", [_event("p")])  # commits in the window
    assert result.accepted == 1
    await eventually(lambda: daemon.events_mark() != mark)
    # The wait sees the commit it would otherwise have missed: it returns now, not in 30 s.
    await asyncio.wait_for(daemon.wait_for_events(30.0, since=mark), timeout=5.0)
    assert len(await daemon.store.events_after(first["seq"], limit=10)) == 1


async def test_without_a_commit_the_wait_lasts_its_timeout_and_a_stop_ends_it(
    running_daemon, make_settings
):
    running = await running_daemon(make_settings(sensors={"echo": {}}))
    daemon = running.daemon
    mark = daemon.events_mark()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await daemon.wait_for_events(0.05, since=mark)  # nothing committed: the timeout ends it
    assert loop.time() - started >= 0.05
    waiting = asyncio.create_task(daemon.wait_for_events(30.0, since=mark))
    await asyncio.sleep(0)  # let the wait start
    assert not waiting.done()
    await running.stop()  # stopping answers long-polls at once
    await asyncio.wait_for(waiting, timeout=5.0)
