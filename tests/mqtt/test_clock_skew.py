"""A remote agent whose clock runs 30 s behind still refutes: its offset is estimated
from its heartbeats and its events' observed_at corrected by it (bounded)."""

from __future__ import annotations

import time

from tests.mqtt.conftest import _start, agent_settings, wait_state

from memwarden.agent import Agent
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor

FS_BINDING = {"sensor": "files", "path": "app.json", "key": "/timeout", "equals": 30}


class BehindClock:
    """The agent host's clock: 30 s behind ours."""

    def time(self) -> float:
        return time.time() - 30.0


async def test_an_agent_30s_behind_still_refutes(
    mosquitto_broker, start_daemon, world, tmp_path, eventually
):
    broker = mosquitto_broker()
    (world / "app.json").write_text('{"timeout": 30}')
    d = await start_daemon(broker)
    block = await d.obj.add_block({"content": "The API timeout is 30 s", "bindings": [FS_BINDING]})
    settings = agent_settings(broker, tmp_path / "agent", world)
    agent = Agent(settings, registry=Registry.from_classes({"fs": FsSensor}), clock=BehindClock())
    a = await _start(agent, "agent")
    try:

        def offset():
            rows = {s["name"]: s for s in d.obj.sensor_status()}
            return rows["files"].get("clock_offset_s")

        await eventually(lambda: offset() is not None and offset() > 29.0)
        assert 29.0 < offset() < 31.0  # shown in /v1/sensors, bounded
        await wait_state(d.obj, block.id, "fresh")
        # Confirmed just now on our clock (another path, a correct clock): an uncorrected
        # refutation from the agent would carry a time 30 s older and be ignored.
        await d.obj.bus.submit(
            "remote:http",
            [
                {
                    "sensor": "files",
                    "subject": "app.json",
                    "outcome": "confirmed",
                    "observed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            ],
        )
        (world / "app.json").write_text('{"timeout": 60}')
        await wait_state(d.obj, block.id, "stale")
        [event] = await d.obj.store.events_for(block.id, limit=1)
        assert (event.outcome, event.observed) == ("refuted", 60)
        assert abs(event.observed_at - time.time()) < 5.0  # on our clock, not 30 s back
    finally:
        await a.stop()
