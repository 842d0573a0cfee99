"""Binding a fact already stored: ``PATCH /v1/blocks/{id}`` with ``bindings`` and
``POST /v1/blocks/{id}/bind`` (auto), through a real daemon with the fs sensor."""

from __future__ import annotations

import json
from typing import Any

from memwarden.memory._model import default_node_name
from tests.suggest.conftest import Api
from tests.support import eventually

TIMEOUT = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}


async def _block(api: Api, block_id: str) -> dict[str, Any]:
    answer = await api.client.get(f"/v1/blocks/{block_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


async def _state(api: Api, block_id: str, state: str) -> bool:
    block = await _block(api, block_id)
    if state == "refuted":  # one refutation of a short-term fact is a soft one (stale)
        return block["state"] == "refuted" or "soft_refuted" in block["stale_reasons"]
    return bool(block["state"] == state)


async def _audit_updates(api: Api, block_id: str) -> list[str]:
    async with api.daemon.store.db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT detail FROM audit WHERE block_id = ? AND action = 'update' ORDER BY at",
            (block_id,),
        )
    return [str(r[0]) for r in rows]


async def test_patch_binds_a_stored_fact_and_its_sensor_checks_it(api: Api):
    """An unbound fact gets an fs binding by PATCH: fresh once the file is read, refuted
    when the file changes; [] unbinds it again."""
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    assert block["bindings"] == []
    answer = await api.client.patch(f"/v1/blocks/{block['id']}", json={"bindings": [TIMEOUT]})
    assert answer.status_code == 200, answer.text
    bound = answer.json()
    node = default_node_name()  # the daemon's node stored it, and serves it
    assert bound["bindings"] == [
        {**TIMEOUT, "subject": "config/app.yaml", "nodes": [node], "served_by": node}
    ]
    assert bound["state"] == "unverified"
    assert bound["version"] == block["version"] + 1  # new bindings: a new version
    audit = await _audit_updates(api, block["id"])
    assert '"sensor": "fs"' in audit[-1]
    assert "config/app.yaml" in audit[-1]
    await eventually(lambda: _state(api, block["id"], "fresh"), timeout_s=10)
    (api.workspace / "config/app.yaml").write_text("http:\n  timeout: 60\n  port: 8080\n")
    await eventually(lambda: _state(api, block["id"], "refuted"), timeout_s=10)

    cleared = await api.client.patch(f"/v1/blocks/{block['id']}", json={"bindings": []})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["bindings"] == []
    assert cleared.json()["state"] == "unverified"


async def test_patch_bindings_with_other_fields_is_one_edit(api: Api):
    block = await api.post("/v1/blocks", {"content": "The port is 8080"}, status=201)
    binding = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/port", "equals": 8080}
    answer = await api.client.patch(
        f"/v1/blocks/{block['id']}", json={"bindings": [binding], "importance": 0.9}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["importance"] == 0.9
    assert answer.json()["bindings"][0]["key"] == "/http/port"


async def _refused(api: Api, block_id: str, body: Any, field: str) -> None:
    """A refused PATCH: 422 naming ``field``, no traceback, the block unchanged."""
    before = await api.daemon.store.get(block_id)
    if isinstance(body, str):
        answer = await api.client.patch(
            f"/v1/blocks/{block_id}", content=body, headers={"Content-Type": "application/json"}
        )
    else:
        answer = await api.client.patch(f"/v1/blocks/{block_id}", json=body)
    assert answer.status_code == 422, answer.text
    assert "Traceback" not in answer.text
    locs = [".".join(str(p) for p in d["loc"]) for d in answer.json()["detail"]]
    assert any(field in loc for loc in locs), locs
    after = await api.daemon.store.get(block_id)
    fields = {"bindings", "importance", "version", "content", "state", "updated_at"}
    assert after.model_dump(include=fields) == before.model_dump(include=fields)


async def test_hostile_bindings_are_refused_naming_the_field_and_change_nothing(api: Api):
    block = await api.post(
        "/v1/blocks", {"content": "The API timeout is 30 s", "bindings": [TIMEOUT]}, status=201
    )
    bid = block["id"]
    await eventually(lambda: _state(api, bid, "fresh"), timeout_s=10)  # then it stays
    await _refused(api, bid, {"bindings": [{**TIMEOUT, "sensor": "nope"}]}, "bindings.0.sensor")
    outside = {"sensor": "fs", "path": "/etc/passwd", "exists": True}
    await _refused(api, bid, {"bindings": [TIMEOUT, outside], "importance": 0.1}, "bindings.1")
    escape = {"sensor": "fs", "path": "../../etc/passwd", "exists": True}
    await _refused(api, bid, {"bindings": [escape]}, "bindings.0")
    await _refused(api, bid, {"bindings": "fs"}, "bindings")
    await _refused(api, bid, {"bindings": None}, "bindings")
    await _refused(api, bid, {"bindings": [{"path": "config/app.yaml"}]}, "bindings.0.sensor")
    await _refused(api, bid, '{"bindings": [', "body")
    await _refused(api, bid, {"bindings": [TIMEOUT] * 33}, "bindings")


async def test_an_unknown_block_is_404(api: Api):
    answer = await api.client.patch("/v1/blocks/01J0000000000000000000000Z", json={"bindings": []})
    assert answer.status_code == 404, answer.text
    answer = await api.client.post(
        "/v1/blocks/01J0000000000000000000000Z/bind", json={"bind": "auto"}
    )
    assert answer.status_code == 404, answer.text


async def test_rebinding_closes_the_removed_bindings_open_requests(api: Api):
    block = await api.post(
        "/v1/blocks", {"content": "The API timeout is 30 s", "bindings": [TIMEOUT]}, status=201
    )
    # Made "later" than any answer the sensor gives meanwhile: only the rebinding closes it.
    now = api.daemon.store.clock.time() + 3600

    async def insert(conn: Any) -> None:
        await conn.execute(
            "INSERT INTO revalidations (id, block_id, sensor, subject, reason, created_at,"
            " send_at, deadline_s) VALUES ('r-open', ?, 'fs', 'config/app.yaml', 'test', ?,"
            " ?, 5)",
            (block["id"], now, now),
        )

    await api.daemon.store.db.write(insert)
    port = {"sensor": "fs", "path": "package.json", "key": "/version", "equals": "1.2.3"}
    answer = await api.client.patch(f"/v1/blocks/{block['id']}", json={"bindings": [port]})
    assert answer.status_code == 200, answer.text
    async with api.daemon.store.db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT status, outcome FROM revalidations WHERE id = 'r-open'"
        )
    assert [tuple(r) for r in rows] == [("expired", "unbound")]


async def test_bind_auto_binds_a_stored_fact_and_says_why(api: Api):
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    answer = await api.post(f"/v1/blocks/{block['id']}/bind", {"bind": "auto"})
    assert answer["bind"]["mode"] == "auto"
    assert answer["bind"]["chosen"]["binding"]["key"] == "/http/timeout"
    assert answer["bind"]["why"].startswith("bound: ")
    assert answer["bindings"][0]["key"] == "/http/timeout"
    await eventually(lambda: _state(api, block["id"], "fresh"), timeout_s=10)
    again = await api.post(f"/v1/blocks/{block['id']}/bind", {"bind": "auto"})
    assert again["bind"]["why"].startswith("already bound so")
    assert len(again["bindings"]) == 1


async def test_bind_auto_without_a_confirming_suggestion_leaves_it_unbound(api: Api):
    block = await api.post("/v1/blocks", {"content": "the timeout is 45 s"}, status=201)
    answer = await api.post(f"/v1/blocks/{block['id']}/bind", {"bind": "auto"})
    assert answer["bind"]["chosen"] is None
    assert "left unbound" in answer["bind"]["why"]
    assert answer["bind"]["contradicts"][0]["binding"]["equals"] == 45
    assert answer["bindings"] == []


async def test_bind_refuses_a_bad_body(api: Api):
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    for body in ({"bind": "suggest"}, {}, {"bind": "auto", "extra": 1}):
        answer = await api.client.post(f"/v1/blocks/{block['id']}/bind", json=body)
        assert answer.status_code == 422, answer.text
    assert (await _block(api, block["id"]))["bindings"] == []


async def test_a_binding_kept_as_it_was_is_not_checked_again(api: Api):
    """A stored binding today's rules refuse (quarantined) does not stop auto from adding
    one: it is kept as it is, quarantine and all; a new copy of it is refused."""
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    outside = {"path": "/etc/hostname", "exists": True}
    now = api.daemon.store.clock.time()

    async def insert(conn: Any) -> None:
        await conn.execute(
            "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at, quarantine,"
            " quarantined_at) SELECT rid, 'fs', '/etc/hostname', ?, ?, 'outside the roots', ?"
            " FROM blocks WHERE id = ?",
            (json.dumps(outside), now, now, block["id"]),
        )

    await api.daemon.store.db.write(insert)
    answer = await api.post(f"/v1/blocks/{block['id']}/bind", {"bind": "auto"})
    assert [b.get("key") for b in answer["bindings"]] == [None, "/http/timeout"]
    async with api.daemon.store.db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT quarantine FROM bindings WHERE subject = '/etc/hostname'"
        )
    assert [r[0] for r in rows] == ["outside the roots"]
    other = await api.post("/v1/blocks", {"content": "another fact"}, status=201)
    refused = await api.client.patch(
        f"/v1/blocks/{other['id']}", json={"bindings": [{"sensor": "fs", **outside}]}
    )
    assert refused.status_code == 422, refused.text
