"""The flat, mutable record of one block: what the store keeps and the rules work on.

Rules run on this record, not on the pydantic :class:`~memwarden.memory.Block`, because
they sit on the hot path (hundreds of thousands of events per second) where building a
validated model per event would dominate. Times are POSIX seconds (floats).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["RECORD_COLUMNS", "BlockRecord", "touched_at"]


@dataclass(slots=True)
class BlockRecord:
    """One row of the ``blocks`` table."""

    id: str
    title: str
    content: str
    tags: list[str]
    source: str
    category: str
    info_type: str
    volatility: str
    tier: str
    state: str
    stale_reasons: list[str]
    reliability: float
    importance: float
    validated_by: str | None
    validated_at: float | None
    validity_window_s: float
    stale_at: float | None
    half_life_s: float
    created_at: float
    updated_at: float
    last_accessed_at: float | None = None
    access_count: int = 0
    recent_access_count: int = 0  # since the last heuristic cycle
    session_count: int = 0
    reinforcement_count: int = 0
    contradiction_count: int = 0
    last_contradiction_at: float | None = None
    consecutive_refutations: int = 0
    consecutive_errors: int = 0
    outcome_history: str = ""  # newest last: C confirmed, R refuted (flapping window)
    flapping: bool = False
    stability: float = 0.0
    retention: float = 1.0
    archived_at: float | None = None
    archive_reason: str | None = None
    version: int = 1
    signals: dict[str, float] = field(default_factory=dict)
    namespace: str = "default"  # the project it belongs to; set once, at insert
    rid: int = 0  # the internal integer key; 0 until stored

    def last_touched(self) -> float:
        """The later of last validation, last access and creation: decay counts from here."""
        return touched_at(self.created_at, self.validated_at, self.last_accessed_at)


def touched_at(created_at: float, validated_at: float | None, accessed_at: float | None) -> float:
    """:meth:`BlockRecord.last_touched` of a block with these three times."""
    t = created_at
    if validated_at is not None and validated_at > t:
        t = validated_at
    if accessed_at is not None and accessed_at > t:
        t = accessed_at
    return t


RECORD_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(BlockRecord))
