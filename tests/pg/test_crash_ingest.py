"""A real ``memwarden run`` on PostgreSQL killed with ``kill -9`` in the middle of a
stream of event batches (docs/SCALE.md, "What is built").

What is atomic: ``POST /v1/events`` hands its whole batch to the store as one
``apply_events`` job; the writer's group commit puts several jobs (several requests) in
one transaction, but never part of a job, and a job that fails is redone alone, whole.
So the unit of atomicity is the writer transaction, and it always holds whole HTTP
batches: after the crash each batch is in the log entirely or not at all, acknowledged
or not (a batch committed but not yet answered when the process died is all there).
And each stored event has its effects (one per block bound to its subject) and each
effect its event, and each block's evidence is the end of the chain of its effects:
the state and reliability each effect found are those the one before it left, and the
last leaves what the block says now.

Then the daemon restarts on the same database and home, every batch is posted again,
and nothing is applied twice: what was stored comes back as ``duplicates``.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx
import pytest

from tests.pgserver import PgServer, require_pg
from tests.support import daemon_env, eventually_blocking, start_memwarden

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support import DaemonProcess

REMOTE = "edge-files"
SUBJECTS = ("a.yaml", "b.yaml", "c.yaml")
# Block title -> the subject its binding names: a.yaml is bound to two blocks.
BLOCKS = {"first a": "a.yaml", "second a": "a.yaml", "b": "b.yaml", "c": "c.yaml"}
BATCHES = 48
PER_BATCH = 150
KILL_AT = 12  # kill -9 when this many POSTs have been acknowledged
WORKERS = 6


def _env(home: Path, dsn: str) -> dict[str, str]:
    return daemon_env(
        home,
        MEMWARDEN_STORE__URL=dsn,
        MEMWARDEN_CLUSTER__NODE="crash",
        MEMWARDEN_SENSORS=json.dumps({REMOTE: {"remote": True, "kind": "fs"}}),
    )


def _batch(prefix: str, n: int, base: float) -> list[dict[str, Any]]:
    """Batch ``n``: ``PER_BATCH`` events over the subjects, one in ten a refutation."""
    return [
        {
            "event_id": f"{prefix}{n}-{i}",
            "sensor": REMOTE,
            "subject": SUBJECTS[(n + i) % len(SUBJECTS)],
            "outcome": "refuted" if i % 10 == 9 else "confirmed",
            "observed_at": datetime.fromtimestamp(
                base + (n * PER_BATCH + i) * 0.001, UTC
            ).isoformat(),
        }
        for i in range(PER_BATCH)
    ]


def _post(d: DaemonProcess, events: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{d.url}/v1/events", headers=d.auth, json=events, timeout=30)


def _add_blocks(d: DaemonProcess) -> dict[str, str]:
    """Block id -> the subject it is bound to."""
    out = {}
    for title, subject in BLOCKS.items():
        added = httpx.post(
            f"{d.url}/v1/blocks",
            headers=d.auth,
            json={
                "title": f"Where {title} lives",
                "content": f"{subject} on the edge host ({title})",
                "bindings": [{"sensor": REMOTE, "path": subject}],
            },
            timeout=10,
        )
        assert added.status_code == 201, added.text
        out[str(added.json()["id"])] = subject
    return out


def _rows(server: PgServer, database: str, sql: str) -> list[list[str]]:
    return [line.split("|") for line in server.psql(sql, database).splitlines() if line]


def _stored(server: PgServer, database: str, prefix: str) -> Counter[str]:
    """event id -> copies in the log, of this stream's ids."""
    rows = _rows(
        server,
        database,
        f"SELECT event_id, count(*) FROM events WHERE event_id LIKE '{prefix}%' GROUP BY event_id",
    )
    return Counter({r[0]: int(r[1]) for r in rows})


def _check_consistent(
    server: PgServer,
    database: str,
    prefix: str,
    blocks: dict[str, str],
    initial: dict[str, tuple[str, float]],
) -> None:
    """Every event has its effects, every effect its event, every block's evidence is
    the end of its chain of effects."""
    orphans = _rows(
        server,
        database,
        "SELECT f.block_rid, f.event_seq FROM effects f"
        " LEFT JOIN events e ON e.seq = f.event_seq WHERE e.seq IS NULL",
    )
    assert orphans == [], "effects without their event"
    bound = Counter(blocks.values())
    per_event = _rows(
        server,
        database,
        "SELECT e.event_id, e.subject, count(f.event_seq) FROM events e"
        " LEFT JOIN effects f ON f.event_seq = e.seq"
        f" WHERE e.event_id LIKE '{prefix}%' GROUP BY e.event_id, e.subject",
    )
    wrong = [(eid, n) for eid, subject, n in per_event if int(n) != bound[subject]]
    assert wrong == [], f"events without (all) their effects: {wrong[:5]}"
    chains: dict[str, list[tuple[str, str, float, float]]] = defaultdict(list)
    for bid, before, after, rb, ra in _rows(
        server,
        database,
        "SELECT k.id, f.state_before, f.state_after, f.reliability_before,"
        " f.reliability_after FROM effects f JOIN blocks k ON k.rid = f.block_rid"
        " ORDER BY k.id, f.event_seq",
    ):
        chains[bid].append((before, after, float(rb), float(ra)))
    now = {
        r[0]: (r[1], float(r[2]))
        for r in _rows(server, database, "SELECT id, state, reliability FROM blocks")
    }
    for bid in blocks:
        state, reliability = initial[bid]
        for before, after, rb, ra in chains[bid]:
            assert (before, rb) == pytest.approx((state, reliability)), bid
            state, reliability = after, ra
        assert now[bid] == pytest.approx((state, reliability)), bid


def _stream_killed(d: DaemonProcess, batches: list[list[dict[str, Any]]]) -> set[int]:
    """POST the batches, ``WORKERS`` at a time, and ``kill -9`` the daemon when the
    ``KILL_AT``-th acknowledgement (2xx) arrives; the batches acknowledged."""
    acked: set[int] = set()
    failed: set[int] = set()
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        futures = {pool.submit(_post, d, b): n for n, b in enumerate(batches)}
        for done in concurrent.futures.as_completed(futures):
            n = futures[done]
            try:
                answer = done.result()
            except httpx.TransportError:
                failed.add(n)
                continue
            if answer.is_success:
                assert answer.json()["accepted"] == PER_BATCH, answer.text
                acked.add(n)
            else:
                failed.add(n)
            if len(acked) == KILL_AT and d.alive():
                os.kill(d.process.pid, signal.SIGKILL)
                d.process.wait()
    assert len(acked) >= KILL_AT
    assert len(acked) < BATCHES, "the stream ended before the kill: nothing was cut"
    assert acked | failed == set(range(BATCHES))
    return acked


class _Started(NamedTuple):
    dsn: str
    database: str
    home: Path
    daemon: DaemonProcess
    blocks: Any
    initial: dict[str, tuple[str, float]]
    prefix: str
    batches: list[Any]


def _started(server: PgServer, tmp_path: Path, nodes: list[DaemonProcess], letter: str) -> _Started:
    """A daemon on a new database with its blocks, their initial (state, reliability),
    and the batches to ingest (event ids starting with ``letter``, then ``prefix``)."""
    dsn = server.create_database("crash")
    database = dsn.rsplit("/", 1)[1]
    home = tmp_path / "home"
    d = start_memwarden(home, env=_env(home, dsn))
    nodes.append(d)
    blocks = _add_blocks(d)
    initial = {
        r[0]: (r[1], float(r[2]))
        for r in _rows(server, database, "SELECT id, state, reliability FROM blocks")
    }
    prefix = f"{letter}{uuid.uuid4().hex[:8]}-"
    base = time.time() - 120
    batches = [_batch(prefix, n, base) for n in range(BATCHES)]
    return _Started(dsn, database, home, d, blocks, initial, prefix, batches)


def test_kill_9_mid_ingest_leaves_whole_batches_and_loses_no_acknowledged_event(
    pg_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    dsn, database, home, d, blocks, initial, prefix, batches = _started(
        pg_server, tmp_path, nodes, "c"
    )

    acked = _stream_killed(d, batches)

    stored = _stored(pg_server, database, prefix)
    assert set(stored.values()) <= {1}, "an event stored twice"
    whole, none = [], []
    for n, batch in enumerate(batches):
        there = [e["event_id"] in stored for e in batch]
        if n in acked:
            assert all(there), f"acknowledged batch {n} lost events"
        else:
            assert all(there) or not any(there), f"batch {n} partly stored"
            (whole if all(there) else none).append(n)
    _check_consistent(pg_server, database, prefix, blocks, initial)
    print(  # noqa: T201 - what the kill cut
        f"acknowledged {len(acked)}, unacknowledged stored whole {len(whole)},"
        f" not stored {len(none)}"
    )

    # The same database and home: every batch again; nothing applied twice.
    (home / "api.json").unlink()  # the dead daemon's address
    again = start_memwarden(home, env=_env(home, dsn))
    nodes.append(again)
    accepted = duplicates = 0
    for batch in batches:
        answer = _post(again, batch)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["spooled"] == 0
        accepted += body["accepted"]
        duplicates += body["duplicates"]
    assert duplicates == sum(stored.values())
    assert accepted == BATCHES * PER_BATCH - duplicates
    after = _stored(pg_server, database, prefix)
    assert set(after.values()) == {1}
    assert len(after) == BATCHES * PER_BATCH
    _check_consistent(pg_server, database, prefix, blocks, initial)


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of this test's own: it is stopped and started mid-test."""
    server = PgServer(require_pg())
    try:
        yield server.start()
    finally:
        server.remove()


DELIVERY_BATCH = 500  # SpoolingIngest's default: events per delivery transaction


def test_kill_9_while_delivering_the_spool_loses_and_doubles_nothing(
    own_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    """Events spooled while the database is away, then the daemon killed while it
    delivers them: the log holds a whole number of delivery batches, oldest first (the
    unit of atomicity is the delivery transaction, which may end inside an HTTP batch:
    every spooled event was acknowledged already, and the rest stays in the spool); the
    next start on the same home delivers the rest, each event once."""
    dsn, database, home, d, blocks, initial, prefix, batches = _started(
        own_server, tmp_path, nodes, "s"
    )
    order = [e["event_id"] for b in batches for e in b]  # the spool's order

    own_server.stop("fast")
    for batch in batches:
        answer = _post(d, batch)
        assert answer.status_code == 200, answer.text
        assert answer.json()["spooled"] == PER_BATCH, answer.text
    own_server.start()

    def delivering() -> int:
        if d.process.poll() is not None:
            return -1
        return int(
            own_server.psql(
                f"SELECT count(*) FROM events WHERE event_id LIKE '{prefix}%'", database
            )
        )

    partly = eventually_blocking(delivering, timeout_s=30, interval_s=0.005, what="delivery")
    os.kill(d.process.pid, signal.SIGKILL)
    d.process.wait()
    assert 0 < partly < len(order), "killed before or after the delivery, not during it"

    stored = _stored(own_server, database, prefix)
    assert set(stored.values()) == {1}
    assert len(stored) % DELIVERY_BATCH == 0, len(stored)
    assert set(stored) == set(order[: len(stored)]), "not the oldest spooled events"
    assert len(stored) < len(order), "the kill came after the whole delivery"
    _check_consistent(own_server, database, prefix, blocks, initial)
    print(f"killed with {len(stored)} of {len(order)} spooled events delivered")  # noqa: T201

    (home / "api.json").unlink()  # the dead daemon's address
    again = start_memwarden(home, env=_env(home, dsn))
    nodes.append(again)

    def unsent() -> int:
        health = httpx.get(f"{again.url}/v1/health", headers=again.auth, timeout=10)
        return int(health.json()["cluster"]["spool"]["unsent"])

    eventually_blocking(
        lambda: unsent() == 0, timeout_s=30, what="the rest delivered", process=again.process
    )
    after = _stored(own_server, database, prefix)
    assert set(after.values()) == {1}
    assert sorted(after) == sorted(order)
    _check_consistent(own_server, database, prefix, blocks, initial)
