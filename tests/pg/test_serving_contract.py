"""Node-scoped bindings (docs/SCALE.md, "Node-scoped bindings"), on both backends where
they mean the same, and the parts only several nodes on PostgreSQL have.

Both backends: a binding's ``nodes`` (default: the store's node) and ``served_by`` are
stored and shown; an edit keeps a binding's list unless it gives one; hostile lists
(bad names, too many, ``*`` with others, a name twice, not a list) are refused naming
the field, with nothing stored; migration from the version before gives old bindings
``["*"]``; on SQLite the one node serves every binding (``keep_servers``, audited).

PostgreSQL, two stores (nodes) on one database: an event about a subject reaches only
the bindings its node serves (the other node's stays in the log, without effect); the
leader's pass moves a binding of ``[a, b]`` to ``b`` when ``a`` stops heartbeating (an
audit row), and requeues ``a``'s claimed checks; each node claims only the checks of the
bindings it serves, each once, also with two claimers at once; a restarting node
requeues only its own claims."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from memwarden.cluster import ensure_tables
from memwarden.errors import ValidationInputError
from memwarden.memory import Store
from memwarden.memory._clock import FakeClock
from memwarden.memory._model import ValidationEvent
from memwarden.memory.pg import SCHEMA_VERSION, migrate, schema_version
from tests.support import sqlite_at_version

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from tests.pgserver import PgServer

START = 1_767_225_600.0
FS = {"sensor": "fs", "path": "config/app.yaml", "key": "/timeout", "equals": 30}


def _block(**binding: Any) -> dict[str, Any]:
    return {"content": "the app times out after 30 s", "bindings": [{**FS, **binding}]}


def _event(event_id: str, outcome: str, *, at: float) -> ValidationEvent:
    return ValidationEvent.model_validate(
        {
            "event_id": event_id,
            "sensor": "fs",
            "subject": "config/app.yaml",
            "outcome": outcome,
            "observed_at": datetime.fromtimestamp(at, UTC).isoformat(),
        }
    )


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, pg_server: PgServer
) -> AsyncIterator[Store]:
    where = str(tmp_path / "m.db") if request.param == "sqlite" else pg_server.create_database()
    async with Store(where, clock=FakeClock(START), node="node-a") as s:
        yield s


async def _audit(store: Store, action: str) -> list[tuple[str, str, dict[str, Any]]]:
    if store.pg_db is None:
        async with (
            store.db.read() as conn,
            conn.execute(
                "SELECT actor, block_id, detail FROM audit WHERE action = ? ORDER BY id", (action,)
            ) as cur,
        ):
            rows = [tuple(r) for r in await cur.fetchall()]
    else:
        async with store.pg_db.read() as conn:
            rows = [
                tuple(r)
                for r in await conn.fetch(
                    "SELECT actor, block_id, detail FROM audit WHERE action = $1 ORDER BY id",
                    action,
                )
            ]
    return [(a, b, json.loads(d)) for a, b, d in rows]


async def test_nodes_default_shown_and_kept(store: Store) -> None:
    default = await store.add(_block())
    assert default.bindings[0].nodes == ["node-a"]
    assert default.bindings[0].served_by == "node-a"
    assert default.bindings[0].selector == {k: v for k, v in FS.items() if k != "sensor"}
    listed = await store.add(_block(nodes=["node-b", "node-a"]))
    assert listed.bindings[0].nodes == ["node-b", "node-a"]
    anywhere = await store.add(_block(nodes=["*"], served_by="node-z"))
    assert anywhere.bindings[0].nodes == ["*"]
    assert anywhere.bindings[0].served_by == "node-a"  # a write's served_by is ignored
    # The wire form shows both; the request to a sensor carries neither.
    assert default.model_dump(mode="json")["bindings"][0]["nodes"] == ["node-a"]
    # An edit that gives the binding without nodes keeps its list; one that gives a list
    # changes it.
    kept = await store.update(listed.id, {"bindings": [FS]})
    assert kept.bindings[0].nodes == ["node-b", "node-a"]
    assert kept.version == listed.version  # nothing changed
    moved = await store.update(listed.id, {"bindings": [{**FS, "nodes": ["node-c"]}]})
    assert moved.bindings[0].nodes == ["node-c"]
    assert moved.version == listed.version + 1


@pytest.mark.parametrize(
    ("nodes", "problem"),
    [
        (["Node-A"], "should match pattern"),
        (["a b"], "should match pattern"),
        (["-a"], "should match pattern"),
        (["a" * 64], "should match pattern"),
        (["a\x00"], "should match pattern"),
        (["'; DROP TABLE bindings; --"], "should match pattern"),
        (["*", "node-a"], '"*" (any node) stands alone'),
        (["node-a", "node-a"], "named twice"),
        ([f"n{i}" for i in range(17)], "at most 16"),
        ([], "at least 1"),
        ("node-a", "valid list"),
        ([7], "valid string"),
    ],
)
async def test_hostile_nodes_refused_nothing_stored(store: Store, nodes: Any, problem: str) -> None:
    first = await store.add(_block())
    before = await store.counts()
    with pytest.raises(ValidationInputError) as err:
        await store.add(_block(nodes=nodes))
    fields = [f for f, _ in err.value.errors]
    assert any("bindings.0.nodes" in f for f in fields), err.value.errors
    assert problem in str(err.value)
    with pytest.raises(ValidationInputError):
        await store.update(first.id, {"bindings": [{**FS, "nodes": nodes}]})
    assert await store.counts() == before
    again = await store.get(first.id)
    assert again.bindings[0].nodes == ["node-a"]
    assert again.version == first.version


async def test_sqlite_one_node_serves_every_binding(tmp_path: Path) -> None:
    """On SQLite the daemon's node serves every binding, whatever its list says: a host
    renamed keeps its bindings checked. Each change is audited."""
    path = tmp_path / "m.db"
    async with Store(path, clock=FakeClock(START), node="old-host") as s:
        a = await s.add(_block())
        b = await s.add(_block(nodes=["elsewhere"]))
        assert await s.keep_servers() == (0, 0)  # served by it already
    async with Store(path, clock=FakeClock(START), node="new-host") as s:
        assert await s.keep_servers() == (2, 0)
        assert await s.keep_servers() == (0, 0)
        for block in (a, b):
            assert (await s.get(block.id)).bindings[0].served_by == "new-host"
        assert (await s.get(b.id)).bindings[0].nodes == ["elsewhere"]
        served = await _audit(s, "serve")
        assert [(actor, bid, d["from"], d["to"]) for actor, bid, d in served] == [
            ("node:new-host", a.id, "old-host", "new-host"),
            ("node:new-host", b.id, "old-host", "new-host"),
        ]
        assert [len(await s.bindings_for_sensor("fs", served_by=n)) for n in ("new-host",)] == [2]


async def test_sqlite_13_migrates_bindings_to_any_node(tmp_path: Path) -> None:
    """A store at schema 13 with a binding: after migrations 14-15 it is ``["*"]``, served by
    no one until the daemon's node takes it."""
    path = tmp_path / "old.db"
    conn = sqlite_at_version(path, 13)
    conn.execute(
        "INSERT INTO blocks (rid, id, title, content, tags, source, category, info_type,"
        " volatility, tier, state, reliability, importance, validity_window_s, stale_at,"
        " half_life_s, created_at, updated_at) VALUES (1, 'old-block', 't', 'c', '[]', 'user',"
        " 'semantic', 'semi_static', 'medium', 'long_term', 'unverified', 0.8, 0.5, 604800,"
        " ?, 1209600, ?, ?)",
        (START + 604800, START, START),
    )
    conn.execute(
        "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at)"
        " VALUES (1, 'fs', 'a.yaml', '{\"path\": \"a.yaml\"}', ?)",
        (START,),
    )
    conn.execute(
        "INSERT INTO revalidations (id, block_id, sensor, subject, reason, status, created_at,"
        " send_at, deadline_s) VALUES ('r1', 'old-block', 'fs', 'a.yaml', 'expired', 'sent',"
        " ?, ?, 60)",
        (START, START),
    )
    conn.close()
    async with Store(path, clock=FakeClock(START), node="host-1") as s:
        binding = (await s.get("old-block")).bindings[0]
        assert (binding.nodes, binding.served_by) == (["*"], None)
        assert await s.requeue_sent_revalidations(node="host-1") == 0  # not its claim
        assert await s.keep_servers() == (1, 0)
        assert (await s.get("old-block")).bindings[0].served_by == "host-1"
        assert await s.requeue_sent_revalidations() == 1
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] >= 15
    finally:
        raw.close()


# ------------------------------------------------------------------ PostgreSQL, two nodes


async def _alive(dsn: str, *names: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await ensure_tables(conn)
        for name in names:
            await conn.execute(
                "INSERT INTO cluster_nodes (node, instance, host, pid, started_at, heartbeat_at)"
                " VALUES ($1, $1, 'test', 1, clock_timestamp(), clock_timestamp())"
                " ON CONFLICT (node) DO UPDATE SET heartbeat_at = clock_timestamp(),"
                " stopped_at = NULL",
                name,
            )
    finally:
        await conn.close()


async def _age(dsn: str, name: str, seconds: float) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "UPDATE cluster_nodes SET heartbeat_at = heartbeat_at - make_interval(secs => $2)"
            " WHERE node = $1",
            name,
            seconds,
        )
    finally:
        await conn.close()


async def _rows(store: Store, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    assert store.pg_db is not None
    async with store.pg_db.read() as conn:
        return [tuple(r) for r in await conn.fetch(sql, *args)]


@pytest.fixture
async def two(pg_server: PgServer) -> AsyncIterator[tuple[str, Store, Store]]:
    dsn = pg_server.create_database()
    clock = FakeClock(START)
    async with (
        Store(dsn, clock=clock, node="node-a") as a,
        Store(dsn, clock=clock, node="node-b") as b,
    ):
        await _alive(dsn, "node-a", "node-b")
        yield dsn, a, b


async def test_events_reach_only_the_serving_nodes_bindings(
    two: tuple[str, Store, Store],
) -> None:
    _, a, b = two
    block = await a.add(_block())  # nodes [node-a], served by node-a
    # node-b's sensor says the file (its own config/app.yaml) is wrong: kept, no effect.
    result = await b.apply_events([_event("from-b", "refuted", at=START - 1)])
    assert result.changes == []
    assert (await a.get(block.id)).state.value == "unverified"
    assert await _rows(a, "SELECT event_id FROM events") == [("from-b",)]
    assert await _rows(a, "SELECT count(*) FROM effects") == [(0,)]
    # An event naming the block from outside (bound_only) through node-b: refused, kept
    # as a dead letter, nothing changed.
    direct = _event("b-direct", "refuted", at=START - 1).model_copy(update={"block_id": block.id})
    result = await b.apply_events([direct], bound_only=True)
    assert [e for e, _ in result.rejected] == ["b-direct"]
    assert (await a.get(block.id)).state.value == "unverified"
    # node-a's own observation applies.
    await a.apply_events([_event("from-a", "confirmed", at=START - 1)])
    assert (await a.get(block.id)).state.value == "fresh"
    assert await _rows(a, "SELECT count(*) FROM effects") == [(1,)]
    # Its polling sensor is given the binding; node-b's is not.
    assert [bid for bid, _ in await a.bindings_for_sensor("fs", served_by="node-a")] == [block.id]
    assert await b.bindings_for_sensor("fs", served_by="node-b") == []


async def test_leader_moves_a_binding_when_its_node_dies(two: tuple[str, Store, Store]) -> None:
    dsn, a, b = two
    block = await a.add(_block(nodes=["node-a", "node-b"]))
    anywhere = await b.add(_block(nodes=["*"]))
    only_a = await a.add(_block(nodes=["node-a"]))
    assert await a.keep_servers() == (0, 0)  # as stored
    # A binding stored on node-b naming node-a first is served by no one until the
    # leader's pass gives it to node-a, the first alive: node-b's events never reach it.
    first_b = await b.add(_block(nodes=["node-a", "node-b"]))
    assert (await b.get(first_b.id)).bindings[0].served_by is None
    await b.apply_events([_event("b-early", "refuted", at=START - 3)])
    assert (await b.get(first_b.id)).state.value == "unverified"
    assert await a.keep_servers() == (1, 0)
    assert (await a.get(first_b.id)).bindings[0].served_by == "node-a"
    # node-a stops heartbeating: its bindings with node-b next go to node-b, ["*"] stays
    # where it is (node-b), node-a's own goes to no one.
    await _age(dsn, "node-a", 31)
    assert await b.keep_servers() == (3, 0)
    got = {x.id: (await b.get(x.id)).bindings[0].served_by for x in (block, anywhere, only_a)}
    assert got == {block.id: "node-b", anywhere.id: "node-b", only_a.id: None}
    moves = {(bid, d["from"], d["to"]) for actor, bid, d in await _audit(b, "serve")}
    assert moves >= {
        (block.id, "node-a", "node-b"),
        (first_b.id, "node-a", "node-b"),
        (only_a.id, "node-a", None),
    }
    actors = [actor for actor, _, _ in await _audit(b, "serve")]
    assert actors == ["node:node-a"] + ["node:node-b"] * 3  # who made each change
    # Now node-b's observation counts for it, node-a's no more.
    await a.apply_events([_event("late-a", "refuted", at=START - 2)])
    assert (await b.get(block.id)).state.value == "unverified"
    await b.apply_events([_event("now-b", "confirmed", at=START - 1)])
    assert (await b.get(block.id)).state.value == "fresh"
    # node-a comes back: first in the list, it serves again.
    await _alive(dsn, "node-a")
    assert await b.keep_servers() == (3, 0)
    assert (await b.get(block.id)).bindings[0].served_by == "node-a"
    assert (await b.get(anywhere.id)).bindings[0].served_by == "node-b"  # kept


async def test_each_node_claims_its_own_checks_once(two: tuple[str, Store, Store]) -> None:
    dsn, a, b = two
    mine = [await a.add(_block()) for _ in range(30)]
    theirs = [await b.add(_block()) for _ in range(30)]
    for x in mine + theirs:
        await a.request_revalidation(x.id)
    claimed_b = await b.claim_revalidations(limit=100)
    assert sorted(r.block_id for r in claimed_b) == sorted(x.id for x in theirs)
    assert all(r.attempts == 0 for r in claimed_b)
    # Two claimers of node-a at once (two ticks): each request once between them.
    got = await asyncio.gather(*(a.claim_revalidations(limit=7) for _ in range(6)))
    ids = [r.id for batch in got for r in batch]
    assert len(ids) == len(set(ids)) == 30
    assert sorted(r.block_id for batch in got for r in batch) == sorted(x.id for x in mine)
    assert await a.claim_revalidations(limit=100) == []
    assert await _rows(
        a, "SELECT node, count(*) FROM revalidations WHERE status = 'sent' GROUP BY 1 ORDER BY 1"
    ) == [("node-a", 30), ("node-b", 30)]
    # node-a restarts: only its own claims are requeued.
    assert await a.requeue_sent_revalidations(node="node-a") == 30
    assert await _rows(
        a, "SELECT node, status, count(*) FROM revalidations GROUP BY 1, 2 ORDER BY 1, 2"
    ) == [("node-a", "pending", 30), ("node-b", "sent", 30)]
    # node-b dies: the leader (node-a) requeues its claims; nobody serves them now, so
    # nobody claims them (node-b's bindings name only node-b).
    await _age(dsn, "node-b", 31)
    assert await a.keep_servers() == (30, 30)
    assert await b.claim_revalidations(limit=100) == []
    assert len(await a.claim_revalidations(limit=100)) == 30  # its own, again
    # A hostile node name for a claim names nothing.
    a.node = "node-a"
    with pytest.raises(Exception, match="not a valid node name"):
        a.node = "Node A"
    assert a.node == "node-a"


async def test_postgresql_7_migrates_bindings_to_any_node(pg_server: PgServer) -> None:
    """A database at version 7 with a binding and a sent check: migration 8 makes the
    binding ``["*"]`` served by none, the check's node unknown; the leader's pass gives
    the binding a live node and requeues the check (claimed by no known node)."""
    dsn = pg_server.create_database()
    async with Store(dsn, clock=FakeClock(START), node="node-a") as s:
        block = await s.add(_block())
        await s.request_revalidation(block.id)
        assert len(await s.claim_revalidations()) == 1
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "DROP INDEX revalidations_node; DROP INDEX bindings_served;"
            " ALTER TABLE bindings DROP COLUMN nodes, DROP COLUMN served_by;"
            " ALTER TABLE revalidations DROP COLUMN node;"
            " UPDATE schema_version SET version = 7"
        )
        assert await migrate(conn) == 7  # the version it found
        assert await schema_version(conn) == SCHEMA_VERSION
    finally:
        await conn.close()
    async with Store(dsn, clock=FakeClock(START), node="node-a") as s:
        binding = (await s.get(block.id)).bindings[0]
        assert (binding.nodes, binding.served_by) == (["*"], None)
        await _alive(dsn, "node-a")
        assert await s.keep_servers() == (1, 1)
        assert (await s.get(block.id)).bindings[0].served_by == "node-a"
        assert len(await s.claim_revalidations()) == 1


@pytest.mark.parametrize(
    ("nodes", "served_by"),
    [("[oops", None), ('["Bad Name"]', None), ('["*", "a"]', None), ('"a"', None), (None, "Bad!")],
)
async def test_an_import_with_a_hostile_node_list_stores_nothing(
    store: Store, nodes: str | None, served_by: str | None
) -> None:
    """An export object's binding carries its ``nodes`` and ``served_by`` columns; one
    that is not a valid list (the leader's pass reads it as JSON) is refused, nothing
    stored; a valid one is kept."""
    block = await store.add(_block(nodes=["node-a", "node-b"]))
    [row] = await store.export_blocks()
    assert row["bindings"][0]["nodes"] == '["node-a","node-b"]'
    await store.delete(block.id)
    before = await store.counts()
    bad = json.loads(json.dumps(row))
    bad["bindings"][0].update(nodes=nodes, served_by=served_by)
    with pytest.raises(ValidationInputError) as err:
        await store.import_blocks([bad])
    assert [f for f, _ in err.value.errors] == ["0.bindings.0"]
    assert await store.counts() == before
    await store.import_blocks([row])
    assert (await store.get(block.id)).bindings[0].nodes == ["node-a", "node-b"]
