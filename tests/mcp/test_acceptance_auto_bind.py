"""Acceptance (issue "Binding suggestions"): an agent adds five plain-language facts with
bind=auto over MCP (the real SDK client) in the demo workspace; the world changes; each
fact is refuted by its sensor — and no binding was ever written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from memwarden.demo import SETTINGS
from memwarden.sensors import FsSensor
from tests.mcp.test_mcp import call, mcp_session
from tests.support import eventually

if TYPE_CHECKING:
    from memwarden.daemon import Daemon

# What an agent says, and where the workspace has it written (file, key).
FACTS = {
    "The API timeout is 30 s": ("config/app.yaml", "/http/timeout"),
    "The web app is at version 2.4.1": ("package.json", "/version"),
    "The database host is db.internal": ("config/db.toml", "/database/host"),
    "The cache TTL is 10 minutes": ("config/cache.yaml", "/cache/ttl_s"),
    "The worker memory limit is 512Mi": ("config/worker.json", "/worker/memory_limit"),
}

# The world changes: someone edits each of those files.
CHANGED = {
    "config/app.yaml": "http:\n  timeout: 45\n",
    "package.json": json.dumps({"name": "shop-web", "version": "2.5.0", "private": True}),
    "config/db.toml": '[database]\nhost = "db2.internal"\npool_size = 10\n',
    "config/cache.yaml": "cache:\n  ttl_s: 300\n  backend: redis\n",
    "config/worker.json": json.dumps({"worker": {"memory_limit": "1Gi", "concurrency": 4}}),
}


async def _refuted_by_fs(daemon: Daemon, block_id: str) -> bool:
    """Refuted, or stale from a soft refutation (one refutation of a short-term fact), by
    an fs event that says so."""
    block = await daemon.store.get(block_id)
    fallen = block.state.value == "refuted" or "soft_refuted" in block.stale_reasons
    if not fallen:
        return False
    [last] = await daemon.store.events_for(block_id, limit=1)
    return last.sensor == "fs" and last.outcome == "refuted"


async def test_five_auto_bound_facts_are_refuted_when_the_world_changes(demo_daemon: Daemon):
    assert set(CHANGED) <= {"config/app.yaml", *SETTINGS}  # the demo's own files
    sensor = demo_daemon.runners["fs"].sensor
    assert isinstance(sensor, FsSensor)
    root = Path(sensor.roots[0])
    added: dict[str, str] = {}
    async with mcp_session(demo_daemon) as session:
        before = (await call(session, "memory_health", {}))["coverage"]
        assert (before["live"], before["share"]) == (0, None)
        for text, (path, key) in FACTS.items():
            answer = await call(session, "memory_add", {"content": text, "bind": "auto"})
            chosen = answer["bind"]["chosen"]
            assert chosen is not None, (text, answer["bind"]["why"])
            assert (chosen["path"], chosen["key"]) == (path, key), text
            assert answer["bind"]["why"].startswith("bound: ")
            assert [(b["path"], b["key"]) for b in answer["bindings"]] == [(path, key)]
            added[text] = answer["id"]
        # Every fact is confirmed by its sensor, and all of memory is now checkable.
        for block_id in added.values():
            await eventually(
                lambda b=block_id: _state(demo_daemon, b, "fresh"),
                timeout_s=20,
                what=f"{block_id} confirmed by fs",
            )
        after = (await call(session, "memory_health", {}))["coverage"]
        assert (after["live"], after["checkable"], after["share"]) == (5, 5, 1.0)

        for rel, text in CHANGED.items():
            (root / rel).write_text(text)
        for text, block_id in added.items():
            await eventually(
                lambda b=block_id: _refuted_by_fs(demo_daemon, b),
                timeout_s=20,
                what=f"{text!r} refuted by fs after its file changed",
            )
        for block_id in added.values():
            seen = await call(session, "memory_get", {"id": block_id})
            assert seen["state"] in ("refuted", "stale"), seen
            assert seen["validation"]["validated_by"] == "fs"
    # No binding was written by hand: no call named one, and each block still holds
    # exactly the binding bind=auto chose.
    for text, block_id in added.items():
        stored = (await demo_daemon.store.get(block_id)).bindings
        assert [(b.sensor, b.selector["path"], b.selector["key"]) for b in stored] == [
            ("fs", *FACTS[text])
        ]


async def _state(daemon: Daemon, block_id: str, state: str) -> bool:
    return (await daemon.store.get(block_id)).state.value == state
