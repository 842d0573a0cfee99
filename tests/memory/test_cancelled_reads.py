"""A read cancelled half-way never leaves a reader pinned to an old snapshot."""

from __future__ import annotations

import asyncio
import contextlib


async def test_cancelled_reads_do_not_hide_later_writes(make_store):
    """After reads cancelled between execute and fetch, the next reads see new writes."""
    store = await make_store(readers=1)
    await store.add_many([{"content": f"block {i}"} for i in range(2000)])
    for attempt in range(40):
        task = asyncio.create_task(store.list_blocks({"limit": 2000}))
        for _ in range(1 + attempt % 4):
            await asyncio.sleep(0)  # let the read reach a random point, then cancel it
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        block = await store.add({"content": f"new {attempt}"})  # reads its block back
        assert (await store.counts())["blocks"] == 2000 + attempt + 1
        assert (await store.get(block.id)).content == f"new {attempt}"
