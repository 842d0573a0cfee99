"""Item 7 of the freshness contract: retry interval, flapping threshold, counted errors."""

from __future__ import annotations

import pytest

from memwarden.memory import BlockRecord
from memwarden.memory.policy import PolicyConfig, apply_event, transitions

CFG = PolicyConfig()


def _fresh(window_s: float = 21600.0) -> BlockRecord:
    return BlockRecord(
        id="b",
        title="",
        content="x",
        tags=[],
        source="agent",
        category="semantic",
        info_type="dynamic",
        volatility="high",
        tier="short_term",
        state="fresh",
        stale_reasons=[],
        reliability=0.9,
        importance=0.5,
        validated_by="fs",
        validated_at=100.0,
        validity_window_s=window_s,
        stale_at=100.0 + window_s,
        half_life_s=43200.0,
        created_at=0.0,
        updated_at=100.0,
    )


def _feed(rec: BlockRecord, outcomes: str, start: float = 200.0) -> None:
    for i, mark in enumerate(outcomes):
        outcome = {"C": "confirmed", "R": "refuted"}[mark]
        at = start + i
        apply_event(rec, outcome=outcome, sensor="fs", observed_at=at, now=at, cfg=CFG)


@pytest.mark.parametrize(
    ("window_s", "retry_s"),
    [
        (600.0, 5.0),  # ephemeral 10 min: 0.83 s, raised to the 5 s minimum
        (21600.0, 30.0),  # high 6 h: 6 h / 720
        (7 * 86400.0, 300.0),  # medium 7 d: 14 min, capped at 5 min
        (180 * 86400.0, 300.0),  # low 180 d: capped
    ],
)
def test_a_soft_refutation_rechecks_after_a_retry_interval(window_s, retry_s):
    """The re-check of a soft refutation waits window/720 (5 s..5 min), not zero."""
    rec = _fresh(window_s)
    eff = apply_event(rec, outcome="refuted", sensor="fs", observed_at=200.0, now=200.0, cfg=CFG)
    assert (rec.state, eff.hard, eff.revalidate) == ("stale", False, "source_changed")
    assert eff.revalidate_after_s == retry_s


def test_a_change_is_rechecked_at_once():
    """A 'changed' event (truth unknown) is re-checked immediately: no retry wait."""
    rec = _fresh()
    eff = apply_event(rec, outcome="changed", sensor="fs", observed_at=200.0, now=200.0, cfg=CFG)
    assert (eff.revalidate, eff.revalidate_after_s) == ("source_changed", 0.0)


@pytest.mark.parametrize("history", ["CRC", "CRRRC", "CCRRRCCC", "RC"])
def test_one_change_and_its_restore_is_not_flapping(history):
    """One change and its restore is two transitions: never flapping."""
    rec = _fresh()
    _feed(rec, history)
    assert transitions(rec.outcome_history) <= 2
    assert not rec.flapping


def test_two_change_pairs_flag_flapping():
    """C R C R: three transitions at a high score flag it; C R C R C keeps it."""
    rec = _fresh()
    _feed(rec, "CRC")
    assert not rec.flapping
    _feed(rec, "R", start=300.0)
    assert rec.flapping
    _feed(rec, "C", start=400.0)
    assert rec.flapping


async def test_store_queues_the_retry_later(make_store, clock):
    """The store writes the soft refutation's request with send_at = now + retry; it is
    not due before then (fake clock)."""
    from memwarden.memory import ValidationEvent, from_ts  # noqa: PLC0415 - test-local

    store = await make_store()
    block = await store.add(
        {
            "content": "timeout is 30",
            "volatility": "high",
            "bindings": [{"sensor": "fs", "path": "a.yaml", "subject": "a.yaml"}],
        }
    )
    now = clock.time()

    def event(outcome: str, at: float) -> ValidationEvent:
        return ValidationEvent(
            sensor="fs", subject="a.yaml", outcome=outcome, observed_at=from_ts(at)
        )

    await store.apply_events([event("confirmed", now - 1)])
    await store.apply_events([event("refuted", now)])
    got = await store.get(block.id)
    assert got.state == "stale"
    assert await store.due_revalidations(now=now + 29.9) == []
    [due] = await store.due_revalidations(now=now + 30.0)
    assert (due.block_id, due.sensor, due.subject) == (block.id, "fs", "a.yaml")
