"""PATCH with If-Match: two agents editing one block never lose an edit silently."""

from __future__ import annotations

import httpx
import pytest

from memwarden.client import Client
from memwarden.errors import VersionConflictError


def test_the_second_edit_based_on_an_old_version_gets_412_and_changes_nothing(live_daemon):
    h = live_daemon.auth
    url = f"{live_daemon.url}/v1/blocks"
    block = httpx.post(
        url, json={"content": "The queue holds 100 jobs"}, headers=h, timeout=5
    ).json()
    read = httpx.get(f"{url}/{block['short_id']}", headers=h, timeout=5)
    etag = read.headers["ETag"]
    assert etag == f'"{block["version"]}"'
    # Agent A and agent B both read version 1; B edits first.
    b_edit = httpx.patch(
        f"{url}/{block['id']}",
        json={"content": "The queue holds 200 jobs"},
        headers={**h, "If-Match": etag},
        timeout=5,
    )
    assert b_edit.status_code == 200
    assert b_edit.headers["ETag"] == f'"{block["version"] + 1}"'
    a_edit = httpx.patch(
        f"{url}/{block['id']}",
        json={"content": "The queue holds 150 jobs"},
        headers={**h, "If-Match": etag},
        timeout=5,
    )
    assert a_edit.status_code == 412
    assert a_edit.json()["version"] == block["version"] + 1
    assert "edited meanwhile" in a_edit.json()["detail"]
    assert a_edit.headers["ETag"] == b_edit.headers["ETag"]
    now = httpx.get(f"{url}/{block['id']}", headers=h, timeout=5).json()
    assert now["content"] == "The queue holds 200 jobs"
    # With the new version A's edit goes through; without If-Match an edit always applies.
    retry = httpx.patch(
        f"{url}/{block['id']}",
        json={"content": "The queue holds 150 jobs"},
        headers={**h, "If-Match": a_edit.headers["ETag"]},
        timeout=5,
    )
    assert retry.status_code == 200
    # Only a new text is a new version: other fields are last-writer-wins.
    same = httpx.patch(f"{url}/{block['id']}", json={"importance": 0.8}, headers=h, timeout=5)
    assert same.json()["version"] == block["version"] + 2


def test_a_malformed_if_match_is_a_422_naming_the_header(live_daemon):
    h = live_daemon.auth
    url = f"{live_daemon.url}/v1/blocks"
    block = httpx.post(
        url, json={"content": "If-Match must be a version"}, headers=h, timeout=5
    ).json()
    r = httpx.patch(
        f"{url}/{block['id']}",
        json={"importance": 0.1},
        headers={**h, "If-Match": "abc"},
        timeout=5,
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["header", "If-Match"]
    assert httpx.get(f"{url}/{block['id']}", headers=h, timeout=5).json()["importance"] != 0.1


def test_the_client_raises_a_version_conflict(live_daemon):
    with Client(live_daemon.url, live_daemon.token) as mw:
        block = mw.add({"content": "client edits with a version"})
        mw.update(block.id, {"content": "client edits, first"}, if_version=block.version)
        with pytest.raises(VersionConflictError, match="edited meanwhile"):
            mw.update(block.id, {"content": "client edits, second"}, if_version=block.version)
        assert mw.get(block.id).content == "client edits, first"
