"""Retrieval semantics: what search leaves out, and when it checks before answering."""

from __future__ import annotations

from tests.support import WorldSensor


async def _bound(daemon, text: str, subject: str, value: object, info_type: str) -> str:
    WorldSensor.world[subject] = value
    block = await daemon.add_block(
        {
            "content": text,
            "info_type": info_type,
            "bindings": [{"sensor": "world", "path": subject, "equals": value}],
        }
    )
    await daemon.revalidate(block.id, wait_s=5)
    assert (await daemon.store.get(block.id)).state == "fresh"
    return block.id


async def test_fast_changing_facts_are_always_read_through(daemon):
    """A fresh high-volatility fact is re-checked on every read; a medium one is not."""
    queue = await _bound(daemon, "The job queue depth is 4", "queue/depth", 4, "dynamic")
    config = await _bound(daemon, "The queue limit is 100", "queue/limit", 100, "semi_static")
    WorldSensor.world["queue/depth"] = 9
    WorldSensor.world["queue/limit"] = 50
    answer = await daemon.search("queue", limit=10)
    assert answer["checked"] == [queue]  # only the fast-changing one, without fresh=true
    assert answer["observations"][queue]["observed"] == 9
    assert (await daemon.store.get(config)).state == "fresh"  # not checked: still trusted


async def test_refuted_and_archived_are_left_out_unless_asked(daemon):
    """Refuted facts appear only with include_refuted; archived ones never."""
    refuted = await _bound(daemon, "The cache holds 512 entries", "cache/size", 512, "semi_static")
    archived = await _bound(daemon, "The cache runs on port 6380", "cache/port", 6380, "static")
    for _ in range(3):
        WorldSensor.world["cache/size"] = 1024
        await daemon.revalidate(refuted, wait_s=5)
    assert (await daemon.store.get(refuted)).state == "refuted"
    await daemon.store.archive(archived, reason="superseded")
    plain = await daemon.search("cache", limit=10)
    assert [r["block"]["id"] for r in plain["results"]] == []
    with_refuted = await daemon.search("cache", limit=10, include_refuted=True)
    assert [r["block"]["id"] for r in with_refuted["results"]] == [refuted]
    assert "refuted by a sensor" in with_refuted["results"][0]["warnings"][0]
