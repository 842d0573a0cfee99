"""Bad MQTT payloads are dead-lettered with the reason, counted, acknowledged; nothing breaks."""

from __future__ import annotations

import json
import sqlite3
import time

from tests.mqtt.conftest import event_json, run_tool, wait_accepted

FUTURE = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86_400))


def _dead_letters(db) -> list[tuple[str, str]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT source, reason FROM dead_letters ORDER BY id").fetchall()


async def test_bad_payloads_are_dead_lettered_and_not_redelivered(
    mosquitto_broker, start_daemon, tmp_path
):
    """Not JSON, bad schema, too large, unknown or wrong sensor, future time: all rejected."""
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    await d.obj.mqtt.connected()
    big = tmp_path / "big.json"
    big.write_bytes(event_json(message="x" * 70_000))
    pub = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1"]
    files = "memwarden/v1/events/files"
    await run_tool(*pub, "-t", files, "-m", "this is not JSON {")
    await run_tool(*pub, "-t", files, "-m", json.dumps({"sensor": "files", "outcome": "maybe"}))
    await run_tool(*pub, "-t", files, "-f", str(big))
    await run_tool(*pub, "-t", "memwarden/v1/events/nosuch", "-m", event_json("nosuch").decode())
    await run_tool(*pub, "-t", files, "-m", event_json("other").decode())
    await run_tool(*pub, "-t", files, "-m", event_json(observed_at=FUTURE).decode())
    await run_tool(*pub, "-t", files, "-m", "[1, 2]")
    await run_tool(*pub, "-t", files, "-m", event_json(event_id="good-1").decode())
    bridge = d.obj.mqtt
    await wait_accepted(d.obj, 1)  # in order: the good one last, so all were handled by then
    assert dict(bridge.rejected) == {
        "not_json": 1,
        "invalid_event": 2,
        "too_large": 1,
        "not_remote_sensor": 1,
        "sensor_mismatch": 1,
        "future_timestamp": 1,
    }
    db = d.obj.settings.db_path
    letters = _dead_letters(db)
    assert len(letters) == 7
    reasons = " | ".join(r for _, r in letters)
    for expected in (
        "not_json",
        "too_large: 70",
        "not_remote_sensor: 'nosuch'",
        "future_timestamp",
    ):
        assert expected in reasons
    assert {s for s, _ in letters} == {"mqtt:files", "mqtt:nosuch"}
    assert d.obj.bus.rejected["invalid_event"] == 2
    # Acknowledged although bad: a restarted daemon (same session) gets none of them again.
    await d.stop()
    d2 = await start_daemon(broker)
    await d2.obj.mqtt.connected()
    await run_tool(*pub, "-t", files, "-m", event_json(event_id="good-2").decode())
    await wait_accepted(d2.obj, 1)
    assert d2.obj.mqtt.rejected.total() == 0
    assert len(_dead_letters(db)) == 7


async def test_malformed_agent_status_and_heartbeats_are_ignored(mosquitto_broker, start_daemon):
    """Status and heartbeat messages that make no sense are logged and dropped; a cleared
    retained status forgets the agent."""
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    await d.obj.mqtt.connected()
    pub = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1"]
    agents = "memwarden/v1/agents"
    online = json.dumps({"status": "online", "agent": "e2/r", "sensors": ["files"]})
    await run_tool(*pub, "-t", f"{agents}/e2/status", "-m", online)
    await run_tool(*pub, "-t", f"{agents}/e3/status", "-m", "{not json")
    await run_tool(*pub, "-t", f"{agents}/e2/heartbeat", "-m", json.dumps({"seq": 3}))
    await run_tool(*pub, "-t", f"{agents}/e2/heartbeat", "-m", "[]")
    await run_tool(*pub, "-t", files_topic(), "-m", event_json(event_id="sync-1").decode())
    await wait_accepted(d.obj, 1)  # everything before it was handled
    assert d.obj.mqtt.agents["e2"].status == "online"
    assert "e3" not in d.obj.mqtt.agents
    assert d.obj.mqtt.gaps.agents == {}  # the bad heartbeats announced nothing
    await run_tool(*pub, "-r", "-t", f"{agents}/e2/status", "-n")  # clears a retained status
    await run_tool(*pub, "-t", files_topic(), "-m", event_json(event_id="sync-2").decode())
    await wait_accepted(d.obj, 2)
    assert "e2" not in d.obj.mqtt.agents


def files_topic() -> str:
    return "memwarden/v1/events/files"
