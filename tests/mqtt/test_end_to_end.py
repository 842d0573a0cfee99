"""A remote agent and the daemon, through a real mosquitto."""

from __future__ import annotations

from tests.mqtt.conftest import wait_state


async def test_agent_file_change_changes_the_block_in_the_daemon(
    mosquitto_broker, start_daemon, start_agent, world
):
    """A file changed on the agent's host changes the block's state in the daemon's store."""
    broker = mosquitto_broker()
    (world / "app.json").write_text('{"timeout": 30}')
    d = await start_daemon(broker)
    block = await d.obj.add_block(
        {
            "content": "The API timeout is 30 s",
            "bindings": [{"sensor": "files", "path": "app.json", "key": "/timeout", "equals": 30}],
        }
    )
    await start_agent(broker)
    await wait_state(d.obj, block.id, "fresh")
    (world / "app.json").write_text('{"timeout": 60}')
    await wait_state(d.obj, block.id, "refuted")
