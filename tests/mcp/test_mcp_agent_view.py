"""What an agent sees over MCP (a real SDK client): the sensors it can bind to, and
domain errors flagged isError=true with a message it can act on."""

from __future__ import annotations

import asyncio
import json
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.daemon import Daemon, load_settings
from tests.mcp.test_mcp import call, mcp_session

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


@pytest.fixture
async def five(tmp_path: Path) -> AsyncIterator[Daemon]:
    """A daemon running the five built-in sensors on a tiny project."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "README.md").write_text("# demo\n")
    (project / "tests" / "test_api.py").write_text("def test_timeout():\n    assert True\n")
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "home",
        api={"port": 0},
        sensors={
            "files": {"kind": "fs", "roots": [str(project)]},
            "tests": {
                "kind": "code_test",
                "project_root": str(project),
                "command": [sys.executable, "-m", "pytest"],
                "sandbox": "none",
            },
            "runtime": {"checks": {"mem": {"type": "memory", "max_used_percent": 100}}},
            "http": {},
            "review": {},
        },
    )
    d = Daemon(settings)
    task = asyncio.create_task(d.run())
    ready = asyncio.create_task(d.ready())
    done, _ = await asyncio.wait({task, ready}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    assert ready in done
    yield d
    d.request_stop()
    await asyncio.wait_for(task, timeout=30)


async def _error(session: Any, tool: str, args: dict[str, Any]) -> str:
    result = await session.call_tool(tool, args)
    assert result.is_error, result.content
    [content] = result.content
    return str(content.text)


async def test_memory_sensors_describes_every_running_sensor(five):
    async with mcp_session(five) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        listing = await call(session, "memory_sensors", {})
        running = {s["name"]: s for s in listing["running"]}
        assert set(running) == {"files", "tests", "runtime", "http", "review"}
        for sensor in running.values():
            assert sensor["summary"]
            assert sensor["examples"]
            assert all(e["sensor"] == sensor["name"] for e in sensor["examples"])
        assert running["files"]["binds"]["roots"] == [str(five.settings.home.parent / "project")]
        assert running["tests"]["binds"]["test_files"] == ["tests/test_api.py"]
        assert {"test": "tests/test_api.py::test_timeout"} | {"sensor": "tests"} in running[
            "tests"
        ]["examples"]
        assert running["runtime"]["binds"]["checks"] == {"mem": "memory"}
        assert "localhost:*" in running["http"]["binds"]["allowed_hosts"]
        assert running["review"]["examples"] == [{"sensor": "review"}]
        # Every example is a binding the daemon accepts as it is.
        for sensor in running.values():
            example = sensor["examples"][0]
            if sensor["kind"] == "fs":
                example = {"sensor": "files", "path": "README.md", "exists": True}
            added = await call(
                session,
                "memory_add",
                {"content": f"bound to {sensor['name']}", "bindings": [example]},
            )
            assert added["bindings"][0]["sensor"] == sensor["name"]
    description = tools["memory_add"].description or ""
    assert "memory_sensors" in description
    examples = [line.split("  (")[0] for line in description.splitlines() if line.startswith("  {")]
    assert len(examples) >= 5
    for example in examples:  # each one valid JSON an agent can copy
        assert "sensor" in json.loads(example)


async def test_domain_errors_are_flagged_and_say_what_to_do(five):
    async with mcp_session(five) as session:
        text = await _error(
            session,
            "memory_add",
            {"content": "x", "bindings": [{"sensor": "fs", "path": "README.md"}]},
        )
        assert "no sensor named 'fs'; running: files, http, review, runtime, tests" in text
        assert "Use memory_sensors" in text
        text = await _error(
            session,
            "memory_add",
            {"content": "x", "bindings": [{"sensor": "files", "colour": "red"}]},
        )
        assert "bindings.0" in text
        assert "Use memory_sensors" in text
        for tool in ("memory_get", "memory_explain", "memory_revalidate"):
            text = await _error(session, tool, {"id": "deadbeefdeadbeef"})
            assert "no block with id 'deadbeefdeadbeef'. Use memory_search" in text
        text = await _error(session, "memory_review", {"id": "deadbeefdeadbeef", "reason": "r"})
        assert "no block with id" in text
        text = await _error(session, "memory_get", {"id": "dead"})
        assert "at least 8 hex digits" in text
    assert (await five.store.counts())["blocks"] == 0  # nothing was stored by the errors


async def test_the_same_fact_twice_comes_back_as_the_first(five):
    async with mcp_session(five) as session:
        first = await call(session, "memory_add", {"content": "The API timeout is 30 s"})
        again = await call(session, "memory_add", {"content": "the API  timeout is 30 S"})
        assert again["id"] == first["id"]
        assert again["duplicate_of"] == first["id"]
        other = await call(
            session, "memory_add", {"content": "The API timeout is 30 s", "dedupe": False}
        )
        assert other["id"] != first["id"]
        got = await call(session, "memory_get", {"id": first["short_id"]})
        assert got["id"] == first["id"]
    assert json.dumps(got)  # plain JSON for the agent


async def test_no_daemon_is_an_error_result_saying_how_to_start_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWARDEN_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("MEMWARDEN_TOKEN", "left-over")
    nowhere = SimpleNamespace(settings=SimpleNamespace(home=tmp_path))
    async with mcp_session(nowhere) as session:  # type: ignore[arg-type]
        for tool, args in (
            ("memory_search", {"query": "x"}),
            ("memory_sensors", {}),
            ("memory_health", {}),
        ):
            text = await _error(session, tool, args)
            assert "memwarden is not running" in text
            assert "memwarden run" in text
