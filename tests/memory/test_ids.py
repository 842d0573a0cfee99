"""Time-ordered identifiers (UUIDv7, RFC 9562)."""

from __future__ import annotations

import itertools
import time
import uuid

from memwarden.memory import _ids, new_id


def test_version_and_variant_bits():
    """Every id is a canonical UUID string with version 7 and the RFC 9562 variant."""
    for _ in range(1000):
        text = new_id()
        value = uuid.UUID(text)
        assert str(value) == text  # canonical, lowercase, hyphenated
        assert value.version == 7
        assert value.variant == uuid.RFC_4122
        assert (value.int >> 76) & 0xF == 0x7
        assert (value.int >> 62) & 0b11 == 0b10


def test_strictly_increasing_and_unique_over_100k_calls():
    """100k ids in a row sort strictly increasing (as text), hence are all unique."""
    ids = [new_id() for _ in range(100_000)]
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert len(set(ids)) == len(ids)


def test_timestamp_is_now():
    """The 48-bit timestamp is the current Unix time in milliseconds."""
    before = time.time_ns() // 1_000_000
    ms = uuid.UUID(new_id()).int >> 80
    after = time.time_ns() // 1_000_000
    # The counter may borrow a few milliseconds ahead when ids come very fast.
    assert before - 1 <= ms <= after + 1000


def test_increasing_when_the_clock_steps_back(monkeypatch):
    """A wall clock stepping backwards (NTP) does not make ids go backwards."""
    first = new_id()
    now_ns = time.time_ns()
    monkeypatch.setattr(_ids.time, "time_ns", lambda: now_ns - 60_000_000_000)
    ids = [first, *(new_id() for _ in range(10))]
    assert all(a < b for a, b in itertools.pairwise(ids))


def test_increasing_past_4096_ids_in_one_millisecond(monkeypatch):
    """More ids than the counter holds in one frozen millisecond still increase."""
    frozen = time.time_ns()
    monkeypatch.setattr(_ids, "_last_ms", 0)  # restored afterwards: no ids from the future
    monkeypatch.setattr(_ids.time, "time_ns", lambda: frozen)
    ids = [new_id() for _ in range(10_000)]
    assert all(a < b for a, b in itertools.pairwise(ids))
