"""The memory model, the rules and the store. Depends only on :mod:`memwarden.errors`.

:class:`Store` is the store's whole API (a façade); :class:`Database` is the connection
owner underneath it (one writer with group commit, pooled readers).
"""

from __future__ import annotations

from memwarden.memory._backup import backup_database
from memwarden.memory._clock import Clock, FakeClock, SystemClock, from_ts, sleep_on, to_ts
from memwarden.memory._codec import binding_from_row, content_key
from memwarden.memory._compaction import CompactionConfig, CompactionReport
from memwarden.memory._database import FLOOD_COMMIT_WEIGHT, FLOOD_WAL_MIB, Database
from memwarden.memory._decayline import RetentionPoint, retention_line
from memwarden.memory._durations import Duration, format_duration, parse_duration
from memwarden.memory._erasure import MAX_ERASE, UNREACHABLE, ErasureReport, ErasureTarget
from memwarden.memory._ids import new_id
from memwarden.memory._localfile import LocalFile
from memwarden.memory._location import shown_location, store_location
from memwarden.memory._maintenance import DecayReport
from memwarden.memory._model import (
    MAX_CONTENT_CHARS,
    NAMESPACE_PATTERN,
    Binding,
    Block,
    BlockState,
    Category,
    InfoType,
    Namespace,
    NewBlock,
    Outcome,
    RevalidationReason,
    RevalidationRequest,
    StaleReason,
    Tier,
    Unit,
    Validation,
    ValidationEvent,
    Volatility,
    default_volatility,
)
from memwarden.memory._outbox import OutboxMessage, OutboxStats
from memwarden.memory._promotion import ConsolidationReport
from memwarden.memory._proposals import NewProposal, Proposal
from memwarden.memory._quarantine import StoredBinding
from memwarden.memory._record import BlockRecord
from memwarden.memory._results import (
    ApplyResult,
    BlockFilter,
    BlockPatch,
    DueBlock,
    EventRecord,
    Explanation,
    FactEvidence,
    SearchHit,
    StateChange,
    validate_input,
)
from memwarden.memory._retention import RetentionConfig, RetentionReport, RetentionRule
from memwarden.memory._scorelog import ScoreLog
from memwarden.memory._search import SearchMode
from memwarden.memory._series import KEEP_S as SERIES_KEEP_S
from memwarden.memory._series import STEP_S as SERIES_STEP_S
from memwarden.memory._series import slot_of as series_slot
from memwarden.memory._store import Store
from memwarden.memory._transfer import ImportReport, is_export_row

__all__ = [
    "FLOOD_COMMIT_WEIGHT",
    "FLOOD_WAL_MIB",
    "MAX_CONTENT_CHARS",
    "MAX_ERASE",
    "NAMESPACE_PATTERN",
    "SERIES_KEEP_S",
    "SERIES_STEP_S",
    "UNREACHABLE",
    "ApplyResult",
    "Binding",
    "Block",
    "BlockFilter",
    "BlockPatch",
    "BlockRecord",
    "BlockState",
    "Category",
    "Clock",
    "CompactionConfig",
    "CompactionReport",
    "ConsolidationReport",
    "Database",
    "DecayReport",
    "DueBlock",
    "Duration",
    "ErasureReport",
    "ErasureTarget",
    "EventRecord",
    "Explanation",
    "FactEvidence",
    "FakeClock",
    "ImportReport",
    "InfoType",
    "LocalFile",
    "Namespace",
    "NewBlock",
    "NewProposal",
    "OutboxMessage",
    "OutboxStats",
    "Outcome",
    "Proposal",
    "RetentionConfig",
    "RetentionPoint",
    "RetentionReport",
    "RetentionRule",
    "RevalidationReason",
    "RevalidationRequest",
    "ScoreLog",
    "SearchHit",
    "SearchMode",
    "StaleReason",
    "StateChange",
    "Store",
    "StoredBinding",
    "SystemClock",
    "Tier",
    "Unit",
    "Validation",
    "ValidationEvent",
    "Volatility",
    "backup_database",
    "binding_from_row",
    "content_key",
    "default_volatility",
    "format_duration",
    "from_ts",
    "is_export_row",
    "new_id",
    "parse_duration",
    "retention_line",
    "series_slot",
    "shown_location",
    "sleep_on",
    "store_location",
    "to_ts",
    "validate_input",
]
