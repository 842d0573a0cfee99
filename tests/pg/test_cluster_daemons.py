"""Several real ``memwarden run`` daemons (nodes) on one PostgreSQL database
(docs/SCALE.md): node names are registered (a second live instance of one name is
refused, naming the other host); exactly one node leads; ``kill -9`` of the leader hands
the singleton passes to the other within 10 s, never to both at once; every event a node
acknowledged is in the log exactly once; and a database stopped mid-stream makes a node
answer ``spooled`` (reads 503 ``storage unavailable``), then deliver it all once."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.pgserver import PgServer, require_pg
from tests.support import daemon_env, eventually_blocking, start_memwarden

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support import DaemonProcess

REMOTE = "edge-files"  # a remote sensor: it reports over POST /v1/events
EX_CONFIG = 78


def _env(home: Path, dsn: str, node: str, **extra: str) -> dict[str, str]:
    return daemon_env(
        home,
        MEMWARDEN_STORE__URL=dsn,
        MEMWARDEN_CLUSTER__NODE=node,
        MEMWARDEN_SENSORS=json.dumps({REMOTE: {"remote": True, "kind": "fs"}}),
        MEMWARDEN_LOG_LEVEL="debug",  # the singleton passes' ticks (singleton_pass)
        MEMWARDEN_LOG_FORMAT="json",
        MEMWARDEN_SCHEDULER__DECAY_INTERVAL="1s",
        MEMWARDEN_SCHEDULER__SWEEP_INTERVAL="200ms",
        **extra,
    )


def _health(d: DaemonProcess) -> dict[str, Any]:
    got = httpx.get(f"{d.url}/v1/health", headers=d.auth, timeout=10)
    assert got.status_code == 200, got.text
    return dict(got.json())


def _metrics(d: DaemonProcess) -> dict[str, float]:
    got = httpx.get(f"{d.url}/metrics", headers=d.auth, timeout=10)
    assert got.status_code == 200, got.text
    out = {}
    for line in got.text.splitlines():
        if line.startswith(("memwarden_spool", "memwarden_cluster", "memwarden_storage")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _cluster(d: DaemonProcess) -> dict[str, Any]:
    return dict(_health(d)["cluster"])


def _events(ids: list[str], *, at: float) -> list[dict[str, Any]]:
    return [
        {
            "event_id": event_id,
            "sensor": REMOTE,
            "subject": "app.yaml",
            "outcome": "confirmed",
            "observed_at": datetime.fromtimestamp(at - 30 + i * 0.001, UTC).isoformat(),
        }
        for i, event_id in enumerate(ids)
    ]


def _post(d: DaemonProcess, ids: list[str]) -> dict[str, Any]:
    answer = httpx.post(
        f"{d.url}/v1/events", headers=d.auth, json=_events(ids, at=time.time()), timeout=20
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _add_bound_block(d: DaemonProcess) -> str:
    added = httpx.post(
        f"{d.url}/v1/blocks",
        headers=d.auth,
        json={
            "title": "Where the app config lives",
            "content": "app.yaml on the edge host",
            "bindings": [{"sensor": REMOTE, "path": "app.yaml"}],
        },
        timeout=10,
    )
    assert added.status_code == 201, added.text
    return str(added.json()["id"])


def _stored(server: PgServer, database: str, prefix: str) -> dict[str, int]:
    """event id -> copies in the event log, of the ids starting with ``prefix``."""
    out = server.psql(
        f"SELECT event_id, count(*) FROM events WHERE event_id LIKE '{prefix}%' GROUP BY event_id",
        database,
    )
    return {line.split("|")[0]: int(line.split("|")[1]) for line in out.splitlines() if line}


def _log_lines(d: DaemonProcess) -> list[dict[str, Any]]:
    lines = []
    for line in d.log().splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def _passes(d: DaemonProcess) -> list[tuple[float, int]]:
    """(when, epoch) of each singleton pass tick in the node's log."""
    return [
        (datetime.fromisoformat(e["timestamp"]).timestamp(), int(e["epoch"]))
        for e in _log_lines(d)
        if e.get("event") == "singleton_pass"
    ]


def _long_poll_woken_by_the_other_node(
    follower: DaemonProcess, leader: DaemonProcess, prefix: str
) -> list[str]:
    """A long-poll of the log on ``follower`` wakes when ``leader`` commits an event
    (the ``memwarden_events`` notice), long before its wait ends; the id sent."""
    # A long-poll of the log on one node wakes when the other node commits events.
    log = httpx.get(
        f"{follower.url}/v1/events", headers=follower.auth, params={"limit": 1000}, timeout=10
    ).json()
    last = max(e["seq"] for e in log)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        began = time.monotonic()
        polled = pool.submit(
            httpx.get,
            f"{follower.url}/v1/events",
            headers=follower.auth,
            params={"after": last, "wait": "20s"},
            timeout=30,
        )
        eventually_blocking(  # the poll is in: it waits (no event after `last` yet)
            lambda: not polled.done() and time.monotonic() - began > 0.5, what="waiting"
        )
        woke_by = [f"{prefix}w-0"]
        sent = time.monotonic()
        assert _post(leader, woke_by)["accepted"] == 1
        answer = polled.result(timeout=30)
        waited = time.monotonic() - sent
    assert answer.status_code == 200, answer.text
    assert [e["event_id"] for e in answer.json()] == woke_by
    assert waited < 5, f"the other node's long-poll woke {waited:.1f} s after the commit"
    return woke_by


def test_a_node_name_is_one_instance_at_a_time(
    pg_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    """A second live daemon with a node's name is refused (exit 78, the other host named);
    after a clean stop, or a kill -9 on this host, the name is free again at once."""
    dsn = pg_server.create_database("nodes")
    first = start_memwarden(tmp_path / "a", env=_env(tmp_path / "a", dsn, "alpha"))
    nodes.append(first)
    memwarden = Path(sys.executable).parent / "memwarden"
    twin = subprocess.run(
        [str(memwarden), "run"],
        env=_env(tmp_path / "b", dsn, "alpha"),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    out = (twin.stdout + twin.stderr).decode(errors="replace")
    assert twin.returncode == EX_CONFIG, out
    assert "node 'alpha' is already running on host" in out
    assert repr(socket.gethostname()) in out
    assert first.alive()
    row = pg_server.psql(
        "SELECT node, host, pid, stopped_at IS NULL FROM cluster_nodes", dsn.rsplit("/", 1)[1]
    )
    assert row.strip() == f"alpha|{socket.gethostname()}|{first.process.pid}|t"

    assert first.stop() == 0  # a clean stop frees the name: the next start is at once
    again = start_memwarden(tmp_path / "b", env=_env(tmp_path / "b", dsn, "alpha"))
    nodes.append(again)
    assert _cluster(again)["node"] == "alpha"
    os.kill(again.process.pid, signal.SIGKILL)  # a crash on this host: its pid is gone
    again.process.wait()
    third = start_memwarden(tmp_path / "a", env=_env(tmp_path / "a", dsn, "alpha"))
    nodes.append(third)
    assert _cluster(third)["instance"] != _cluster(third)["node"]
    # Another name beside it is a second node.
    beta = start_memwarden(tmp_path / "c", env=_env(tmp_path / "c", dsn, "beta"))
    nodes.append(beta)
    assert _cluster(beta)["node"] == "beta"


def test_two_nodes_one_leader_kill_9_hands_over_and_keeps_every_event(
    pg_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    dsn = pg_server.create_database("nodes")
    database = dsn.rsplit("/", 1)[1]
    a = start_memwarden(tmp_path / "a", env=_env(tmp_path / "a", dsn, "node-a"))
    nodes.append(a)
    b = start_memwarden(tmp_path / "b", env=_env(tmp_path / "b", dsn, "node-b"))
    nodes.append(b)
    _add_bound_block(a)

    def one_leader() -> tuple[DaemonProcess, DaemonProcess] | None:
        ca, cb = _cluster(a), _cluster(b)
        if ca["leader"] == cb["leader"]:
            return None
        return (a, b) if ca["leader"] else (b, a)

    leader, follower = eventually_blocking(one_leader, timeout_s=20, what="exactly one leader")
    lc, fc = _cluster(leader), _cluster(follower)
    assert lc["leader_holder"] == fc["leader_holder"]
    assert str(lc["leader_holder"]).startswith(lc["node"] + "/")
    assert "password" not in json.dumps(lc)
    assert _metrics(leader)["memwarden_cluster_leader"] == 1.0
    assert _metrics(follower)["memwarden_cluster_leader"] == 0.0

    # Events acknowledged by each node before the kill.
    prefix = f"k{uuid.uuid4().hex[:8]}-"
    acked: list[str] = []
    for n, d in enumerate((leader, follower, leader, follower)):
        ids = [f"{prefix}{n}-{i}" for i in range(25)]
        answer = _post(d, ids)
        assert answer["accepted"] + answer["duplicates"] == 25, answer
        assert answer["spooled"] == 0
        acked += ids

    acked += _long_poll_woken_by_the_other_node(follower, leader, prefix)

    eventually_blocking(lambda: _passes(leader), timeout_s=10, what="the leader's singleton passes")
    killed_at = time.time()
    os.kill(leader.process.pid, signal.SIGKILL)
    leader.process.wait()
    eventually_blocking(
        lambda: _cluster(follower)["leader"], timeout_s=15, interval_s=0.05, what="takeover"
    )
    took = time.time() - killed_at
    assert took < 10, f"the other node led {took:.1f} s after the kill"
    print(f"takeover after kill -9: {took:.2f} s")  # noqa: T201 - the measured figure

    new_passes = eventually_blocking(
        lambda: [p for p in _passes(follower) if p[0] >= killed_at],
        timeout_s=10,
        what="the new leader's singleton passes",
    )
    old = _passes(leader)
    # Never both at once: the follower ran none before the kill, the dead leader none
    # after it, and the new term is a later epoch.
    assert all(t < killed_at for t, _ in old)
    assert [p for p in _passes(follower) if p[0] < killed_at] == []
    assert min(e for _, e in new_passes) > max(e for _, e in old)
    assert _cluster(follower)["leader_holder"].startswith(_cluster(follower)["node"] + "/")

    stored = _stored(pg_server, database, prefix)
    assert sorted(stored) == sorted(acked)
    assert set(stored.values()) == {1}


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of this test's own: it is stopped and started mid-test."""
    server = PgServer(require_pg())
    try:
        yield server.start()
    finally:
        server.remove()


def test_database_stopped_mid_stream_events_spooled_then_delivered_once(
    own_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    dsn = own_server.create_database("spool")
    database = dsn.rsplit("/", 1)[1]
    d = start_memwarden(tmp_path / "a", env=_env(tmp_path / "a", dsn, "node-a"))
    nodes.append(d)
    block_id = _add_bound_block(d)
    prefix = f"s{uuid.uuid4().hex[:8]}-"
    before = [f"{prefix}0-{i}" for i in range(20)]
    assert _post(d, before)["accepted"] == 20

    own_server.stop("fast")
    during: list[str] = []
    for n in range(1, 4):
        ids = [f"{prefix}{n}-{i}" for i in range(10)]
        answer = _post(d, ids)
        assert answer["spooled"] == 10, answer
        assert answer["accepted"] == 0
        during += ids
    read = httpx.get(f"{d.url}/v1/blocks/{block_id}", headers=d.auth, timeout=20)
    assert read.status_code == 503, read.text
    assert read.json()["detail"].startswith("storage unavailable")
    health = _health(d)
    assert health["status"] == "red"
    assert "storage unavailable" in health["warnings"][0]["message"]
    assert health["cluster"]["spool"]["unsent"] == 30
    assert health["cluster"]["leader_holder"] is None
    assert (tmp_path / "a" / "spool.db").exists()
    cut_off = _metrics(d)
    assert cut_off["memwarden_spool_unsent"] == 30
    assert cut_off["memwarden_storage_up"] == 0

    own_server.start()
    eventually_blocking(
        lambda: _cluster(d)["spool"]["unsent"] == 0,
        timeout_s=30,
        what="the spool delivered after the database returned",
        process=d.process,
    )
    after = [f"{prefix}4-{i}" for i in range(5)]
    assert _post(d, after)["accepted"] == 5
    stored = _stored(own_server, database, prefix)
    assert sorted(stored) == sorted(before + during + after)
    assert set(stored.values()) == {1}
    spool = _cluster(d)["spool"]
    assert spool["delivered"] == 30
    assert spool["dropped"] == 0
    back = _metrics(d)
    assert back["memwarden_spool_unsent"] == 0
    assert back["memwarden_spool_delivered_total"] == 30
    assert back["memwarden_storage_up"] == 1
    got = httpx.get(f"{d.url}/v1/blocks/{block_id}", headers=d.auth, timeout=10)
    assert got.status_code == 200, got.text


def test_a_node_stopped_while_cut_off_keeps_its_spool_for_its_next_start(
    own_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    """Events spooled while the database is away survive a clean stop of the node (the
    stop itself succeeds without the database) and are delivered by its next start."""
    dsn = own_server.create_database("spool")
    database = dsn.rsplit("/", 1)[1]
    home = tmp_path / "a"
    d = start_memwarden(home, env=_env(home, dsn, "node-a"))
    nodes.append(d)
    _add_bound_block(d)
    prefix = f"r{uuid.uuid4().hex[:8]}-"
    own_server.stop("fast")
    spooled = [f"{prefix}{i}" for i in range(12)]
    assert _post(d, spooled)["spooled"] == 12
    assert d.stop() == 0
    assert "daemon_stopped" in d.log()
    own_server.start()
    again = start_memwarden(home, env=_env(home, dsn, "node-a"))
    nodes.append(again)
    eventually_blocking(
        lambda: _cluster(again)["spool"]["unsent"] == 0,
        timeout_s=30,
        what="the spool delivered by the next start",
        process=again.process,
    )
    stored = _stored(own_server, database, prefix)
    assert sorted(stored) == sorted(spooled)
    assert set(stored.values()) == {1}


def _add_block_on(d: DaemonProcess, subject: str, *, served_by: str | None = None) -> str:
    """A block bound to the remote sensor's ``subject``, added through ``d``; with
    ``served_by``, bound to that node (docs/SCALE.md, "Node-scoped bindings"), once the
    leader's pass has given it the binding: only that node's events reach it."""
    binding: dict[str, Any] = {"sensor": REMOTE, "path": subject}
    if served_by is not None:
        binding["nodes"] = [served_by]
    added = httpx.post(
        f"{d.url}/v1/blocks",
        headers=d.auth,
        json={
            "title": f"The {subject} setting",
            "content": f"{subject} on the edge host says so",
            "bindings": [binding],
        },
        timeout=10,
    )
    assert added.status_code == 201, added.text
    block_id = str(added.json()["id"])
    if served_by is not None:
        eventually_blocking(
            lambda: (
                httpx.get(f"{d.url}/v1/blocks/{block_id}", headers=d.auth, timeout=10).json()[
                    "bindings"
                ][0]["served_by"]
                == served_by
            ),
            timeout_s=20,
            what=f"{subject} served by {served_by}",
        )
    return block_id


def _refute_on(d: DaemonProcess, subject: str) -> str:
    event_id = f"r{uuid.uuid4().hex[:12]}"
    event = {
        "event_id": event_id,
        "sensor": REMOTE,
        "subject": subject,
        "outcome": "refuted",
        "reliability": 1.0,  # hard at once
        "observed_at": datetime.fromtimestamp(time.time() - 1, UTC).isoformat(),
    }
    answer = httpx.post(f"{d.url}/v1/events", headers=d.auth, json=[event], timeout=20)
    assert answer.status_code == 200, answer.text
    assert answer.json()["accepted"] == 1, answer.text
    return event_id


def _notices(d: DaemonProcess, session: str, after: int = 0) -> list[dict[str, Any]]:
    got = httpx.get(
        f"{d.url}/v1/events",
        headers=d.auth,
        params={"session": session, "after": after},
        timeout=10,
    )
    assert got.status_code == 200, got.text
    return list(got.json())


def test_a_session_on_one_node_is_told_of_a_refutation_applied_on_the_other(
    pg_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    dsn = pg_server.create_database("sessions")
    a = start_memwarden(tmp_path / "a", env=_env(tmp_path / "a", dsn, "node-a"))
    nodes.append(a)
    b = start_memwarden(tmp_path / "b", env=_env(tmp_path / "b", dsn, "node-b"))
    nodes.append(b)
    # Added through node A; the remote sensor reports to node B for two of them.
    remote = _add_block_on(a, "remote.yaml", served_by="node-b")
    local = _add_block_on(a, "local.yaml")
    unread = _add_block_on(a, "unread.yaml", served_by="node-b")
    for block_id in (remote, local):  # the session reads two of them through node A
        got = httpx.get(
            f"{a.url}/v1/blocks/{block_id}",
            headers=a.auth,
            params={"session": "agent-7"},
            timeout=10,
        )
        assert got.status_code == 200, got.text
    assert _notices(a, "agent-7") == []

    # Refuted by an event POSTed to node B: node A's session hears of it.
    event_id = _refute_on(b, "remote.yaml")
    sent = time.monotonic()
    [notice] = eventually_blocking(
        lambda: _notices(a, "agent-7"), timeout_s=10, what="the notice on node A"
    )
    told_after = time.monotonic() - sent
    assert told_after < 5, f"node A told the session {told_after:.1f} s after the commit"
    print(f"session told on the other node after: {told_after:.3f} s")  # noqa: T201 - the figure
    assert notice["block_id"] == remote
    assert notice["state"][1] in ("stale", "refuted")  # a remote fs sensor's weight
    assert notice["event_id"] == event_id
    assert notice["seq"] == 1
    assert _notices(b, "agent-7") == []  # the session read nothing through node B

    # A block nobody read falls: no notice. One refuted through node A itself: told once
    # (applied here and read back from the effects log).
    _refute_on(b, "unread.yaml")
    local_event = _refute_on(a, "local.yaml")
    [second] = eventually_blocking(
        lambda: _notices(a, "agent-7", after=1), timeout_s=10, what="the local notice"
    )
    assert (second["block_id"], second["event_id"], second["seq"]) == (local, local_event, 2)
    unread_state = httpx.get(f"{a.url}/v1/blocks/{unread}", headers=a.auth, timeout=10)
    assert unread_state.json()["state"] in ("stale", "refuted")  # it fell, before `local`
    assert [n["seq"] for n in _notices(a, "agent-7")] == [1, 2]  # told once, not twice


def test_a_session_on_the_follower_is_told_of_the_leaders_sweep_and_of_a_dependency(
    pg_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    """Falls no effects row records (docs/SCALE.md): the leader's sweep expiring a block
    and a dependency made stale by a refutation on the other node reach a session that
    read them through the follower (``block_falls``); it fails without that log."""
    dsn = pg_server.create_database("falls")
    a = start_memwarden(tmp_path / "a", env=_env(tmp_path / "a", dsn, "node-a"))
    nodes.append(a)
    eventually_blocking(lambda: _cluster(a)["leader"], timeout_s=20, what="node A leads")
    b = start_memwarden(tmp_path / "b", env=_env(tmp_path / "b", dsn, "node-b"))
    nodes.append(b)
    assert not _cluster(b)["leader"]  # the sweep runs on node A only
    root = _add_block_on(b, "root.yaml", served_by="node-a")  # node A's events reach it
    added = httpx.post(
        f"{b.url}/v1/blocks",
        headers=b.auth,
        json={"title": "Follows the root", "content": "as root.yaml says", "depends_on": [root]},
        timeout=10,
    )
    assert added.status_code == 201, added.text
    dependent = str(added.json()["id"])
    added = httpx.post(
        f"{b.url}/v1/blocks",
        headers=b.auth,
        json={"title": "Short-lived", "content": "true for two seconds", "validity_window": "2s"},
        timeout=10,
    )
    assert added.status_code == 201, added.text
    expiring = str(added.json()["id"])
    for block_id in (dependent, expiring):  # the session reads them through node B
        got = httpx.get(
            f"{b.url}/v1/blocks/{block_id}",
            headers=b.auth,
            params={"session": "agent-9"},
            timeout=10,
        )
        assert got.status_code == 200, got.text
        assert got.json()["state"] in ("fresh", "unverified")

    # Node A's sweep expires the short-lived block: node B's session hears of it.
    [expired] = eventually_blocking(
        lambda: _notices(b, "agent-9"), timeout_s=15, what="the expiry on node B"
    )
    assert (expired["block_id"], expired["reason"], expired["state"][1]) == (
        expiring,
        "expired",
        "stale",
    )
    assert "event_id" not in expired
    # A refutation POSTed to node A makes the dependent stale: told on node B too.
    _refute_on(a, "root.yaml")
    [dep] = eventually_blocking(
        lambda: _notices(b, "agent-9", after=1), timeout_s=10, what="the dependency on node B"
    )
    assert (dep["block_id"], dep["reason"], dep["state"][1]) == (dependent, "dependency", "stale")
    assert [n["seq"] for n in _notices(b, "agent-9")] == [1, 2]  # each told once
    assert _notices(a, "agent-9") == []  # the session read nothing through node A
