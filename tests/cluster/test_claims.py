"""Revalidation requests claimed per node with FOR UPDATE SKIP LOCKED, on a real server:
two claimers at once never take one request twice and lose none."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from memwarden.cluster import (
    NewRevalidation,
    claim_revalidations,
    connect,
    enqueue_revalidations,
    ensure_tables,
    finish_revalidations,
    requeue_claims,
)
from memwarden.errors import ConfigError, StorageError, ValidationInputError

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_767_225_600.0


def _requests(n: int, *, node: str = "a", send_at: float = NOW, start: int = 0):
    return [
        NewRevalidation(
            id=f"r{i:05d}",
            node=node,
            block_id=f"b{i:05d}",
            sensor="fs",
            subject=f"config/{i}.yaml",
            reason="expired",
            created_at=NOW - 10,
            send_at=send_at + i * 0.001,
            deadline_s=60.0,
        )
        for i in range(start, start + n)
    ]


@pytest.fixture
async def conn(dsn):
    c = await connect(dsn)
    await ensure_tables(c)
    await ensure_tables(c)  # idempotent
    try:
        yield c
    finally:
        await c.close()


async def test_two_concurrent_claimers_take_each_request_once(conn, dsn):
    """Two connections claim a node's 600 requests at once, in small bites: every
    request is claimed exactly once, none is lost, other nodes' are not touched."""
    await enqueue_revalidations(conn, _requests(600, node="a"))
    await enqueue_revalidations(conn, _requests(50, node="b", start=1000))
    claimers = [await asyncpg.connect(dsn) for _ in range(2)]
    taken: dict[str, list[str]] = {"x": [], "y": []}

    async def claim_all(c: asyncpg.Connection, who: str) -> None:
        while batch := await claim_revalidations(c, "a", claimer=who, limit=7, now=NOW + 10):
            taken[who] += [r.id for r in batch]
            assert all(r.node == "a" and r.attempts == 1 for r in batch)

    try:
        await asyncio.gather(claim_all(claimers[0], "x"), claim_all(claimers[1], "y"))
    finally:
        for c in claimers:
            await c.close()
    both = taken["x"] + taken["y"]
    assert len(both) == len(set(both)) == 600
    assert set(both) == {f"r{i:05d}" for i in range(600)}
    assert taken["x"]
    assert taken["y"]  # both took part
    rows = await conn.fetch(
        "SELECT claimed_by, count(*) FROM cluster_revalidations GROUP BY claimed_by"
    )
    assert {r[0]: r[1] for r in rows} == {"x": len(taken["x"]), "y": len(taken["y"]), None: 50}


async def test_a_locked_claim_is_skipped_not_waited_for(conn, dsn):
    """While one claimer's transaction holds its rows, another claims the next ones at
    once (SKIP LOCKED); a rolled-back claim leaves its rows to be claimed again."""
    await enqueue_revalidations(conn, _requests(10))
    other = await asyncpg.connect(dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        first = await claim_revalidations(conn, "a", claimer="x", limit=4, now=NOW + 1)
        second = await asyncio.wait_for(
            claim_revalidations(other, "a", claimer="y", limit=4, now=NOW + 1), 5
        )
        assert [r.id for r in first] == [f"r{i:05d}" for i in range(4)]
        assert [r.id for r in second] == [f"r{i:05d}" for i in range(4, 8)]
        await tx.rollback()  # x crashed before its commit: its four are pending again
        again = await claim_revalidations(other, "a", claimer="y", limit=10, now=NOW + 1)
        assert sorted(r.id for r in again) == [f"r{i:05d}" for i in (0, 1, 2, 3, 8, 9)]
    finally:
        await other.close()


async def test_claims_in_two_processes(conn, dsn, tmp_path):
    """Two processes claiming at once (psql's own connections): no request twice."""
    await enqueue_revalidations(conn, _requests(400))
    script = ROOT / "tests" / "cluster" / "claim_node.py"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            dsn,
            who,
            str(NOW + 10),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        for who in ("p", "q")
    ]
    results = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 60)
    outs = [(out.decode(), err.decode()) for out, err in results]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
    ids = [line for out, _ in outs for line in out.split()]
    assert len(ids) == len(set(ids)) == 400


async def test_only_due_requests_oldest_first_and_one_open_per_binding(conn):
    """Requests due later are left; the oldest come first; a second request for a
    binding with an open one is not queued."""
    await enqueue_revalidations(conn, _requests(3, send_at=NOW))
    await enqueue_revalidations(conn, _requests(2, send_at=NOW + 100, start=3))
    dup = _requests(1)[0]
    assert await enqueue_revalidations(conn, [_again(dup)]) == []
    got = await claim_revalidations(conn, "a", claimer="x", limit=10, now=NOW + 1)
    assert [r.id for r in got] == ["r00000", "r00001", "r00002"]
    assert await claim_revalidations(conn, "a", claimer="x", limit=10, now=NOW + 1) == []
    # Finished: the binding may have a new request.
    assert await finish_revalidations(conn, ["r00000"], "done", now=NOW + 2, outcome="ok") == 1
    assert await finish_revalidations(conn, ["r00000"], "done", now=NOW + 3) == 0
    assert await enqueue_revalidations(conn, [_again(dup)]) == ["again"]


def _again(req: NewRevalidation) -> NewRevalidation:
    return NewRevalidation(
        id="again",
        node=req.node,
        block_id=req.block_id,
        sensor=req.sensor,
        subject=req.subject,
        reason="manual",
        created_at=req.created_at,
        send_at=req.send_at,
        deadline_s=req.deadline_s,
    )


async def test_requeue_own_claims_or_the_dead_ones(conn):
    """A restarting node requeues only its own claims; the leader those claimed too
    long ago; requeued requests are claimed again with their attempts counted."""
    await enqueue_revalidations(conn, _requests(6))
    await claim_revalidations(conn, "a", claimer="x", limit=2, now=NOW + 1)
    await claim_revalidations(conn, "a", claimer="y", limit=2, now=NOW + 50)
    assert await requeue_claims(conn, claimer="x", now=NOW + 60) == 2
    states = dict(await conn.fetch("SELECT id, status FROM cluster_revalidations"))
    assert [states[f"r{i:05d}"] for i in range(4)] == ["pending", "pending", "claimed", "claimed"]
    assert await requeue_claims(conn, claimed_before=NOW + 10, now=NOW + 60) == 0
    assert await requeue_claims(conn, claimed_before=NOW + 51, now=NOW + 60) == 2
    got = await claim_revalidations(conn, "a", claimer="z", limit=10, now=NOW + 61)
    attempts = {r.id: r.attempts for r in got}
    assert attempts["r00000"] == 2
    assert attempts["r00002"] == 2
    assert attempts["r00004"] == 1


@pytest.mark.parametrize("node", ["", "A", "a'; DROP TABLE cluster_revalidations; --", "x" * 64])
async def test_hostile_node_names_are_refused(conn, node):
    """A node name is checked before any SQL runs; the table is still there after."""
    with pytest.raises(ConfigError):
        await claim_revalidations(conn, node, claimer="x", limit=1, now=NOW)
    with pytest.raises(ConfigError):
        await enqueue_revalidations(conn, _requests(1, node=node))
    assert await conn.fetchval("SELECT count(*) FROM cluster_revalidations") == 0


async def test_hostile_values_are_data(conn):
    """Subjects and reasons that look like SQL are stored and returned verbatim; bad
    limits and statuses are input errors."""
    req = _requests(1)[0]
    odd = NewRevalidation(
        id="odd",
        node="a",
        block_id="b'); DELETE FROM cluster_revalidations; --",
        sensor="fs",
        subject="$1 \\ ' \" \x00".replace("\x00", ""),
        reason="expired",
        created_at=req.created_at,
        send_at=req.send_at,
        deadline_s=req.deadline_s,
    )
    assert await enqueue_revalidations(conn, [odd]) == ["odd"]
    (got,) = await claim_revalidations(conn, "a", claimer="x", limit=1, now=NOW + 1)
    assert (got.block_id, got.subject) == (odd.block_id, odd.subject)
    for limit in (0, -1, 1001):
        with pytest.raises(ValidationInputError):
            await claim_revalidations(conn, "a", claimer="x", limit=limit, now=NOW)
    with pytest.raises(ValidationInputError):
        await finish_revalidations(conn, ["odd"], "pending", now=NOW)
    with pytest.raises(ValidationInputError):
        await requeue_claims(conn, now=NOW)


async def test_tables_created_by_many_nodes_at_once(dsn):
    """Four connections creating the cluster tables at the same moment: no error, one
    set of tables."""
    conns = [await connect(dsn) for _ in range(4)]
    try:
        await asyncio.gather(*(ensure_tables(c) for c in conns))
        names = await conns[0].fetch(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'cluster_%' ORDER BY 1"
        )
        assert [r[0] for r in names] == ["cluster_leases", "cluster_nodes", "cluster_revalidations"]
    finally:
        for c in conns:
            await c.close()


async def test_an_unreachable_database_is_a_storage_error_without_the_password():
    """Connecting to nothing is a StorageError naming the server but not the password."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(StorageError) as caught:
            await connect(f"postgresql://bob:s3cret-pw@127.0.0.1:{port}/db", timeout_s=2)
    assert f"postgresql://bob@127.0.0.1:{port}/db" in str(caught.value)
    assert "s3cret" not in str(caught.value)
