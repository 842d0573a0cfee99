"""docs/MQTT.md's broker configuration is the one the tests run."""

from __future__ import annotations

import re
from pathlib import Path

from tests.mqtt.conftest import stored

DOC = Path(__file__).parents[2] / "docs" / "MQTT.md"


def documented_config() -> str:
    """The first ```conf block after the "Broker configuration (tested)" heading."""
    text = DOC.read_text()
    section = text[text.index("## Broker configuration (tested)") :]
    match = re.search(r"```conf\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no conf block in the tested section"
    return match.group(1)


async def test_documented_broker_config_keeps_events_for_an_absent_daemon(
    mosquitto_broker, start_daemon, start_agent, eventually, tmp_path
):
    """With the documented mosquitto config, events sent while the daemon is away all arrive."""
    conf = documented_config()
    assert "max_queued_messages" in conf
    assert "persistent_client_expiration" in conf
    broker = mosquitto_broker(
        settings=conf.replace("/var/lib/mosquitto/", f"{tmp_path / 'persist'}/")
    )
    (tmp_path / "persist").mkdir()
    d1 = await start_daemon(broker)
    await d1.obj.mqtt.connected()
    await d1.stop()  # the broker keeps the daemon's session
    a = await start_agent(broker)
    await a.obj.connected()
    ctx = a.obj.runners["files"].ctx
    for i in range(1500):  # more than mosquitto's stock max_queued_messages (1000)
        await ctx.emit(ctx.event(f"f{i % 5}.txt", "changed", observed=i))

    async def all_acked() -> bool:
        return (await a.obj.queue.stats()).unsent == 0

    await eventually(all_acked, timeout_s=20)
    d2 = await start_daemon(broker)
    db = d2.obj.settings.db_path
    await eventually(lambda: stored(db, a.obj.agent) == (1500, 1500), timeout_s=30)
    assert d2.obj.mqtt.gaps.agents["edge1"].gaps == 0  # the broker held all of them
