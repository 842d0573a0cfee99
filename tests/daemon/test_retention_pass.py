"""The retention pass in the daemon: scheduled on the daemon's clock only when something
is configured, it reports what it removed (log line and counter)."""

from __future__ import annotations

from datetime import timedelta

import structlog

from memwarden.daemon._metrics import render
from memwarden.memory import FakeClock

SLOW = {"sweep_interval": "1h", "dispatch_interval": "1h", "heartbeat_interval": "1h"}


async def test_the_pass_archives_on_the_daemons_clock_and_reports(
    running_daemon, make_settings, eventually
):
    """A rule's old blocks are archived by the scheduled pass; the log says what went,
    and memwarden_retention_removed_total{kind="archived"} counts it."""
    clock = FakeClock()
    settings = make_settings(
        scheduler=SLOW,
        retention={"interval": "50ms", "rules": [{"tag": "tmp", "max_age": "1d"}]},
    )
    with structlog.testing.capture_logs() as logs:
        r = await running_daemon(settings, clock=clock)
        store = r.daemon.store
        old = await store.add({"content": "scratch", "tags": ["tmp"]})
        kept = await store.add({"content": "keeper", "tags": ["other"]})
        clock.advance(timedelta(days=2))

        async def archived() -> bool:
            return (await store.get(old.id)).state == "archived"

        await eventually(archived, timeout_s=10)
        await eventually(lambda: r.daemon.scheduler.retention_removed.get("archived") == 1)
    assert (await store.get(kept.id)).state != "archived"
    done = [e for e in logs if e["event"] == "retention_done" and e.get("archived")]
    assert done
    assert done[0]["archived"] == 1
    body, _ = await render(r.daemon)
    assert b'memwarden_retention_removed_total{kind="archived"} 1.0' in body


async def test_without_configuration_no_pass_is_scheduled(running_daemon, make_settings):
    """The default [retention] schedules nothing: nothing can be removed by age."""
    r = await running_daemon(make_settings(scheduler=SLOW))
    names = {t.get_name() for t in r.daemon.scheduler._loops}
    assert "scheduler.retention" not in names
    assert "scheduler.decay" in names
