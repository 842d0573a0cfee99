"""A remote agent and the daemon, through a real mosquitto."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from structlog.testing import capture_logs
from tests.mqtt.conftest import event_json, run_tool, wait_accepted, wait_state
from tests.support import eventually

from memwarden.daemon._metrics import render
from memwarden.memory import RevalidationRequest

FS_BINDING = {"sensor": "files", "path": "app.json", "key": "/timeout", "equals": 30}


async def test_agent_file_change_changes_the_block_in_the_daemon(
    mosquitto_broker, start_daemon, start_agent, world
):
    """A file changed on the agent's host changes the block's state in the daemon's store."""
    broker = mosquitto_broker()
    (world / "app.json").write_text('{"timeout": 30}')
    # A soft refutation's re-check waits the retry interval (minutes by default); a short
    # one lets the agent's repeated refutations turn it hard within the test's deadline.
    retry = {"retry_min": "100ms", "retry_max": "200ms"}
    d = await start_daemon(broker, rules={"evidence": retry})
    block = await d.obj.add_block({"content": "The API timeout is 30 s", "bindings": [FS_BINDING]})
    a = await start_agent(broker)
    await wait_state(d.obj, block.id, "fresh")
    (world / "app.json").write_text('{"timeout": 60}')
    await wait_state(d.obj, block.id, "refuted")
    [event] = await d.obj.store.events_for(block.id, limit=1)
    assert event.sensor == "files"
    assert event.outcome == "refuted"
    assert event.observed == 60
    status = {s["name"]: s for s in d.obj.sensor_status()}
    assert status["files"]["status"] == "running"
    assert status["files"]["agent"] == "edge1"
    assert a.obj.last_seq >= 2


async def test_revalidation_of_a_remote_sensor_goes_over_mqtt(
    mosquitto_broker, start_daemon, start_agent, world
):
    """A revalidation for a remote sensor is answered by the agent, and the daemon waits for it."""
    broker = mosquitto_broker()
    (world / "app.json").write_text('{"timeout": 30}')
    d = await start_daemon(broker)
    block = await d.obj.add_block({"content": "timeout 30", "bindings": [FS_BINDING]})
    await start_agent(broker)
    await wait_state(d.obj, block.id, "fresh")
    answer = await d.obj.revalidate(block.id, wait_s=10)
    assert answer["requested"]
    assert answer["answered"] == answer["requested"]
    assert answer["timed_out"] == []
    [event] = await d.obj.store.events_for(block.id, limit=1)
    assert event.request_id == answer["requested"][0]
    assert event.outcome == "confirmed"


async def test_unanswered_remote_revalidation_becomes_an_error_event(
    mosquitto_broker, start_daemon
):
    """With no agent listening, a remote request gets an `error` event after its deadline."""
    broker = mosquitto_broker()
    d = await start_daemon(
        broker,
        mqtt={"remote_answer_grace": "0s"},
        rules={"staleness": {"revalidation_timeout": "50ms"}},
    )
    await d.obj.mqtt.connected()
    block = await d.obj.add_block(
        {"content": "x", "bindings": [{"sensor": "files", "path": "app.json"}]}
    )
    answer = await d.obj.revalidate(block.id, wait_s=10)
    assert answer["answered"] == answer["requested"]
    [event] = await d.obj.store.events_for(block.id, limit=1)
    assert event.outcome == "error"
    assert "did not answer" in event.message
    assert (await d.obj.store.get(block.id)).state == "unverified"  # an error changes no truth


async def test_gaps_are_counted_in_health_and_metrics(mosquitto_broker, start_daemon):
    """A jump in an agent's sequence is counted per agent in health() and /metrics."""
    broker = mosquitto_broker()
    d = await start_daemon(broker, mqtt={"resend_gaps": False})
    await d.obj.mqtt.connected()
    with capture_logs() as logs:
        await _publish_seqs(broker, (1, 2, 7))
        await wait_accepted(d.obj, 3)
    [gap] = [e for e in logs if e["event"] == "mqtt_gap_detected"]
    assert (gap["agent"], gap["from_seq"], gap["to_seq"], gap["missing"]) == ("edge7/run1", 3, 6, 4)
    health = await d.obj.health()
    assert health["mqtt"]["agents"]["edge7"]["gaps"] == 4
    assert health["mqtt"]["agents"]["edge7"]["missing"] == 4
    assert health["mqtt"]["gaps_total"] == 4
    body, _ = await render(d.obj)
    assert b'memwarden_mqtt_gaps_total{agent="edge7"} 4.0' in body


async def _publish_seqs(broker, seqs) -> None:
    for seq in seqs:
        await run_tool(
            "mosquitto_pub", "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1",
            "-t", "memwarden/v1/events/files",
            "-m", event_json(agent="edge7/run1", seq=seq, event_id=f"e{seq}").decode(),
        )  # fmt: skip


async def test_a_remote_sensors_bindings_carry_their_blocks_window(
    mosquitto_broker, start_daemon, start_agent, world
):
    """Bindings handed to an agent carry each block's validity window, as local ones do,
    so a polling sensor there renews its blocks itself; an edit of the window follows."""
    broker = mosquitto_broker()
    (world / "app.json").write_text('{"timeout": 30}')
    d = await start_daemon(broker)
    block = await d.obj.add_block(
        {"content": "The API timeout is 30 s", "validity_window": "45m", "bindings": [FS_BINDING]}
    )
    a = await start_agent(broker)
    ctx = a.obj.runners["files"].ctx
    await eventually(
        lambda: (
            [(b.block_id, b.validity_window) for b in ctx.bindings]
            == [(block.id, timedelta(minutes=45))]
        )
    )
    await d.obj.edit_block(block.id, {"validity_window": "2h"}, actor="test")
    await eventually(
        lambda: (
            [(b.block_id, b.validity_window) for b in ctx.bindings]
            == [(block.id, timedelta(hours=2))]
        )
    )


async def test_queued_at_goes_only_to_sensors_whose_agents_all_read_it(
    mosquitto_broker, start_daemon, start_agent, world
):
    """The daemon adds ``queued_at`` to a remote request only when every agent that
    announced the sensor says it reads it: one agent of an earlier release (no
    ``accepts``), or a status whose ``accepts`` is not a short list of strings, and the
    request goes out as before, which that agent accepts."""
    broker = mosquitto_broker()
    (world / "app.json").write_text('{"timeout": 30}')
    d = await start_daemon(broker)
    block = await d.obj.add_block({"content": "timeout 30", "bindings": [FS_BINDING]})
    a = await start_agent(broker)
    await wait_state(d.obj, block.id, "fresh")
    bridge = d.obj.mqtt
    assert bridge.all_accept("files", "queued_at")
    assert not bridge.all_accept("other", "queued_at")  # nobody announced it
    runner = a.obj.runners["files"]
    seen: list[RevalidationRequest] = []
    answer = runner.revalidate

    async def recording(request: RevalidationRequest) -> Any:
        seen.append(request)
        return await answer(request)

    runner.revalidate = recording
    await d.obj.revalidate(block.id, wait_s=10)
    assert [r.queued_at is not None for r in seen] == [True]

    pub = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1", "-r"]
    status = {"status": "online", "agent": "old1/r", "sensors": ["files"]}
    hostile = ["queued_at", ["queued_at"] * 33, [1, None, "x" * 65], {"queued_at": True}]
    for i, accepts in enumerate([None, *hostile]):
        body = status if accepts is None else {**status, "accepts": accepts}
        await run_tool(*pub, "-t", f"memwarden/v1/agents/old{i}/status", "-m", json.dumps(body))
        await eventually(lambda i=i: f"old{i}" in bridge.agents, timeout_s=10)
        assert not bridge.all_accept("files", "queued_at"), accepts
        await run_tool(*pub, "-t", f"memwarden/v1/agents/old{i}/status", "-n")  # cleared
        await eventually(lambda i=i: f"old{i}" not in bridge.agents, timeout_s=10)
    await run_tool(*pub, "-t", "memwarden/v1/agents/old0/status", "-m", json.dumps(status))
    await eventually(lambda: not bridge.all_accept("files", "queued_at"), timeout_s=10)
    await d.obj.revalidate(block.id, wait_s=10)
    assert [r.queued_at is not None for r in seen] == [True, False]
