"""sd_notify: READY, STATUS, WATCHDOG, RELOADING and STOPPING reach a real datagram socket."""

from __future__ import annotations

import os
import time

from memwarden.daemon import Notifier


async def test_ready_watchdog_stopping(running_daemon, make_settings, notify_socket):
    """The daemon says READY=1 (with a STATUS) once ready, pings WATCHDOG=1, and STOPPING=1."""
    sock = notify_socket()
    notifier = sock.notifier(WATCHDOG_USEC="200000")
    assert notifier.watchdog_interval_s == 0.1
    running = await running_daemon(make_settings(sensors={"echo": {}}), notifier=notifier)
    ready = await sock.expect("READY", "1")
    assert ready["STATUS"] == "1/1 sensors running"  # READY does not wait for the counts
    assert sock.messages[0] == {"STATUS": "starting"}
    assert (await sock.expect("STATUS"))["STATUS"] == "0 blocks, 0 stale, 1/1 sensors running"
    await sock.expect("WATCHDOG", "1")
    await sock.expect("WATCHDOG", "1")
    await running.stop()
    await sock.expect("STOPPING", "1")


async def test_reload_says_reloading_then_ready(
    running_daemon, make_settings, notify_socket, config_file
):
    """A reload sends RELOADING=1 with MONOTONIC_USEC (now, on CLOCK_MONOTONIC), then READY=1."""
    sock = notify_socket()
    path = config_file('[sensors.echo]\nvalue = "a"\n')
    daemon = (
        await running_daemon(make_settings(path), notifier=sock.notifier(), config_file=path)
    ).daemon
    await sock.expect("READY", "1")
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    await daemon.reload()
    reloading = await sock.expect("RELOADING", "1")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert before <= int(reloading["MONOTONIC_USEC"]) <= after
    await sock.expect("READY", "1")


async def test_abstract_namespace_socket(running_daemon, make_settings, notify_socket):
    """NOTIFY_SOCKET=@name reaches a socket in the abstract namespace."""
    sock = notify_socket(abstract=True)
    assert sock.env_value.startswith("@")
    running = await running_daemon(make_settings(), notifier=sock.notifier())
    await sock.expect("READY", "1")
    await running.stop()
    await sock.expect("STOPPING", "1")


def test_without_notify_socket_nothing_is_sent():
    """Without NOTIFY_SOCKET every call is a no-op that says so, and no watchdog runs."""
    notifier = Notifier(env={"WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.watchdog_interval_s == 0.5


def test_watchdog_for_another_pid_is_ignored():
    """WATCHDOG_USEC meant for another process (WATCHDOG_PID) does not start our watchdog."""
    mine = Notifier(env={"WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())})
    other = Notifier(env={"WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid() + 1)})
    assert mine.watchdog_interval_s == 0.1
    assert other.watchdog_interval_s is None


def test_unreachable_socket_is_reported_not_raised(tmp_path):
    """A NOTIFY_SOCKET nobody listens on makes send() return False, never raise."""
    notifier = Notifier(env={"NOTIFY_SOCKET": str(tmp_path / "gone")})
    try:
        assert notifier.enabled
        assert notifier.send(status="x") is False
    finally:
        notifier.close()
