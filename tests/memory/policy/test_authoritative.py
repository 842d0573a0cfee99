"""A refutation carrying full reliability (a code test) is hard at once."""

from __future__ import annotations

from memwarden.memory import BlockRecord
from memwarden.memory.policy import PolicyConfig, apply_event


def _fresh() -> BlockRecord:
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
        reliability=1.0,
        importance=0.5,
        validated_by="tests",
        validated_at=100.0,
        validity_window_s=21600.0,
        stale_at=21700.0,
        half_life_s=43200.0,
        created_at=0.0,
        updated_at=100.0,
    )


def test_a_full_reliability_refutation_is_hard_at_once():
    """A failing test (reliability 1.0) refutes on its first report, not after three."""
    rec = _fresh()
    eff = apply_event(
        rec,
        outcome="refuted",
        sensor="tests",
        observed_at=200.0,
        now=200.0,
        cfg=PolicyConfig(),
        reliability=1.0,
    )
    assert eff.hard
    assert rec.state == "refuted"


def test_a_less_reliable_refutation_stays_soft():
    """A refutation from a 0.9 sensor is soft the first time: stale, not refuted."""
    rec = _fresh()
    eff = apply_event(
        rec,
        outcome="refuted",
        sensor="fs",
        observed_at=200.0,
        now=200.0,
        cfg=PolicyConfig(),
        reliability=0.9,
    )
    assert not eff.hard
    assert rec.state == "stale"
    assert "soft_refuted" in rec.stale_reasons
