"""The memory model, the rules and the store. Depends only on :mod:`memwarden.errors`."""

from __future__ import annotations

from memwarden.memory._clock import Clock, FakeClock, SystemClock, from_ts, to_ts
from memwarden.memory._durations import Duration, format_duration, parse_duration
from memwarden.memory._ids import new_id
from memwarden.memory._model import (
    Binding,
    Block,
    BlockState,
    Category,
    InfoType,
    NewBlock,
    Outcome,
    RevalidationReason,
    RevalidationRequest,
    StaleReason,
    Tier,
    Validation,
    ValidationEvent,
    Volatility,
    default_volatility,
)
from memwarden.memory._record import BlockRecord
from memwarden.memory._results import Explanation, SearchHit

__all__ = [
    "Binding",
    "Block",
    "BlockRecord",
    "BlockState",
    "Category",
    "Clock",
    "Duration",
    "Explanation",
    "FakeClock",
    "InfoType",
    "NewBlock",
    "Outcome",
    "RevalidationReason",
    "RevalidationRequest",
    "SearchHit",
    "StaleReason",
    "SystemClock",
    "Tier",
    "Validation",
    "ValidationEvent",
    "Volatility",
    "default_volatility",
    "format_duration",
    "from_ts",
    "new_id",
    "parse_duration",
    "to_ts",
]
