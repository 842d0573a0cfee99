"""The cluster's own tables and the one way to reach PostgreSQL (``cluster/_ddl.py``),
on a real server."""

from __future__ import annotations

import asyncio
import socket

import pytest

from memwarden.cluster import connect, ensure_tables
from memwarden.errors import StorageError


async def test_tables_created_by_many_nodes_at_once(dsn):
    """Four connections creating the cluster tables at the same moment: no error, one
    set of tables; a table an earlier version made and nothing uses is dropped."""
    first = await connect(dsn)
    try:
        await first.execute("CREATE TABLE cluster_revalidations (id text PRIMARY KEY)")
    finally:
        await first.close()
    conns = [await connect(dsn) for _ in range(4)]
    try:
        await asyncio.gather(*(ensure_tables(c) for c in conns))
        names = await conns[0].fetch(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'cluster_%' ORDER BY 1"
        )
        assert [r[0] for r in names] == ["cluster_leases", "cluster_nodes"]
    finally:
        for c in conns:
            await c.close()


async def test_an_unreachable_database_is_a_storage_error_without_the_password():
    """Connecting to nothing is a StorageError naming the server but not the password."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(StorageError) as caught:
            await connect(f"postgresql://bob:s3cret-pw@127.0.0.1:{port}/db", timeout_s=2)
    assert f"postgresql://bob@127.0.0.1:{port}/db" in str(caught.value)
    assert "s3cret" not in str(caught.value)
