"""The leader's lease on a real PostgreSQL server: one leader at a time, takeover within
10 s of a kill -9, a counted job never on two nodes at once, demotion by the node's own
clock when the database stops answering."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import pytest
from structlog.testing import capture_logs

from memwarden.cluster import Leader, LeaseTimes, Notifier, Term, check_name, ensure_tables
from memwarden.errors import ConfigError, LeadershipLostError
from memwarden.plugins import Backoff
from memwarden.plugins.testing import FakeClock
from tests.support import eventually

if TYPE_CHECKING:
    from tests.cluster.conftest import TcpProxy

ROOT = Path(__file__).resolve().parents[2]


def _node(dsn: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    """``tests/cluster/leader_node.py`` as a child process (its output in ``log``)."""
    with log.open("wb") as out:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.leader_node", dsn, name],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )


async def _lease(conn: asyncpg.Connection) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT holder, epoch, expires_at, expires_at > clock_timestamp() AS valid"
        " FROM cluster_leases WHERE name = 'singletons'"
    )


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_two_processes_kill_the_leader_the_other_takes_over(dsn, tmp_path):
    """Two nodes in two processes: one leads; kill -9 it and the other leads within 10 s;
    the counted job never ran on both at once; a clean stop releases the lease."""
    conn = await asyncpg.connect(dsn)
    await ensure_tables(conn)
    await conn.execute(
        "CREATE TABLE job_runs (id bigserial PRIMARY KEY, node text NOT NULL,"
        " epoch bigint NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz)"
    )

    async def runs(node: str) -> int:
        return await conn.fetchval("SELECT count(*) FROM job_runs WHERE node = $1", node)

    a = _node(dsn, "a", tmp_path / "a.log")
    b: subprocess.Popen[bytes] | None = None
    try:
        await eventually(lambda: runs("a"), timeout_s=30, what="node a leads", process=a)
        b = _node(dsn, "b", tmp_path / "b.log")
        await eventually(
            lambda: conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE"
                " 'memwarden leader b/%'"
            ),
            timeout_s=30,
            what="node b contends",
            process=b,
        )
        # b contends through several of a's renewals (2 s apart) and never leads.
        seen = await runs("a")
        await eventually(
            lambda: _more(conn, seen + 120),
            timeout_s=30,
            what="a keeps running its job",
            process=a,
        )
        assert await runs("b") == 0
        before = await _lease(conn)
        assert before is not None
        assert before["holder"].startswith("a/")
        assert before["valid"]

        a.send_signal(signal.SIGKILL)
        a.wait(timeout=10)
        killed_at = await conn.fetchval("SELECT clock_timestamp()")

        await eventually(lambda: runs("b"), timeout_s=15, what="b takes over", process=b)
        first_b = await conn.fetchval("SELECT min(started_at) FROM job_runs WHERE node = 'b'")
        assert (first_b - killed_at).total_seconds() < 10.0
        after = await _lease(conn)
        assert after is not None
        assert after["holder"].startswith("b/")
        assert after["epoch"] == before["epoch"] + 1

        # Never twice at once: every run of a (an unfinished one ended at the kill) is
        # over before b's first run started.
        last_a = await conn.fetchval(
            "SELECT max(coalesce(finished_at, $1)) FROM job_runs WHERE node = 'a'", killed_at
        )
        assert last_a <= first_b
        overlaps = await conn.fetchval(
            "SELECT count(*) FROM job_runs x JOIN job_runs y ON x.node < y.node"
            " AND x.started_at < coalesce(y.finished_at, $1)"
            " AND y.started_at < coalesce(x.finished_at, $1)",
            killed_at,
        )
        assert overlaps == 0

        # A clean stop releases the lease at once.
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=20) == 0, (tmp_path / "b.log").read_text()
        released = await _lease(conn)
        assert released is not None
        assert not released["valid"]
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        await conn.close()


async def _more(conn: asyncpg.Connection, count: int) -> bool:
    return await conn.fetchval("SELECT count(*) FROM job_runs WHERE node = 'a'") >= count


@pytest.mark.timeout(60)
async def test_one_leader_among_three_and_a_release_hands_over(dsn):
    """Three leaders in one process: exactly one term at a time; stopping the leader
    releases, and another is elected without waiting for the TTL."""
    times = LeaseTimes(ttl_s=30.0, renew_s=1.0, poll_s=0.05, safety_s=0.5)
    leaders = [Leader(dsn, node=f"n{i}", times=times) for i in range(3)]
    for leader in leaders:
        await leader.__aenter__()
    try:
        await eventually(lambda: any(x.term for x in leaders), what="someone leads")
        first = next(x for x in leaders if x.term is not None)
        others = [x for x in leaders if x is not first]
        assert all(x.term is None for x in others)
        await first.stop()  # released: the TTL of 30 s is not waited for
        await eventually(lambda: any(x.term for x in others), timeout_s=10, what="handover")
        assert sum(x.term is not None for x in others) == 1
    finally:
        for leader in leaders:
            await leader.stop()


@pytest.mark.timeout(60)
async def test_silent_database_deposes_by_the_nodes_own_clock(dsn, proxy: TcpProxy):
    """The database stops answering (packets dropped): the renewal hangs, and at
    ``sent + ttl - safety`` on the node's clock the leader is deposed and its job
    cancelled; once the line is back it leads again, in a new epoch."""
    clock = FakeClock(1000.0)
    times = LeaseTimes(ttl_s=6.0, renew_s=2.0, poll_s=1.0, safety_s=0.5)
    deposed: list[tuple[int, str]] = []
    cancelled_at: list[float] = []

    async def job(term: Term) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled_at.append(clock.time())
            raise

    leader = Leader(
        proxy.dsn(dsn),
        node="solo",
        times=times,
        clock=clock,
        on_deposed=lambda term, why: deposed.append((term.epoch, why)),
        backoff=Backoff(base_s=0.001, cap_s=0.001),
    )
    async with leader:
        runner = asyncio.create_task(leader.run_while_leader(job, name="job"))
        term = await asyncio.wait_for(leader.elected(), 30)
        assert leader.holds(term)
        await eventually(lambda: clock.sleepers >= 2, what="renewal and watchdog wait")

        proxy.pause()
        clock.advance(2.0)  # the renewal goes out and hangs
        clock.advance(3.25)  # 5.25 s after the last renewal was sent: still sure
        await asyncio.sleep(0)
        assert leader.holds(term)
        assert not cancelled_at
        clock.advance(0.25)  # 5.5 s = ttl - safety: no longer sure
        await eventually(lambda: leader.term is None, what="deposed")
        assert not leader.holds(term)
        await eventually(lambda: cancelled_at, what="the job was cancelled")
        assert cancelled_at == [1005.5]
        assert deposed == [(term.epoch, "lease not renewed in time")]

        proxy.resume()

        async def again() -> bool:
            clock.advance(0.01)  # the reconnect's backoff waits on the clock
            return leader.term is not None

        await eventually(again, timeout_s=30, what="leads again")
        assert leader.term is not None
        assert leader.term.epoch == term.epoch + 1
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


@pytest.mark.timeout(60)
async def test_renewals_keep_the_term_until_another_holds_the_lease(dsn):
    """Each renewal moves the deadline on; a lease another holder took is not renewed:
    deposed, and not taken back while the other's lease is valid. A job that fails is
    logged and not run again in the same term."""
    clock = FakeClock(1000.0)
    times = LeaseTimes(ttl_s=6.0, renew_s=2.0, poll_s=1.0, safety_s=0.5)
    deposed: list[str] = []
    runs: list[int] = []

    async def failing(term: Term) -> None:
        runs.append(term.epoch)
        raise RuntimeError("the pass broke")

    conn = await asyncpg.connect(dsn)
    leader = Leader(
        dsn, node="renewer", times=times, clock=clock, on_deposed=lambda t, why: deposed.append(why)
    )
    async with leader:
        with capture_logs() as logs:
            runner = asyncio.create_task(leader.run_while_leader(failing, name="failing"))
            term = await asyncio.wait_for(leader.elected(), 30)
            await eventually(lambda: runs, what="the job ran")
            await eventually(
                lambda: any(e["event"] == "leader_job_failed" for e in logs), what="logged"
            )
        for n in (1, 2, 3):
            await eventually(lambda: clock.sleepers >= 2, what="waiting for the next renewal")
            clock.advance(2.0)
            await eventually(lambda n=n: leader.renewals == n, what=f"renewal {n}")
        assert clock.time() == 1006.0  # past the first deadline (1005.5): renewed
        assert leader.holds(term)
        assert runs == [term.epoch]  # failed once, not run again in this term

        await conn.execute(
            "UPDATE cluster_leases SET holder = 'other/1', epoch = epoch + 1,"
            " expires_at = clock_timestamp() + interval '1 hour'"
        )
        await eventually(lambda: clock.sleepers >= 2, what="waiting for the next renewal")
        clock.advance(2.0)
        await eventually(lambda: leader.term is None, what="deposed")
        assert deposed == ["lease taken over or expired"]
        tried = leader.attempts
        for _ in range(3):
            await eventually(lambda: clock.sleepers >= 1, what="polling")
            clock.advance(1.0)
            await eventually(lambda t=tried: leader.attempts > t, what="tried again")
            tried = leader.attempts
        assert leader.term is None
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    await conn.close()


@pytest.mark.timeout(60)
async def test_lost_connection_deposes_and_fences(dsn, pg_server):
    """The leader's connection is killed on the server: deposed at once; a transaction
    fenced with the old term fails, with the new term it passes."""
    times = LeaseTimes(ttl_s=6.0, renew_s=0.2, poll_s=0.1, safety_s=0.5)
    leader = Leader(dsn, node="fenced", times=times, backoff=Backoff(base_s=0.01, cap_s=0.05))
    conn = await asyncpg.connect(dsn)
    async with leader:
        old = await asyncio.wait_for(leader.elected(), 30)
        async with conn.transaction():
            await old.fence(conn)  # ours: passes
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name LIKE 'memwarden leader fenced/%'"
        )
        assert killed == 1
        await eventually(lambda: leader.depositions >= 1, what="deposed")
        new = await asyncio.wait_for(leader.elected(), 30)
        assert new.epoch == old.epoch + 1
        with pytest.raises(LeadershipLostError) as caught:
            async with conn.transaction():
                await old.fence(conn)
        assert caught.value.epoch == old.epoch
        async with conn.transaction():
            await new.fence(conn)
    await conn.close()


async def test_no_database_no_leader_and_a_prompt_stop():
    """A leader and a notifier whose database refuses connections keep trying, never
    lead or listen, log why, and stop at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dsn = f"postgresql://x@127.0.0.1:{sock.getsockname()[1]}/db"
        times = LeaseTimes(ttl_s=1.0, renew_s=0.2, poll_s=0.05, safety_s=0.1)
        with capture_logs() as logs:
            leader = Leader(dsn, node="alone", times=times)
            notifier = Notifier(dsn, channels=["memwarden_events"], backoff=Backoff(0.01, 0.02))
            async with leader, notifier:
                await eventually(
                    lambda: (
                        sum(e["event"] == "leader_connection_lost" for e in logs) >= 2
                        and sum(e["event"] == "notifier_disconnected" for e in logs) >= 2
                    ),
                    what="both retried",
                )
                assert leader.term is None
                assert not notifier.is_connected
                assert leader.attempts == 0
            assert leader.elections == 0


@pytest.mark.parametrize(
    "name", ["", "A", "-x", "x" * 64, "a b", "a;drop table x", "../etc", "ü", "a\n", None]
)
def test_names_are_checked(name):
    """Node and lease names are short plain words: anything else is a ConfigError."""
    with pytest.raises(ConfigError):
        check_name(name)


def test_valid_names_pass():
    """Names of hosts as they usually are pass unchanged."""
    for name in ("a", "ci-runner-3", "build_1.example", "0node", "x" * 63):
        assert check_name(name) == name


@pytest.mark.parametrize(
    ("ttl", "renew", "poll", "safety"),
    [(6, 6, 1, 0.5), (6, 5.5, 1, 0.5), (0, 1, 1, 0.1), (6, 2, 0, 0.5), (6, 2, 1, 0)],
)
def test_lease_times_that_could_not_work_are_refused(ttl, renew, poll, safety):
    """A renewal interval that could miss the lease's end, or a zero time, is refused."""
    with pytest.raises(ConfigError):
        LeaseTimes(ttl_s=ttl, renew_s=renew, poll_s=poll, safety_s=safety)


async def test_an_unexpected_error_is_logged_and_tried_again(dsn, monkeypatch):
    """A bug in a session (here: the first table check raising RuntimeError) is logged
    with its traceback and the leader and the notifier try again, not stop for good."""
    import memwarden.cluster._leader as leader_module  # noqa: PLC0415
    import memwarden.cluster._notify as notify_module  # noqa: PLC0415

    real_tables, real_connect = leader_module.ensure_tables, notify_module.connect
    broken = {"leader": 1, "notifier": 1}

    async def tables_once_broken(conn):
        if broken["leader"]:
            broken["leader"] -= 1
            raise RuntimeError("a bug")
        await real_tables(conn)

    async def connect_once_broken(*args, **kwargs):
        if broken["notifier"]:
            broken["notifier"] -= 1
            raise RuntimeError("another bug")
        return await real_connect(*args, **kwargs)

    monkeypatch.setattr(leader_module, "ensure_tables", tables_once_broken)
    monkeypatch.setattr(notify_module, "connect", connect_once_broken)
    times = LeaseTimes(ttl_s=6.0, renew_s=1.0, poll_s=0.05, safety_s=0.5)
    with capture_logs() as logs:
        leader = Leader(dsn, node="buggy", times=times, backoff=Backoff(0.01, 0.02))
        notifier = Notifier(dsn, channels=["memwarden_events"], backoff=Backoff(0.01, 0.02))
        async with leader, notifier:
            await asyncio.wait_for(leader.elected(), 30)
            await asyncio.wait_for(notifier.connected(), 30)
    failed = {e["event"]: e for e in logs if e["log_level"] == "error"}
    assert failed["leader_session_failed"]["error"] == "RuntimeError: a bug"
    assert failed["notifier_session_failed"]["error"] == "RuntimeError: another bug"
