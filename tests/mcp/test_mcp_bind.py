"""memory_add with bind and memory_suggest_bindings, through a real MCP SDK client against a
daemon whose fs sensor indexes the demo workspace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.mcp.conftest import start_demo_daemon
from tests.mcp.test_mcp import call, mcp_session

if TYPE_CHECKING:
    from pathlib import Path

    from mcp.client.session import ClientSession

    from memwarden.daemon import Daemon

TIMEOUT = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}


async def _error(session: ClientSession, tool: str, args: dict[str, Any]) -> str:
    result = await session.call_tool(tool, args)
    assert result.is_error, result.content
    return " ".join(str(getattr(c, "text", "")) for c in result.content)


async def _count(daemon: Daemon) -> int:
    return int((await daemon.store.counts())["blocks"])


async def test_memory_add_bind_auto_binds_and_says_why(demo_daemon: Daemon):
    """bind=auto stores the binding whose dry run confirmed, and the answer says why."""
    async with mcp_session(demo_daemon) as session:
        added = await call(
            session, "memory_add", {"content": "The API timeout is 30 s", "bind": "auto"}
        )
    [stored_binding] = added["bindings"]
    assert TIMEOUT.items() <= stored_binding.items()
    assert added["bind"]["mode"] == "auto"
    assert added["bind"]["chosen"] == TIMEOUT
    assert added["bind"]["confidence"] >= 0.85
    assert added["bind"]["why"].startswith("bound: ")
    assert "timeout" in added["bind"]["why"]
    assert added["bind"]["suggestions"][0]["check"] == "confirmed"
    stored = await demo_daemon.store.get(added["id"])
    assert [b.selector["key"] for b in stored.bindings] == ["/http/timeout"]


async def test_memory_add_bind_suggest_stores_unbound_with_the_candidates(demo_daemon: Daemon):
    async with mcp_session(demo_daemon) as session:
        added = await call(
            session,
            "memory_add",
            {"content": "The web app is at version 2.4.1", "bind": "suggest"},
        )
    assert added["bindings"] == []
    assert added["bind"]["chosen"] is None
    assert "stored unbound" in added["bind"]["why"]
    best = added["bind"]["suggestions"][0]
    assert best["binding"] == {
        "sensor": "fs",
        "path": "package.json",
        "key": "/version",
        "equals": "2.4.1",
    }
    assert best["observed"] == "2.4.1"
    assert (await demo_daemon.store.get(added["id"])).bindings == []


async def test_memory_add_without_bind_follows_the_config(tmp_path: Path):
    """No bind: [suggest] bind decides — none (the default) adds no bind answer; auto binds."""
    async with start_demo_daemon(tmp_path / "a") as d, mcp_session(d) as session:
        added = await call(session, "memory_add", {"content": "The API timeout is 30 s"})
        assert "bind" not in added
        assert added["bindings"] == []
    async with (
        start_demo_daemon(tmp_path / "b", suggest={"bind": "auto"}) as d,
        mcp_session(d) as session,
    ):
        added = await call(session, "memory_add", {"content": "The API timeout is 30 s"})
        assert TIMEOUT.items() <= added["bindings"][0].items()
        assert added["bind"]["mode"] == "auto"
        kept = await call(
            session, "memory_add", {"content": "The API timeout is 30 s", "bind": "none"}
        )
        assert "bind" not in kept


async def test_memory_add_with_bindings_looks_for_none(demo_daemon: Daemon):
    """A fact that names its own binding keeps it; bind=auto says it looked for nothing."""
    own = {"sensor": "fs", "path": "config/app.yaml", "exists": True}
    async with mcp_session(demo_daemon) as session:
        added = await call(
            session,
            "memory_add",
            {"content": "The API timeout is 30 s", "bind": "auto", "bindings": [own]},
        )
    assert [{k: b[k] for k in own} for b in added["bindings"]] == [own]
    assert added["bind"]["chosen"] is None
    assert "names its own bindings" in added["bind"]["why"]


async def test_memory_suggest_bindings_offers_and_contradicts(demo_daemon: Daemon):
    """Suggestions confirm now; a fact the file refutes comes back as a contradiction with
    what the file says; nothing is stored."""
    before = await _count(demo_daemon)
    async with mcp_session(demo_daemon) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        found = await call(
            session, "memory_suggest_bindings", {"content": "The database host is db.internal"}
        )
        wrong = await call(
            session, "memory_suggest_bindings", {"content": "The API timeout is 45 s"}
        )
    schema = tools["memory_suggest_bindings"].input_schema
    assert schema["required"] == ["content"]
    assert schema["properties"]["limit"]["maximum"] == 50
    best = found["suggestions"][0]
    assert best["binding"]["path"] == "config/db.toml"
    assert best["binding"]["key"] == "/database/host"
    assert best["check"] == "confirmed"
    assert 0 < best["confidence"] <= 1
    assert found["contradicts"] == []
    assert wrong["suggestions"] == []
    [contra] = wrong["contradicts"]
    assert contra["binding"] == {**TIMEOUT, "equals": 45}
    assert contra["check"] == "refuted"
    assert contra["observed"] == 30
    assert "the file says 30" in contra["why"]
    assert await _count(demo_daemon) == before


async def test_hostile_bind_and_suggest_inputs_are_refused_naming_the_field(
    demo_daemon: Daemon,
):
    """A bad bind, limit or an oversized text: an error naming the field; nothing stored."""
    before = await _count(demo_daemon)
    async with mcp_session(demo_daemon) as session:
        text = await _error(
            session, "memory_add", {"content": "The API timeout is 30 s", "bind": "always"}
        )
        assert "bind" in text
        text = await _error(session, "memory_suggest_bindings", {"content": "x", "limit": 0})
        assert "limit" in text
        text = await _error(session, "memory_suggest_bindings", {"content": "x" * 20_001})
        assert "content" in text
        text = await _error(session, "memory_suggest_bindings", {"content": ""})
        assert "content" in text
    assert await _count(demo_daemon) == before


async def test_memory_bind_auto_binds_a_stored_fact(demo_daemon: Daemon):
    """A fact stored unbound is bound later by memory_bind auto; the answer says why."""
    async with mcp_session(demo_daemon) as session:
        added = await call(session, "memory_add", {"content": "The API timeout is 30 s"})
        assert added["bindings"] == []
        bound = await call(session, "memory_bind", {"id": added["short_id"], "auto": True})
    assert bound["id"] == added["id"]
    assert bound["bind"]["chosen"] == TIMEOUT
    assert bound["bind"]["why"].startswith("bound: ")
    assert TIMEOUT.items() <= bound["bindings"][0].items()
    stored = await demo_daemon.store.get(added["id"])
    assert [b.selector["key"] for b in stored.bindings] == ["/http/timeout"]


async def test_memory_bind_with_bindings_replaces_and_unbinds(demo_daemon: Daemon):
    async with mcp_session(demo_daemon) as session:
        added = await call(session, "memory_add", {"content": "The API timeout is 30 s"})
        bound = await call(session, "memory_bind", {"id": added["id"], "bindings": [TIMEOUT]})
        assert TIMEOUT.items() <= bound["bindings"][0].items()
        assert "bind" not in bound
        cleared = await call(session, "memory_bind", {"id": added["id"], "bindings": []})
        assert cleared["bindings"] == []
    assert (await demo_daemon.store.get(added["id"])).bindings == []


async def test_hostile_memory_bind_is_refused_and_changes_nothing(demo_daemon: Daemon):
    """An unknown sensor names bindings.0.sensor and points at memory_sensors; neither or
    both of auto and bindings is refused; an unknown id is not found; nothing changed."""
    async with mcp_session(demo_daemon) as session:
        added = await call(session, "memory_add", {"content": "The API timeout is 30 s"})
        fid = added["id"]
        text = await _error(
            session, "memory_bind", {"id": fid, "bindings": [{**TIMEOUT, "sensor": "nope"}]}
        )
        assert "bindings.0.sensor" in text
        assert "memory_sensors" in text
        text = await _error(session, "memory_bind", {"id": fid})
        assert "auto=true or bindings" in text
        text = await _error(session, "memory_bind", {"id": fid, "auto": True, "bindings": []})
        assert "auto=true or bindings" in text
        text = await _error(session, "memory_bind", {"id": "zzzzzzzz", "auto": True})
        assert "memory_search" in text
    stored = await demo_daemon.store.get(fid)
    assert stored.bindings == []
    assert stored.version == 1
