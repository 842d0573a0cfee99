"""`memwarden agent` on its own: bindings, requests and emits it must refuse or survive."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs
from tests.mqtt.conftest import agent_settings, run_tool
from tests.support import eventually, start_in_loop

from memwarden.agent import Agent
from memwarden.daemon import load_settings
from memwarden.errors import ConfigError
from memwarden.memory import RevalidationRequest
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor


def test_an_agent_needs_an_mqtt_section(tmp_path):
    """Without [mqtt] the agent refuses to start, saying what is missing."""
    settings = load_settings(None, env={}, home=tmp_path)
    with pytest.raises(ConfigError, match=r"needs an \[mqtt\] section"):
        Agent(settings, registry=Registry.from_classes({"fs": FsSensor}))


async def test_bad_bindings_are_skipped_and_good_ones_cached_for_an_offline_start(
    mosquitto_broker, start_agent, eventually, world
):
    """A binding the plugin refuses is skipped; the rest are applied, and kept for a restart."""
    broker = mosquitto_broker()
    a = await start_agent(broker)
    await a.obj.connected()
    good = {"sensor": "files", "subject": "app.json", "path": "app.json"}
    bad = {"sensor": "files", "subject": "x", "path": "x", "regex": "(", "exists": True}
    body = json.dumps(
        [{"block_id": "b1", "binding": good}, {"block_id": "b2", "binding": bad}, {"nope": 1}]
    )
    host = ["-h", "127.0.0.1", "-p", str(broker.port)]
    await run_tool("mosquitto_pub", *host, "-r", "-q", "1",
                   "-t", "memwarden/v1/bindings/files", "-m", body)  # fmt: skip
    ctx = a.obj.runners["files"].ctx
    await eventually(lambda: [b.block_id for b in ctx.bindings] == ["b1"])
    await run_tool("mosquitto_pub", *host, "-q", "1",
                   "-t", "memwarden/v1/bindings/files", "-m", "not json")  # fmt: skip
    await a.stop()
    broker.kill()
    again = await start_agent(broker)  # the broker is down: bindings come from the cache
    assert [b.block_id for b in again.obj.runners["files"].ctx.bindings] == ["b1"]


async def test_bindings_carry_their_blocks_window_and_a_bad_one_is_dropped_alone(
    mosquitto_broker, start_agent, eventually, world
):
    """Each binding's validity_window reaches the sensor (BoundSubject.validity_window);
    a window that is not a duration, zero or negative is dropped, the binding kept."""
    broker = mosquitto_broker()
    a = await start_agent(broker)
    await a.obj.connected()
    items = [
        {"block_id": f"b{i}", "binding": {"sensor": "files", "path": f"f{i}.json"}}
        for i in range(6)
    ]
    for item, window in zip(items, ["2m", None, "soon", 0, -5, ["6h"]], strict=True):
        if window is not None:
            item["validity_window"] = window
    host = ["-h", "127.0.0.1", "-p", str(broker.port)]
    with capture_logs() as logs:
        await run_tool("mosquitto_pub", *host, "-r", "-q", "1",
                       "-t", "memwarden/v1/bindings/files", "-m", json.dumps(items))  # fmt: skip
        ctx = a.obj.runners["files"].ctx
        await eventually(lambda: len(ctx.bindings) == 6)
    windows = {b.block_id: b.validity_window for b in ctx.bindings}
    assert windows == {"b0": timedelta(minutes=2)} | {f"b{i}": None for i in range(1, 6)}
    refused = [e for e in logs if e["event"] == "binding_window_invalid"]
    assert sorted(e["block_id"] for e in refused) == ["b2", "b3", "b4", "b5"]
    assert {e["field"] for e in refused} == {"validity_window"}


def _request_body(now: datetime, *, sensor: str, reason: str) -> dict[str, Any]:
    """A revalidation request as the daemon sends it, for ``sensor``'s ``app.json`` of
    block b1, made at ``now`` with 30 s to answer."""
    return {
        "block_id": "b1",
        "sensor": sensor,
        "subject": "app.json",
        "binding": {"sensor": sensor, "path": "app.json"},
        "reason": reason,
        "created_at": now.isoformat(),
        "deadline": (now + timedelta(seconds=30)).isoformat(),
    }


async def test_misrouted_expired_and_malformed_requests_are_ignored(
    mosquitto_broker, start_agent, world
):
    """Requests for another sensor, past their deadline, or not parseable get no answer."""
    broker = mosquitto_broker()
    a = await start_agent(broker)
    await a.obj.connected()
    now = datetime.now(UTC)
    request = _request_body(now, sensor="other", reason="manual")
    expired = {**request, "sensor": "files", "deadline": (now - timedelta(seconds=1)).isoformat()}
    host = ["-h", "127.0.0.1", "-p", str(broker.port), "-q", "1"]
    topic = "memwarden/v1/revalidate/files"
    for payload in (json.dumps(request), json.dumps(expired), "{"):
        await run_tool("mosquitto_pub", *host, "-t", topic, "-m", payload)
    await run_tool("mosquitto_pub", *host, "-t", "memwarden/v1/agents/edge1/resend", "-m", "[]")
    fine = {
        **request,
        "id": "req-fine",
        "sensor": "files",
        "binding": {"sensor": "files", "path": "app.json"},
    }
    await run_tool("mosquitto_pub", *host, "-t", topic, "-m", json.dumps(fine))
    async with asyncio.timeout(10):  # the good one is answered; the others came before it
        while a.obj.last_seq < 1:
            a.obj.queue.changed.clear()
            await a.obj.queue.changed.wait()
    await a.stop()
    with contextlib.closing(sqlite3.connect(a.obj.state_dir / "agent-queue.db")) as conn:
        payloads = [json.loads(r[0]) for r in conn.execute("SELECT payload FROM queue")]
    assert [p["request_id"] for p in payloads] == [fine["id"]]


async def test_emits_naming_another_sensor_or_too_large_are_refused(
    mosquitto_broker, start_agent, world
):
    """An event naming another sensor, or larger than the payload limit, is never queued."""
    broker = mosquitto_broker()
    a = await start_agent(broker)
    ctx = a.obj.runners["files"].ctx
    other = ctx.event("x", "confirmed").model_copy(update={"sensor": "other"})
    await ctx.emit(other)
    await ctx.emit(ctx.event("x", "changed", observed="y" * 70_000))
    assert a.obj.rejected == 2
    assert a.obj.last_seq == 0
    await ctx.emit(ctx.event("x", "changed"))
    assert a.obj.last_seq == 1


async def test_an_agent_with_a_bad_sensor_table_fails_to_start_naming_it(tmp_path):
    """An unknown kind or a bad option in [sensors.*] stops the agent with the path."""
    settings = load_settings(
        None,
        env={},
        home=tmp_path,
        mqtt={"url": "mqtt://127.0.0.1:1"},
        sensors={"a": {"kind": "nope"}, "b": {"kind": "fs", "roots": []}},
    )
    agent = Agent(settings, registry=Registry.from_classes({"fs": FsSensor}))
    with pytest.raises(ConfigError) as err:
        await agent.run()
    problems = "; ".join(err.value.problems)
    assert "sensors.a.kind" in problems
    assert "sensors.b.roots" in problems


class BehindClock:
    """The agent host's clock, an hour behind the daemon's (the test's real clock)."""

    SKEW_S = 3600.0

    def time(self) -> float:
        return time.time() - self.SKEW_S


async def test_queued_at_reaches_the_sensor_on_the_agents_clock(mosquitto_broker, tmp_path, world):
    """A request's ``queued_at`` (the daemon's clock) is handed to the sensor as the time
    of receipt on the agent's clock minus how long the request waited, so an hour of skew
    does not shift it; fields this release does not know are ignored; a queued_at after
    created_at is no wait; a queued_at that is not a time makes the request invalid."""
    broker = mosquitto_broker()
    clock = BehindClock()
    agent = Agent(
        agent_settings(broker, tmp_path / "agent", world),
        registry=Registry.from_classes({"fs": FsSensor}),
        clock=clock,
    )
    task = await start_in_loop(agent, name="agent")
    try:
        await agent.connected()
        runner = agent.runners["files"]
        seen: list[tuple[RevalidationRequest, float]] = []
        answer = runner.revalidate

        async def recording(request: RevalidationRequest) -> Any:
            seen.append((request, clock.time()))
            return await answer(request)

        runner.revalidate = recording  # type: ignore[method-assign]
        now = datetime.now(UTC)
        request = _request_body(now, sensor="files", reason="expired")
        five_min_ago, in_2h = now - timedelta(minutes=5), now + timedelta(hours=2)
        waited = {**request, "id": "r-waited", "queued_at": five_min_ago.isoformat()}
        later = {**request, "id": "r-later", "queued_at": in_2h.isoformat()}
        bad = {**request, "id": "r-bad", "queued_at": "five minutes ago"}
        unknown = {**request, "id": "r-unknown", "added_by_a_later_daemon": {"x": 1}}
        old = {**request, "id": "r-old"}
        host = ["-h", "127.0.0.1", "-p", str(broker.port), "-q", "1"]
        topic = "memwarden/v1/revalidate/files"
        with capture_logs() as logs:
            for body in (waited, later, bad, unknown, old):
                await run_tool("mosquitto_pub", *host, "-t", topic, "-m", json.dumps(body))
            await eventually(lambda: len(seen) == 4, timeout_s=10)
        got = {r.id: (r.queued_at, at) for r, at in seen}
        assert sorted(got) == ["r-later", "r-old", "r-unknown", "r-waited"]
        queued, at = got["r-waited"]
        assert queued is not None
        # Receipt on the agent's clock minus the 5 minutes it waited (not now - 5 min on
        # the daemon's clock, an hour later): within the time the message took to arrive.
        assert at - 300 - 5 <= queued.timestamp() <= at - 300
        queued, at = got["r-later"]
        assert queued is not None
        assert at - 5 <= queued.timestamp() <= at  # queued after it was sent: no wait
        assert got["r-old"][0] is None  # a daemon before queued_at: as before
        assert got["r-unknown"][0] is None
        invalid = [e for e in logs if e["event"] == "revalidation_request_invalid"]
        assert len(invalid) == 1
        assert "queued_at" in invalid[0]["error"]
    finally:
        agent.request_stop()
        await asyncio.wait_for(task, timeout=20)


async def test_the_agent_announces_the_wire_additions_it_reads(mosquitto_broker, start_agent):
    broker = mosquitto_broker()
    a = await start_agent(broker)
    await a.obj.connected()
    host = ["-h", "127.0.0.1", "-p", str(broker.port)]
    out = await run_tool(
        "mosquitto_sub", *host, "-t", "memwarden/v1/agents/edge1/status", "-C", "1", "-W", "10"
    )
    status = json.loads(out)
    assert status["status"] == "online"
    assert status["accepts"] == ["queued_at"]
