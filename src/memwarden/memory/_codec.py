"""Rows ⇄ records ⇄ API models. The only place that knows the column encodings."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from memwarden.memory._clock import from_ts
from memwarden.memory._model import (
    Binding,
    Block,
    BlockState,
    Category,
    InfoType,
    StaleReason,
    Tier,
    Validation,
    Volatility,
)
from memwarden.memory._record import RECORD_COLUMNS, BlockRecord
from memwarden.memory.policy import current_stale_reasons, effective_state

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory._model import NewBlock
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "BLOCK_COLUMNS",
    "EVIDENCE_COLUMNS",
    "EVIDENCE_UPDATE_COLUMNS",
    "content_key",
    "new_record",
    "normalise_content",
    "record_from_row",
    "record_to_block",
    "record_to_row",
]

BLOCK_COLUMNS = RECORD_COLUMNS
_JSON_LIST = frozenset({"tags"})
_JSON_DICT = frozenset({"signals"})
_INDEX = {name: i for i, name in enumerate(BLOCK_COLUMNS)}

# The columns the evidence rules read and write: the hot path loads and stores only these.
EVIDENCE_COLUMNS: tuple[str, ...] = (
    "rid",
    "id",
    "tier",
    "state",
    "stale_reasons",
    "reliability",
    "validated_by",
    "validated_at",
    "validity_window_s",
    "stale_at",
    "updated_at",
    "reinforcement_count",
    "contradiction_count",
    "last_contradiction_at",
    "consecutive_refutations",
    "consecutive_errors",
    "outcome_history",
    "flapping",
)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def record_from_row(row: Sequence[Any]) -> BlockRecord:
    """A record from a full ``SELECT <BLOCK_COLUMNS>`` row."""
    values = list(row)
    values[_INDEX["tags"]] = json.loads(values[_INDEX["tags"]])
    values[_INDEX["signals"]] = json.loads(values[_INDEX["signals"]])
    reasons = values[_INDEX["stale_reasons"]]
    values[_INDEX["stale_reasons"]] = reasons.split(",") if reasons else []
    values[_INDEX["flapping"]] = bool(values[_INDEX["flapping"]])
    return BlockRecord(*values)


def record_to_row(rec: BlockRecord) -> tuple[Any, ...]:
    """The column values for ``INSERT INTO blocks (<BLOCK_COLUMNS>)``."""
    out: list[Any] = []
    for name in BLOCK_COLUMNS:
        value = getattr(rec, name)
        if name in _JSON_LIST or name in _JSON_DICT:
            value = _dumps(value)
        elif name == "stale_reasons":
            value = ",".join(value)
        elif name == "flapping":
            value = int(value)
        elif name == "rid" and not value:
            value = None  # let SQLite assign it
        out.append(value)
    return tuple(out)


_new_record = BlockRecord.__new__


def evidence_record(row: Sequence[Any]) -> BlockRecord:
    """A partial record from a ``SELECT <EVIDENCE_COLUMNS>`` row.

    Only the evidence fields (and ``stability``, which a demotion reads) are set: this
    is the ingest hot path, where a full 38-field construction per routed row cost more
    than the rules themselves. Pass it only to the evidence rules.
    """
    rec = _new_record(BlockRecord)
    (
        rec.rid,
        rec.id,
        rec.tier,
        rec.state,
        reasons,
        rec.reliability,
        rec.validated_by,
        rec.validated_at,
        rec.validity_window_s,
        rec.stale_at,
        rec.updated_at,
        rec.reinforcement_count,
        rec.contradiction_count,
        rec.last_contradiction_at,
        rec.consecutive_refutations,
        rec.consecutive_errors,
        rec.outcome_history,
        flapping,
    ) = row
    rec.stale_reasons = reasons.split(",") if reasons else []
    rec.flapping = bool(flapping)
    rec.stability = 0.0  # not loaded: the demotion UPDATE computes it in SQL
    return rec


# What the hot path writes back: the evidence columns but the id and the tier (a tier
# changes only on the rare demotion, written on its own so the bulk UPDATE stays narrow).
EVIDENCE_UPDATE_COLUMNS: tuple[str, ...] = EVIDENCE_COLUMNS[3:]


def evidence_row(rec: BlockRecord) -> tuple[Any, ...]:
    """Values for ``UPDATE blocks SET <EVIDENCE_UPDATE_COLUMNS> = ? ... WHERE rid = ?``."""
    return (
        rec.state,
        ",".join(rec.stale_reasons),
        rec.reliability,
        rec.validated_by,
        rec.validated_at,
        rec.validity_window_s,
        rec.stale_at,
        rec.updated_at,
        rec.reinforcement_count,
        rec.contradiction_count,
        rec.last_contradiction_at,
        rec.consecutive_refutations,
        rec.consecutive_errors,
        rec.outcome_history,
        int(rec.flapping),
        rec.rid,
    )


def new_record(new: NewBlock, *, block_id: str, now: float, cfg: PolicyConfig) -> BlockRecord:
    """The record of a freshly added block: unverified, reliability from its source."""
    assert new.volatility is not None  # noqa: S101 - NewBlock fills it in its validator
    assert new.info_type is not None  # noqa: S101 - idem
    window = (
        new.validity_window.total_seconds()
        if new.validity_window is not None
        else cfg.window_s(new.volatility)
    )
    reliability = (
        new.reliability if new.reliability is not None else cfg.source_reliability(new.source)
    )
    return BlockRecord(
        id=block_id,
        title=new.title,
        content=new.content,
        tags=list(dict.fromkeys(new.tags)),
        source=new.source,
        category=new.category.value,
        info_type=new.info_type.value,
        volatility=new.volatility.value,
        tier=new.tier.value,
        state=BlockState.UNVERIFIED.value,
        stale_reasons=[],
        reliability=reliability,
        importance=new.importance,
        validated_by=None,
        validated_at=None,
        validity_window_s=window,
        stale_at=now + window,
        half_life_s=cfg.half_life_s(new.volatility),
        created_at=now,
        updated_at=now,
        stability=cfg.promotion.core.initial_stability,
        retention=new.importance,
        signals=dict(new.signals),
        namespace=new.namespace or "default",
    )


def record_to_block(
    rec: BlockRecord,
    *,
    bindings: list[Binding],
    now: float,
    cfg: PolicyConfig,
    retention: float | None = None,
    depends_on: list[str] | None = None,
) -> Block:
    """The API view of a record, with the state and reasons as of ``now``."""
    state = effective_state(rec, now)
    reasons = current_stale_reasons(rec, now, cfg) if state == BlockState.STALE else []
    return Block(
        id=rec.id,
        title=rec.title,
        content=rec.content,
        tags=rec.tags,
        source=rec.source,
        category=Category(rec.category),
        info_type=InfoType(rec.info_type),
        volatility=Volatility(rec.volatility),
        tier=Tier(rec.tier),
        state=BlockState(state),
        stale_reasons=[StaleReason(r) for r in reasons],
        validation=Validation(
            validated_by=rec.validated_by,
            validated_at=from_ts(rec.validated_at) if rec.validated_at is not None else None,
            validity_window=timedelta(seconds=rec.validity_window_s),
            reliability=rec.reliability,
        ),
        stale_at=from_ts(rec.stale_at) if rec.stale_at is not None else None,
        importance=rec.importance,
        retention=rec.retention if retention is None else retention,
        stability=rec.stability,
        access_count=rec.access_count,
        session_count=rec.session_count,
        reinforcement_count=rec.reinforcement_count,
        contradiction_count=rec.contradiction_count,
        flapping=rec.flapping,
        created_at=from_ts(rec.created_at),
        updated_at=from_ts(rec.updated_at),
        last_accessed_at=from_ts(rec.last_accessed_at) if rec.last_accessed_at else None,
        archived_at=from_ts(rec.archived_at) if rec.archived_at is not None else None,
        archive_reason=rec.archive_reason,
        version=rec.version,
        bindings=bindings,
        depends_on=depends_on or [],
        signals=rec.signals,
        namespace=rec.namespace,
    )


def binding_from_row(
    sensor: str,
    subject: str,
    selector: str,
    nodes: str | None = None,
    served_by: str | None = None,
) -> Binding:
    """A stored binding (with its ``nodes`` JSON and ``served_by`` when given). One an
    older memwarden stored that today's model cannot read comes back with only its
    sensor, subject and ``unreadable`` (why), never an error: one bad row must not make
    its block, or a listing, unreadable."""
    try:
        raw = json.loads(selector)
        if isinstance(raw, dict):
            raw.pop("nodes", None)  # never the selector's: the columns say
            raw.pop("served_by", None)
            scope: dict[str, Any] = {}
            if nodes is not None:
                scope["nodes"] = json.loads(nodes)
            if served_by is not None:
                scope["served_by"] = served_by
            return Binding.model_validate({**raw, **scope, "sensor": sensor, "subject": subject})
        problem = "the stored selector is not a JSON object"
    except ValueError as err:  # not JSON, or refused by the model (a ValidationError)
        problem = f"the stored selector is unreadable: {err}"[:300]
    extra: dict[str, Any] = {"unreadable": problem}
    return Binding.model_construct(sensor=sensor, subject=subject, **extra)


def binding_selector_json(binding: Binding) -> str:
    return _dumps(binding.selector)


def binding_nodes_json(binding: Binding, default: str) -> str:
    """The ``nodes`` column of a binding stored by node ``default``: its own list, or
    the storing node alone."""
    return _dumps(binding.nodes if binding.nodes is not None else [default])


def normalise_content(content: str) -> str:
    """Content as duplicate detection compares it: casefolded, whitespace collapsed."""
    return " ".join(content.casefold().split())


def content_key(content: str) -> str:
    """The indexed ``content_key`` of a block: a hash of its normalised content."""
    return hashlib.sha256(normalise_content(content).encode()).hexdigest()[:32]
