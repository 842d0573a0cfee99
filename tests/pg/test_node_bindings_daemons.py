"""Node-scoped bindings with two real ``memwarden run`` daemons on one PostgreSQL
(docs/SCALE.md, "Node-scoped bindings" and "Revalidation requests go to the node that
serves the binding"). Each node has an ``fs`` sensor on its own directory, both holding
``app.yaml`` (the same subject, two different files): node-a's says ``timeout: 30``,
node-b's ``timeout: 99``.

A block bound to ``app.yaml`` with ``nodes = [node-a, node-b]`` is checked by node-a
only: node-a's sensor confirms it, an event from node-b about the same subject is kept
in the log and changes nothing, a check asked for through node-b is claimed and run by
node-a, once (counted in the log). Hostile inputs (bad node names, too many nodes, an
event claiming a node) are refused with nothing changed. When node-a dies (``kill -9``;
its heartbeat aged past 30 s in the database), node-b leads, the binding moves to it
(``served_by``, an audit row) and node-b's sensor checks it: its file refutes the
block."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from tests.support import daemon_env, eventually_blocking, start_memwarden

if TYPE_CHECKING:
    from pathlib import Path

    from tests.pgserver import PgServer
    from tests.support import DaemonProcess

BINDING = {"sensor": "fs", "path": "app.yaml", "key": "/timeout", "equals": 30}


def _env(home: Path, dsn: str, node: str, root: Path) -> dict[str, str]:
    return daemon_env(
        home,
        MEMWARDEN_STORE__URL=dsn,
        MEMWARDEN_CLUSTER__NODE=node,
        MEMWARDEN_SENSORS=json.dumps(
            {"fs": {"roots": [str(root)], "debounce_ms": 10, "index": False}}
        ),
        MEMWARDEN_SCHEDULER__DISPATCH_INTERVAL="100ms",
    )


def _get(d: DaemonProcess, path: str, **params: Any) -> Any:
    got = httpx.get(f"{d.url}{path}", headers=d.auth, params=params, timeout=10)
    assert got.status_code == 200, got.text
    return got.json()


def _binding(d: DaemonProcess, block_id: str) -> dict[str, Any]:
    return dict(_get(d, f"/v1/blocks/{block_id}")["bindings"][0])


def _state(d: DaemonProcess, block_id: str) -> str:
    return str(_get(d, f"/v1/blocks/{block_id}")["state"])


def _sql(server: PgServer, dsn: str, sql: str) -> list[list[str]]:
    out = server.psql(sql, dsn.rsplit("/", 1)[1])
    return [line.split("|") for line in out.splitlines() if line]


def _event(event_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "sensor": "fs",
        "subject": "app.yaml",
        "outcome": "refuted",
        "observed_at": datetime.now(UTC).isoformat(),
        **extra,
    }


def _hostile_inputs_change_nothing(pg_server: PgServer, dsn: str, b: DaemonProcess) -> None:
    """Bad node names, too many nodes, "*" with others, NUL; an event that names a node
    (an event's node is the one whose API or sensor took it, never its own claim)."""
    before = _sql(
        pg_server, dsn, "SELECT count(*) FROM blocks UNION ALL SELECT count(*) FROM events"
    )
    for nodes_given, field in (
        (["Node A"], "nodes"),
        ([f"n{i}" for i in range(17)], "nodes"),
        (["*", "node-a"], "nodes"),
        (["node-a\u0000"], "nodes"),
    ):
        refused = httpx.post(
            f"{b.url}/v1/blocks",
            headers=b.auth,
            json={"content": "x", "bindings": [{**BINDING, "nodes": nodes_given}]},
            timeout=10,
        )
        assert refused.status_code == 422, refused.text
        assert field in refused.text
        assert "Traceback" not in refused.text
    claiming = httpx.post(
        f"{b.url}/v1/events", headers=b.auth, json=[_event("claims-a", node="node-a")], timeout=10
    )
    assert claiming.status_code == 200, claiming.text  # the batch's answer: each refused
    assert claiming.json()["accepted"] == 0
    assert claiming.json()["rejected"] == [
        {"event": "0", "reason": "node: Extra inputs are not permitted"}
    ]
    assert (
        _sql(pg_server, dsn, "SELECT count(*) FROM blocks UNION ALL SELECT count(*) FROM events")
        == before
    )


def _checks_asked_through_b_run_on_a(
    pg_server: PgServer, dsn: str, b: DaemonProcess, block_id: str
) -> None:
    """A check asked for through node-b goes to node-a, and runs once; a caller waiting
    on node-b learns the answer."""
    asked = httpx.post(f"{b.url}/v1/blocks/{block_id}/revalidate", headers=b.auth, timeout=20)
    assert asked.status_code == 200, asked.text
    (request_id,) = asked.json()["requested"]
    eventually_blocking(
        lambda: (
            _sql(
                pg_server, dsn, f"SELECT node, status FROM revalidations WHERE id = '{request_id}'"
            )
            == [["node-a", "done"]]
        ),
        timeout_s=20,
    )
    answers = f"SELECT count(*) FROM events WHERE request_id = '{request_id}'"
    assert _sql(pg_server, dsn, answers) == [["1"]]
    # More dispatch ticks on both nodes (100 ms each) send it no more.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert _sql(pg_server, dsn, answers) == [["1"]]
    assert _sql(
        pg_server, dsn, f"SELECT attempts FROM revalidations WHERE id = '{request_id}'"
    ) == [["1"]]
    # A read through node-b that waits for the outcome is told of node-a's answer (the
    # store says which requests are answered), not left to wait out its 20 s.
    waited = httpx.post(
        f"{b.url}/v1/blocks/{block_id}/revalidate",
        headers=b.auth,
        params={"wait": "20s"},
        timeout=30,
    )
    assert waited.status_code == 200, waited.text
    (waited_id,) = waited.json()["requested"]
    assert (waited.json()["answered"], waited.json()["timed_out"]) == ([waited_id], [])
    assert _sql(
        pg_server, dsn, f"SELECT node, status FROM revalidations WHERE id = '{waited_id}'"
    ) == [["node-a", "done"]]


def test_a_binding_is_checked_by_its_serving_node_and_moves_when_it_dies(
    pg_server: PgServer, tmp_path: Path, nodes: list[DaemonProcess]
) -> None:
    dsn = pg_server.create_database("served")
    roots = {}
    for name, timeout in (("node-a", 30), ("node-b", 99)):
        roots[name] = tmp_path / f"{name}-files"
        roots[name].mkdir()
        (roots[name] / "app.yaml").write_text(f"timeout: {timeout}\n")
    a = start_memwarden(tmp_path / "a", env=_env(tmp_path / "a", dsn, "node-a", roots["node-a"]))
    nodes.append(a)
    eventually_blocking(lambda: _get(a, "/v1/health")["cluster"]["leader"], timeout_s=20)
    b = start_memwarden(tmp_path / "b", env=_env(tmp_path / "b", dsn, "node-b", roots["node-b"]))
    nodes.append(b)

    added = httpx.post(
        f"{b.url}/v1/blocks",
        headers=b.auth,
        json={
            "content": "the app times out after 30 s",
            "bindings": [{**BINDING, "nodes": ["node-a", "node-b"]}],
        },
        timeout=10,
    )
    assert added.status_code == 201, added.text
    block_id = added.json()["id"]
    # Added through node-b, not the first of the list: served by no one until the
    # leader's pass gives it to node-a, the first live node of its list.
    assert added.json()["bindings"][0]["served_by"] is None
    eventually_blocking(lambda: _binding(b, block_id)["served_by"] == "node-a", timeout_s=20)
    assert _binding(a, block_id)["nodes"] == ["node-a", "node-b"]
    # node-a's sensor confirms it (its app.yaml says 30); node-b's never looks.
    eventually_blocking(lambda: _state(a, block_id) == "fresh", timeout_s=20)

    _hostile_inputs_change_nothing(pg_server, dsn, b)

    # node-b's own block on app.yaml (nodes [node-b]): node-b's sensor reads its file
    # (99) and refutes it; those events, about the same subject, leave node-a's block be.
    mine = httpx.post(
        f"{b.url}/v1/blocks",
        headers=b.auth,
        json={"content": "node-b's app times out after 30 s", "bindings": [BINDING]},
        timeout=10,
    )
    assert mine.status_code == 201, mine.text
    b_block = mine.json()["id"]
    assert _binding(b, b_block)["nodes"] == ["node-b"]
    eventually_blocking(lambda: _state(b, b_block) == "stale", timeout_s=20)  # soft refuted
    reached = _sql(
        pg_server,
        dsn,
        "SELECT DISTINCT k.id FROM effects f JOIN blocks k ON k.rid = f.block_rid"
        " JOIN events e ON e.seq = f.event_seq WHERE e.outcome = 'refuted'",
    )
    assert reached == [[b_block]]
    assert _state(a, block_id) == "fresh"

    _checks_asked_through_b_run_on_a(pg_server, dsn, b, block_id)

    # node-a dies; its heartbeat is made 60 s old (as 30 s of silence would).
    a.process.kill()
    a.process.wait()
    _sql(
        pg_server,
        dsn,
        "UPDATE cluster_nodes SET heartbeat_at = heartbeat_at - interval '60 seconds'"
        " WHERE node = 'node-a'",
    )
    eventually_blocking(lambda: _get(b, "/v1/health")["cluster"]["leader"], timeout_s=20)
    eventually_blocking(lambda: _binding(b, block_id)["served_by"] == "node-b", timeout_s=20)
    moves = _sql(
        pg_server,
        dsn,
        f"SELECT actor, detail FROM audit WHERE action = 'serve' AND block_id = '{block_id}'"
        " ORDER BY id",
    )
    last = json.loads(moves[-1][1])
    assert (moves[-1][0], last["from"], last["to"]) == ("node:node-b", "node-a", "node-b")
    # node-b's sensor now checks it: its app.yaml says 99.
    eventually_blocking(lambda: _state(b, block_id) != "fresh", timeout_s=30)
    fell = _sql(
        pg_server,
        dsn,
        "SELECT e.sensor, e.outcome FROM effects f JOIN blocks k ON k.rid = f.block_rid"
        f" JOIN events e ON e.seq = f.event_seq WHERE k.id = '{block_id}'"
        " AND f.state_before = 'fresh' AND f.state_after <> 'fresh'",
    )
    assert fell == [["fs", "refuted"]]
