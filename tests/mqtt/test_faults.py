"""Faults: the broker, the agent and the daemon die; nothing accepted is lost or doubled."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from tests.mqtt.conftest import MEMWARDEN, event_json, run_tool, stored


async def _emit(agent, n: int, start: int = 0) -> None:
    ctx = agent.runners["files"].ctx
    for i in range(start, start + n):
        await ctx.emit(ctx.event(f"f{i % 7}.txt", "changed", observed=i))


async def test_broker_killed_mid_stream_loses_nothing_and_stores_once(
    mosquitto_broker, start_daemon, start_agent, eventually
):
    """The broker is SIGKILLed and restarted mid-stream: every event is stored exactly once."""
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    a = await start_agent(broker)
    await d.obj.mqtt.connected()
    await a.obj.connected()
    await _emit(a.obj, 300)
    broker.kill()  # some events are in flight, some queued for the daemon, some not sent
    await _emit(a.obj, 200, start=300)  # the agent keeps them in its durable queue
    broker.start()
    db = d.obj.settings.db_path
    await eventually(lambda: stored(db, a.obj.agent) == (500, 500), timeout_s=30)
    assert a.obj.last_seq == 500
    await eventually(lambda: d.obj.mqtt.gaps.agents["edge1"].missing == 0)
    await eventually(lambda: d.obj.mqtt.connections >= 2)


async def test_killed_agent_last_will_marks_its_sensors_unavailable(
    mosquitto_broker, start_daemon, tmp_path, eventually
):
    """`memwarden agent` killed -9: its last will arrives; its sensors go unavailable."""
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    world = tmp_path / "edge-world"
    world.mkdir()
    config = tmp_path / "agent.toml"
    config.write_text(
        f'home = "{tmp_path / "edge-home"}"\nlog_format = "json"\n'
        f'[mqtt]\nurl = "{broker.url}"\n'
        '[agent]\nid = "edge9"\nheartbeat_interval = "200ms"\n'
        f'[sensors.files]\nkind = "fs"\nroots = ["{world}"]\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMWARDEN_")}
    proc = await asyncio.create_subprocess_exec(
        str(MEMWARDEN) if MEMWARDEN.exists() else sys.executable,
        *([] if MEMWARDEN.exists() else ["-m", "memwarden.cli"]),
        "agent", "--config", str(config),
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def files_status() -> str:
            return {s["name"]: s for s in d.obj.sensor_status()}["files"]["status"]

        await eventually(lambda: files_status() == "running", timeout_s=20)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await eventually(lambda: files_status() == "unavailable")
        row = {s["name"]: s for s in d.obj.sensor_status()}["files"]
        assert row["agent"] == "edge9"
        assert row["reason"] == "connection lost"  # the last will, not a clean stop
        assert d.obj.mqtt.agents["edge9"].status == "offline"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_daemon_restart_while_agent_publishes_loses_nothing(
    mosquitto_broker, start_daemon, start_agent, eventually
):
    """The daemon is away while the agent keeps publishing: its persistent session delivers all."""
    broker = mosquitto_broker()
    d1 = await start_daemon(broker)
    a = await start_agent(broker)
    await d1.obj.mqtt.connected()
    db = d1.obj.settings.db_path
    await _emit(a.obj, 100)
    await eventually(lambda: stored(db, a.obj.agent) == (100, 100))
    await d1.stop()
    await _emit(a.obj, 200, start=100)

    async def all_acked() -> bool:
        return (await a.obj.queue.stats()).unsent == 0

    await eventually(all_acked)  # the broker holds them for the daemon's session
    d2 = await start_daemon(broker)
    await eventually(lambda: stored(db, a.obj.agent) == (300, 300), timeout_s=20)
    assert d2.obj.mqtt.gaps.agents["edge1"].gaps == 0  # nothing had to be re-sent


async def test_state_changes_published_while_disconnected_wait_in_the_outbox(
    mosquitto_broker, start_daemon, eventually
):
    """State changes made while the broker is down are kept in the outbox and sent on reconnect."""
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    bridge = d.obj.mqtt
    await bridge.connected()
    topic = "memwarden/v1/blocks/+/state"
    sub = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1", "-c"]
    await run_tool(*sub, "-i", "outbox-watcher", "-t", topic, "-E")  # a persistent session
    block = await d.obj.add_block(
        {"content": "x", "bindings": [{"sensor": "files", "path": "app.json"}]}
    )
    broker.stop()  # SIGTERM: mosquitto saves the watcher's session
    await bridge.disconnected()
    await d.obj.bus.submit("remote:http", [json.loads(event_json())])  # broker down
    assert (await d.obj.store.get(block.id)).state == "fresh"
    assert (await d.obj.store.outbox_stats()).queued >= 1
    broker.start()

    async def flushed() -> bool:
        return (await d.obj.store.outbox_stats()).queued == 0

    await eventually(flushed)
    out = await run_tool(*sub, "-i", "outbox-watcher", "-t", topic, "-C", "1", "-W", "10")
    assert f'"block_id": "{block.id}"' in out
    assert '"state": "fresh"' in out


async def test_messages_a_full_broker_queue_drops_are_seen_and_re_sent(
    mosquitto_broker, start_daemon, start_agent, eventually
):
    """A broker that silently drops QoS 1 messages (queue full): gaps are counted, then re-sent."""
    broker = mosquitto_broker(extra="max_inflight_messages 1\nmax_queued_messages 5\n")
    d = await start_daemon(broker)
    a = await start_agent(broker)
    await d.obj.mqtt.connected()
    await a.obj.connected()
    # The daemon commits (and so acknowledges) nothing until the agent has published all
    # 400: the broker's queue for the daemon (5) must overflow, however fast the machine.
    published = asyncio.Event()
    submit = d.obj.bus.submit

    async def held_submit(source: str, payloads: Any, **options: Any) -> Any:
        await published.wait()
        return await submit(source, payloads, **options)

    d.obj.bus.submit = held_submit
    await _emit(a.obj, 400)
    await eventually(lambda: a.obj.published >= 400, timeout_s=30)
    published.set()
    db = d.obj.settings.db_path
    await eventually(lambda: stored(db, a.obj.agent) == (400, 400), timeout_s=30)
    gaps = d.obj.mqtt.gaps.agents["edge1"]
    assert gaps.gaps > 0  # the broker did drop some: the loss was seen...
    await eventually(lambda: gaps.missing == 0)
    assert gaps.recovered == gaps.gaps  # ...and every one came back
    health = await d.obj.health()
    assert health["mqtt"]["agents"]["edge1"]["gaps"] == gaps.gaps
