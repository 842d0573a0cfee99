"""Coverage in GET /v1/health, /metrics and `memwarden health`: the share of live facts
with a binding whose sensor is alive, with one sensor running and one that never starts."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import httpx
import mw_test_sensors
import pytest
from tests.support import WorldSensor, start_in_loop
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.daemon import Daemon, load_settings
from memwarden.plugins import Registry

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


@pytest.fixture
async def two(tmp_path: Path) -> AsyncIterator[Daemon]:
    """``world`` runs; ``flaky`` fails its setup every time (never alive)."""
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "home",
        api={"port": 0},
        sensors={"world": {}, "flaky": {"fail_setups": 1000}},
    )
    registry = Registry.from_classes(
        {"world": WorldSensor, "flaky": mw_test_sensors.FlakySetupSensor}
    )
    d = Daemon(settings, registry=registry)
    task = await start_in_loop(d)
    yield d
    d.request_stop()
    await asyncio.wait_for(task, timeout=20)


def _client(d: Daemon) -> httpx.AsyncClient:
    home = d.settings.home
    url = json.loads((home / "api.json").read_text())["url"]
    token = (home / "token").read_text().strip()
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"})


async def test_health_metrics_and_cli_report_the_checkable_share(
    two: Daemon, monkeypatch: pytest.MonkeyPatch
):
    assert two.runners["flaky"].status != "running"
    facts = [
        ("agent", [{"sensor": "world", "path": "a"}]),
        ("agent", []),
        ("agent", [{"sensor": "flaky", "path": "b"}]),  # its sensor never started
        ("user", [{"sensor": "world", "path": "c"}]),
    ]
    for i, (source, bindings) in enumerate(facts):
        await two.add_block({"content": f"fact {i}", "source": source, "bindings": bindings})
    gone = await two.add_block({"content": "gone", "bindings": [{"sensor": "world", "path": "d"}]})
    await two.store.archive(gone.id, reason="test")
    async with _client(two) as client:
        health = (await client.get("/v1/health")).json()
        metrics = (await client.get("/metrics")).text
    cov = health["coverage"]
    assert (cov["live"], cov["checkable"], cov["share"]) == (4, 2, 0.5)
    assert cov["by_source"] == {
        "agent": {"live": 3, "checkable": 1, "share": 0.3333},
        "user": {"live": 1, "checkable": 1, "share": 1.0},
    }
    assert cov["by_tier"] == {"short_term": {"live": 4, "checkable": 2, "share": 0.5}}
    assert "memwarden_coverage_ratio 0.5" in metrics
    assert 'memwarden_coverage_by_source_ratio{source="agent"} 0.3333' in metrics
    assert 'memwarden_coverage_by_tier_ratio{tier="short_term"} 0.5' in metrics
    assert "memwarden_facts_live 4.0" in metrics
    assert "memwarden_facts_checkable 2.0" in metrics
    monkeypatch.setenv("MEMWARDEN_HOME", str(two.settings.home))
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    result = await asyncio.to_thread(CliRunner().invoke, app, ["health"])
    assert result.exit_code == 0, result.output
    assert "checkable 50% (2 of 4 live facts have a binding whose sensor runs)" in result.output
    assert "by source: agent 33% (1/3), user 100% (1/1)" in result.output
    assert "by tier: short_term 50% (2/4)" in result.output


async def test_an_empty_memory_reports_no_share(two: Daemon):
    """No live facts: the share is null, and the ratio metric is left out (not 0, not NaN)."""
    async with _client(two) as client:
        health = (await client.get("/v1/health")).json()
        metrics = (await client.get("/metrics")).text
    assert health["coverage"]["share"] is None
    assert "memwarden_coverage_ratio " not in metrics
    assert "memwarden_facts_live 0.0" in metrics
