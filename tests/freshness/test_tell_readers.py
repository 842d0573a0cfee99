"""A session that read a fact is told when it is refuted: HTTP long-poll and MCP."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memwarden.daemon._api import ensure_token
from tests.support import WorldSensor, daemon, eventually

__all__ = ["daemon"]


async def _fact(d, subject: str) -> str:
    WorldSensor.world[subject] = "on"
    block = await d.add_block(
        {
            "content": f"the {subject} switch is on",
            "bindings": [{"sensor": "world", "path": subject, "equals": "on"}],
        }
    )
    await d.revalidate(block.id, wait_s=5)
    return block.id


async def _refute(d, subject: str) -> float:
    """A failing check of full reliability (hard at once); returns when it is committed."""
    await d.bus.submit(
        "remote:http",
        [
            {
                "sensor": "world",
                "subject": subject,
                "outcome": "refuted",
                "reliability": 1.0,
                "observed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1)),
            }
        ],
    )
    return time.monotonic()


async def test_http_long_poll_is_told_of_a_refutation_within_a_second(daemon):
    d = daemon
    block = await _fact(d, "cache")
    other = await _fact(d, "queue")
    await d.search("cache switch", session="agent-1")
    await d.read_block(other, session="agent-2")  # agent-2 never read the cache fact
    headers = {"Authorization": f"Bearer {ensure_token(d.settings.home)}"}
    async with httpx.AsyncClient(base_url=d.api.bound_url(), headers=headers) as http:
        poll = asyncio.create_task(
            http.get("/v1/events", params={"session": "agent-1", "wait": "10s"}, timeout=15)
        )
        quiet = asyncio.create_task(
            http.get("/v1/events", params={"session": "agent-2", "wait": "2s"}, timeout=15)
        )
        await eventually(lambda: d.sessions.waiting("agent-1") and d.sessions.waiting("agent-2"))
        committed = await _refute(d, "cache")
        answer = await poll
        told_after = time.monotonic() - committed
        assert answer.status_code == 200
        [notice] = answer.json()
        assert told_after < 1.0
        assert (notice["block_id"], notice["state"], notice["seq"]) == (
            block,
            ["fresh", "refuted"],
            1,
        )
        assert (await quiet).json() == []  # only the sessions that read it are told
        again = await http.get("/v1/events", params={"session": "agent-1", "after": 1})
        assert again.json() == []


async def test_an_mcp_subscriber_is_told_of_a_refutation_within_a_second(daemon):
    d = daemon
    block = await _fact(d, "router")
    uri = "memwarden://session/agent-9/context"
    updates: asyncio.Queue[tuple[str, float]] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.put_nowait((str(message.params.uri), time.monotonic()))

    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("memwarden")),
        args=["mcp"],
        env={**os.environ, "MEMWARDEN_HOME": str(d.settings.home)},
    )
    with Path(os.devnull).open("w") as devnull:  # noqa: ASYNC230 - opening /dev/null never blocks
        async with (
            stdio_client(params, errlog=devnull) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            init = await session.initialize()
            assert init.capabilities.resources is not None
            assert init.capabilities.resources.subscribe
            found = await session.call_tool(
                "memory_search", {"query": "router switch", "session": "agent-9"}
            )
            assert not found.is_error
            await session.send_request(
                types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)),
                types.EmptyResult,
            )
            # The MCP server follows the session: its long-poll is held by the daemon.
            await eventually(lambda: d.sessions.waiting("agent-9"))
            committed = await _refute(d, "router")
            got_uri, at = await asyncio.wait_for(updates.get(), timeout=10)
            assert got_uri == uri
            assert at - committed < 1.0
            text = await session.read_resource(uri)
            [content] = text.contents
            assert content.text.startswith("[REFUTED")
            assert "router" in content.text
    assert (await d.store.get(block)).state == "refuted"


async def test_a_stop_answers_a_held_long_poll_at_once(daemon):
    """Stopping the daemon answers a reader's held long-poll (200, no notices) instead of
    holding the shutdown until the server's grace period cancels it mid-request."""
    d = daemon
    headers = {"Authorization": f"Bearer {ensure_token(d.settings.home)}"}
    async with httpx.AsyncClient(base_url=d.api.bound_url(), headers=headers) as http:
        poll = asyncio.create_task(
            http.get("/v1/events", params={"session": "agent-3", "wait": "60s"}, timeout=90)
        )
        await eventually(lambda: d.sessions.waiting("agent-3"))
        d.request_stop()
        answer = await poll  # a 60 s wait: answered now only because the daemon stops
    assert answer.status_code == 200
    assert answer.json() == []


async def test_a_dependents_falls_are_told_each_time_with_their_reason(daemon):
    """A block pulled stale by a dependency is told as ``dependency`` (no event of its
    own), and again when it falls by dependency a second time after being checked."""
    d = daemon
    first, second = await _fact(d, "root-1"), await _fact(d, "root-2")
    WorldSensor.world["dep"] = "on"
    dependent = await d.add_block(
        {
            "content": "the dependent switch follows both roots",
            "bindings": [{"sensor": "world", "path": "dep", "equals": "on"}],
            "depends_on": [first, second],
        }
    )
    await d.revalidate(dependent.id, wait_s=5)
    await d.read_block(dependent.id, session="agent-3")
    await d.read_block(first, session="agent-4")
    await _refute(d, "root-1")
    [told] = await eventually(lambda: d.sessions.after("agent-3", 0), what="the first fall")
    assert (told["block_id"], told["state"], told["reason"]) == (
        dependent.id,
        ["fresh", "stale"],
        "dependency",
    )
    assert "event_id" not in told
    await d.revalidate(dependent.id, wait_s=5)  # checked again: fresh
    assert (await d.read_block(dependent.id))["state"] == "fresh"
    await _refute(d, "root-2")
    [again] = await eventually(lambda: d.sessions.after("agent-3", 1), what="the second fall")
    assert (again["block_id"], again["reason"], again["seq"]) == (dependent.id, "dependency", 2)
    assert [n["block_id"] for n in d.sessions.after("agent-4", 0)] == [first]
