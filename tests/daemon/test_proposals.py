"""The periodic proposal pass and /v1/proposals, on a daemon whose fs sensor indexes the
demo workspace: proposals (never bindings) for unbound facts, accepted or rejected."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import httpx
from tests.mcp.conftest import start_demo_daemon
from tests.support import eventually

from memwarden.client import AsyncClient

if TYPE_CHECKING:
    from pathlib import Path

    from memwarden.daemon import Daemon


def _client(d: Daemon) -> httpx.AsyncClient:
    home = d.settings.home
    url = json.loads((home / "api.json").read_text())["url"]
    token = (home / "token").read_text().strip()
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=20)


async def _ok(answer: httpx.Response, status: int = 200) -> Any:
    assert answer.status_code == status, answer.text
    return answer.json()


async def _proposals(api: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    page = await _ok(await api.get("/v1/proposals", params=params))
    return list(page["proposals"])


async def test_the_pass_proposes_and_a_person_decides(tmp_path: Path):
    """Unbound facts get binding proposals (still unbound); a fact speaking of a bound
    fact's file gets depends_on; accept binds (the others go obsolete), reject is
    remembered and never proposed again."""
    async with start_demo_daemon(tmp_path) as d, _client(d) as api:
        bound = await d.add_block(
            {
                "content": "The API timeout is 30 s",
                "bindings": [
                    {
                        "sensor": "fs",
                        "path": "config/app.yaml",
                        "key": "/http/timeout",
                        "equals": 30,
                    }
                ],
            }
        )
        host = await d.add_block({"content": "The database host is db.internal"})
        clients = await d.add_block({"content": "Clients give up after the timeout of 30 s"})
        plain = await d.add_block({"content": "We chose SQLite for storage"})
        ran = await _ok(await api.post("/v1/proposal-pass"))
        assert ran["looked_at"] == 3  # the unbound ones
        assert ran["proposed"] >= 3

        for_host = await _proposals(api, block_id=host.id)
        [best] = [p for p in for_host if p["proposal"].get("key") == "/database/host"]
        assert best["kind"] == "binding"
        assert best["proposal"]["path"] == "config/db.toml"
        assert best["status"] == "pending"
        assert "host" in best["why"]
        for_clients = await _proposals(api, block_id=clients.id)
        [dep] = [p for p in for_clients if p["kind"] == "depends_on"]
        assert dep["proposal"] == {"depends_on": bound.id}
        assert "config/app.yaml" in dep["why"]
        assert await _proposals(api, block_id=plain.id) == []
        # Proposals, not bindings: nothing is bound yet.
        assert (await d.store.get(host.id)).bindings == []
        assert (await d.coverage())["checkable"] == 1

        decided = await _ok(
            await api.post(
                f"/v1/proposals/{best['id']}", json={"action": "accept", "decided_by": "ann"}
            )
        )
        assert (decided["status"], decided["decided_by"]) == ("accepted", "ann")
        [binding] = (await d.store.get(host.id)).bindings
        assert binding.selector["key"] == "/database/host"
        others = await _proposals(api, block_id=host.id, status="all")
        assert {p["status"] for p in others if p["id"] != best["id"]} <= {"obsolete"}
        await eventually(
            lambda: _state(d, host.id, "fresh"), timeout_s=20, what="the fs sensor confirms it"
        )
        assert (await d.coverage())["checkable"] == 2

        async with AsyncClient(home=d.settings.home) as client:
            listed = await client.proposals(block_id=clients.id)
            assert dep["id"] in [p["id"] for p in listed]
            accepted = await client.decide_proposal(dep["id"], "accept", decided_by="ann")
            assert accepted["status"] == "accepted"
        assert (await d.store.get(clients.id)).depends_on == [bound.id]

        [for_clients_binding, *_] = [
            p for p in await _proposals(api, block_id=clients.id) if p["kind"] == "binding"
        ]
        rejected = await _ok(
            await api.post(
                f"/v1/proposals/{for_clients_binding['id']}",
                json={"action": "reject", "decided_by": "bob"},
            )
        )
        assert rejected["status"] == "rejected"
        assert (await d.store.get(clients.id)).bindings == []
        again = await _ok(await api.post("/v1/proposal-pass"))
        assert again["proposed"] == 0  # the rejected one is not proposed again
        statuses = [p["status"] for p in await _proposals(api, block_id=clients.id, status="all")]
        assert statuses.count("rejected") == 1


async def test_hostile_decisions_are_refused_and_change_nothing(tmp_path: Path):
    async with start_demo_daemon(tmp_path) as d, _client(d) as api:
        fact = await d.add_block({"content": "The database host is db.internal"})
        await _ok(await api.post("/v1/proposal-pass"))
        [first, *_] = await _proposals(api, block_id=fact.id)
        url = f"/v1/proposals/{first['id']}"
        bad = await api.post(url, json={"action": "merge", "decided_by": "eve"})
        assert bad.status_code == 422
        assert "action" in bad.text
        bad = await api.post(url, json={"action": "accept"})
        assert bad.status_code == 422
        assert "decided_by" in bad.text
        bad = await api.post(url, json={"action": "accept", "decided_by": "x" * 129})
        assert bad.status_code == 422
        bad = await api.post(
            "/v1/proposals/0199-dead-beef", json={"action": "accept", "decided_by": "eve"}
        )
        assert bad.status_code == 404
        bad = await api.post(
            "/v1/proposals/..%2F..", json={"action": "accept", "decided_by": "eve"}
        )
        assert bad.status_code in (404, 422)
        bad = await api.get("/v1/proposals", params={"status": "everything"})
        assert bad.status_code == 422
        assert "status" in bad.text
        async with httpx.AsyncClient(base_url=str(api.base_url)) as anonymous:
            assert (await anonymous.get("/v1/proposals")).status_code == 401
            assert (await anonymous.post("/v1/proposal-pass")).status_code == 401
            refused = await anonymous.post(url, json={"action": "accept", "decided_by": "eve"})
            assert refused.status_code == 401
        assert (await d.store.get(fact.id)).bindings == []
        assert (await d.store.get_proposal(first["id"])).status == "pending"
        await _ok(await api.post(url, json={"action": "reject", "decided_by": "ann"}))
        twice = await api.post(url, json={"action": "accept", "decided_by": "eve"})
        assert twice.status_code == 422
        assert "rejected already" in twice.text
        assert (await d.store.get(fact.id)).bindings == []


async def test_the_scheduler_runs_the_pass_and_it_can_be_switched_off(tmp_path: Path):
    async with start_demo_daemon(tmp_path / "on", suggest={"propose_interval": "50ms"}) as d:
        fact = await d.add_block({"content": "The web app is at version 2.4.1"})

        async def proposed() -> bool:
            return bool(await d.store.list_proposals(block_id=fact.id))

        await eventually(proposed, timeout_s=20, what="the pass ran by itself")
        assert _pass_task() is not None
    async with start_demo_daemon(tmp_path / "off", suggest={"propose": False}):
        # The scheduler's passes are started (decay's loop is there), the proposals' not.
        await eventually(
            lambda: _pass_task("scheduler.decay") is not None, what="the passes started"
        )
        assert _pass_task() is None


def _pass_task(name: str = "scheduler.proposals") -> asyncio.Task[Any] | None:
    return next((t for t in asyncio.all_tasks() if t.get_name() == name), None)


async def _state(d: Daemon, block_id: str, state: str) -> bool:
    return (await d.store.get(block_id)).state.value == state
