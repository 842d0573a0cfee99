"""The staleness sweep tells sessions of what it made stale: the expired blocks, and the
dependents that fell with them (on SQLite, where no ``block_falls`` table says so)."""

from __future__ import annotations

from datetime import timedelta

from memwarden.memory import FakeClock


async def test_a_sweep_tells_readers_of_expired_blocks_and_of_their_dependents(
    running_daemon, make_settings, eventually
):
    clock = FakeClock()
    daemon = (await running_daemon(make_settings(), clock=clock)).daemon
    root = await daemon.add_block({"content": "the root fact", "validity_window": "2m"})
    dependent = await daemon.add_block(
        {"content": "the dependent fact", "validity_window": "7d", "depends_on": [root.id]}
    )
    bystander = await daemon.add_block({"content": "a fact of its own", "validity_window": "7d"})
    await daemon.read_block(dependent.id, session="reader-of-dependent")
    await daemon.read_block(root.id, session="reader-of-root")
    await daemon.read_block(bystander.id, session="reader-of-bystander")
    assert daemon.sessions.after("reader-of-dependent", 0) == []

    clock.advance(timedelta(minutes=3).total_seconds())  # the root's window ran out

    [told] = await eventually(
        lambda: daemon.sessions.after("reader-of-dependent", 0), what="the dependent's fall"
    )
    assert (told["block_id"], told["state"][1], told["reason"]) == (
        dependent.id,
        "stale",
        "dependency",
    )
    [expired] = daemon.sessions.after("reader-of-root", 0)
    assert (expired["block_id"], expired["state"][1], expired["reason"]) == (
        root.id,
        "stale",
        "expired",
    )
    assert (await daemon.store.get(dependent.id)).state == "stale"
    assert daemon.sessions.after("reader-of-bystander", 0) == []
