"""What the store takes and gives back: input models (a block edit, a listing filter)
and the plain result types of its reads and writes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memwarden.errors import ValidationInputError
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    binding_from_row,
    record_from_row,
    record_to_block,
)
from memwarden.memory._durations import Duration
from memwarden.memory._model import (
    Binding,
    Block,
    BlockState,
    Category,
    Content,
    InfoType,
    Signal,
    Tag,
    Tier,
    Title,
    Volatility,
)

if TYPE_CHECKING:
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "ApplyResult",
    "BlockFilter",
    "BlockPatch",
    "DueBlock",
    "EventRecord",
    "Explanation",
    "FactEvidence",
    "SearchHit",
    "StateChange",
    "validate_input",
]

_ID = BLOCK_COLUMNS.index("id")

M = TypeVar("M", bound=BaseModel)


def validate_input(model: type[M], data: Any) -> M:
    """Validate ``data`` as ``model`` or raise :class:`ValidationInputError` naming each field."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ValidationInputError(
            [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.errors()]
        ) from None


class BlockPatch(BaseModel):
    """An edit to a block; only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    title: Title | None = None
    content: Content | None = None
    tags: list[Tag] | None = Field(default=None, max_length=32)
    category: Category | None = None
    info_type: InfoType | None = None
    volatility: Volatility | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    validity_window: Duration | None = None
    signals: dict[str, Signal] | None = None
    bindings: list[Binding] | None = Field(
        default=None,
        max_length=32,
        description="Replace the block's bindings ([] removes them): the block becomes "
        "unverified and its sensors check the new ones (docs/RULES.md).",
    )


class BlockFilter(BaseModel):
    """What :meth:`Store.list_blocks` selects."""

    model_config = ConfigDict(extra="forbid")

    state: BlockState | None = None
    tier: Tier | None = None
    volatility: Volatility | None = None
    sensor: str | None = None
    tag: str | None = None
    flapping: bool | None = Field(default=None, description="Only flapping (or steady) ones.")
    newest_first: bool = Field(default=False, description="Newest id first (after: older).")
    after: str | None = Field(default=None, description="Keyset cursor: ids after this one.")
    limit: int = Field(default=100, ge=1, le=10_000)
    namespaces: list[str] | None = Field(
        default=None, description="Only blocks of these namespaces (None: every one)."
    )


class DueBlock(NamedTuple):
    """A block whose validity window has run out (as the sweep sees it)."""

    id: str
    stale_at: float
    state: str
    volatility: str
    reliability: float


@dataclass(frozen=True, slots=True)
class StateChange:
    """A block changed state because of an event (published to MQTT, shown in ``tail``)."""

    block_id: str
    before: str
    after: str
    reliability: float
    observed_at: float
    event_id: str
    sensor: str = ""  # who reported it ("" for a dependency)


@dataclass(slots=True)
class ApplyResult:
    """What a batch of events did."""

    accepted: int = 0
    duplicates: int = 0
    unmatched: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    changes: list[StateChange] = field(default_factory=list)
    revalidations: int = 0
    reviews: int = 0
    answered: list[str] = field(default_factory=list)  # revalidation request ids answered
    erased: int = 0  # events naming an erased block: dropped, neither stored nor dead-lettered
    # Kept in the node's local spool (PostgreSQL unreachable): committed there, applied
    # once the database answers again (docs/SCALE.md); the daemon's bus sets it.
    spooled: int = 0


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One event in a block's history, with what it did to the block."""

    seq: int
    event_id: str
    sensor: str
    subject: str
    outcome: str
    observed_at: float
    received_at: float
    reliability: float | None
    message: str
    observed: Any
    request_id: str | None
    state_before: str | None
    state_after: str | None
    reliability_before: float | None
    reliability_after: float | None
    detail: dict[str, Any] | None
    # When compaction folded a run of identical outcomes into this (its last) event:
    # (count, first observed_at, last observed_at).
    run: tuple[int, float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "event_id": self.event_id,
            "sensor": self.sensor,
            "subject": self.subject,
            "outcome": self.outcome,
            "observed_at": from_ts(self.observed_at).isoformat(),
            "received_at": from_ts(self.received_at).isoformat(),
            "reliability": self.reliability,
            "message": self.message,
            "observed": self.observed,
            "request_id": self.request_id,
            "effect": None
            if self.state_before is None
            else {
                "state": [self.state_before, self.state_after],
                "reliability": [self.reliability_before, self.reliability_after],
                **(self.detail or {}),
            },
            "run": None
            if self.run is None
            else {
                "count": self.run[0],
                "first_observed_at": from_ts(self.run[1]).isoformat(),
                "last_observed_at": from_ts(self.run[2]).isoformat(),
            },
        }


@dataclass(slots=True)
class FactEvidence:
    """What a read's receipt needs about a block beyond the block itself."""

    consecutive_errors: int = 0
    errors_since: float | None = None  # observed_at of the first error of the streak
    last_error: str | None = None
    open_checks: list[float] = field(default_factory=list)  # send_at of open requests
    confirmation: dict[str, Any] | None = None  # the event behind validated_at
    last_event: dict[str, Any] | None = None  # the block's latest event and its effect


@dataclass(slots=True)
class SearchHit:
    """One ranked search result and why it ranks where it does.

    The store's own callers need the ranking and a few fields (``id``, ``state``), so a
    hit carries the block's stored columns as the search read them; its flat record is
    made the first time ``record`` is read and the validated :class:`Block` the first
    time ``block`` is (at the API edge), not for every hit of every search.

    Read-only by convention (``dataclasses.replace`` makes a changed copy): it is not a
    frozen dataclass because a frozen one's ``__init__`` sets each of its 17 fields
    through ``object.__setattr__``, 2.1 us a hit against 0.6, on a path that makes up
    to ``limit`` of them per search (docs/BENCHMARKS.md, "Session 11").
    """

    columns: tuple[Any, ...] = field(repr=False)  # the block's row (BLOCK_COLUMNS order)
    state: str  # effective, as of the search
    score: float
    relevance: float
    freshness: float
    reliability: float
    retention: float
    stale: bool
    warnings: list[str]
    # What the block is built from: the stored bindings and dependencies as the search
    # statement returns them (JSON arrays), the search's instant and policy.
    bindings_json: str = field(repr=False)
    depends_json: str = field(repr=False)
    now: float = field(repr=False)
    policy: PolicyConfig = field(repr=False, compare=False)
    # Vector and hybrid search: the fused rank's parts (keyword_rank, bm25, vector_rank,
    # similarity, rrf), for explaining a result; empty for keyword search.
    parts: dict[str, float] = field(default_factory=dict, compare=False)
    _record: list[BlockRecord] = field(default_factory=list, repr=False, compare=False)
    _block: list[Block] = field(default_factory=list, repr=False, compare=False)  # built once

    @property
    def id(self) -> str:
        return str(self.columns[_ID])

    @property
    def record(self) -> BlockRecord:
        """The block's flat record (made once, on first use)."""
        if not self._record:
            self._record.append(record_from_row(self.columns))
        return self._record[0]

    @property
    def block(self) -> Block:
        """The block as of the search (built once, on first use)."""
        if not self._block:
            self._block.append(
                record_to_block(
                    self.record,
                    bindings=[binding_from_row(*b) for b in json.loads(self.bindings_json)],
                    now=self.now,
                    cfg=self.policy,
                    retention=self.retention,
                    depends_on=sorted(json.loads(self.depends_json)),
                )
            )
        return self._block[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "block": self.block.model_dump(mode="json"),
            "score": self.score,
            "stale": self.stale,
            "warnings": self.warnings,
            "factors": {
                "relevance": self.relevance,
                "freshness": self.freshness,
                "reliability": self.reliability,
                "retention": self.retention,
            },
        }


# ------------------------------------------------------------------ explain
# What Store.explain answers: JSON-ready (times as ISO strings), so the API returns it as
# it is; typed here so callers and the type checker know every key.


class ExplainState(TypedDict):
    stored: str
    effective: str
    stale: bool
    stale_reasons: list[str]
    stale_at: str | None
    archived_at: str | None
    archive_reason: str | None


class ReliabilityStep(TypedDict):
    observed_at: str | None
    sensor: str
    outcome: str
    before: float | None
    after: float | None
    ignored: Any
    event_id: str


class ExplainReliability(TypedDict):
    current: float
    history: list[ReliabilityStep]  # newest first


class ExplainValidation(TypedDict):
    validated_by: str | None
    validated_at: str | None
    validity_window_s: float
    inside_window: bool
    reinforcements: int
    contradictions: int
    last_contradiction_at: str | None
    flapping: bool
    outcome_history: str


class ExplainRetention(TypedDict):
    value: float
    stored: float
    importance: float
    last_touched: str | None
    age_s: float
    half_life_s: float
    half_life_effective_s: float
    floor: float
    archive_below: float
    would_archive: str | None


class ExplainRank(TypedDict):
    freshness: float
    reliability: float
    retention: float
    product: float
    searchable: bool


class CoreThresholds(TypedDict):
    access_count: int
    stability: float
    sessions: int


class ExplainCore(TypedDict):
    blockers: list[str]
    access_count: int
    stability: float
    sessions: int
    thresholds: CoreThresholds


class Consolidation(TypedDict):
    promote: bool
    reasons: list[str]


class ExplainPromotion(TypedDict):
    tier: str
    scorer: str
    score: dict[str, object]
    other_score: dict[str, object]
    consolidation: Consolidation
    core: ExplainCore
    access_times: list[str | None]
    events: list[dict[str, Any]]  # EventRecord.as_dict()


class Explanation(TypedDict):
    """Why a block stands where it does (``Store.explain``, ``GET /v1/blocks/{id}/explain``)."""

    id: str
    title: str
    now: str | None
    state: ExplainState
    reliability: ExplainReliability
    validation: ExplainValidation
    retention: ExplainRetention
    rank: ExplainRank
    promotion: ExplainPromotion
