"""The domain model: blocks, bindings, validation events and revalidation requests.

These pydantic models are the wire and API shapes. The store keeps a flat
:class:`~memwarden.memory._record.BlockRecord` per block for the hot paths and builds
:class:`Block` from it for callers.
"""

from __future__ import annotations

import json
import re
import socket
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)

from memwarden.memory._durations import Duration
from memwarden.memory._ids import new_id

__all__ = [
    "ANY_NODE",
    "BINDING_SUBJECT_KEYS",
    "MAX_BINDING_NODES",
    "MAX_CONTENT_CHARS",
    "NODE_NAME_PATTERN",
    "Binding",
    "Block",
    "BlockState",
    "Category",
    "InfoType",
    "NewBlock",
    "Outcome",
    "RevalidationReason",
    "RevalidationRequest",
    "StaleReason",
    "Tier",
    "Validation",
    "ValidationEvent",
    "Volatility",
    "default_node_name",
    "default_volatility",
]


class InfoType(StrEnum):
    """How the knowledge behaves."""

    STATIC = "static"
    SEMI_STATIC = "semi_static"
    DYNAMIC = "dynamic"
    EPHEMERAL = "ephemeral"


class Volatility(StrEnum):
    """How fast the knowledge goes out of date."""

    LOW = "low"  # months / years
    MEDIUM = "medium"  # days / weeks
    HIGH = "high"  # hours
    EPHEMERAL = "ephemeral"  # minutes / seconds


class Tier(StrEnum):
    """Where the block sits in the promotion ladder."""

    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    CORE = "core"


class Category(StrEnum):
    """What kind of memory the block is."""

    SEMANTIC = "semantic"
    EPISODIC = "episodic"
    PROCEDURAL = "procedural"
    REFLECTION = "reflection"


class BlockState(StrEnum):
    """What is known about the block's truth right now."""

    UNVERIFIED = "unverified"
    FRESH = "fresh"
    STALE = "stale"
    REFUTED = "refuted"
    ARCHIVED = "archived"


class StaleReason(StrEnum):
    """Why a block is not fresh."""

    EXPIRED = "expired"
    LOW_RELIABILITY = "low_reliability"
    SOURCE_CHANGED = "source_changed"
    DEPENDENCY = "dependency"
    SOFT_REFUTED = "soft_refuted"
    FLAPPING = "flapping"


class Outcome(StrEnum):
    """What a sensor observed about a subject."""

    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    CHANGED = "changed"  # the source changed; truth unknown
    ERROR = "error"  # could not check


class RevalidationReason(StrEnum):
    """Why the daemon asks a sensor to look again."""

    EXPIRED = "expired"
    LOW_RELIABILITY = "low_reliability"
    SOURCE_CHANGED = "source_changed"
    ON_READ = "on_read"
    DEPENDENCY = "dependency"
    MANUAL = "manual"


_INFO_TO_VOLATILITY = {
    InfoType.STATIC: Volatility.LOW,
    InfoType.SEMI_STATIC: Volatility.MEDIUM,
    InfoType.DYNAMIC: Volatility.HIGH,
    InfoType.EPHEMERAL: Volatility.EPHEMERAL,
}
_VOLATILITY_TO_INFO = {v: k for k, v in _INFO_TO_VOLATILITY.items()}


def default_volatility(info_type: InfoType) -> Volatility:
    """The volatility an info type implies when none is given."""
    return _INFO_TO_VOLATILITY[info_type]


# ------------------------------------------------------------------ field types

MAX_CONTENT_CHARS = 256 * 1024
MAX_TITLE_CHARS = 500


def _utf8_clean(value: str) -> str:
    """Reject strings that cannot be stored as UTF-8 (lone surrogates from bad bytes)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        msg = f"is not valid UTF-8 text (bad character at position {err.start})"
        raise ValueError(msg) from None
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _json_utf8_clean(value: Any) -> Any:
    """Reject JSON values the store cannot keep: not JSON, or holding text that is not UTF-8."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"holds text that is not valid UTF-8 ({err.reason})") from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"is not JSON ({err})") from None
    return value


Text = Annotated[str, AfterValidator(_utf8_clean)]
Content = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS), AfterValidator(_utf8_clean)
]
Title = Annotated[str, StringConstraints(max_length=MAX_TITLE_CHARS), AfterValidator(_utf8_clean)]
Tag = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=64),
    AfterValidator(_utf8_clean),
]
SensorName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z][a-z0-9_.-]{0,63}$"),
]
Subject = Annotated[str, StringConstraints(max_length=2048), AfterValidator(_utf8_clean)]
# Numbers are strict: JSON true/false or "0.5" is a type error, not a silent 1.0/0.5.
Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False, strict=True)]
Signal = Annotated[float, Field(allow_inf_nan=False, strict=True)]
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
Namespace = Annotated[
    str,
    StringConstraints(pattern=NAMESPACE_PATTERN),
    Field(description="A namespace: [a-z0-9][a-z0-9_.-]*, at most 64 characters."),
]
BlockId = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
]

# Which selector key names the subject for each built-in sensor kind; a sensor's own
# binding model may say otherwise by setting ``subject`` explicitly.
BINDING_SUBJECT_KEYS: tuple[str, ...] = ("subject", "path", "test", "url", "check", "topic")

_STRICT = ConfigDict(extra="forbid", str_max_length=MAX_CONTENT_CHARS, validate_default=True)


# A node's name (docs/SCALE.md, "What each node needs"), and a binding's node list entry:
# a node name, or "*" (any node) on its own.
NODE_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
MAX_BINDING_NODES = 16
NodeName = Annotated[str, StringConstraints(pattern=NODE_NAME_PATTERN)]
_NodeEntry = Annotated[str, StringConstraints(pattern=r"^(\*|[a-z0-9][a-z0-9._-]{0,62})$")]
ANY_NODE = "*"


def default_node_name() -> str:
    """The host name as a node name: lowercased, other characters as ``-``, at most 63."""
    name = re.sub(r"[^a-z0-9._-]", "-", socket.gethostname().lower()).lstrip("._-")[:63]
    return name or "node"


class Binding(BaseModel):
    """Ties a block to a sensor instance and a subject that sensor can check.

    The wire form is flat: ``{"sensor": "fs", "path": "config/app.yaml", "key":
    "/http/timeout", "equals": 30}``. Every key but ``sensor``, ``subject``, ``nodes``
    and ``served_by`` is the selector, which the sensor's own binding model validates.
    The subject defaults to the first of ``path``, ``test``, ``url``, ``check``,
    ``topic`` found in it.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    sensor: SensorName
    subject: Subject = ""
    nodes: list[_NodeEntry] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_BINDING_NODES,
        description="The nodes whose sensor checks this binding, in order of preference "
        '(node names, or ["*"]: any node); the first one alive serves it. Default: the '
        'node that stored it (docs/SCALE.md, "Node-scoped bindings").',
    )
    served_by: NodeName | None = Field(
        default=None,
        description="The node serving this binding now (set by memwarden; ignored when "
        "given on a write).",
    )

    # A binding is what it checks: its sensor, subject and selector. Which nodes check
    # it and who serves it now are not part of it, so the binding a sensor was given
    # (from the store, with both) equals the one in a request to check it (without).
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Binding):
            return NotImplemented
        return (self.sensor, self.subject, self.model_extra) == (
            other.sensor,
            other.subject,
            other.model_extra,
        )

    def __hash__(self) -> int:
        # As a frozen model's own hash was (its fields then: sensor and subject).
        return hash((self.sensor, self.subject))

    @field_validator("nodes")
    @classmethod
    def _node_list(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if ANY_NODE in value and len(value) > 1:
            raise ValueError('"*" (any node) stands alone in a list of nodes')
        if len(set(value)) != len(value):
            raise ValueError("a node is named twice")
        return value

    @model_serializer(mode="wrap")
    def _without_unset_nodes(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A binding not read from the store (a request to a sensor, an agent's own) has
        # neither: left out, so older agents that refuse unknown keys still read it.
        # A stored binding has its list; served by no one then shows as null.
        data = handler(self)
        if isinstance(data, dict) and self.nodes is None:
            data.pop("nodes", None)
            if self.served_by is None:
                data.pop("served_by", None)
        return data

    @model_validator(mode="after")
    def _derive_subject(self) -> Binding:
        # The selector is stored as JSON: extra keys are not validated field by field.
        try:
            _json_utf8_clean(self.model_extra or {})
        except ValueError as err:
            raise ValueError(f"the selector {err}") from None
        if not self.subject:
            for key in BINDING_SUBJECT_KEYS[1:]:
                value = (self.model_extra or {}).get(key)
                if isinstance(value, str | int | float) and not isinstance(value, bool):
                    object.__setattr__(self, "subject", str(value))
                    break
        return self

    @property
    def selector(self) -> dict[str, Any]:
        """The sensor-specific part of the binding."""
        return dict(self.model_extra or {})


class Validation(BaseModel):
    """Who last checked a block, when, for how long it holds, and how far to trust it."""

    model_config = ConfigDict(extra="forbid")

    validated_by: str | None = None
    validated_at: AwareDatetime | None = None
    validity_window: Duration
    reliability: Unit


class NewBlock(BaseModel):
    """What an agent submits to store a block."""

    model_config = _STRICT

    title: Title = ""
    content: Content
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    source: Annotated[str, StringConstraints(min_length=1, max_length=128)] = "agent"
    category: Category = Category.SEMANTIC
    info_type: InfoType | None = None
    volatility: Volatility | None = None
    tier: Tier = Tier.SHORT_TERM
    reliability: Unit | None = Field(
        default=None, description="Initial reliability; defaults from the source."
    )
    importance: Unit = 0.5
    validity_window: Duration | None = Field(
        default=None, description="Overrides the window the volatility implies."
    )
    bindings: list[Binding] = Field(default_factory=list, max_length=32)
    depends_on: list[BlockId] = Field(
        default_factory=list,
        max_length=32,
        description="Blocks this one rests on: when one is refuted or goes stale, so does this.",
    )
    signals: dict[Annotated[str, StringConstraints(max_length=64)], Signal] = Field(
        default_factory=dict,
        max_length=32,
        description="Engagement signals for promotion (user_confirmations, ...).",
    )
    namespace: Namespace | None = Field(
        default=None,
        description="The namespace (project) it belongs to: one the token's agent may "
        "write; default: the agent's first (docs/PRIVACY.md).",
    )

    @model_validator(mode="after")
    def _fill_types(self) -> NewBlock:
        if self.info_type is not None and self.volatility is None:
            self.volatility = _INFO_TO_VOLATILITY[self.info_type]
        elif self.info_type is None and self.volatility is not None:
            self.info_type = _VOLATILITY_TO_INFO[self.volatility]
        elif self.info_type is None:  # neither given
            self.info_type, self.volatility = InfoType.SEMI_STATIC, Volatility.MEDIUM
        return self


class Block(BaseModel):
    """A stored block as callers see it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    content: str
    tags: list[str]
    source: str
    category: Category
    info_type: InfoType
    volatility: Volatility
    tier: Tier
    state: BlockState
    stale_reasons: list[StaleReason]
    validation: Validation
    stale_at: datetime | None
    importance: float
    retention: float
    stability: float
    access_count: int
    session_count: int
    reinforcement_count: int
    contradiction_count: int
    flapping: bool
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime | None
    archived_at: datetime | None = None
    archive_reason: str | None = None
    version: int
    bindings: list[Binding] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    signals: dict[str, float] = Field(default_factory=dict)
    namespace: str = Field(default="default", description="The namespace (project) it is in.")
    short_id: str | None = Field(
        default=None,
        description="The id's last hex digits, as many as tell it apart in this store "
        "(at least 8); accepted wherever an id is.",
    )
    duplicate_of: str | None = Field(
        default=None,
        description="Only on an add with dedupe: this block already held the same content "
        "(casefolded, whitespace collapsed) and was returned instead of a new one.",
    )


class ValidationEvent(BaseModel):
    """What a sensor observed about a subject. The same schema travels over HTTP and MQTT.

    ``observed_at`` is the time that counts: an event older than a block's last
    validation never makes it fresher. ``validity_window`` overrides the block's window
    for this observation (like a per-result TTL).
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"$id": "https://memwarden.dev/schema/validation-event.v1.json"},
    )

    # Text (no NUL, valid UTF-8): PostgreSQL text holds neither, and both backends agree.
    event_id: Annotated[
        str, StringConstraints(min_length=1, max_length=64), AfterValidator(_utf8_clean)
    ] = Field(default_factory=new_id, description="Unique per event; duplicates are stored once.")
    sensor: SensorName
    subject: Subject = ""
    outcome: Outcome
    observed_at: AwareDatetime
    observed: Annotated[JsonValue, AfterValidator(_json_utf8_clean)] = Field(
        default=None, description="The value the sensor saw."
    )
    reliability: Unit | None = Field(
        default=None, description="The sensor's reliability; the sensor default when absent."
    )
    validity_window: Duration | None = None
    request_id: (
        Annotated[str, StringConstraints(max_length=64), AfterValidator(_utf8_clean)] | None
    ) = None
    block_id: BlockId | None = Field(
        default=None, description="Apply to this block only, instead of every bound block."
    )
    message: Annotated[Text, StringConstraints(max_length=4096)] = ""
    agent: Annotated[str, StringConstraints(max_length=128), AfterValidator(_utf8_clean)] | None = (
        Field(default=None, description="The remote agent that sent the event (MQTT).")
    )
    seq: Annotated[int, Field(ge=0, strict=True)] | None = Field(
        default=None, description="Per agent-run sequence number, for gap detection."
    )

    @model_validator(mode="after")
    def _needs_target(self) -> ValidationEvent:
        if not self.subject and not self.block_id:
            raise ValueError("an event needs a subject or a block_id")
        return self


class RevalidationRequest(BaseModel):
    """The daemon asking a sensor to check one binding now."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    block_id: str
    sensor: str
    subject: str
    binding: Binding
    reason: RevalidationReason
    created_at: AwareDatetime
    deadline: AwareDatetime
    attempts: int = 0
    queued_at: AwareDatetime | None = Field(
        default=None,
        exclude=True,
        description="When the check was asked for (``created_at`` is when it was sent; a "
        "retry or a check spread after downtime waits in between), on the clock of the "
        "host the sensor runs on. A look at the binding taken after it answers the "
        "request. Left out of the model's own serialisation: over MQTT the daemon adds it "
        "(on its clock) only for agents that announce they read it, since older agents "
        "refuse a request with a field they do not know; the agent puts it on its own "
        "clock (docs/MQTT.md).",
    )

    @property
    def timeout(self) -> timedelta:
        return self.deadline - self.created_at
