"""Search by meaning through the daemon: the embedding task fills vectors in the
background, GET /v1/search takes mode, hostile modes and embedders are refused."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from tests.support import eventually, start_in_loop

from memwarden.daemon import Daemon, load_settings
from memwarden.errors import ConfigError
from memwarden.plugins import Registry

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


def _client(d: Daemon) -> httpx.AsyncClient:
    home = d.settings.home
    url = json.loads((home / "api.json").read_text())["url"]
    token = (home / "token").read_text().strip()
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=20)


@pytest.fixture
async def semantic(tmp_path: Path) -> AsyncIterator[Daemon]:
    settings = load_settings(
        None, env={}, home=tmp_path / "home", api={"port": 0}, search={"embedder": "stub"}
    )
    d = Daemon(settings, registry=Registry.from_classes({}))
    task = await start_in_loop(d)
    yield d
    d.request_stop()
    await asyncio.wait_for(task, timeout=20)


async def _search(api: httpx.AsyncClient, **params: Any) -> httpx.Response:
    return await api.get("/v1/search", params=params)


async def test_the_task_embeds_in_the_background_and_search_is_hybrid(semantic: Daemon):
    """An added fact gets its vector from the embedding task; the default mode is hybrid
    and each result explains the fused rank (keyword_rank, vector_rank, rrf)."""
    d = semantic
    block = await d.add_block({"content": "The API timeout is 30 s"})
    await d.add_block({"content": "The database lives in Frankfurt"})
    vectors = d.store.vectors
    assert vectors is not None
    await eventually(lambda: len(vectors) == 2, what="both facts embedded")
    async with _client(d) as api:
        answer = await _search(api, q="API timeout")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["mode"] == "hybrid"
        [first, *_] = body["results"]
        assert first["block"]["id"] == block.id
        assert {"keyword_rank", "vector_rank", "similarity", "rrf"} <= set(first["factors"])
        keyword = (await _search(api, q="API timeout", mode="keyword")).json()
        assert keyword["mode"] == "keyword"
        assert "vector_rank" not in keyword["results"][0]["factors"]


async def test_an_edit_is_embedded_again(semantic: Daemon):
    """Editing a fact's content queues it; the task gives it the new text's vector."""
    d = semantic
    block = await d.add_block({"content": "The API timeout is 30 s"})
    vectors = d.store.vectors
    assert vectors is not None
    await eventually(lambda: len(vectors) == 1, what="embedded")
    before = vectors.embedded
    await d.store.update(block.id, {"content": "zebras are striped"})
    await eventually(lambda: vectors.embedded > before, what="embedded again")
    hits = await d.store.search("zebras striped", mode="vector", limit=1)
    assert hits[0].id == block.id


@pytest.mark.parametrize("mode", ["sideways", "VECTOR", "", "x" * 2000])
async def test_a_hostile_mode_is_refused_naming_the_field(semantic: Daemon, mode: str):
    """An unknown mode is a 422 naming ``mode``; the daemon answers on."""
    async with _client(semantic) as api:
        answer = await _search(api, q="timeout", mode=mode)
        assert answer.status_code == 422
        assert "mode" in answer.text
        assert "Traceback" not in answer.text
        assert (await api.get("/healthz")).status_code == 200


async def test_reembed_queues_every_block(semantic: Daemon):
    """POST /v1/search/reembed queues every block and names the model."""
    d = semantic
    await d.add_block({"content": "fact one"})
    await d.add_block({"content": "fact two"})
    async with _client(d) as api:
        answer = await api.post("/v1/search/reembed")
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"queued": 2, "embedder": "stub-hash/64"}


async def test_vector_mode_without_an_embedder_is_refused(tmp_path: Path):
    """A daemon without an embedder searches by keyword and refuses mode=vector (422)."""
    settings = load_settings(None, env={}, home=tmp_path / "home", api={"port": 0})
    d = Daemon(settings, registry=Registry.from_classes({}))
    task = await start_in_loop(d)
    try:
        assert d.store.vectors is None
        async with _client(d) as api:
            plain = await _search(api, q="timeout")
            assert plain.json()["mode"] == "keyword"
            refused = await _search(api, q="timeout", mode="vector")
            assert refused.status_code == 422
            assert "mode" in refused.text
    finally:
        d.request_stop()
        await asyncio.wait_for(task, timeout=20)


@pytest.mark.parametrize("name", ["no-such-model", "../../etc", "a b"])
async def test_an_unknown_or_hostile_embedder_is_a_config_error(tmp_path: Path, name: str):
    """``[search] embedder`` naming nothing installed stops the start with a ConfigError
    naming ``search.embedder`` (never a download, never a traceback)."""

    async def start() -> None:
        settings = load_settings(
            None, env={}, home=tmp_path / "home", api={"port": 0}, search={"embedder": name}
        )
        await start_in_loop(Daemon(settings, registry=Registry.from_classes({})))

    with pytest.raises(ConfigError) as caught:
        await start()
    said = [str(caught.value), *caught.value.problems]
    assert any(line.startswith("search.embedder") for line in said), said
    assert not (tmp_path / "home" / "memwarden.db").exists()  # refused before the store


async def test_the_python_client_and_mcp_take_mode(semantic: Daemon):
    """``AsyncClient.search(mode=...)`` and MCP ``memory_search`` with ``mode`` reach the
    daemon: vector finds by shared pieces, keyword answers as keyword; a bad mode fails."""
    from tests.mcp.test_mcp import mcp_session  # noqa: PLC0415 - the MCP helpers

    from memwarden.client import AsyncClient  # noqa: PLC0415

    d = semantic
    block = await d.add_block({"content": "The API timeout is 30 s"})
    vectors = d.store.vectors
    assert vectors is not None
    await eventually(lambda: len(vectors) == 1, what="embedded")
    async with AsyncClient(home=d.settings.home) as client:
        answer = await client.search("timeouts", mode="vector")
        assert answer["mode"] == "vector"
        assert [r["block"]["id"] for r in answer["results"]] == [block.id]
        assert (await client.search("API timeout", mode="keyword"))["mode"] == "keyword"
    async with mcp_session(d) as session:
        found = await session.call_tool("memory_search", {"query": "timeouts", "mode": "vector"})
        assert not found.is_error, found.content
        assert found.structured_content is not None
        assert found.structured_content["mode"] == "vector"
        assert [r["id"] for r in found.structured_content["results"]] == [block.id]
        bad = await session.call_tool("memory_search", {"query": "x", "mode": "sideways"})
        assert bad.is_error


async def test_the_embedding_backlog_shows_in_health_metrics_and_status(
    semantic: Daemon, monkeypatch: pytest.MonkeyPatch
):
    """Blocks waiting for a vector are counted in GET /v1/health (``search``), in
    /metrics (``memwarden_embedding_backlog``, ``memwarden_vectors``) and by
    ``memwarden status``; once embedded, the backlog is 0."""
    from typer.testing import CliRunner  # noqa: PLC0415 - the CLI, in a thread

    from memwarden.cli import app  # noqa: PLC0415

    d = semantic
    vectors = d.store.vectors
    assert vectors is not None
    drain = vectors.drain_once

    async def held() -> int:  # the task runs but embeds nothing: the queue stays
        return 0

    monkeypatch.setattr(vectors, "drain_once", held)
    await d.add_block({"content": "The API timeout is 30 s"})
    await d.add_block({"content": "The database lives in Frankfurt"})
    async with _client(d) as api:
        search = (await api.get("/v1/health")).json()["search"]
        assert search == {"embedder": "stub-hash/64", "vectors": 0, "embedding_backlog": 2}
        metrics = (await api.get("/metrics")).text
        assert "memwarden_embedding_backlog 2.0" in metrics
        assert "memwarden_vectors 0.0" in metrics
        for name in ("MEMWARDEN_URL", "MEMWARDEN_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        home = str(d.settings.home)
        shown = await asyncio.to_thread(CliRunner().invoke, app, ["--home", home, "status"])
        assert shown.exit_code == 0, shown.output
        assert "search   stub-hash/64: 0 vectors, 2 blocks waiting for one" in shown.stdout
        monkeypatch.setattr(vectors, "drain_once", drain)
        vectors.notify()
        await eventually(lambda: len(vectors) == 2, what="both facts embedded")
        search = (await api.get("/v1/health")).json()["search"]
        assert search == {"embedder": "stub-hash/64", "vectors": 2, "embedding_backlog": 0}
        assert "memwarden_embedding_backlog 0.0" in (await api.get("/metrics")).text


async def test_a_namespaced_health_counts_only_its_own_backlog(
    semantic: Daemon, monkeypatch: pytest.MonkeyPatch
):
    """An agent's health (``namespaces``) counts the vectors and the blocks waiting for
    one of its namespaces only: another namespace's backlog is not its business."""
    d = semantic
    vectors = d.store.vectors
    assert vectors is not None

    async def held() -> int:  # the task runs but embeds nothing: the queue stays
        return 0

    monkeypatch.setattr(vectors, "drain_once", held)
    await d.add_block({"content": "The API timeout is 30 s", "namespace": "ours"})
    for i in range(3):
        await d.add_block({"content": f"fact {i} of theirs", "namespace": "theirs"})
    ours = (await d.health(namespaces=["ours"]))["search"]
    assert ours == {"embedder": "stub-hash/64", "vectors": 0, "embedding_backlog": 1}
    everyone = (await d.health())["search"]
    assert everyone["embedding_backlog"] == 4
