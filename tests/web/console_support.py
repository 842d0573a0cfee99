"""Helpers for the console tests: a signed-in HTTP client and a block with a history."""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from memwarden.memory import ValidationEvent
from tests.support import WorldSensor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from memwarden.daemon import Daemon

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


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
    (one minute apart, ending 10 minutes ago): three groups of identical events."""
    WorldSensor.world["ttl"] = 60
    block = await daemon.add_block(
        {
            "title": title,
            "content": "The cache TTL is 60 s",
            "tags": ["cache"],
            "bindings": [{"sensor": "world", "path": "ttl", "equals": 60}],
        }
    )
    start = datetime.now(UTC) - timedelta(minutes=20)
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
        await daemon.store.apply_events([event])
    return block.id, outcomes
