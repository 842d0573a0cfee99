"""Dependencies between blocks: when a block falls, what rests on it goes stale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memwarden.errors import ValidationInputError
from memwarden.memory import FakeClock, Store, ValidationEvent


def _event(clock: FakeClock, subject: str, outcome: str) -> ValidationEvent:
    return ValidationEvent(
        sensor="fs",
        subject=subject,
        outcome=outcome,
        observed_at=datetime.fromtimestamp(clock.time(), tz=UTC),
    )


@pytest.fixture
async def dep_store(tmp_path):
    clock = FakeClock()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        yield store, clock


async def _chain(store: Store, clock: FakeClock) -> tuple[str, str, str]:
    root = await store.add(
        {"content": "db port is 5432", "bindings": [{"sensor": "fs", "path": "a"}]}
    )
    mid = await store.add(
        {
            "content": "app connects to 5432",
            "depends_on": [root.id],
            "bindings": [{"sensor": "fs", "path": "b"}],
        }
    )
    leaf = await store.add({"content": "health check uses the app", "depends_on": [mid.id]})
    clock.advance(1)
    await store.apply_events([_event(clock, s, "confirmed") for s in ("a", "b")])
    return root.id, mid.id, leaf.id


async def test_refuting_the_root_makes_the_whole_chain_stale(dep_store):
    """A chain of three blocks goes stale from its root, with reason 'dependency'."""
    store, clock = dep_store
    root, mid, leaf = await _chain(store, clock)
    clock.advance(1)
    changed = set()
    for _ in range(3):  # soft (root goes stale), soft, hard (root refuted)
        clock.advance(1)
        result = await store.apply_events([_event(clock, "a", "refuted")])
        changed |= {c.block_id for c in result.changes}
    assert (await store.get(root)).state == "refuted"
    for block_id in (mid, leaf):
        block = await store.get(block_id)
        assert block.state == "stale"
        assert "dependency" in [r.value for r in block.stale_reasons]
    assert changed >= {mid, leaf}


async def test_dependents_get_revalidation_requests(dep_store):
    """A dependent with a binding is queued for revalidation when its root goes stale."""
    store, clock = dep_store
    root, mid, _ = await _chain(store, clock)
    clock.advance(timedelta(days=8))  # past the 7 d window of both
    await store.mark_stale([root])
    requests = await store.due_revalidations(limit=10)
    assert {(r.block_id, r.reason.value) for r in requests} >= {(mid, "dependency")}


async def test_depends_on_a_missing_block_is_refused(dep_store):
    """depends_on naming no block is a clear error on the field; nothing is written."""
    store, _ = dep_store
    with pytest.raises(ValidationInputError) as info:
        await store.add({"content": "x", "depends_on": ["nope"]})
    assert info.value.errors[0][0] == "depends_on.0"
    assert (await store.counts())["blocks"] == 0


async def test_get_returns_depends_on(dep_store):
    """A block reports what it depends on."""
    store, clock = dep_store
    root, mid, _ = await _chain(store, clock)
    assert (await store.get(mid)).depends_on == [root]


async def test_requests_left_sent_are_requeued(dep_store):
    """Revalidations left 'sent' by a daemon that died are pending again after restart."""
    store, clock = dep_store
    root, _, _ = await _chain(store, clock)
    ids = await store.request_revalidation(root)
    await store.set_revalidation_status(ids, "sent")
    assert await store.due_revalidations(limit=10) == []
    assert await store.requeue_sent_revalidations() == len(ids)
    assert {r.id for r in await store.due_revalidations(limit=10)} == set(ids)
