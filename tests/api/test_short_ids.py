"""Short ids in the API: every block path takes them; errors say what is wrong once."""

from __future__ import annotations

import httpx

from tests.api.conftest import LiveDaemon


def _add(live: LiveDaemon, content: str) -> dict:
    r = httpx.post(f"{live.url}/v1/blocks", json={"content": content}, headers=live.auth, timeout=5)
    assert r.status_code == 201, r.text
    return r.json()


def test_every_block_path_takes_the_short_id(live_daemon):
    block = _add(live_daemon, "short ids work on every path")
    short = block["short_id"]
    assert len(short) >= 8
    assert block["id"].replace("-", "").endswith(short)
    base = f"{live_daemon.url}/v1/blocks/{short}"
    h = live_daemon.auth
    assert httpx.get(base, headers=h, timeout=5).json()["id"] == block["id"]
    assert httpx.get(f"{base}/events", headers=h, timeout=5).status_code == 200
    assert httpx.get(f"{base}/explain", headers=h, timeout=5).status_code == 200
    edited = httpx.patch(base, json={"importance": 0.9}, headers=h, timeout=5).json()
    assert edited["id"] == block["id"]
    assert edited["importance"] == 0.9
    archived = httpx.delete(base, headers=h, timeout=5).json()
    assert archived["state"] == "archived"


def test_unknown_short_and_malformed_ids(live_daemon):
    h = live_daemon.auth
    r = httpx.get(f"{live_daemon.url}/v1/blocks/deadbeefdeadbeef", headers=h, timeout=5)
    assert r.status_code == 404
    assert r.json() == {"detail": "no block with id 'deadbeefdeadbeef'"}
    r = httpx.get(f"{live_daemon.url}/v1/blocks/dead", headers=h, timeout=5)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["id"]
    assert "at least 8 hex digits" in r.json()["detail"][0]["msg"]


def test_without_the_token_an_id_is_neither_found_nor_missing(live_daemon):
    block = _add(live_daemon, "no token, no answer about ids")
    for ref in (block["short_id"], "deadbeefdeadbeef"):
        r = httpx.get(f"{live_daemon.url}/v1/blocks/{ref}", timeout=5)
        assert r.status_code == 401


def test_depends_on_takes_short_ids_and_names_a_bad_one(live_daemon):
    base = _add(live_daemon, "the base fact others rest on")
    url = f"{live_daemon.url}/v1/blocks"
    body = {"content": "rests on the base", "depends_on": [base["short_id"]]}
    r = httpx.post(url, json=body, headers=live_daemon.auth, timeout=5)
    assert r.status_code == 201, r.text
    assert r.json()["depends_on"] == [base["id"]]
    body = {"content": "rests on nothing", "depends_on": [base["short_id"], "deadbeefdeadbeef"]}
    r = httpx.post(url, json=body, headers=live_daemon.auth, timeout=5)
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {
            "loc": ["depends_on", "1"],
            "msg": "no block with id 'deadbeefdeadbeef'",
            "type": "value_error",
        }
    ]
