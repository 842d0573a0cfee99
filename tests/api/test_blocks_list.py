"""GET /v1/blocks (filters, paging) and dedupe on add (opt-in)."""

from __future__ import annotations

import uuid

import httpx

from tests.api.conftest import REMOTE_SENSOR, LiveDaemon


def _post(live: LiveDaemon, body: dict, **params: str) -> httpx.Response:
    return httpx.post(
        f"{live.url}/v1/blocks", json=body, params=params, headers=live.auth, timeout=5
    )


def _list(live: LiveDaemon, **params: str | int) -> dict:
    r = httpx.get(f"{live.url}/v1/blocks", params=params, headers=live.auth, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def test_list_filters_by_tag_state_sensor_and_tier_and_pages(live_daemon):
    tag = f"t{uuid.uuid4().hex[:8]}"
    ids = [
        _post(live_daemon, {"content": f"listed {i}", "tags": [tag]}).json()["id"] for i in range(5)
    ]
    bound = _post(
        live_daemon,
        {
            "content": "listed, bound",
            "tags": [tag],
            "bindings": [{"sensor": REMOTE_SENSOR, "path": "a.txt"}],
        },
    ).json()["id"]
    page = _list(live_daemon, tag=tag, limit=2)
    assert [b["id"] for b in page["blocks"]] == ids[:2]
    assert all(b["short_id"] for b in page["blocks"])
    seen = [b["id"] for b in page["blocks"]]
    while page["next"]:
        page = _list(live_daemon, tag=tag, limit=2, after=page["next"])
        seen += [b["id"] for b in page["blocks"]]
    assert seen == [*ids, bound]
    assert [b["id"] for b in _list(live_daemon, tag=tag, sensor=REMOTE_SENSOR)["blocks"]] == [bound]
    assert len(_list(live_daemon, tag=tag, state="unverified", tier="short_term")["blocks"]) == 6
    assert _list(live_daemon, tag=tag, state="refuted")["blocks"] == []


def test_list_refuses_unknown_filter_values_naming_them(live_daemon):
    r = httpx.get(
        f"{live_daemon.url}/v1/blocks",
        params={"state": "bogus"},
        headers=live_daemon.auth,
        timeout=5,
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "state"]
    r = httpx.get(
        f"{live_daemon.url}/v1/blocks", params={"limit": 0}, headers=live_daemon.auth, timeout=5
    )
    assert r.status_code == 422


def test_dedupe_is_opt_in_and_answers_200_with_the_stored_block(live_daemon):
    text = f"The deploy window is 02:00 UTC ({uuid.uuid4().hex[:6]})"
    first = _post(live_daemon, {"content": text})
    assert first.status_code == 201
    assert first.json()["duplicate_of"] is None
    same = _post(
        live_daemon, {"content": "  " + text.upper().replace(" ", "\n ") + " "}, dedupe="true"
    )
    assert same.status_code == 200
    assert same.json()["id"] == first.json()["id"]
    assert same.json()["duplicate_of"] == first.json()["id"]
    plain = _post(live_daemon, {"content": text})  # without dedupe: stored again, as before
    assert plain.status_code == 201
    assert plain.json()["id"] != first.json()["id"]
    # An archived block is no longer live: an add with dedupe stores a new one.
    for block_id in (first.json()["id"], plain.json()["id"]):
        httpx.delete(f"{live_daemon.url}/v1/blocks/{block_id}", headers=live_daemon.auth, timeout=5)
    again = _post(live_daemon, {"content": text}, dedupe="true")
    assert again.status_code == 201
    assert again.json()["id"] not in (first.json()["id"], plain.json()["id"])
