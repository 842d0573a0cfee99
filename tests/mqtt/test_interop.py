"""Clients we did not write (mosquitto_pub / mosquitto_sub) follow only the documented topics."""

from __future__ import annotations

import asyncio
import json

from tests.mqtt.conftest import event_json, run_tool, stored, wait_accepted, wait_state


async def test_mosquitto_pub_events_are_stored_and_mosquitto_sub_sees_state(
    mosquitto_broker, start_daemon
):
    """An event from mosquitto_pub is accepted; mosquitto_sub sees the state change and status."""
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    await d.obj.mqtt.connected()
    host = ["-h", "127.0.0.1", "-p", str(broker.port)]
    sub = ["mosquitto_sub", *host, "-q", "1", "-c", "-i", "interop-sub"]
    state_topic = "memwarden/v1/blocks/+/state"
    await run_tool(*sub, "-t", state_topic, "-E")  # a persistent session, subscribed
    block = await d.obj.add_block(
        {
            "content": "The API timeout is 30 s",
            "validity_window": "90m",
            "bindings": [{"sensor": "files", "path": "a.json"}],
        }
    )
    payload = event_json(subject="a.json", event_id="interop-1", agent="ext/1", seq=1)
    await run_tool("mosquitto_pub", *host, "-q", "1", "-t", "memwarden/v1/events/files",
                   "-m", payload.decode())  # fmt: skip
    await wait_state(d.obj, block.id, "fresh")
    line = await run_tool(*sub, "-t", state_topic, "-C", "1", "-W", "10")
    change = json.loads(line)
    assert change["block_id"] == block.id
    assert change["state"] == "fresh"
    assert change["before"] == "unverified"
    assert change["event_id"] == "interop-1"
    assert set(change) == {"block_id", "state", "before", "reliability", "observed_at", "event_id"}
    status = await run_tool(
        "mosquitto_sub", *host, "-t", "memwarden/v1/status", "-C", "1", "-W", "5"
    )
    assert status.strip() == "online"  # retained birth message
    bindings = await run_tool(
        "mosquitto_sub", *host, "-t", "memwarden/v1/bindings/files", "-C", "1", "-W", "5"
    )
    [bound] = json.loads(bindings)  # retained, for the agent that runs `files`
    assert bound["block_id"] == block.id
    assert bound["binding"]["path"] == "a.json"
    assert bound["validity_window"] == "1h30m"  # the block's, for the agent's sensor


async def test_a_redelivered_event_is_stored_once(mosquitto_broker, start_daemon):
    """The same event published twice (a redelivery, a re-send) is stored once."""
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    await d.obj.mqtt.connected()
    host = ["-h", "127.0.0.1", "-p", str(broker.port)]
    payload = event_json(event_id="twice", agent="ext/2", seq=1).decode()
    for _ in range(2):
        await run_tool("mosquitto_pub", *host, "-q", "1", "-t", "memwarden/v1/events/files",
                       "-m", payload)  # fmt: skip
    await wait_accepted(d.obj, 1)
    while d.obj.mqtt.duplicates < 1:
        await d.obj.wait_for_events(0.5)
    assert stored(d.obj.settings.db_path, "ext/2") == (1, 1)


async def test_acknowledged_only_after_commit(mosquitto_broker, start_daemon):
    """A message received but not committed when the daemon stops is redelivered, then stored."""
    broker = mosquitto_broker()
    d1 = await start_daemon(broker)
    await d1.obj.mqtt.connected()
    received = asyncio.Event()

    async def never_commits(source, payloads, **_):  # the daemon "dies" before the commit
        received.set()
        await asyncio.Event().wait()

    d1.obj.bus.submit = never_commits
    host = ["-h", "127.0.0.1", "-p", str(broker.port)]
    payload = event_json(event_id="late-1", agent="ext/3", seq=1).decode()
    await run_tool("mosquitto_pub", *host, "-q", "1", "-t", "memwarden/v1/events/files",
                   "-m", payload)  # fmt: skip
    await asyncio.wait_for(received.wait(), 10)
    await d1.stop()
    db = d1.obj.settings.db_path
    assert stored(db, "ext/3") == (0, 0)
    d2 = await start_daemon(broker)  # same client id: the broker resends what was not acked
    await wait_accepted(d2.obj, 1)
    assert stored(db, "ext/3") == (1, 1)
