"""Helpers for the console tests: a signed-in HTTP client and a block with a history."""

from __future__ import annotations

import contextlib
import re
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from memwarden.memory import ValidationEvent
from tests.support import WorldSensor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from memwarden.daemon import Daemon

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class ShiftedClock:
    """The real clock moved by ``offset_s``: a running daemon can be made to live
    through a past stretch (set a negative offset, act, move it on, back to 0)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def time(self) -> float:
        return time.time() + self.offset_s


def api(daemon: Daemon) -> httpx.AsyncClient:
    token = (daemon.settings.home / "token").read_text().strip()
    return httpx.AsyncClient(
        base_url=daemon.api.bound_url(), headers={"Authorization": f"Bearer {token}"}
    )


async def link(daemon: Daemon, reviewer: str = "alice") -> str:
    async with api(daemon) as client:
        answer = await client.post("/v1/review-links", json={"reviewer": reviewer})
    return str(answer.json()["url"])


@contextlib.asynccontextmanager
async def signed_in(daemon: Daemon) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client holding a console session (signed in through a one-time link)."""
    async with httpx.AsyncClient(base_url=daemon.api.bound_url()) as client:
        answer = await client.get(await link(daemon))
        assert answer.status_code == 303
        yield client


async def block_with_history(daemon: Daemon, title: str = "cache ttl") -> tuple[str, list[str]]:
    """A bound block with 5 confirmations, then 2 refutations, then 3 confirmations
    (one minute apart, ending 10 minutes ago): three groups of identical events. With a
    :class:`ShiftedClock` the daemon lives through it: the block is added 20 minutes
    ago and each event applied when it was observed (so retention has a history)."""
    WorldSensor.world["ttl"] = 60
    start = datetime.now(UTC) - timedelta(minutes=20)
    shifted = daemon.clock if isinstance(daemon.clock, ShiftedClock) else None
    if shifted is not None:  # added with (just after) the first event
        shifted.offset_s = start.timestamp() - time.time()
    block = await daemon.add_block(
        {
            "title": title,
            "content": "The cache TTL is 60 s",
            "tags": ["cache"],
            "bindings": [{"sensor": "world", "path": "ttl", "equals": 60}],
        }
    )
    outcomes = ["confirmed"] * 5 + ["refuted"] * 2 + ["confirmed"] * 3
    events: list[Any] = [
        ValidationEvent(
            event_id=f"h{i}",
            sensor="world",
            subject="ttl",
            outcome=outcome,
            observed_at=start + timedelta(minutes=i),
            block_id=block.id,
            message=f"seen {i}",
        )
        for i, outcome in enumerate(outcomes)
    ]
    for event in events:  # one at a time: each is its own effect
        if shifted is not None:
            shifted.offset_s = event.observed_at.timestamp() - time.time()
        await daemon.store.apply_events([event])
    if shifted is not None:
        shifted.offset_s = 0.0
    return block.id, outcomes
