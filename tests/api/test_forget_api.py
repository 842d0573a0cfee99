"""Erasure over HTTP: ``DELETE /v1/blocks/{id}?erase=true``, ``POST /v1/forget`` and
``GET /v1/erasures``; the token as for every write; hostile input refused, nothing changed."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from memwarden.client import Client

if TYPE_CHECKING:
    from tests.api.conftest import LiveDaemon


def _api(live: LiveDaemon) -> httpx.Client:
    return httpx.Client(base_url=live.url, headers=live.auth, timeout=30)


def _add(api: httpx.Client, content: str, **extra: Any) -> str:
    answer = api.post("/v1/blocks", json={"content": content, **extra})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def test_delete_with_erase_removes_the_block_and_leaves_a_tombstone(live_daemon):
    """erase=true: the block is gone (404), its tombstone names it, reason kept; a plain
    DELETE still archives."""
    with _api(live_daemon) as api:
        gone = _add(api, "erase me over http")
        archived = _add(api, "archive me over http")
        answer = api.delete(f"/v1/blocks/{gone}", params={"erase": "true", "reason": "asked"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["erased"] == [gone]
        assert body["removed"]["blocks"] == 1
        assert body["wal_truncated"] is True
        assert api.get(f"/v1/blocks/{gone}").status_code == 404
        tombs = api.get("/v1/erasures", params={"block_id": gone}).json()
        assert [(t["block_id"], t["reason"], t["actor"]) for t in tombs] == [(gone, "asked", "api")]
        assert "content" not in tombs[0]
        assert api.delete(f"/v1/blocks/{archived}").json()["state"] == "archived"


def test_forget_by_tag_dry_run_then_for_real_with_the_client(live_daemon):
    """The Python client: a dry run lists and keeps; the erasure takes exactly those."""
    tag = f"f{uuid.uuid4().hex[:8]}"
    with _api(live_daemon) as api:
        ids = sorted(_add(api, f"tagged fact {i}", tags=[tag]) for i in range(2))
        keep = _add(api, "untagged fact stays")
    with Client(live_daemon.url, live_daemon.token) as client:
        listed = client.forget(tag=tag, dry_run=True)
        assert sorted(b["id"] for b in listed["blocks"]) == ids
        assert listed["erased"] == []
        assert client.get(ids[0]).id == ids[0]
        done = client.forget(tag=tag, reason="cleanup")
        assert sorted(done["erased"]) == ids
        assert {t["block_id"] for t in client.erasures(limit=1000)} >= set(ids)
        assert client.get(keep).content == "untagged fact stays"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "ids"),
        ({"tag": "a", "query": "b"}, "ids"),
        ({"query": '*()"'}, "query"),
        ({"ids": ["0190d2d8-0000-7000-8000-00000000beef"]}, None),
        ({"ids": ["../../etc/passwd"]}, None),
        ({"ids": [""]}, "ids"),
        ({"ids": "not-a-list"}, "ids"),
        ({"tag": "x", "extra": 1}, "extra"),
        ({"reason": "x" * 501, "tag": "x"}, "reason"),
    ],
)
def test_hostile_bodies_are_refused_and_change_nothing(live_daemon, body, field):
    """A bad body is a 4xx naming the field (unknown ids: 404 naming the id); no block
    goes and no tombstone is written."""
    with _api(live_daemon) as api:
        keep = _add(api, "bystander over http")
        before = len(api.get("/v1/erasures", params={"limit": 1000}).json())
        answer = api.post("/v1/forget", json=body)
        assert 400 <= answer.status_code < 500, answer.text
        if field is None:
            assert answer.status_code == 404
            assert "no block with id" in answer.text
        else:
            assert field in answer.text
        assert "Traceback" not in answer.text
        assert api.get(f"/v1/blocks/{keep}").status_code == 200
        assert len(api.get("/v1/erasures", params={"limit": 1000}).json()) == before


def test_erase_of_an_unknown_block_is_404(live_daemon):
    """DELETE ...?erase=true of an id that names nothing: 404, nothing written."""
    with _api(live_daemon) as api:
        answer = api.delete(
            "/v1/blocks/0190d2d8-0000-7000-8000-00000000f00d", params={"erase": "true"}
        )
        assert answer.status_code == 404
        assert "no block with id" in answer.text


def test_forget_needs_the_token(live_daemon):
    """Without the token: 401, and the block stays."""
    with _api(live_daemon) as api:
        keep = _add(api, "token guarded fact")
        answer = httpx.post(f"{live_daemon.url}/v1/forget", json={"ids": [keep]}, timeout=10)
        assert answer.status_code == 401
        refused = httpx.delete(
            f"{live_daemon.url}/v1/blocks/{keep}", params={"erase": "true"}, timeout=10
        )
        assert refused.status_code == 401
        assert api.get(f"/v1/blocks/{keep}").status_code == 200
