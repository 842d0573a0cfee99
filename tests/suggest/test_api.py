"""POST /v1/suggest-bindings and POST /v1/blocks with bind, through a real daemon."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

import httpx

from memwarden.sensors import FsSensor
from tests.suggest.conftest import Api, start_api
from tests.support import eventually


async def test_a_fact_gets_the_binding_that_checks_it(api: Api):
    """ "The API timeout is 30 s" finds /http/timeout in config/app.yaml, confirmed now."""
    found = await api.post("/v1/suggest-bindings", {"content": "The API timeout is 30 s"})
    best = found["suggestions"][0]
    assert best["binding"] == {
        "sensor": "fs",
        "path": "config/app.yaml",
        "key": "/http/timeout",
        "equals": 30,
    }
    assert best["check"]["outcome"] == "confirmed"
    assert 0 < best["confidence"] <= 1
    assert "timeout" in best["why"]
    assert found["contradicts"] == []


async def test_a_wrong_fact_comes_back_as_a_contradiction(api: Api):
    found = await api.post("/v1/suggest-bindings", {"content": "the timeout is 45 s"})
    assert found["suggestions"] == []
    [contra] = found["contradicts"]
    assert contra["binding"]["key"] == "/http/timeout"
    assert contra["binding"]["equals"] == 45
    assert contra["check"]["outcome"] == "refuted"
    assert "the file says 30" in contra["why"]


async def test_secrets_are_matched_but_never_echoed(api: Api):
    """The right secret finds its key; its value is in no why, check or contradiction."""
    found = await api.post("/v1/suggest-bindings", {"content": "the db password is hunter2"})
    best = found["suggestions"][0]
    assert best["binding"]["key"] == "/db/password"
    assert "hunter2" not in best["why"]
    assert "hunter2" not in str(best["check"])
    wrong = await api.post("/v1/suggest-bindings", {"content": "the db password is letmein"})
    assert "hunter2" not in str(wrong)
    token = await api.post("/v1/suggest-bindings", {"content": "API_TOKEN is wrong-one"})
    assert "s3cr3t-token-value" not in str(token)


async def test_a_bad_body_is_a_422_naming_the_field(api: Api):
    answer = await api.client.post("/v1/suggest-bindings", json={"content": "x", "limit": 0})
    assert answer.status_code == 422
    assert "limit" in answer.text
    answer = await api.client.post("/v1/suggest-bindings", json={"text": "x"})
    assert answer.status_code == 422
    assert "content" in answer.text


async def test_the_route_needs_the_token(api: Api):
    async with httpx.AsyncClient(base_url=str(api.client.base_url)) as anonymous:
        answer = await anonymous.post("/v1/suggest-bindings", json={"content": "x"})
    assert answer.status_code == 401


async def test_bind_auto_stores_the_binding_and_the_file_then_refutes_it(api: Api):
    """No binding written by hand: auto binds, and a change to the file refutes the fact."""
    block = await api.post(
        "/v1/blocks", {"content": "The API timeout is 30 s", "bind": "auto"}, status=201
    )
    assert block["bind"]["chosen"]["binding"]["key"] == "/http/timeout"
    assert block["bindings"][0]["key"] == "/http/timeout"
    assert block["bindings"][0]["equals"] == 30
    await eventually(lambda: _state(api, block["id"], "fresh"), timeout_s=10)
    (api.workspace / "config/app.yaml").write_text("http:\n  timeout: 60\n  port: 8080\n")
    await eventually(lambda: _state(api, block["id"], "refuted"), timeout_s=10)


async def test_bind_suggest_stores_unbound_and_answers_suggestions(api: Api):
    block = await api.post(
        "/v1/blocks", {"content": "web is at version 1.2.3", "bind": "suggest"}, status=201
    )
    assert block["bindings"] == []
    assert block["bind"]["chosen"] is None
    assert block["bind"]["suggestions"][0]["binding"]["key"] == "/version"


async def test_without_bind_the_answer_is_the_plain_block(api: Api):
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    assert "bind" not in block
    assert block["bindings"] == []


async def test_the_index_follows_the_files(api: Api):
    sensor = api.daemon.runners["fs"].sensor
    assert isinstance(sensor, FsSensor)
    (api.workspace / "config/new.toml").write_text("[cache]\nttl_s = 600\n")

    async def found() -> bool:
        answer = await api.post("/v1/suggest-bindings", {"content": "the cache ttl is 10 minutes"})
        return bool(answer["suggestions"])

    await eventually(found, timeout_s=10)


async def _state(api: Api, block_id: str, state: str) -> bool:
    answer = await api.client.get(f"/v1/blocks/{block_id}")
    block = answer.json()
    if state == "refuted":  # one refutation of a short-term fact is a soft one (stale)
        return block["state"] == "refuted" or "soft_refuted" in block["stale_reasons"]
    return block["state"] == state


async def test_the_cli_suggests_for_a_stored_block(api: Api):
    """`memwarden suggest ID` prints the confirmed binding and why."""
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    exe = Path(sys.executable).with_name("memwarden")
    env = {**os.environ, "MEMWARDEN_HOME": str(api.daemon.settings.home)}
    env.pop("MEMWARDEN_URL", None)
    env.pop("MEMWARDEN_TOKEN", None)
    proc = await asyncio.create_subprocess_exec(
        str(exe), "suggest", block["id"], "--json", env=env, stdout=PIPE, stderr=PIPE
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, stderr.decode()
    answer = json.loads(stdout)
    assert answer["suggestions"][0]["binding"]["key"] == "/http/timeout"
    proc = await asyncio.create_subprocess_exec(
        str(exe), "suggest", block["id"], env=env, stdout=PIPE, stderr=PIPE
    )
    stdout, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert '"key": "/http/timeout"' in stdout.decode()
    assert "the key /http/timeout matches timeout" in stdout.decode()


async def test_without_an_index_bind_auto_says_why_nothing_was_bound(tmp_path: Path):
    async with start_api(tmp_path, {"config/app.yaml": "http:\n  timeout: 30\n"}, index=False) as a:
        block = await a.post(
            "/v1/blocks", {"content": "The API timeout is 30 s", "bind": "auto"}, status=201
        )
    assert block["bindings"] == []
    assert "index = true" in block["bind"]["why"]
