"""The MCP server over stdio (a real client from the mcp SDK) against a running daemon."""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memwarden.mcp import context_line
from tests.support import WorldSensor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from memwarden.daemon import Daemon

TOOLS = {
    "memory_search",
    "memory_add",
    "memory_get",
    "memory_explain",
    "memory_revalidate",
    "memory_review",
    "memory_health",
    "memory_sensors",
    "memory_suggest_bindings",
    "memory_bind",
    "memory_forget",
}


@asynccontextmanager
async def mcp_session(daemon: Daemon) -> AsyncIterator[ClientSession]:
    exe = Path(sys.executable).with_name("memwarden")
    params = StdioServerParameters(
        command=str(exe),
        args=["mcp"],
        # The whole environment (coverage measures the server process through it).
        env={**os.environ, "MEMWARDEN_HOME": str(daemon.settings.home)},
    )
    with Path(os.devnull).open("w") as devnull:  # noqa: ASYNC230 - opening /dev/null never blocks
        async with (
            stdio_client(params, errlog=devnull) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> Any:
    result = await session.call_tool(tool, args)
    assert not result.is_error, result.content
    return result.structured_content


async def test_lists_every_tool_with_a_described_schema(daemon):
    """An agent sees all nine tools, each with a description and typed, described inputs."""
    async with mcp_session(daemon) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description
        assert len(tool.description) > 30
        assert tool.input_schema["type"] == "object"
    search = tools["memory_search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["limit"]["maximum"] == 50
    add = tools["memory_add"].input_schema["properties"]
    assert add["info_type"]["enum"] == ["static", "semi_static", "dynamic", "ephemeral"]


async def test_every_tool_answers(daemon):
    """add, get, search, explain, revalidate, review and health each work end to end."""
    WorldSensor.world["config/app.yaml#timeout"] = 30
    async with mcp_session(daemon) as session:
        added = await call(
            session,
            "memory_add",
            {
                "content": "The API timeout is 30 s",
                "title": "API timeout",
                "info_type": "semi_static",
                "bindings": [{"sensor": "world", "path": "config/app.yaml#timeout", "equals": 30}],
            },
        )
        block_id = added["id"]
        assert added["state"] == "unverified"
        got = await call(session, "memory_get", {"id": block_id})
        assert got["content"] == "The API timeout is 30 s"
        found = await call(session, "memory_search", {"query": "api timeout"})
        assert [r["id"] for r in found["results"]] == [block_id]
        checked = await call(session, "memory_revalidate", {"id": block_id, "wait_seconds": 10})
        assert checked["answered"] is True
        assert "r=0.90" in checked["fact"]
        explained = await call(session, "memory_explain", {"id": block_id})
        assert explained
        assert "error" not in explained
        review = await call(
            session, "memory_review", {"id": block_id, "reason": "confirm with ops"}
        )
        assert review["status"] == "pending"
        health = await call(session, "memory_health", {})
        assert 0 <= health["score"] <= 100
    assert (await daemon.store.get(block_id)).state == "fresh"


async def test_a_stale_fact_comes_back_with_its_warning(daemon):
    """A fact whose source changed is returned marked stale, with a warning saying why."""
    block = await daemon.add_block({"content": "The cache holds 512 entries", "title": "cache"})
    await daemon.bus.submit(
        "remote:http",
        [
            {
                "sensor": "world",
                "block_id": block.id,
                "outcome": "changed",
                "observed_at": "2026-01-01T00:00:00Z",
            }
        ],
    )
    async with mcp_session(daemon) as session:
        found = await call(session, "memory_search", {"query": "cache entries"})
        resource = await session.read_resource("memwarden://context/cache entries")
    [hit] = found["results"]
    assert hit["stale"] is True
    assert any("source_changed" in w for w in hit["warnings"])
    assert hit["line"].startswith("[STALE (source_changed)")
    assert "STALE" in resource.contents[0].text


async def test_read_through_returns_the_new_truth(daemon):
    """fresh=true re-checks a stale fact first: the answer reflects the world as it is now."""
    WorldSensor.world["svc/version"] = "1.2"
    block = await daemon.add_block(
        {
            "content": "The service version is 1.2",
            "title": "service version",
            "bindings": [{"sensor": "world", "path": "svc/version", "equals": "1.2"}],
        }
    )
    await daemon.bus.submit(
        "remote:http",
        [
            {
                "sensor": "world",
                "subject": "svc/version",
                "outcome": "changed",
                "observed_at": "2026-01-01T00:00:00Z",
            }
        ],
    )
    WorldSensor.world["svc/version"] = "1.3"  # the world moved on
    async with mcp_session(daemon) as session:
        found = await call(session, "memory_search", {"query": "service version", "fresh": True})
    # Checked for this read, or by the dispatch loop just before it: either way the
    # answer reflects the world now, and its re-check (a retry) is pending.
    [last] = await daemon.store.events_for(block.id, limit=1)
    assert (last.outcome, last.observed) == ("refuted", "1.3")
    if found["checked"]:
        assert found["observations"][block.id]["observed"] == "1.3"
    [hit] = found["results"]  # one refutation is soft: still listed, marked stale
    assert hit["stale"] is True
    assert any("soft_refuted" in w for w in hit["warnings"])
    assert hit["receipt"]["verdict"] == "checking"
    assert hit["line"].startswith("[CHECKING (re-check pending)")


def test_context_line_marks_low_reliability_and_state():
    """The compact context line carries category, sensor, age, reliability and markers."""
    block = {
        "title": "",
        "content": "Deploys run at 02:00",
        "category": "procedural",
        "state": "unverified",
        "stale_reasons": [],
        "bindings": [],
        "validation": {"validated_by": None, "validated_at": None, "reliability": 0.5},
    }
    line = context_line({"block": block})
    assert line == (
        "[UNVERIFIED · procedural · unbound · never validated · r=0.50 · LOW RELIABILITY] "
        "Deploys run at 02:00"
    )


async def test_forget_lists_on_a_dry_run_then_erases(daemon):
    """memory_forget with dry_run lists and keeps; without it the fact is gone, a tombstone
    stays, the other fact stays, and the answer names what memory cannot reach."""
    gone = await daemon.add_block({"content": "The customer is Ann Example", "tags": ["pii"]})
    kept = await daemon.add_block({"content": "The build uses make"})
    async with mcp_session(daemon) as session:
        listed = await call(session, "memory_forget", {"tag": "pii", "dry_run": True})
        assert [b["id"] for b in listed["blocks"]] == [gone.id]
        assert listed["erased"] == []
        assert (await daemon.store.get(gone.id)).content
        erased = await call(session, "memory_forget", {"ids": [gone.id], "reason": "asked"})
        unknown = await session.call_tool("memory_forget", {"ids": [gone.id]})
    assert erased["erased"] == [gone.id]
    assert any("backups" in place for place in erased["unreachable"])
    assert unknown.is_error
    assert "no block" in str(unknown.content)
    assert [t["block_id"] for t in await daemon.store.erasures()] == [gone.id]
    assert (await daemon.store.get(kept.id)).content == "The build uses make"


async def test_results_carry_the_console_url_of_their_block(daemon):
    """memory_get and each memory_search result give the block's console page: just the
    address (a browser there still has to sign in)."""
    block = await daemon.add_block({"title": "cache ttl", "content": "The cache TTL is 300 s"})
    async with mcp_session(daemon) as session:
        got = await call(session, "memory_get", {"id": block.id})
        found = await call(session, "memory_search", {"query": "cache TTL"})
        now = datetime.now(UTC).isoformat()  # after it was added (created_at is rounded)
        then = await call(session, "memory_get", {"id": block.short_id, "as_of": now})
    page = f"/review/blocks/{block.id}"
    assert got["console_url"].startswith("http://127.0.0.1:")
    assert got["console_url"].endswith(page)
    assert [r["console_url"] for r in found["results"]] == [got["console_url"]]
    assert then["content"] == "The cache TTL is 300 s"
    assert then["console_url"] == got["console_url"]  # as_of too (the full id's page)
    async with httpx.AsyncClient() as web:
        assert (await web.get(got["console_url"])).status_code == 401  # sign-in needed
