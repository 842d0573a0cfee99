"""The daemon's configuration: arguments > environment (``MEMWARDEN_``) > TOML > defaults.

Only the daemon reads the environment, and never writes it: the variables (the process's,
or a mapping given to :func:`load_settings`) reach pydantic-settings through a settings
source (:class:`_EnvSource`), so loading is safe while other threads run. Every problem
is reported with its path, the value and what was expected:
``sensors.api.interval: '5 minutes' is not a duration ...``.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from typing_extensions import override

from memwarden.errors import ConfigError, PluginLoadError
from memwarden.hosting import validate_sensor_options
from memwarden.memory import (
    FLOOD_COMMIT_WEIGHT,
    FLOOD_WAL_MIB,
    NAMESPACE_PATTERN,
    CompactionConfig,
    Duration,
    Namespace,
    RetentionConfig,
    Unit,
    store_location,
)
from memwarden.memory.policy import PolicyConfig
from memwarden.plugins import StartupPolicy
from memwarden.privacy import PrivacySettings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic.fields import FieldInfo

    from memwarden.plugins import Registry

__all__ = [
    "NAMESPACE_PATTERN",
    "OPERATIONS",
    "AgentPolicy",
    "AgentSettings",
    "ApiSettings",
    "BusSettings",
    "MqttSettings",
    "ReadThroughSettings",
    "RestartSettings",
    "SchedulerSettings",
    "SensorSettings",
    "Settings",
    "StoreSettings",
    "SuggestSettings",
    "config_problems",
    "default_home",
    "format_problems",
    "hostname_id",
    "load_settings",
    "sensor_option_problems",
    "validate_sensor_options",
]

_FROZEN = ConfigDict(extra="forbid", frozen=True)
Port = Annotated[int, Field(ge=0, le=65535)]


def default_home(environ: Mapping[str, str] | None = None) -> Path:
    """Where state lives when nothing says otherwise.

    systemd's ``STATE_DIRECTORY``, then ``$XDG_STATE_HOME/memwarden``, then
    ``~/.local/state/memwarden``, read from ``environ`` (default: the process
    environment). ``MEMWARDEN_HOME`` (read by :class:`Settings`) wins.
    """
    env = os.environ if environ is None else environ
    if state := env.get("STATE_DIRECTORY"):
        return Path(state.split(":")[0])
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "memwarden"


class StoreSettings(BaseModel):
    """``[store]``: the database (SQLite by default; PostgreSQL with ``url``)."""

    model_config = _FROZEN

    path: Path | None = Field(default=None, description="Default: <home>/memwarden.db")
    url: str | None = Field(
        default=None,
        description="Instead of path: sqlite:///path/to/file.db, or"
        " postgresql://user:password@host:port/database for a PostgreSQL store"
        " (docs/SCALE.md; needs the postgres extra). The password is never logged.",
        repr=False,
    )
    synchronous: Literal["auto", "normal", "full"] = Field(
        default="auto",
        description="SQLite's fsync policy: normal survives a crash or kill -9 of the daemon;"
        " full (fsync at every commit) also survives power loss or an OS crash after an"
        " acknowledgement. auto: full when [mqtt] is configured (remote agents are told"
        " their event is stored once acknowledged), normal otherwise.",
    )
    readers: Annotated[int, Field(ge=1, le=16)] = 2
    maintenance_connections: Annotated[int, Field(ge=1, le=8)] = Field(
        default=2,
        description="PostgreSQL only: how many ranges of rows a decay pass works on at once,"
        " each in a transaction of its own: the writer's connection and"
        " maintenance_connections - 1 opened for the pass and closed after it (the leader's"
        " pass over a million blocks takes about half as long with 2 as with 1 on a 2-core"
        " server; docs/SCALE.md). 1 runs every range on the writer's connection.",
    )
    inline_read_ms: Annotated[float, Field(ge=0, le=5)] = Field(
        default=0.5,
        description="A small search runs on the event loop's own read-only connection when it"
        " finishes within this budget of the loop thread's CPU time (SQLite interrupts it past"
        " the budget, or past ten times the budget in wall time, and a reader thread answers"
        " instead): no thread hand-off for the common small search. The loop is held at most"
        " about this long per search; 0 sends every search to a reader thread.",
    )
    flood_commit_events: Annotated[int, Field(ge=20_000, le=1_000_000)] = Field(
        default=FLOOD_COMMIT_WEIGHT,
        description="In a flood of events (more waiting for the writer than one transaction"
        " takes, 20 000), each further transaction may take twice as many, up to this many:"
        " fewer commits, but an event further back in the flood is acknowledged later (each"
        " 100 000 events in one transaction cost about 5 s of one core, docs/BENCHMARKS.md)."
        " 20000 keeps every transaction at 20 000. SQLite only.",
    )
    flood_wal_mib: Annotated[int, Field(ge=0, le=1_048_576)] = Field(
        default=FLOOD_WAL_MIB,
        description="In a flood of events, commits leave the WAL checkpoint (copying the"
        " WAL back into the database file, and syncing both) to the flood's last commit"
        " while the WAL file is under this many MiB: one checkpoint for the flood instead of"
        " one per transaction, at the price of this much disk for the WAL meanwhile (cut back"
        " to 64 MiB afterwards). 0 checkpoints at every commit, as SQLite does. SQLite only.",
    )
    score_log: Path | None = Field(
        default=None,
        description="JSONL log of every promotion score (rotated). Default: <home>/scores.jsonl",
    )
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    secure_delete: bool = Field(
        default=True,
        description="SQLite overwrites with zeros what a write frees (deleted rows, an edit's"
        " old text, merged search-index segments), so `memwarden forget` leaves no copy in"
        " the file's free space. Off saves some write time (docs/BENCHMARKS.md) but an"
        " erasure then reaches older copies only with --vacuum.",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            store_location(value)
        except ConfigError as err:  # its message never repeats a password
            raise ValueError(str(err)) from None
        return value

    @model_validator(mode="after")
    def _one_location(self) -> StoreSettings:
        if self.url is not None and self.path is not None:
            raise ValueError("set [store] path or [store] url, not both")
        return self

    @property
    def postgresql(self) -> bool:
        """Whether the store is on PostgreSQL."""
        return isinstance(self.location(Path()), str)

    def location(self, default: Path) -> Path | str:
        """The SQLite file (``path``, the file of a ``sqlite://`` url, else ``default``)
        or the PostgreSQL URL."""
        if self.url is not None:
            return store_location(self.url)
        return self.path or default

    def synchronous_for(self, *, mqtt: bool) -> Literal["normal", "full"]:
        """The mode in effect: ``auto`` is ``full`` with the MQTT bridge on."""
        if self.synchronous == "auto":
            return "full" if mqtt else "normal"
        return self.synchronous


class ApiSettings(BaseModel):
    """``[api]``: the HTTP API (loopback only unless told otherwise)."""

    model_config = _FROZEN

    enabled: bool = True
    host: str = "127.0.0.1"
    port: Port = 7077
    unix_socket: Path | None = None
    socket_group: str | None = Field(
        default=None,
        description="Group that may use the Unix socket (0660); by default 0600, owner only.",
    )
    max_body_bytes: Annotated[int, Field(ge=1024)] = 1024 * 1024
    max_future_skew: Duration = Field(
        default=timedelta(seconds=5),
        description="POST /v1/events: an observed_at further ahead of our clock is refused.",
    )
    docs: bool = Field(
        default=True,
        description="Serve /docs, /redoc and /openapi.json (behind the token); false: off.",
    )


class BusSettings(BaseModel):
    """``[bus]``: how events travel from sensors to the store."""

    model_config = _FROZEN

    queue_per_source: Annotated[int, Field(ge=1)] = 1000
    batch_max: Annotated[int, Field(ge=1)] = 2000
    drain_timeout: Duration = timedelta(seconds=10)


class SchedulerSettings(BaseModel):
    """``[scheduler]``: the periodic passes."""

    model_config = _FROZEN

    sweep_interval: Duration = timedelta(seconds=5)
    dispatch_interval: Duration = timedelta(seconds=1)
    sweep_batch: Annotated[int, Field(ge=1)] = 1000
    decay_interval: Duration = timedelta(hours=1)
    heuristic_interval: Duration = timedelta(hours=24)
    consolidation_interval: Duration = timedelta(hours=1)
    compaction_interval: Duration = timedelta(hours=1)
    heartbeat_interval: Duration = timedelta(seconds=30)


# A node's name (docs/SCALE.md): as memwarden.cluster.check_name, which the daemon cannot
# import (the cluster needs the postgres extra).
_NODE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


def default_node_name() -> str:
    """The host name as a node name: lowercased, other characters as ``-``, at most 63."""
    name = re.sub(r"[^a-z0-9._-]", "-", socket.gethostname().lower()).lstrip("._-")[:63]
    return name or "node"


class ClusterSettings(BaseModel):
    """``[cluster]``: this daemon as one node of several on one PostgreSQL database
    (docs/SCALE.md). Unused on SQLite, where a daemon always leads."""

    model_config = _FROZEN

    node: str = Field(
        default_factory=default_node_name,
        description="This node's name, unique among the nodes: 1-63 characters of a-z, 0-9,"
        " '.', '_' and '-', starting with a letter or digit (default: the host name).",
    )
    lease_ttl: Duration = Field(
        default=timedelta(seconds=6),
        description="A renewal of the leader's lease holds it this long (database clock).",
    )
    lease_renew: Duration = Field(
        default=timedelta(seconds=2), description="The leader renews its lease this often."
    )
    lease_poll: Duration = Field(
        default=timedelta(seconds=1),
        description="A follower looks for an expired lease this often.",
    )
    lease_safety: Duration = Field(
        default=timedelta(milliseconds=500),
        description="The leader stops believing this long before its lease could expire.",
    )
    spool_max_unsent: Annotated[int, Field(ge=1)] = Field(
        default=100_000,
        description="Events the local spool keeps while the database is away; past it the"
        " oldest are dropped (counted).",
    )

    @field_validator("node")
    @classmethod
    def _node_name(cls, value: str) -> str:
        if not _NODE_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid node name (1-63 characters of a-z, 0-9, '.', '_'"
                " and '-', starting with a letter or digit)"
            )
        return value

    @model_validator(mode="after")
    def _lease_times(self) -> ClusterSettings:
        ttl, renew = self.lease_ttl.total_seconds(), self.lease_renew.total_seconds()
        poll, safety = self.lease_poll.total_seconds(), self.lease_safety.total_seconds()
        if min(ttl, renew, poll, safety) <= 0:
            raise ValueError("the lease times must be positive")
        if renew + safety >= ttl:
            raise ValueError(
                f"lease_renew ({renew:g} s) + lease_safety ({safety:g} s) must be below"
                f" lease_ttl ({ttl:g} s), or a renewal could come too late"
            )
        return self


class ReadThroughSettings(BaseModel):
    """``[read_through]``: what a read with ``max_age``/``fresh`` may check, and receipts."""

    model_config = _FROZEN

    quick: Duration = Field(
        default=timedelta(milliseconds=500),
        description="A binding whose recent checks take at most this (median) is re-checked "
        "on read; slower ones (a test suite, a slow plugin) carry their age.",
    )
    recheck_floor: Duration = Field(
        default=timedelta(seconds=1),
        description="A binding checked this recently is not checked again for a read "
        "(at least the sensor's own min_interval): readers cannot make it a load generator.",
    )
    unreachable_after: Annotated[int, Field(ge=1)] = Field(
        default=2, description="Consecutive check errors after which a fact is unreachable."
    )
    unreachable_grace: Duration = Field(
        default=timedelta(seconds=10),
        description="How long a bound sensor may be down (failed, agent offline) before "
        "its facts are unreachable.",
    )


class SuggestSettings(BaseModel):
    """``[suggest]``: binding suggestions for facts added without a binding."""

    model_config = _FROZEN

    bind: Literal["auto", "suggest", "none"] = Field(
        default="none",
        description="What POST /v1/blocks does when the body names no `bind`: bind the best "
        "confirming suggestion (auto), return suggestions (suggest), or nothing (none).",
    )
    auto_min_confidence: float = Field(
        default=0.85,
        ge=0.0,
        le=1.0,
        description="bind=auto binds only a suggestion at least this confident.",
    )
    propose: bool = Field(
        default=True,
        description="Run the periodic pass that proposes bindings (and depends_on) for "
        "unbound facts, for a person to accept or reject on the review page.",
    )
    propose_interval: Duration = Field(
        default=timedelta(hours=1), description="How often the proposal pass runs."
    )
    propose_batch: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=200,
        description="Unbound facts looked at per pass (the next ones each time, round the "
        "store): each costs a match and a dry run per candidate.",
    )


class SearchSettings(BaseModel):
    """``[search]``: search by meaning (docs/SEARCH.md)."""

    model_config = _FROZEN

    embedder: str = Field(
        default="none",
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="The embedder behind vector and hybrid search: none (keyword search "
        "only), stub (hashing, for tests), wordllama (static embeddings shipped in its "
        "wheel: pip install 'memwarden[semantic]'), or a plugin's name "
        "(entry-point group memwarden.embedders). With one, searches are hybrid by default.",
    )
    embed_batch: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=256, description="Blocks embedded per batch by the background task."
    )
    embed_claim: Duration = Field(
        default=timedelta(seconds=120),
        description="On PostgreSQL: how long a node's claim on a batch of queued blocks holds"
        " (database clock) before another node may embed them; longer than a batch takes"
        " (1 s to 1 day).",
    )
    embedders: dict[
        Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")],
        dict[str, Any],
    ] = Field(
        default_factory=dict,
        description="Per-embedder options, [search.embedders.<name>], passed to the embedder "
        "named by `embedder` (e.g. http: url, model, dim, allowed_hosts, timeout, "
        "max_answer_bytes; docs/SEARCH.md).",
    )

    @field_validator("embed_claim")
    @classmethod
    def _claim_time(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(days=1):
            raise ValueError(f"{value.total_seconds():g} s is outside 1 s to 1 day")
        return value


class RestartSettings(BaseModel):
    """``[sensors.<name>.restart]``: how a crashing sensor is restarted."""

    model_config = _FROZEN

    backoff_initial: Duration = Field(
        default=timedelta(seconds=1), description="Ceiling of the first delay (full jitter)."
    )
    backoff_max: Duration = Field(
        default=timedelta(seconds=60), description="The delay never exceeds this."
    )
    crash_loop_restarts: Annotated[int, Field(ge=0)] = Field(
        default=5, description="More crashes than this within crash_loop_window: failed."
    )
    crash_loop_window: Duration = timedelta(minutes=5)
    healthy_after: Duration = Field(
        default=timedelta(seconds=60), description="A run this long resets the backoff."
    )


_TRANSPORTS: tuple[Literal["mqtt", "http"], ...] = ("mqtt", "http")


class SensorSettings(BaseModel):
    """``[sensors.<name>]``: one sensor instance; sensor-specific keys go to its Config."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str | None = Field(default=None, description="The plugin; default: the table name.")
    enabled: bool = True
    startup: StartupPolicy = StartupPolicy.RETRY
    revalidate_timeout: Duration | None = Field(
        default=None,
        description="How long one check may take; default: rules.staleness.revalidation_timeout.",
    )
    setup_timeout: Duration = timedelta(seconds=30)
    teardown_timeout: Duration = timedelta(seconds=10)
    restart: RestartSettings = Field(default_factory=RestartSettings)
    remote: bool = Field(
        default=False,
        description="Runs on another host (`memwarden agent`) and talks over MQTT: not run here.",
    )
    # What a remote sensor may report (checked on every event that arrives over HTTP/MQTT).
    report_via: list[Literal["mqtt", "http"]] = Field(
        default_factory=lambda: list(_TRANSPORTS),
        description="Remote: the ways its events may arrive (MQTT, POST /v1/events).",
    )
    agents: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]] | None = Field(
        default=None,
        description="Remote: the agent ids that may report as this sensor over MQTT "
        "(on agents/<id>/events/<sensor>); default: any agent the broker lets publish.",
    )
    max_reliability: Unit | None = Field(
        default=None,
        description="Remote: an event's reliability is capped (clamped) to this; default: "
        "the sensor's reliability in rules.evidence.sensor_reliability.",
    )
    max_validity_window: Duration | None = Field(
        default=None,
        description="Remote: an event's validity_window is capped (clamped) to this; "
        "default: the longest rules.staleness.validity_window.",
    )

    @model_validator(mode="after")
    def _remote_only(self) -> SensorSettings:
        if not self.remote:
            local = [
                key
                for key in ("agents", "max_reliability", "max_validity_window")
                if getattr(self, key) is not None
            ]
            if local:
                raise ValueError(f"{', '.join(local)}: only for a remote sensor (remote = true)")
        if self.remote and self.kind == "review":
            raise ValueError("the review sensor records people's decisions: it cannot be remote")
        return self

    @property
    def options(self) -> dict[str, Any]:
        """The sensor-specific keys, validated later by the sensor's own Config model."""
        return dict(self.model_extra or {})


_TOPIC_LEVEL = re.compile(r"[^/+#\x00]+")
_AGENT_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def hostname_id() -> str:
    """This host's name, reduced to what a topic level and a client id may hold."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname() or "localhost")
    return name[:64] or "localhost"


class MqttSettings(BaseModel):
    """``[mqtt]``: the broker remote sensors talk through (disabled unless present)."""

    model_config = _FROZEN

    url: str = Field(
        default="mqtt://127.0.0.1:1883",
        description="mqtt://host:port, or mqtts://host:port for TLS.",
    )
    username: str | None = None
    password: SecretStr | None = None
    client_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Stable client id (persistent session). Default: memwarden-<hostname> "
        "for the daemon, memwarden-agent-<agent id> for an agent.",
    )
    prefix: str = "memwarden/v1"
    ca_file: Path | None = Field(default=None, description="CA bundle for mqtts://.")
    cert_file: Path | None = Field(default=None, description="Client certificate (mqtts://).")
    key_file: Path | None = Field(default=None, description="Client key (mqtts://).")
    tls_insecure: bool = Field(default=False, description="Skip the host name check (tests).")
    keepalive_s: Annotated[int, Field(ge=5, le=3600)] = 30
    connect_timeout: Duration = timedelta(seconds=10)
    backoff_initial: Duration = Field(
        default=timedelta(milliseconds=500), description="Ceiling of the first reconnect delay."
    )
    backoff_max: Duration = Field(
        default=timedelta(seconds=30), description="A reconnect delay never exceeds this."
    )
    max_payload_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 64 * 1024
    max_future_skew: Duration = Field(
        default=timedelta(seconds=5),
        description="An event observed further ahead of our clock is dead-lettered.",
    )
    max_agents: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        default=1000,
        description="Agents followed (status, sequence gaps); the least recently heard go first.",
    )
    agent_idle_timeout: Duration = Field(
        default=timedelta(days=1),
        description="An agent not heard from this long is forgotten (gap figures included).",
    )
    outbox_max: Annotated[int, Field(ge=1)] = Field(
        default=10_000, description="Messages kept while disconnected; the oldest go first."
    )
    batch_max: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=1000, description="Events committed (then acknowledged) together."
    )
    inflight_max: Annotated[int, Field(ge=1, le=65_535)] = Field(
        default=1000, description="Our own QoS 1 publishes waiting for their PUBACK."
    )
    resend_gaps: bool = Field(
        default=True, description="Ask an agent to re-send the events a sequence gap lost."
    )
    remote_answer_grace: Duration = Field(
        default=timedelta(seconds=10),
        description="A remote revalidation unanswered this long after its deadline "
        "becomes an error event.",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            _ = parts.port  # raises on a port that is not a number or out of range
        except ValueError as err:
            raise ValueError(f"{value!r} is not a broker URL ({err})") from None
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise ValueError(f"{value!r} is not a broker URL (use mqtt://host:1883 or mqtts://...)")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"{value!r}: a broker URL has no path, query or fragment")
        if parts.username or parts.password:
            raise ValueError(f"{value!r}: put credentials in username/password, not the URL")
        return value

    @field_validator("prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        levels = value.split("/")
        if not value or any(not _TOPIC_LEVEL.fullmatch(level) for level in levels):
            raise ValueError(
                f"{value!r} is not a topic prefix (levels separated by /, no empty level, "
                "no + or #)"
            )
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> MqttSettings:
        if (self.key_file is None) != (self.cert_file is None):
            raise ValueError("cert_file and key_file go together")
        return self

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (8883 if parts.scheme == "mqtts" else 1883)

    @property
    def tls(self) -> bool:
        return self.url.startswith("mqtts:")


class AgentSettings(BaseModel):
    """``[agent]``: ``memwarden agent`` (remote mode) on a host without a store."""

    model_config = _FROZEN

    id: str = Field(
        default_factory=hostname_id, description="Names this agent in topics; default: hostname."
    )
    state_dir: Path | None = Field(default=None, description="Default: <home>/agent")
    queue_max: Annotated[int, Field(ge=1)] = Field(
        default=100_000, description="Events kept while the broker is away; the oldest go first."
    )
    history_max: Annotated[int, Field(ge=0)] = Field(
        default=10_000, description="Sent events kept to answer a re-send request."
    )
    heartbeat_interval: Duration = timedelta(seconds=10)

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not _AGENT_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not an agent id ([A-Za-z0-9_.-], 1-64 characters)")
        return value


Operation = Literal["read", "write", "forget", "review", "report", "admin"]
OPERATIONS: tuple[Operation, ...] = ("read", "write", "forget", "review", "report", "admin")
_AGENT_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class AgentPolicy(BaseModel):
    """``[agents.<name>]``: one API token (an agent), what it may do and where.

    The token itself is never in the TOML: ``token_file`` (checked like the state dir's
    token: a regular file, 0600, owned by the daemon's user) or ``token_env`` (the name of
    an environment variable of the daemon). ``[agents.default]`` is the state dir's own
    token (``<home>/token``): it needs neither, and narrows what that token may do.
    docs/PRIVACY.md ("Agents and namespaces") describes each operation.
    """

    model_config = _FROZEN

    token_file: Path | None = Field(
        default=None, description="A file holding this agent's token (mode 0600)."
    )
    token_env: str | None = Field(
        default=None, description="The daemon's environment variable holding the token."
    )
    operations: list[Operation] = Field(
        default_factory=lambda: list(OPERATIONS),
        description="What the token may do: read, write, forget, review, report, admin.",
    )
    namespaces: list[Namespace | Literal["*"]] = Field(
        default_factory=lambda: ["default"],
        min_length=1,
        max_length=64,
        description="The namespaces (projects) it reads and writes; the first is where its "
        'new blocks go; "*": every namespace.',
    )
    privacy_profile: str = Field(
        default="default",
        pattern=NAMESPACE_PATTERN,
        description="The named privacy (redaction) profile its writes go through.",
    )

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> AgentPolicy:
        if self.token_file is not None and self.token_env is not None:
            raise ValueError("give token_file or token_env, not both")
        if "*" in self.namespaces and len(self.namespaces) > 1:
            raise ValueError('namespaces: "*" (every namespace) stands alone')
        return self


class Settings(BaseSettings):
    """All of memwarden's daemon configuration."""

    model_config = SettingsConfigDict(
        env_prefix="MEMWARDEN_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    home: Path = Field(default_factory=default_home, description="State directory.")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "console", "json"] = "auto"
    plugins: str | None = Field(
        default=None, description="Comma-separated allowlist of sensor plugins to load."
    )
    store: StoreSettings = Field(default_factory=StoreSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    bus: BusSettings = Field(default_factory=BusSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    read_through: ReadThroughSettings = Field(default_factory=ReadThroughSettings)
    rules: PolicyConfig = Field(default_factory=PolicyConfig)
    sensors: dict[str, SensorSettings] = Field(default_factory=dict)
    mqtt: MqttSettings | None = Field(
        default=None, description="The MQTT bridge for remote sensors; off unless configured."
    )
    agent: AgentSettings = Field(default_factory=AgentSettings)
    suggest: SuggestSettings = Field(default_factory=SuggestSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    retention: RetentionConfig = Field(
        default_factory=RetentionConfig,
        description="How long blocks, archived blocks, events and score-log lines are kept:"
        " nothing is removed unless configured (docs/PRIVACY.md).",
    )
    privacy: PrivacySettings = Field(
        default_factory=PrivacySettings,
        description="What is redacted, rejected or allowed at every door (docs/PRIVACY.md).",
    )
    agents: dict[str, AgentPolicy] = Field(
        default_factory=dict,
        description="Named API tokens, each with its operations and namespaces "
        "(docs/PRIVACY.md); the state dir's token is the agent `default`.",
    )

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, value: dict[str, AgentPolicy]) -> dict[str, AgentPolicy]:
        for name, policy in value.items():
            if not _AGENT_NAME.fullmatch(name):
                msg = f"agent name {name!r} must match [a-z][a-z0-9_.-]* (at most 64 characters)"
                raise ValueError(msg)
            has_source = policy.token_file is not None or policy.token_env is not None
            if name == "default" and has_source:
                raise ValueError(
                    "agents.default is the state dir's token (<home>/token): "
                    "it takes no token_file or token_env"
                )
            if name != "default" and not has_source:
                raise ValueError(f"agents.{name}: needs token_file or token_env")
        return value

    @model_validator(mode="after")
    def _profiles_exist(self) -> Settings:
        """An agent's ``privacy_profile`` is ``default`` or one of ``[privacy.profiles]``."""
        for name, policy in sorted(self.agents.items()):
            profile = policy.privacy_profile
            if profile != "default" and profile not in self.privacy.profiles:
                known = ", ".join(sorted(self.privacy.profiles)) or "none defined"
                raise ValueError(
                    f"agents.{name}.privacy_profile: {profile!r} is not a profile of "
                    f"[privacy.profiles] ({known})"
                )
        return self

    @field_validator("sensors")
    @classmethod
    def _sensor_names(cls, value: dict[str, SensorSettings]) -> dict[str, SensorSettings]:
        for name, conf in value.items():
            if conf.remote and name == "review" and conf.kind is None:
                raise ValueError(
                    "sensors.review: the review sensor records people's decisions; "
                    "it cannot be remote"
                )
            if not re.fullmatch(r"[a-z][a-z0-9_.-]{0,63}", name):
                msg = f"sensor name {name!r} must match [a-z][a-z0-9_.-]* (at most 64 characters)"
                raise ValueError(msg)
        return value

    @property
    def db_path(self) -> Path:
        """The SQLite file (for a PostgreSQL store: where it would be, unused)."""
        where = self.store.location(self.home / "memwarden.db")
        return where if isinstance(where, Path) else self.home / "memwarden.db"

    @property
    def database(self) -> Path | str:
        """The store the daemon opens: the SQLite file, or the PostgreSQL URL."""
        return self.store.location(self.home / "memwarden.db")

    @property
    def plugin_allowlist(self) -> list[str] | None:
        if self.plugins is None:
            return None
        return [p.strip() for p in self.plugins.split(",") if p.strip()]


def format_problems(err: ValidationError) -> list[str]:
    """``path: message`` for each problem, as ``config check`` prints them."""
    out = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown setting"
        out.append(f"{path}: {msg}")
    return out


def _one_sensor_problems(name: str, conf: SensorSettings, registry: Registry) -> list[str]:
    if conf.remote:  # checked by the agent that runs it, not here
        return []
    kind = conf.kind or name
    try:
        info = registry.get(kind)
    except PluginLoadError as err:
        return [f"sensors.{name}.kind: {err}"]
    try:
        validate_sensor_options(name, info.cls.Config, conf.options)
    except ConfigError as err:
        return list(err.problems)
    return []


def sensor_option_problems(settings: Settings, registry: Registry) -> list[str]:
    """Every problem in the ``[sensors.*]`` tables: unknown kinds and bad options."""
    problems: list[str] = []
    for name, conf in settings.sensors.items():
        problems.extend(_one_sensor_problems(name, conf, registry))
    return problems


def config_problems(
    config_file: str | Path, registry_for: Callable[[list[str] | None], Registry]
) -> tuple[Settings | None, list[str]]:
    """Every problem of a configuration file in one pass: the top-level settings *and*
    each sensor's own options, even when the top level has problems too.

    ``registry_for(allowlist)`` gives the sensor plugins to check the sensors against.
    Returns the settings (None when they do not load) and the problems.
    """
    try:
        settings = load_settings(config_file)
    except ConfigError as err:
        problems = list(err.problems) or [str(err)]
    else:
        allow = settings.plugin_allowlist
        return settings, sensor_option_problems(settings, registry_for(allow))
    try:
        raw = tomllib.loads(Path(config_file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None, problems  # the file itself is the problem; nothing more to read
    sensors = raw.get("sensors")
    if not isinstance(sensors, dict):
        return None, problems
    plugins = raw.get("plugins")
    allow = (
        [p.strip() for p in plugins.split(",") if p.strip()] if isinstance(plugins, str) else None
    )
    registry = registry_for(allow)
    for name, table in sensors.items():
        try:
            conf = SensorSettings.model_validate(table)
        except ValidationError:
            continue  # the top-level pass reported this table's own problems
        problems.extend(_one_sensor_problems(str(name), conf, registry))
    return None, problems


class _EnvSource(EnvSettingsSource):
    """``MEMWARDEN_*`` variables read from a given mapping, not from ``os.environ``.

    pydantic-settings' own environment source, with its prefix, ``__`` nesting and JSON
    parsing; only where the variables come from differs (``_load_env_vars`` is the hook
    its dotenv source overrides too). ``load_settings(env=...)`` thus never writes the
    process environment, which other threads may be reading.
    """

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            key if self.case_sensitive else key.lower(): value
            for key, value in self._environ.items()
            if not (self.env_ignore_empty and value == "")
        }


class _DefaultHome(PydanticBaseSettingsSource):
    """The lowest layer: ``home`` from :func:`default_home` of the given environment."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._environ = environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        del field  # one field only, by name
        if field_name == "home":
            return default_home(self._environ), field_name, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return {"home": default_home(self._environ)}


def load_settings(
    config_file: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Load settings from a TOML file, the environment and explicit overrides.

    Precedence: ``overrides`` > ``MEMWARDEN_*`` variables of ``env`` (default: the
    process environment) > the TOML file > defaults (``home`` from :func:`default_home`
    of that same environment). The process environment is read, never written.

    Raises :class:`ConfigError` listing every problem with its path.
    """
    path = Path(config_file) if config_file is not None else None
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"{path}: no such configuration file")
        try:
            with path.open("rb") as fh:
                tomllib.load(fh)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: not valid TOML: {err}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not valid TOML: not UTF-8 text") from None
        except OSError as err:
            raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None

    environ = dict(os.environ if env is None else env)  # a snapshot: read once, never written

    class _FileSettings(Settings):
        @classmethod
        @override
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            # Not the environment as pydantic reads it (_EnvSource instead), no .env
            # files, no secrets directories.
            sources: list[PydanticBaseSettingsSource] = [
                init_settings,
                _EnvSource(settings_cls, environ),
            ]
            if path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            sources.append(_DefaultHome(settings_cls, environ))
            return tuple(sources)

    try:
        loaded = _FileSettings(**overrides)
    except ValidationError as err:
        problems = format_problems(err)
        where = f"{path}: " if path is not None else ""
        raise ConfigError(
            f"{where}{len(problems)} problem(s) in the configuration", problems=problems
        ) from None
    return Settings.model_validate(loaded.model_dump())
