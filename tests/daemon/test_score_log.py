"""The daemon keeps the promotion score log beside its database."""

from __future__ import annotations

import asyncio

from memwarden.daemon import Daemon, load_settings
from memwarden.memory._scorelog import read
from memwarden.plugins import Registry


async def test_consolidation_scores_go_to_the_score_log(tmp_path):
    """The daemon's store logs every promotion score to <home>/scores.jsonl."""
    settings = load_settings(None, env={}, home=tmp_path / "home", api={"enabled": False})
    daemon = Daemon(settings, registry=Registry.from_classes({}))
    task = asyncio.create_task(daemon.run())
    await daemon.ready()
    try:
        block = await daemon.add_block({"content": "I prefer tea over coffee"})
        for session in ("s1", "s2", "s3"):  # seen in three sessions: worth scoring
            await daemon.store.record_access([block.id], session=session)
        await daemon.store.consolidate()
    finally:
        daemon.request_stop()
        await task
    lines = read(tmp_path / "home" / "scores.jsonl")
    assert lines
    assert lines[0]["scorer"] == "composite"
    assert "breakdown" in lines[0]
