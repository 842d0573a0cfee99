"""The API can listen on a Unix socket instead of TCP."""

from __future__ import annotations

import asyncio

from memwarden.client import AsyncClient
from memwarden.daemon import Daemon, load_settings
from memwarden.plugins import Registry


async def test_api_on_a_unix_socket(tmp_path):
    """With [api] unix_socket set, clients reach the daemon through the socket file."""
    sock = tmp_path / "mw.sock"
    settings = load_settings(None, env={}, home=tmp_path / "home", api={"unix_socket": str(sock)})
    daemon = Daemon(settings, registry=Registry.from_classes({}))
    task = asyncio.create_task(daemon.run())
    await daemon.ready()
    try:
        assert daemon.api is not None
        assert daemon.api.bound_url() == f"unix:{sock}"
        token = (tmp_path / "home" / "token").read_text().strip()
        async with AsyncClient(f"unix:{sock}", token) as client:
            block = await client.add({"content": "Sockets are files"})
            assert (await client.get(block.id)).content == "Sockets are files"
    finally:
        daemon.request_stop()
        await task
