"""A node's registration (``cluster_nodes``): one live instance per name, judged by the
database's clock; a clean stop or a dead predecessor on this host frees the name; an
instance whose name was taken over learns it at its next heartbeat."""

from __future__ import annotations

import asyncio
import sys

import asyncpg
import pytest

from memwarden.cluster import NodeRegistry, lease_holder
from memwarden.errors import ConfigError


async def _row(dsn: str, node: str) -> asyncpg.Record | None:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow("SELECT * FROM cluster_nodes WHERE node = $1", node)
    finally:
        await conn.close()


async def _sql(dsn: str, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def test_a_second_live_instance_is_refused_naming_the_other_host(dsn):
    first = NodeRegistry(dsn, node="build-1", host="host-a")
    await first.register()
    twin = NodeRegistry(dsn, node="build-1", host="host-b")
    with pytest.raises(ConfigError) as refused:
        await twin.register()
    message = str(refused.value)
    assert "node 'build-1' is already running on host 'host-a'" in message
    assert message.startswith("cluster.node:")
    row = await _row(dsn, "build-1")
    assert row is not None
    assert (row["instance"], row["host"]) == (first.instance, "host-a")
    # Another name is another node.
    await NodeRegistry(dsn, node="build-2", host="host-b").register()


async def test_silent_for_30_s_the_name_is_taken_and_the_old_instance_learns_it(dsn):
    old = NodeRegistry(dsn, node="n1", host="host-a")
    await old.register()
    conn = await asyncpg.connect(dsn)
    try:
        assert await old.beat(conn)
        # Its last heartbeat 31 s ago by the database's clock.
        await conn.execute(
            "UPDATE cluster_nodes SET heartbeat_at = clock_timestamp() - interval '31 s'"
        )
        new = NodeRegistry(dsn, node="n1", host="host-b")
        await new.register()
        assert not await old.beat(conn)
        assert old.lost
        assert await new.beat(conn)
        # A clean stop of the new one frees the name at once.
        await new.stopped(conn)
        again = NodeRegistry(dsn, node="n1", host="host-c")
        await again.register()
        assert (await _row(dsn, "n1"))["host"] == "host-c"  # type: ignore[index]
        assert (await lease_holder(conn)).holder is None  # no lease taken: none held
    finally:
        await conn.close()


async def test_a_dead_process_on_this_host_is_a_crashed_predecessor(dsn):
    """Same host, its pid gone: taken over at once; its pid alive: refused."""
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()  # reaped: its pid names no process now
    pid = dead.pid
    first = NodeRegistry(dsn, node="n2")
    await first.register()
    await _sql(dsn, "UPDATE cluster_nodes SET pid = $1", pid)
    restarted = NodeRegistry(dsn, node="n2")
    await restarted.register()  # pid gone: not refused
    alive = NodeRegistry(dsn, node="n2")  # the restarted one (this process) is alive
    with pytest.raises(ConfigError, match="already running"):
        await alive.register()


@pytest.mark.parametrize("name", ["", "Build", "-x", "a" * 64, "x/y", "é", "a\x00"])
def test_bad_node_names_are_a_config_error(name):
    with pytest.raises(ConfigError, match=r"cluster\.node"):
        NodeRegistry("postgresql://u@127.0.0.1:1/x", node=name)
