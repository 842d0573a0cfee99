"""Issue 19's acceptance test for erasure, at the byte level, through a real daemon.

A block carrying a unique marker is bound to a file by an fs regex whose observation is
the matched text (so the event log holds the marker too); it is searched (the FTS index
and the score log know it), edited (its history holds the old text) and reviewed (the
comment holds it); then ``DELETE /v1/blocks/{id}?erase=true``. Every byte of every file in
the state dir (the database, its WAL and SHM, the score log, the sensors' state) is then
scanned for the marker as written and lowercased, and an ``fts5vocab`` table over every
FTS index is asked for any term containing it: none anywhere. An unrelated block, bound
to the same file, survives intact. Redaction is off here (``[privacy] enabled = false``):
erasure is for what a policy let in.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import httpx
from tests.support import api_url, eventually, fts_terms_with, occurrences, start_in_loop

from memwarden.daemon import Daemon, load_settings
from memwarden.memory._scorelog import read as read_score_log
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor

if TYPE_CHECKING:
    from pathlib import Path

MARKER = "QmUx83ErasureMarker"


async def test_forget_leaves_the_marker_nowhere(tmp_path):
    """After the erasure the marker is in no byte of the state dir and no FTS term; the
    tombstone has no content; the unrelated block, its binding and events are intact; and
    a later change to the file brings nothing back (the sensor dropped the binding)."""
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(f"contact: {MARKER}@example.com\ntool: ruff\n")
    home = tmp_path / "home"
    settings = load_settings(
        None,
        env={},
        home=home,
        api={"port": 0},
        sensors={"fs": {"roots": [str(work)], "debounce_ms": 10}},
        # Redaction off: it would keep the marker (an e-mail) out of the store from the
        # start; this test is of erasure, for data a policy allowed in.
        privacy={"enabled": False},
    )
    daemon = Daemon(settings, registry=Registry.from_classes({"fs": FsSensor}))
    task = await start_in_loop(daemon)
    try:
        url = api_url(home)
        token = (home / "token").read_text().strip()
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as api:
            block_id, other_id, other_before = await _fill(daemon, api, notes)
            assert occurrences(home, MARKER)  # the test can fail: it was everywhere

            answer = await api.delete(
                f"/v1/blocks/{block_id}", params={"erase": "true", "reason": "user request"}
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["erased"] == [block_id]
            assert body["wal_truncated"] is True
            assert any("backups" in u for u in body["unreachable"])

            assert occurrences(home, MARKER) == {}
            assert fts_terms_with(home / "memwarden.db", MARKER) == []
            lines = read_score_log(home / "scores.jsonl")
            assert lines  # the other block's lines stay
            assert all(line.get("block_id") != block_id for line in lines)
            assert (await api.get(f"/v1/blocks/{block_id}")).status_code == 404
            tombs = (await api.get("/v1/erasures")).json()
            assert [(t["block_id"], t["actor"], t["reason"]) for t in tombs] == [
                (block_id, "api", "user request")
            ]

            # The unrelated block, bound to the same file, is as it was.
            other = await daemon.store.get(other_id)
            assert (other.content, other.bindings) == (other_before[0], other_before[1])
            assert len(await daemon.store.events_for(other_id)) == other_before[2]

            # The sensor forgot the binding: a change to the file reaches the other
            # block only, and the marker stays out of the database.
            notes.write_text(f"contact: {MARKER}@example.org\ntool: black\n")
            await eventually(
                lambda: _events_after(daemon, other_id, other_before[2]),
                what="the other block's next event",
            )
            assert occurrences(home, MARKER) == {}
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, timeout=20)
    assert occurrences(home, MARKER) == {}
    assert fts_terms_with(home / "memwarden.db", MARKER) == []


async def _fill(daemon: Daemon, api: httpx.AsyncClient, notes: Path) -> tuple[str, str, Any]:
    added = await api.post(
        "/v1/blocks",
        json={
            "title": f"Contact {MARKER}",
            "content": f"The customer's address is {MARKER}@example.com",
            "tags": ["customer"],
            "bindings": [{"sensor": "fs", "path": notes.name, "regex": MARKER + r"@\S+"}],
        },
    )
    assert added.status_code == 201, added.text
    block_id = added.json()["id"]
    other = await api.post(
        "/v1/blocks",
        json={
            "content": "The linter is ruff",
            "bindings": [{"sensor": "fs", "path": notes.name, "regex": "ruff"}],
        },
    )
    other_id = other.json()["id"]

    async def observed() -> bool:
        events = await daemon.store.events_for(block_id)
        return any(MARKER in json.dumps(e.as_dict()) for e in events)

    await eventually(observed, what="the fs observation holding the marker")
    await eventually(lambda: _fresh(daemon, other_id), what="the other block confirmed")
    found = await api.get("/v1/search", params={"q": MARKER, "session": "s1"})
    assert [r["block"]["id"] for r in found.json()["results"]] == [block_id]
    await api.get("/v1/search", params={"q": "ruff", "session": "s1"})
    # Scoring lines as the consolidation pass writes them (these blocks are too young
    # for it to score them on its own).
    score_log = daemon.store.score_log
    assert score_log is not None
    for bid in (block_id, other_id):
        score_log.write({"event": "score", "block_id": bid, "scorer": "consolidation"})
    edited = await api.patch(
        f"/v1/blocks/{block_id}", json={"content": f"Write to {MARKER} only on weekdays"}
    )
    assert edited.status_code == 200, edited.text
    review = await api.post(f"/v1/blocks/{block_id}/review", json={"reason": f"is {MARKER} ok?"})
    decided = await api.post(
        f"/v1/reviews/{review.json()['review_id']}/decision",
        json={"decision": "confirm", "decided_by": "ann", "comment": f"{MARKER} confirmed"},
    )
    assert decided.status_code == 200, decided.text
    o = await daemon.store.get(other_id)
    return block_id, other_id, (o.content, o.bindings, len(await daemon.store.events_for(o.id)))


async def _fresh(daemon: Daemon, block_id: str) -> bool:
    return (await daemon.store.get(block_id)).state == "fresh"


async def _events_after(daemon: Daemon, block_id: str, seen: int) -> bool:
    return len(await daemon.store.events_for(block_id)) > seen
