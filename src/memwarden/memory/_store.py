"""The memory store: SQLite in WAL mode, one writer with group commit, pooled readers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import operator
import sqlite3
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Self, TypeVar

import aiosqlite
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memwarden.errors import (
    AmbiguousIdError,
    MemwardenError,
    NotFoundError,
    StorageError,
    ValidationInputError,
    VersionConflictError,
)
from memwarden.memory import (
    _compaction,
    _maintenance,
    _outbox,
    _quarantine,
    _reviews,
    _shortid,
    _transfer,
)
from memwarden.memory._clock import Clock, SystemClock, from_ts
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    EVIDENCE_COLUMNS,
    EVIDENCE_UPDATE_COLUMNS,
    binding_from_row,
    binding_selector_json,
    content_key,
    evidence_record,
    evidence_row,
    new_record,
    normalise_content,
    record_from_row,
    record_to_block,
    record_to_row,
)
from memwarden.memory._durations import Duration
from memwarden.memory._files import prepare_database
from memwarden.memory._fts import fts_query
from memwarden.memory._ids import new_id
from memwarden.memory._model import (
    Binding,
    Block,
    BlockState,
    Category,
    Content,
    InfoType,
    NewBlock,
    Outcome,
    RevalidationReason,
    RevalidationRequest,
    Signal,
    StaleReason,
    Tag,
    Tier,
    Title,
    ValidationEvent,
    Volatility,
)
from memwarden.memory._schema import MIGRATIONS, SCHEMA_VERSION, split_statements
from memwarden.memory._scorelog import ScoreLog
from memwarden.memory._sqlrules import retention_sql
from memwarden.memory._writer import Writer
from memwarden.memory.policy import (
    Effect,
    PolicyConfig,
    apply_event,
    current_stale_reasons,
    demote_core,
    effective_state,
    mark_stale,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
    from types import TracebackType

    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy import HealthReport

__all__ = [
    "ApplyResult",
    "BlockFilter",
    "BlockPatch",
    "DueBlock",
    "EventRecord",
    "FactEvidence",
    "SearchHit",
    "StateChange",
    "Store",
]

log = structlog.get_logger("memwarden.store")

M = TypeVar("M", bound=BaseModel)
_IN_CHUNK = 500  # host parameters per IN (...) list
_ERROR = Outcome.ERROR.value
_STALE = BlockState.STALE.value
_MAX_FUTURE_SKEW_S = 300.0  # an observation this far ahead of our clock is rejected
_RULES_PART = 250  # events whose rules run while the previous part's writes are made
_INLINE_STEPS = 1000  # SQLite VM instructions between two looks at an inline read's budget
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


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


class BlockFilter(BaseModel):
    """What :meth:`Store.list_blocks` selects."""

    model_config = ConfigDict(extra="forbid")

    state: BlockState | None = None
    tier: Tier | None = None
    volatility: Volatility | None = None
    sensor: str | None = None
    tag: str | None = None
    after: str | None = Field(default=None, description="Keyset cursor: ids after this one.")
    limit: int = Field(default=100, ge=1, le=10_000)


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


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked search result and why it ranks where it does.

    The store's own callers need the ranking and a few fields (``id``, ``state``), so a
    hit carries the block's flat record; the validated :class:`Block` is built the first
    time ``block`` is read (at the API edge), not for every hit of every search.
    """

    record: BlockRecord
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
    _block: list[Block] = field(default_factory=list, repr=False, compare=False)  # built once

    @property
    def id(self) -> str:
        return self.record.id

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


# A prepared event: plain values computed outside the writer's transaction.
_Prepared = tuple[
    str,  # 0 event_id
    str,  # 1 sensor
    str,  # 2 subject
    str,  # 3 outcome
    float,  # 4 observed_at
    float | None,  # 5 reliability
    float | None,  # 6 validity_window_s
    str | None,  # 7 request_id
    str | None,  # 8 block_id
    str,  # 9 message
    str | None,  # 10 observed (JSON)
    str | None,  # 11 agent
    int | None,  # 12 agent seq
]

_EVIDENCE_SELECT = f"SELECT {', '.join(EVIDENCE_COLUMNS)} FROM blocks WHERE id IN "
_ROUTE_SELECT = (
    "SELECT g.subject, g.sensor, "
    + ", ".join(f"k.{c}" for c in EVIDENCE_COLUMNS)
    + " FROM bindings g JOIN blocks k ON k.rid = g.block_rid WHERE g.subject IN "
)
_EVIDENCE_UPDATE = (
    "UPDATE blocks SET " + ", ".join(f"{c} = ?" for c in EVIDENCE_UPDATE_COLUMNS) + " WHERE rid = ?"
)
_BLOCK_SELECT = f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks"
_BLOCK_INSERT = (  # the record's columns, then content_key
    f"INSERT INTO blocks ({', '.join(BLOCK_COLUMNS)}, content_key) "
    f"VALUES ({', '.join('?' for _ in BLOCK_COLUMNS)}, ?)"
)
_BACKFILL_CHUNK = 5000  # rows per transaction when content_key is filled in after migration
_REVALIDATION_INSERT = (
    "INSERT OR IGNORE INTO revalidations (id, block_id, sensor, subject, reason,"
    " created_at, send_at, deadline_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_EVENT_INSERT = (
    "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at, received_at,"
    " reliability, validity_window_s, request_id, block_id, message, observed, agent, agent_seq)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_REVALIDATION_DONE = (
    "UPDATE revalidations SET status = 'done', finished_at = ?, outcome = ?"
    " WHERE id = ? AND status IN ('pending', 'sent')"
)
_EFFECT_INSERT = (
    "INSERT INTO effects (block_rid, event_seq, state_before, state_after,"
    " reliability_before, reliability_after, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def _placeholders(n: int) -> str:
    return "(" + ",".join("?" * n) + ")"


def _chunks(items: Sequence[Any], size: int = _IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


async def _select_in(
    conn: aiosqlite.Connection, sql_prefix: str, keys: Sequence[Any], suffix: str = ""
) -> list[sqlite3.Row]:
    """Run ``sql_prefix (?, ?, ...) suffix`` over ``keys`` in chunks; all rows."""
    rows: list[Any] = []
    for chunk in _chunks(keys):
        # execute_fetchall is one round trip to the connection's thread (execute + fetch
        # + close would be three).
        rows.extend(
            await conn.execute_fetchall(sql_prefix + _placeholders(len(chunk)) + suffix, chunk)
        )
    return rows


class Store:
    """The memory store.

    Use it as an async context manager (``async with Store(path) as store``). Writes go
    through one writer task and return once committed; reads use a pool of their own
    connections and never wait for the writer.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        policy: PolicyConfig | None = None,
        readers: int = 2,
        synchronous: Literal["normal", "full"] = "normal",
        max_jobs_per_commit: int = 256,
        score_log: ScoreLog | str | Path | None = None,
        compaction: _compaction.CompactionConfig | None = None,
        inline_read_ms: float = 0.5,
    ) -> None:
        self.path = Path(path)
        self.compaction = compaction or _compaction.CompactionConfig()
        self.clock: Clock = clock or SystemClock()
        self.policy = policy or PolicyConfig()
        self._n_readers = max(1, readers)
        self._synchronous = synchronous
        self._max_jobs = max_jobs_per_commit
        self._wconn: aiosqlite.Connection | None = None
        self._writer: Writer | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all_readers: list[aiosqlite.Connection] = []
        self._replacing: set[asyncio.Future[None]] = set()
        # Small reads (a search matching a few blocks) run on the loop's own connection
        # when they finish within this budget: see _read_inline.
        self._inline_budget_s = max(0.0, inline_read_ms) / 1000.0
        self._inline: sqlite3.Connection | None = None
        self._inline_deadline = 0.0
        self._inline_stopped = False
        self.inline_reads = 0  # reads answered on the loop
        self.inline_overruns = 0  # reads that ran past the budget and went to a reader
        self._open = False
        # A path is opened (and closed) with the store; a ScoreLog given stays the caller's.
        self._score_log_path = None if isinstance(score_log, ScoreLog) else score_log
        self.score_log: ScoreLog | None = score_log if isinstance(score_log, ScoreLog) else None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> Self:
        """Open (creating or migrating) the database and start the writer."""
        if self._open:
            return self
        try:
            prepare_database(self.path)  # 0600 (and so its -wal and -shm), whatever the umask
        except OSError as err:
            raise StorageError(f"cannot open the store at {self.path}: {err}") from err
        try:
            self._wconn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._configure(self._wconn, writer=True)
            await migrate(self._wconn)
            await _backfill_content_keys(self._wconn)
            for _ in range(self._n_readers):
                conn = await aiosqlite.connect(self.path, isolation_level=None)
                await self._configure(conn, writer=False)
                self._all_readers.append(conn)
                self._readers.put_nowait(conn)
            if self._inline_budget_s > 0:
                self._inline = self._open_inline()
        except sqlite3.Error as err:
            await self._close_connections()
            raise StorageError(f"cannot open the store at {self.path}: {err}") from err
        except BaseException:  # a too-new schema, a cancelled open: leave no thread running
            await self._close_connections()
            raise
        self._writer = Writer(self._wconn, max_jobs=self._max_jobs)
        self._writer.start()
        if self._score_log_path is not None:
            self.score_log = ScoreLog(self._score_log_path)
        self._open = True
        log.debug("store_opened", path=str(self.path), schema=SCHEMA_VERSION)
        return self

    async def close(self) -> None:
        """Commit what was accepted, stop the writer and close every connection."""
        if not self._open:
            return
        self._open = False
        if self._replacing:
            await asyncio.gather(*self._replacing, return_exceptions=True)
        if self._writer is not None:
            await self._writer.close()
            self._writer = None
        if self._wconn is not None:
            with contextlib.suppress(sqlite3.Error):
                await self._wconn.execute("PRAGMA optimize")
        await self._close_connections()
        if self._score_log_path is not None and self.score_log is not None:
            self.score_log.close()
            self.score_log = None

    async def _close_connections(self) -> None:
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        for conn in [*self._all_readers, self._wconn]:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error, ValueError):
                    await conn.close()
        self._all_readers.clear()
        self._readers = asyncio.Queue()
        self._wconn = None

    async def _configure(self, conn: aiosqlite.Connection, *, writer: bool) -> None:
        await conn.execute("PRAGMA busy_timeout = 10000")
        await conn.execute("PRAGMA foreign_keys = ON")
        if writer:
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute(f"PRAGMA synchronous = {self._synchronous.upper()}")
        else:
            await conn.execute("PRAGMA query_only = ON")
        await conn.execute("PRAGMA cache_size = -65536")  # KiB: 64 MiB per connection, at most
        await conn.execute("PRAGMA mmap_size = 268435456")
        await conn.execute("PRAGMA temp_store = MEMORY")

    def _open_inline(self) -> sqlite3.Connection:
        """The loop's own read-only connection (see :meth:`_read_inline`)."""
        conn = sqlite3.connect(self.path, isolation_level=None)
        # Never wait for a lock on the loop: a busy database sends the read to a reader.
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA mmap_size = 268435456")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.set_progress_handler(self._inline_progress, _INLINE_STEPS)
        return conn

    def _inline_progress(self) -> int:
        if time.perf_counter() > self._inline_deadline:
            self._inline_stopped = True
            return 1  # interrupts the statement
        return 0

    def _read_inline(self, sql: str, params: Mapping[str, Any]) -> list[Any] | None:
        """The rows of a read run right here on the loop, or None if it did not finish
        within the budget (``inline_read_ms``) or found the database busy.

        A read on a reader connection costs two thread hand-offs, which on a busy machine
        take longer than a small query itself (each waits for the scheduler). A search
        matching a few blocks takes SQLite a fraction of a millisecond, so it is tried
        here first, under a progress handler that interrupts it once the budget is
        spent: the loop is never held longer than that. An interrupted read is then run
        on a reader, as every read was before.
        """
        conn = self._inline
        if conn is None:
            return None
        self._inline_stopped = False
        self._inline_deadline = time.perf_counter() + self._inline_budget_s
        try:
            rows = conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as err:
            if not self._inline_stopped and err.sqlite_errorcode not in _BUSY:
                raise
            self.inline_overruns += 1
            return None
        self.inline_reads += 1
        return rows

    @contextlib.asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        if not self._open:
            raise StorageError("the store is closed")
        conn = await self._readers.get()
        clean = False
        try:
            yield conn
            clean = True
        except MemwardenError:
            clean = True  # ours, raised after a completed fetch (NotFoundError, ...)
            raise
        finally:
            if clean:
                self._readers.put_nowait(conn)
            else:
                # Cancelled or failed between a statement and its fetch: the statement may
                # still be open and would pin this connection to an old snapshot (WAL), so
                # later reads would miss new writes. A fresh connection costs a millisecond.
                replacing = asyncio.ensure_future(self._replace_reader(conn))
                self._replacing.add(replacing)
                replacing.add_done_callback(self._replacing.discard)
                await asyncio.shield(replacing)  # close() waits for it too

    def _closed_meanwhile(self) -> bool:
        # A method, not the attribute: the store may close while we awaited.
        return not self._open

    async def _replace_reader(self, old: aiosqlite.Connection) -> None:
        with contextlib.suppress(sqlite3.Error, ValueError):
            await old.close()
        if old in self._all_readers:
            self._all_readers.remove(old)
        if not self._open:
            return
        try:
            conn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._configure(conn, writer=False)
        except sqlite3.Error as err:
            log.error("store_reader_reopen_failed", error=str(err))
            return
        if self._closed_meanwhile():  # do not leak the new connection
            await conn.close()
            return
        self._all_readers.append(conn)
        self._readers.put_nowait(conn)

    async def _write(self, fn: Any, *, weight: int = 1) -> Any:
        if self._writer is None:
            raise StorageError("the store is closed")
        return await self._writer.submit(fn, weight=weight)

    @property
    def write_backlog(self) -> int:
        """Jobs waiting for the writer."""
        return self._writer.backlog if self._writer is not None else 0

    # ------------------------------------------------------------------ blocks: writes

    async def add(
        self, new: NewBlock | Mapping[str, Any], *, actor: str = "agent", dedupe: bool = False
    ) -> Block:
        """Store a block (with its bindings); returns it as stored.

        With ``dedupe``, a block whose normalised content (casefolded, whitespace
        collapsed) equals a live (not archived) block's is not stored again: that block
        is returned, with ``duplicate_of`` set to its id.
        """
        duplicates: set[str] = set()
        ids = await self.add_many([new], actor=actor, dedupe=dedupe, duplicates=duplicates)
        block = await self.get(ids[0])
        if ids[0] in duplicates:
            block = block.model_copy(update={"duplicate_of": ids[0]})
        return block

    async def add_many(
        self,
        news: Sequence[NewBlock | Mapping[str, Any]],
        *,
        actor: str = "agent",
        dedupe: bool = False,
        duplicates: set[str] | None = None,
    ) -> list[str]:
        """Store many blocks in one transaction; returns their ids in order.

        With ``dedupe``, a block whose normalised content equals a live block's (or an
        earlier one's in the same call) is not stored: its place in the answer holds the
        existing id, which is also added to ``duplicates``.
        """
        validated = []
        errors: list[tuple[str, str]] = []
        for i, item in enumerate(news):
            try:
                validated.append(validate_input(NewBlock, item))
            except ValidationInputError as err:
                prefix = f"{i}." if len(news) > 1 else ""
                errors.extend((prefix + f, m) for f, m in err.errors)
        if errors:
            raise ValidationInputError(errors)
        now = self.clock.time()
        all_records = [
            new_record(n, block_id=new_id(), now=now, cfg=self.policy) for n in validated
        ]
        all_keys = [content_key(r.content) for r in all_records]
        answer = [r.id for r in all_records]
        records = all_records
        found: dict[int, str] = {}

        async def job(conn: aiosqlite.Connection) -> None:
            nonlocal validated, records
            if dedupe:  # in the writer: two concurrent adds of one fact store it once
                found.update(await _find_duplicates(conn, all_records, all_keys))
                keep = [i for i in range(len(all_records)) if i not in found]
                records = [all_records[i] for i in keep]
                validated = [validated[i] for i in keep]
            keys = [all_keys[i] for i in range(len(all_records)) if i not in found]
            block_rows = [record_to_row(r) for r in records]
            audit_rows = (
                [(now, actor, "add", r.id, "{}") for r in records] if len(records) < 100 else []
            )
            # One writer: the next rids are ours to hand out, so bindings can name them.
            # Never reuse a deleted block's rid: its effects (the event history) keep it.
            async with conn.execute(
                "SELECT max(coalesce((SELECT max(rid) FROM blocks), 0),"
                " coalesce((SELECT max(block_rid) FROM effects), 0))"
            ) as cur:
                first = (await cur.fetchone() or (0,))[0] + 1
            rows = [(*row[:-1], first + i, keys[i]) for i, row in enumerate(block_rows)]
            await conn.executemany(_BLOCK_INSERT, rows)
            binding_rows = [
                (first + i, b.sensor, b.subject, binding_selector_json(b), now)
                for i, n in enumerate(validated)
                for b in n.bindings
            ]
            if binding_rows:
                await conn.executemany(
                    "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    binding_rows,
                )
            if audit_rows:
                await conn.executemany(
                    "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?,?,?,?,?)",
                    audit_rows,
                )
            await _insert_dependencies(conn, validated, first, {r.id for r in records})

        await self._write(job)
        for i, existing in found.items():
            answer[i] = existing
            if duplicates is not None:
                duplicates.add(existing)
        return answer

    async def update(
        self,
        block_id: str,
        patch: BlockPatch | Mapping[str, Any],
        *,
        actor: str = "agent",
        expected_version: int | None = None,
    ) -> Block:
        """Edit a block. A new text (title, content, tags) is a new ``version``: the old
        one is kept in history, the block is unverified again and demoted from core.
        With ``expected_version`` the edit applies only to that version (else
        :class:`VersionConflictError`, nothing changed)."""
        p = validate_input(BlockPatch, patch)
        nulls = [k for k in sorted(p.model_fields_set) if getattr(p, k) is None]
        if nulls:  # None means "absent" only when left out; an explicit null is an error
            raise ValidationInputError(
                [(k, "cannot be null (leave the field out to keep its value)") for k in nulls]
            )
        changes = p.model_dump(exclude_unset=True)
        now = self.clock.time()
        cfg = self.policy

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await self._load_record(conn, block_id)
            if expected_version is not None and rec.version != expected_version:
                raise VersionConflictError(rec.id, expected_version, rec.version)
            old = (rec.version, rec.title, rec.content, json.dumps(rec.tags))
            if _apply_patch(rec, changes, now, cfg):
                await conn.execute(
                    "INSERT INTO block_history (block_id, version, title, content, tags,"
                    " replaced_at, replaced_by) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rec.id, *old, now, actor),
                )
            await self._save_record(conn, rec)
            if "content" in changes:
                await conn.execute(
                    "UPDATE blocks SET content_key = ? WHERE rid = ?",
                    (content_key(rec.content), rec.rid),
                )
            await self._audit(conn, actor, "update", rec.id, changes)

        await self._write(job)
        return await self.get(block_id)

    async def archive(self, block_id: str, *, reason: str, actor: str = "agent") -> Block:
        """Move a block to cold storage (out of search) with a reason."""
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await self._load_record(conn, block_id)
            if rec.state == BlockState.ARCHIVED:
                return
            await conn.execute(
                "UPDATE blocks SET state = 'archived', archived_at = ?, archive_reason = ?,"
                " updated_at = ? WHERE id = ?",
                (now, reason, now, block_id),
            )
            await self._audit(conn, actor, "archive", block_id, {"reason": reason})

        await self._write(job)
        return await self.get(block_id)

    async def restore(self, block_id: str, *, actor: str = "agent") -> Block:
        """Bring an archived block back; it returns unverified until a sensor confirms it."""
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await self._load_record(conn, block_id)
            if rec.state != BlockState.ARCHIVED:
                return
            await conn.execute(
                "UPDATE blocks SET state = 'unverified', stale_reasons = '', archived_at = NULL,"
                " archive_reason = NULL, updated_at = ?, last_accessed_at = ? WHERE id = ?",
                (now, now, block_id),
            )
            await self._audit(conn, actor, "restore", block_id, {})

        await self._write(job)
        return await self.get(block_id)

    async def delete(self, block_id: str, *, actor: str = "agent", reason: str = "") -> None:
        """Delete a block for good. The event log and an audit row keep the trace."""

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await self._load_record(conn, block_id)
            await conn.execute("DELETE FROM blocks WHERE id = ?", (block_id,))
            await conn.execute("DELETE FROM sessions WHERE block_id = ?", (block_id,))
            await self._audit(
                conn,
                actor,
                "delete",
                block_id,
                {"reason": reason, "title": rec.title, "content": rec.content[:1000]},
            )

        await self._write(job)

    # ------------------------------------------------------------------ events

    def _prepare(self, ev: ValidationEvent) -> _Prepared:
        return (
            ev.event_id,
            ev.sensor,
            ev.subject,
            ev.outcome.value,
            ev.observed_at.timestamp(),
            ev.reliability,
            ev.validity_window.total_seconds() if ev.validity_window is not None else None,
            ev.request_id,
            ev.block_id,
            ev.message,
            None if ev.observed is None else json.dumps(ev.observed, separators=(",", ":")),
            ev.agent,
            ev.seq,
        )

    async def apply_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> ApplyResult:
        """Append events to the log and apply them to every block they reach, atomically.

        Returns once the transaction committed. Duplicates (same ``event_id``) are stored
        once; an observation from the future is rejected (dead-lettered), not applied.
        With ``bound_only`` (events from outside), an event naming a ``block_id`` whose
        block has no binding for the event's sensor is rejected too, in the same
        transaction that applies the others.
        """
        now = self.clock.time()
        prepared: list[_Prepared] = []
        rejected: list[tuple[str, str, str]] = []
        direct: dict[str, str] = {}  # event id -> payload, for the bound_only check
        limit = now + _MAX_FUTURE_SKEW_S
        for ev in events:
            p = self._prepare(ev)
            if p[4] > limit:
                rejected.append((p[0], "observed_at is in the future", ev.model_dump_json()))
            else:
                prepared.append(p)
                if bound_only and ev.block_id is not None:
                    direct[ev.event_id] = ev.model_dump_json()
        prepared.sort(key=lambda p: p[4])  # apply in observation order
        cfg = self.policy

        async def job(conn: aiosqlite.Connection) -> ApplyResult:
            if direct:
                await _reject_unbound(conn, prepared, rejected, direct)
            result = await _apply_job(conn, prepared, rejected, now, cfg)
            if rejected:
                await self._cap_dead_letters(conn)
            return result

        return await self._write(job, weight=len(prepared))  # type: ignore[no-any-return]

    async def _cap_dead_letters(self, conn: aiosqlite.Connection) -> None:
        """Keep at most ``compaction.dead_letters_max_rows`` dead letters, at every insert:
        a flood of rejected input is bounded at once, not at the next compaction pass.
        (ids grow by one per row, so this is one range delete on the primary key.)"""
        cfg = self.compaction
        if cfg.enabled:
            await conn.execute(
                "DELETE FROM dead_letters WHERE id <= (SELECT max(id) FROM dead_letters) - ?",
                (cfg.dead_letters_max_rows,),
            )

    async def dead_letter(self, *, source: str, reason: str, payload: str | bytes) -> None:
        """Keep a rejected input with the reason (never applied)."""
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> None:
            await conn.execute(
                "INSERT INTO dead_letters (received_at, source, reason, payload) VALUES (?,?,?,?)",
                (now, source, reason, text[:65536]),
            )
            await self._cap_dead_letters(conn)

        await self._write(job)

    # ------------------------------------------------------------------ staleness

    async def due_for_revalidation(
        self, *, limit: int = 1000, now: float | None = None
    ) -> list[DueBlock]:
        """Fresh or unverified blocks whose window has run out, oldest first (index range scan)."""
        at = self.clock.time() if now is None else now
        async with self._read() as conn:
            rows = await conn.execute_fetchall(
                "SELECT id, stale_at, state, volatility, reliability FROM blocks"
                " WHERE stale_at <= ? AND state IN ('fresh', 'unverified')"
                " ORDER BY stale_at LIMIT ?",
                (at, max(0, limit)),
            )
        return list(map(DueBlock._make, rows))

    async def mark_stale(
        self,
        block_ids: Sequence[str],
        *,
        reason: StaleReason = StaleReason.EXPIRED,
        request: bool = True,
        send_at: Mapping[str, float] | None = None,
    ) -> list[str]:
        """Mark blocks stale (the sweep) and queue one revalidation request per binding.

        Returns the ids that actually changed state.
        """
        now = self.clock.time()
        cfg = self.policy
        deadline = cfg.staleness.revalidation_timeout.total_seconds()
        ids = list(dict.fromkeys(block_ids))

        async def job(conn: aiosqlite.Connection) -> list[str]:
            rows = await _select_in(conn, _EVIDENCE_SELECT, ids)
            changed = []
            for row in rows:
                rec = evidence_record(row)
                if mark_stale(rec, now, reason):
                    changed.append(rec)
            await conn.executemany(_EVIDENCE_UPDATE, [evidence_row(r) for r in changed])
            if request and changed:
                bindings = await _select_in(
                    conn,
                    "SELECT k.id, g.sensor, g.subject FROM bindings g"
                    " JOIN blocks k ON k.rid = g.block_rid WHERE g.quarantine IS NULL"
                    " AND g.block_rid IN ",
                    [r.rid for r in changed],
                )
                await conn.executemany(
                    _REVALIDATION_INSERT,
                    [
                        (
                            new_id(),
                            b,
                            s,
                            subj,
                            reason.value,
                            now,
                            (send_at or {}).get(b, now),
                            deadline,
                        )
                        for b, s, subj in bindings
                    ],
                )
            if changed:
                await propagate_dependencies(conn, [r.id for r in changed], now=now, cfg=cfg)
            return [r.id for r in changed]

        return await self._write(job)  # type: ignore[no-any-return]

    async def due_revalidations(
        self, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """Pending revalidation requests whose send time has come, oldest first."""
        at = self.clock.time() if now is None else now
        async with (
            self._read() as conn,
            conn.execute(
                "SELECT r.id, r.block_id, r.sensor, r.subject, r.reason, r.created_at,"
                " r.deadline_s, r.attempts, g.selector FROM revalidations r"
                " JOIN blocks k ON k.id = r.block_id"
                " JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor"
                " AND g.subject = r.subject AND g.quarantine IS NULL"
                " WHERE r.status = 'pending' AND r.send_at <= ? ORDER BY r.send_at LIMIT ?",
                (at, limit),
            ) as cur,
        ):
            rows = await cur.fetchall()
        out = []
        seen = set()
        for rid, block_id, sensor, subject, reason, _created, deadline_s, attempts, sel in rows:
            if rid in seen:
                continue
            seen.add(rid)
            out.append(
                RevalidationRequest(
                    id=rid,
                    block_id=block_id,
                    sensor=sensor,
                    subject=subject,
                    binding=binding_from_row(sensor, subject, sel),
                    reason=RevalidationReason(reason),
                    created_at=from_ts(at),
                    deadline=from_ts(at + deadline_s),
                    attempts=attempts,
                )
            )
        return out

    async def set_revalidation_status(
        self, request_ids: Sequence[str], status: str, *, outcome: str | None = None
    ) -> None:
        """Mark requests ``sent``, ``done``, ``failed`` or ``expired``."""
        now = self.clock.time()
        final = status != "sent"

        async def job(conn: aiosqlite.Connection) -> None:
            await conn.executemany(
                "UPDATE revalidations SET status = ?, attempts = attempts + ?,"
                " finished_at = CASE WHEN ? THEN ? ELSE finished_at END,"
                " outcome = coalesce(?, outcome) WHERE id = ?",
                [(status, int(not final), final, now, outcome, r) for r in request_ids],
            )

        await self._write(job)

    async def requeue_sent_revalidations(self) -> int:
        """Requests left ``sent`` by a daemon that died before the answer: pending again.

        Call at start, before the scheduler runs; returns how many were requeued.
        """
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> int:
            cur = await conn.execute(
                "UPDATE revalidations SET status = 'pending', send_at = ? WHERE status = 'sent'",
                (now,),
            )
            return int(cur.rowcount)

        return await self._write(job)  # type: ignore[no-any-return]

    async def request_revalidation(
        self,
        block_id: str,
        *,
        reason: RevalidationReason = RevalidationReason.MANUAL,
        send_at: float | None = None,
    ) -> list[str]:
        """Queue a check of every binding of a block now; returns the request ids queued.

        A binding that already has an open request keeps it (one check per binding);
        a ``manual`` request also brings a waiting retry forward to now.
        """
        now = self.clock.time()
        timeout_s = self.policy.staleness.revalidation_timeout.total_seconds()

        async def job(conn: aiosqlite.Connection) -> list[str]:
            rec = await self._load_record(conn, block_id)
            async with conn.execute(
                "SELECT sensor, subject FROM bindings WHERE block_rid = ? AND quarantine IS NULL",
                (rec.rid,),
            ) as cur:
                bindings = await cur.fetchall()
            rows = [
                (new_id(), block_id, sensor, subject, reason.value, now, send_at or now, timeout_s)
                for sensor, subject in bindings
            ]
            await conn.executemany(_REVALIDATION_INSERT, rows)
            if reason == RevalidationReason.MANUAL:
                # Someone asked for a check now: a soft refutation's retry waiting for
                # its interval goes now. Reads (on_read) do not: they would turn a
                # retry interval into an immediate re-check again.
                await conn.execute(
                    "UPDATE revalidations SET send_at = ? WHERE block_id = ?"
                    " AND status = 'pending' AND send_at > ?",
                    (now, block_id, now),
                )
            async with conn.execute(
                "SELECT id FROM revalidations WHERE block_id = ? AND status IN ('pending','sent')",
                (block_id,),
            ) as cur:
                return [r[0] for r in await cur.fetchall()]

        return await self._write(job)  # type: ignore[no-any-return]

    async def request_checks(
        self, block_ids: Sequence[str], *, reason: RevalidationReason
    ) -> dict[str, list[tuple[str, float]]]:
        """Queue a check of every binding of each block, in one transaction.

        A binding with an open request keeps it (concurrent readers share one check).
        Returns, per block, its open requests as ``(request id, send_at)``: a request
        whose ``send_at`` is in the future is a retry that waits its interval.
        """
        now = self.clock.time()
        timeout_s = self.policy.staleness.revalidation_timeout.total_seconds()
        ids = list(dict.fromkeys(block_ids))

        async def job(conn: aiosqlite.Connection) -> dict[str, list[tuple[str, float]]]:
            bindings = await _select_in(
                conn,
                "SELECT k.id, g.sensor, g.subject FROM bindings g"
                " JOIN blocks k ON k.rid = g.block_rid WHERE k.id IN ",
                ids,
            )
            await conn.executemany(
                _REVALIDATION_INSERT,
                [
                    (new_id(), b, sensor, subject, reason.value, now, now, timeout_s)
                    for b, sensor, subject in bindings
                ],
            )
            out: dict[str, list[tuple[str, float]]] = {b: [] for b in ids}
            for rid, block_id, send_at in await _select_in(
                conn,
                "SELECT id, block_id, send_at FROM revalidations"
                " WHERE status IN ('pending', 'sent') AND block_id IN ",
                ids,
            ):
                out[block_id].append((rid, send_at))
            return out

        return await self._write(job)  # type: ignore[no-any-return]

    async def receipts_for(self, block_ids: Sequence[str]) -> dict[str, FactEvidence]:
        """What a receipt needs about each block, in one read: its error streak, its open
        checks and the confirmation behind its current validation."""
        ids = list(dict.fromkeys(block_ids))
        out: dict[str, FactEvidence] = {}
        if not ids:
            return out
        async with self._read() as conn:
            for block_id, errors in await _select_in(
                conn, "SELECT id, consecutive_errors FROM blocks WHERE id IN ", ids
            ):
                out[block_id] = FactEvidence(consecutive_errors=errors)
            for block_id, send_at in await _select_in(  # open checks some sensor can answer
                conn,
                "SELECT r.block_id, r.send_at FROM revalidations r"
                " JOIN blocks k ON k.id = r.block_id"
                " JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor"
                " AND g.subject = r.subject"
                " WHERE r.status IN ('pending', 'sent') AND r.block_id IN ",
                ids,
            ):
                if block_id in out:
                    out[block_id].open_checks.append(send_at)
            for block_id, sensor, observed_at, observed, message in await _select_in(
                conn,
                "SELECT k.id, e.sensor, e.observed_at, e.observed, e.message"
                " FROM blocks k JOIN effects f ON f.block_rid = k.rid"
                " JOIN events e ON e.seq = f.event_seq"
                " WHERE e.outcome = 'confirmed' AND e.observed_at = k.validated_at"
                " AND k.id IN ",
                ids,
            ):
                if block_id in out:
                    out[block_id].confirmation = {
                        "sensor": sensor,
                        "observed_at": from_ts(observed_at).isoformat(),
                        "observed": json.loads(observed) if observed is not None else None,
                        "message": message,
                    }
            for block_id, sensor, outcome, observed, message, state in await _select_in(
                conn,
                "SELECT k.id, e.sensor, e.outcome, e.observed, e.message, f.state_after"
                " FROM blocks k JOIN effects f ON f.block_rid = k.rid"
                " AND f.event_seq = (SELECT max(event_seq) FROM effects WHERE block_rid = k.rid)"
                " JOIN events e ON e.seq = f.event_seq WHERE k.id IN ",
                ids,
            ):
                if block_id in out:
                    out[block_id].last_event = {
                        "sensor": sensor,
                        "outcome": outcome,
                        "observed": json.loads(observed) if observed is not None else None,
                        "message": message,
                        "state": state,
                    }
            for block_id in [b for b, ev in out.items() if ev.consecutive_errors]:
                rows = await conn.execute_fetchall(
                    "SELECT e.observed_at, e.message FROM effects f"
                    " JOIN events e ON e.seq = f.event_seq"
                    " WHERE f.block_rid = (SELECT rid FROM blocks WHERE id = ?)"
                    " AND e.outcome = 'error' ORDER BY f.event_seq DESC LIMIT ?",
                    (block_id, out[block_id].consecutive_errors),
                )
                rows = list(rows)
                if rows:
                    out[block_id].errors_since = rows[-1][0]
                    out[block_id].last_error = rows[0][1]
        return out

    async def believed_at(self, block_id: str, at: float) -> dict[str, Any]:
        """What we believed about a block at ``at``: its content version, state,
        reliability, validation and the last evidence committed before then.

        Rebuilt from the append-only event log (events and their effects, in commit
        order), the block's history of edits (``block_history``) and the audit log
        (archive, restore). Bi-temporal as far as the evidence goes: each piece of
        evidence says when the world was observed (``observed_at``) and when we learned
        it (``committed_at``); ``at`` is compared with the latter.
        """
        async with self._read() as conn:
            rows = list(
                await conn.execute_fetchall(
                    "SELECT rid, created_at, version, title, content, tags, validity_window_s,"
                    " reliability FROM blocks WHERE id = ?",
                    (block_id,),
                )
            )
            if not rows:
                raise NotFoundError("block", block_id)
            rid, created_at, version, title, content, tags, window_s, reliability = rows[0]
            if created_at > at:
                raise NotFoundError(
                    "block",
                    block_id,
                    message=f"block {block_id!r} did not exist yet at {from_ts(at).isoformat()}",
                )
            history = list(
                await conn.execute_fetchall(
                    "SELECT version, title, content, tags, replaced_at FROM block_history"
                    " WHERE block_id = ? ORDER BY version",
                    (block_id,),
                )
            )
            effects = list(
                await conn.execute_fetchall(
                    "SELECT e.sensor, e.outcome, e.observed_at, e.received_at, e.message,"
                    " e.observed, e.validity_window_s, f.state_after, f.reliability_before,"
                    " f.reliability_after, f.detail FROM effects f"
                    " JOIN events e ON e.seq = f.event_seq WHERE f.block_rid = ?"
                    " ORDER BY e.seq",
                    (rid,),
                )
            )
            archive = list(
                await conn.execute_fetchall(
                    "SELECT at, action FROM audit WHERE block_id = ?"
                    " AND action IN ('archive', 'restore') AND at <= ? ORDER BY id",
                    (block_id, at),
                )
            )
        shown = (version, title, content, tags)
        for v, t, c, g, replaced_at in history:  # the first version replaced after `at`
            if replaced_at > at:
                shown = (v, t, c, g)
                break
        timeline: list[tuple[float, int, Any]] = [(h[4], 0, h) for h in history if h[4] <= at]
        timeline += [(e[3], 1, e) for e in effects if e[3] <= at]
        timeline.sort(key=lambda item: (item[0], item[1]))
        state = "unverified"
        rel = effects[0][8] if effects else reliability
        validated_by: str | None = None
        validated_at: float | None = None
        window = window_s
        evidence: dict[str, Any] | None = None
        for _when, kind, item in timeline:
            if kind == 0:  # an edit: a new text was never checked
                if state in ("fresh", "stale", "refuted"):
                    state = "unverified"
                continue
            sensor, outcome, observed_at, received_at, message, observed, ev_window = item[:7]
            detail = json.loads(item[10]) if item[10] else {}
            if detail.get("ignored"):
                continue
            state, rel = item[7], item[9]
            if outcome == "confirmed":
                validated_by, validated_at = sensor, observed_at
                window = ev_window if ev_window is not None else window_s
            evidence = {
                "sensor": sensor,
                "outcome": outcome,
                "observed_at": from_ts(observed_at).isoformat(),
                "committed_at": from_ts(received_at).isoformat(),
                "observed": json.loads(observed) if observed is not None else None,
                "message": message,
            }
        reasons: list[str] = []
        if state == "fresh" and validated_at is not None and validated_at + window <= at:
            state, reasons = "stale", ["expired"]
        if archive and archive[-1][1] == "archive":
            state = "archived"
        return {
            "as_of": from_ts(at).isoformat(),
            "block_id": block_id,
            "version": shown[0],
            "title": shown[1],
            "content": shown[2],
            "tags": json.loads(shown[3]) if isinstance(shown[3], str) else shown[3],
            "state": state,
            "stale_reasons": reasons,
            "reliability": round(rel, 4),
            "validated_by": validated_by,
            "validated_at": from_ts(validated_at).isoformat() if validated_at else None,
            "stale_at": from_ts(validated_at + window).isoformat() if validated_at else None,
            "last_evidence": evidence,
            "current_version": version,
        }

    async def count_refuted_matches(self, query: str) -> int:
        """How many refuted blocks match ``query`` (what a search without them hides)."""
        match = fts_query(query)
        if match is None:
            return 0
        sql = (
            "SELECT count(*) FROM blocks_fts f JOIN blocks b ON b.rid = f.rowid"
            " WHERE blocks_fts MATCH ? AND b.state = 'refuted'"
        )
        async with self._read() as conn:
            [(count,)] = list(await conn.execute_fetchall(sql, (match,)))
        return int(count)

    async def request_review(self, block_id: str, *, reason: str) -> dict[str, Any]:
        """Put a block in the human review queue (one open item per block)."""
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> dict[str, Any]:
            await self._load_record(conn, block_id)
            await conn.execute(
                "INSERT OR IGNORE INTO reviews (id, block_id, reason, created_at)"
                " VALUES (?, ?, ?, ?)",
                (new_id(), block_id, reason[:1000], now),
            )
            async with conn.execute(
                "SELECT id, status, reason FROM reviews WHERE block_id = ? AND status = 'pending'",
                (block_id,),
            ) as cur:
                row = await cur.fetchone()
            assert row is not None  # noqa: S101 - inserted or already open just above
            return {"review_id": row[0], "block_id": block_id, "status": row[1], "reason": row[2]}

        return await self._write(job)  # type: ignore[no-any-return]

    async def get_meta(self, key: str) -> str | None:
        """A small fact the daemon keeps about itself."""
        async with (
            self._read() as conn,
            conn.execute("SELECT value FROM meta WHERE key = ?", (key,)) as cur,
        ):
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def set_meta(self, key: str, value: str) -> None:
        async def job(conn: aiosqlite.Connection) -> None:
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

        await self._write(job)

    # ------------------------------------------------------------------ reads

    async def get(self, block_id: str) -> Block:
        """A block with its bindings, its short id and its state as of now."""
        async with self._read() as conn:
            rec = await self._load_record(conn, block_id)
            bindings = await self._bindings_of(conn, [block_id])
            depends = await self._depends_of(conn, [rec.rid])
            short = await _short_ids(conn, [block_id])
        block = record_to_block(
            rec,
            bindings=bindings.get(block_id, []),
            now=self.clock.time(),
            cfg=self.policy,
            depends_on=depends.get(rec.rid),
        )
        return block.model_copy(update={"short_id": short.get(block_id)})

    async def resolve_id(self, ref: str) -> str:
        """The full id a caller means: a full id, or a short id (the id's last hex digits,
        at least 8, dashes optional) that only one block's id ends with.

        Raises :class:`NotFoundError` ("no block with id …"), :class:`AmbiguousIdError`
        naming the candidates, or :class:`ValidationInputError` for too short a ref.
        """
        try:
            kind, value = _shortid.parse_ref(ref)
        except ValueError as err:
            raise ValidationInputError([("id", str(err))]) from None
        async with self._read() as conn:
            if kind == "short":
                rows = await conn.execute_fetchall(
                    "SELECT id FROM blocks WHERE id_key >= ? AND id_key < ? ORDER BY id LIMIT 6",
                    (value, value + "g"),  # 'g' sorts after every hex digit
                )
            else:
                rows = await conn.execute_fetchall("SELECT id FROM blocks WHERE id = ?", (value,))
            ids = [str(r[0]) for r in rows]
            short = await _short_ids(conn, ids) if len(ids) > 1 else {}
        if not ids:
            raise NotFoundError("block", ref.strip())
        if len(ids) > 1:
            shown = [f"{short[i]} ({i})" for i in ids[:5]] + (["…"] if len(ids) > 5 else [])
            raise AmbiguousIdError(
                ref.strip(),
                ids[:5],
                message=f"ambiguous id {ref.strip()!r}: matches {', '.join(shown)}"
                " (give more digits or the whole id)",
            )
        return ids[0]

    async def _cursor(self, after: str) -> str:
        """A listing's ``after``: a full id as it is (the block may be gone since), a short
        id resolved."""
        try:
            kind, value = _shortid.parse_ref(after)
        except ValueError as err:
            raise ValidationInputError([("after", str(err))]) from None
        return await self.resolve_id(after) if kind == "short" else value

    async def short_ids(self, block_ids: Sequence[str]) -> dict[str, str]:
        """Each block's short id: its last 8 hex digits, more while another id ends
        the same way (git's abbreviations, from the end of the id)."""
        async with self._read() as conn:
            return await _short_ids(conn, block_ids)

    async def get_record(self, block_id: str) -> BlockRecord:
        """The raw record of a block (for rules and explanations)."""
        async with self._read() as conn:
            return await self._load_record(conn, block_id)

    async def list_blocks(self, flt: BlockFilter | Mapping[str, Any] | None = None) -> list[Block]:
        """Blocks matching a filter, ordered by id (time of creation), keyset-paginated."""
        f = validate_input(BlockFilter, flt or {})
        where: list[str] = []
        args: list[Any] = []
        now = self.clock.time()
        if f.state is not None:
            if f.state == BlockState.STALE:
                where.append(
                    "(state = 'stale' OR (state IN ('fresh','unverified') AND stale_at <= ?))"
                )
                args.append(now)
            elif f.state in (BlockState.FRESH, BlockState.UNVERIFIED):
                where.append("state = ? AND (stale_at IS NULL OR stale_at > ?)")
                args.extend([f.state.value, now])
            else:
                where.append("state = ?")
                args.append(f.state.value)
        for col in ("tier", "volatility"):
            value = getattr(f, col)
            if value is not None:
                where.append(f"{col} = ?")
                args.append(value.value)
        if f.sensor is not None:
            where.append("rid IN (SELECT block_rid FROM bindings WHERE sensor = ?)")
            args.append(f.sensor)
        if f.tag is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(blocks.tags) WHERE value = ?)")
            args.append(f.tag)
        if f.after is not None:
            where.append("id > ?")
            args.append(await self._cursor(f.after))
        sql = _BLOCK_SELECT + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id LIMIT ?"
        args.append(f.limit)
        async with self._read() as conn:
            async with conn.execute(sql, args) as cur:
                rows = await cur.fetchall()
            recs = [record_from_row(r) for r in rows]
            bindings = await self._bindings_of(conn, [r.id for r in recs])
            depends = await self._depends_of(conn, [r.rid for r in recs])
            short = await _short_ids(conn, [r.id for r in recs])
        return [
            record_to_block(
                r,
                bindings=bindings.get(r.id, []),
                now=now,
                cfg=self.policy,
                depends_on=depends.get(r.rid),
            ).model_copy(update={"short_id": short.get(r.id)})
            for r in recs
        ]

    async def find_by_subject(self, sensor: str, subject: str) -> list[str]:
        """Ids of the blocks bound to ``sensor`` for ``subject``."""
        async with (
            self._read() as conn,
            conn.execute(
                "SELECT k.id FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
                " WHERE g.subject = ? AND g.sensor = ? ORDER BY k.id",
                (subject, sensor),
            ) as cur,
        ):
            return [r[0] for r in await cur.fetchall()]

    async def sensors_bound(self, block_ids: Sequence[str]) -> dict[str, set[str]]:
        """For each of these blocks that exists, the sensors it has a binding for."""
        out: dict[str, set[str]] = {}
        async with self._read() as conn:
            for block_id, sensor in await _select_in(
                conn,
                "SELECT k.id, g.sensor FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
                " WHERE k.id IN ",
                list(block_ids),
            ):
                out.setdefault(block_id, set()).add(sensor)
        return out

    async def bindings_for_sensor(self, sensor: str) -> list[tuple[str, Binding]]:
        """Every (block id, binding) a sensor owns: what it must watch."""
        async with (
            self._read() as conn,
            conn.execute(
                "SELECT k.id, b.sensor, b.subject, b.selector FROM bindings b"
                " JOIN blocks k ON k.rid = b.block_rid"
                " WHERE b.sensor = ? AND k.state <> 'archived' AND b.quarantine IS NULL"
                " ORDER BY b.id",
                (sensor,),
            ) as cur,
        ):
            rows = await cur.fetchall()
        out = []
        for block_id, name, subject, selector in rows:
            try:
                out.append((block_id, binding_from_row(name, subject, selector)))
            except (ValueError, ValidationError) as err:  # stored by an older memwarden
                log.warning("binding_unreadable", sensor=name, block_id=block_id, error=str(err))
        return out

    async def events_after(self, seq: int, *, limit: int = 100) -> list[dict[str, Any]]:
        """The event log after ``seq`` (oldest first), each with the blocks it changed."""
        async with self._read() as conn:
            async with conn.execute(
                "SELECT seq, event_id, sensor, subject, outcome, observed_at, received_at,"
                " message, observed FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                (seq, limit),
            ) as cur:
                rows = list(await cur.fetchall())
            effects: dict[int, list[dict[str, Any]]] = defaultdict(list)
            if rows:
                async with conn.execute(
                    "SELECT f.event_seq, k.id, f.state_before, f.state_after,"
                    " f.reliability_before, f.reliability_after FROM effects f"
                    " LEFT JOIN blocks k ON k.rid = f.block_rid"
                    " WHERE f.event_seq BETWEEN ? AND ?",
                    (rows[0][0], rows[-1][0]),
                ) as cur:
                    for ev_seq, block_id, sb, sa, rb, ra in await cur.fetchall():
                        effects[ev_seq].append(
                            {"block_id": block_id, "state": [sb, sa], "reliability": [rb, ra]}
                        )
        return [
            {
                "seq": r[0],
                "event_id": r[1],
                "sensor": r[2],
                "subject": r[3],
                "outcome": r[4],
                "observed_at": from_ts(r[5]).isoformat(),
                "received_at": from_ts(r[6]).isoformat(),
                "message": r[7],
                "observed": json.loads(r[8]) if r[8] is not None else None,
                "effects": effects.get(r[0], []),
            }
            for r in rows
        ]

    async def events_for(self, block_id: str, *, limit: int = 50) -> list[EventRecord]:
        """A block's validation history, newest first."""
        async with (
            self._read() as conn,
            conn.execute(
                "SELECT e.seq, e.event_id, e.sensor, e.subject, e.outcome, e.observed_at,"
                " e.received_at, e.reliability, e.message, e.observed, e.request_id,"
                " f.state_before, f.state_after, f.reliability_before, f.reliability_after,"
                " f.detail, r.count, r.first_observed_at"
                " FROM effects f JOIN events e ON e.seq = f.event_seq"
                " LEFT JOIN event_runs r ON r.block_rid = f.block_rid AND r.last_seq = f.event_seq"
                " WHERE f.block_rid = (SELECT rid FROM blocks WHERE id = ?)"
                " ORDER BY f.event_seq DESC LIMIT ?",
                (block_id, limit),
            ) as cur,
        ):
            rows = await cur.fetchall()
        return [
            EventRecord(
                seq=r[0],
                event_id=r[1],
                sensor=r[2],
                subject=r[3],
                outcome=r[4],
                observed_at=r[5],
                received_at=r[6],
                reliability=r[7],
                message=r[8],
                observed=json.loads(r[9]) if r[9] is not None else None,
                request_id=r[10],
                state_before=r[11],
                state_after=r[12],
                reliability_before=r[13],
                reliability_after=r[14],
                detail=json.loads(r[15]) if r[15] else None,
                run=None if r[16] is None else (int(r[16]), r[17], r[5]),
            )
            for r in rows
        ]

    async def counts(self) -> dict[str, Any]:
        """Blocks by state (as of now), tier and volatility; events; pending work."""
        now = self.clock.time()
        async with self._read() as conn:
            async with conn.execute(
                "SELECT CASE WHEN state IN ('fresh','unverified') AND stale_at <= ?"
                " THEN 'stale' ELSE state END AS s, tier, volatility, count(*)"
                " FROM blocks GROUP BY s, tier, volatility",
                (now,),
            ) as cur:
                rows = await cur.fetchall()
            async with conn.execute("SELECT max(seq) FROM events") as cur:
                events = (await cur.fetchone() or (0,))[0] or 0
            async with conn.execute(
                "SELECT count(*) FROM revalidations WHERE status IN ('pending', 'sent')"
            ) as cur:
                backlog = (await cur.fetchone() or (0,))[0]
            async with conn.execute("SELECT count(*) FROM reviews WHERE status = 'pending'") as cur:
                reviews = (await cur.fetchone() or (0,))[0]
            async with conn.execute("SELECT count(*) FROM dead_letters") as cur:
                dead = (await cur.fetchone() or (0,))[0]
        by_state: dict[str, int] = defaultdict(int)
        by_tier: dict[str, int] = defaultdict(int)
        by_volatility: dict[str, int] = defaultdict(int)
        for state, tier, volatility, n in rows:
            by_state[state] += n
            by_tier[tier] += n
            by_volatility[volatility] += n
        return {
            "blocks": sum(by_state.values()),
            "by_state": dict(by_state),
            "by_tier": dict(by_tier),
            "by_volatility": dict(by_volatility),
            "events": events,
            "revalidation_backlog": backlog,
            "pending_reviews": reviews,
            "dead_letters": dead,
        }

    # ------------------------------------------------------------------ search

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        include_refuted: bool = False,
        session: str | None = None,
        record: bool = True,
    ) -> list[SearchHit]:
        """Blocks matching ``query`` (words, never FTS syntax), ranked by
        relevance x freshness x reliability x retention.

        Every word must match; when no block has them all, any word may (ranked by BM25,
        so blocks with more of them come first).
        BM25 picks the best ``ranking.candidates`` matches in one pass; only those are
        joined to their blocks and re-ranked, so ranking adds no second pass over every
        match. Archived blocks are not in the index; refuted ones only when asked.
        With a ``session`` (and ``record``), the hits' retrievals are recorded, which
        feeds core promotion (:meth:`record_access`); the hits show the blocks as they
        were before this retrieval.
        """
        if not 1 <= limit <= 1000:
            raise ValidationInputError([("limit", f"{limit} is not between 1 and 1000")])
        match = fts_query(query)
        if match is None:
            return []
        now = self.clock.time()
        cfg = self.policy
        rank = cfg.ranking
        decay = cfg.decay
        sql = _search_sql(include_refuted=include_refuted)
        params = {
            "match": match,
            "cands": max(rank.candidates, limit),
            "now": now,
            "f_fresh": rank.fresh,
            "f_unverified": rank.unverified,
            "f_stale": rank.stale,
            "f_refuted": rank.refuted,
            "core_floor": decay.core_floor,
            "floor": decay.floor,
            "stale_factor": decay.stale_half_life_factor,
            "limit": limit,
        }
        # One statement: bindings and links come along.
        rows = await self._search_rows(sql, params)
        if not rows and " " in match:
            # No block has every word: fall back to any of them (still BM25-ranked,
            # so blocks with more of the words come first).
            params["match"] = fts_query(query, any_term=True)
            rows = await self._search_rows(sql, params)
        hits = []
        warn_below = cfg.staleness.warn_reliability
        for row in rows:
            relevance, freshness, reliability, retention, score, bound, deps = row[:7]
            rec = record_from_row(row[7:])
            state = effective_state(rec, now)
            hits.append(
                SearchHit(
                    record=rec,
                    state=state,
                    score=score,
                    relevance=relevance,
                    freshness=freshness,
                    reliability=reliability,
                    retention=retention,
                    stale=state == _STALE,
                    warnings=_warnings(rec, state, now, cfg, warn_below),
                    bindings_json=bound,
                    depends_json=deps,
                    now=now,
                    policy=cfg,
                )
            )
        if session is not None and record and hits:
            await self.record_access([h.id for h in hits], session=session)
        return hits

    async def _search_rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        """A search's rows: on the loop when quick enough, else on a reader."""
        if not self._open:
            raise StorageError("the store is closed")
        rows = self._read_inline(sql, params)
        if rows is None:
            async with self._read() as conn:
                rows = list(await conn.execute_fetchall(sql, params))
        return rows

    # ------------------------------------------------------------------ maintenance
    # The passes live in _maintenance.py; these methods are their public face.

    async def record_access(
        self, block_ids: Sequence[str], *, session: str | None = None
    ) -> list[str]:
        """Count a retrieval of each block (in ``session``); returns the ids made core."""
        return await _maintenance.record_accesses(self, block_ids, session=session)

    async def decay_cycle(self, *, chunk_rows: int | None = None) -> _maintenance.DecayReport:
        """Recompute retention set-based and archive what decayed below the threshold."""
        return await _maintenance.decay_cycle(self, chunk_rows=chunk_rows)

    async def heuristic_cycle(self, *, chunk_rows: int | None = None) -> dict[str, Any]:
        """The self-tuning rules' self-tuning pass over the blocks read since the previous one."""
        return await _maintenance.heuristic_cycle(self, chunk_rows=chunk_rows)

    async def consolidate(self, *, limit: int | None = None) -> _maintenance.ConsolidationReport:
        """The consolidation pass: score short_term blocks, promote the ones that pass."""
        return await _maintenance.consolidate(self, limit=limit)

    # ------------------------------------------------------------------ quarantine
    # Implemented in _quarantine.py; these methods are its public face.

    async def stored_bindings(self, sensors: Sequence[str]) -> list[_quarantine.StoredBinding]:
        """Every stored binding of these sensors, raw (quarantined ones included)."""
        return await _quarantine.stored_bindings(self, sensors)

    async def quarantined_bindings(self) -> list[_quarantine.StoredBinding]:
        """The bindings quarantined because today's rules refuse them."""
        return await _quarantine.quarantined(self)

    async def set_quarantine(
        self,
        failing: Sequence[tuple[_quarantine.StoredBinding, str]],
        released: Sequence[int] = (),
    ) -> int:
        """Quarantine ``(binding, rule)`` pairs (an error event each), release others."""
        return await _quarantine.set_quarantine(self, failing, released)

    async def compact_events(
        self, cfg: _compaction.CompactionConfig | None = None
    ) -> _compaction.CompactionReport:
        """Compact old runs of identical outcomes in the event log; prune dead letters."""
        return await _compaction.compact(self, cfg)

    async def explain(self, block_id: str) -> dict[str, Any]:
        """Why a block stands where it does: state, reliability, retention, rank, promotion."""
        return await _maintenance.explain(self, block_id)

    async def health(
        self, *, failing_sensors: Iterable[str] = (), sensors_total: int = 0
    ) -> HealthReport:
        """The 0-100 health score and its warnings, from aggregate queries."""
        return await _maintenance.health(
            self, failing_sensors=failing_sensors, sensors_total=sensors_total
        )

    # ------------------------------------------------------------------ helpers

    async def _load_record(self, conn: aiosqlite.Connection, block_id: str) -> BlockRecord:
        async with conn.execute(_BLOCK_SELECT + " WHERE id = ?", (block_id,)) as cur:
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError("block", block_id)
        return record_from_row(row)

    async def _save_record(self, conn: aiosqlite.Connection, rec: BlockRecord) -> None:
        cols = [c for c in BLOCK_COLUMNS if c not in ("id", "rid")]
        values = dict(zip(BLOCK_COLUMNS, record_to_row(rec), strict=True))
        await conn.execute(
            "UPDATE blocks SET " + ", ".join(f"{c} = ?" for c in cols) + " WHERE rid = ?",
            (*(values[c] for c in cols), rec.rid),
        )

    async def _bindings_of(
        self, conn: aiosqlite.Connection, block_ids: Sequence[str]
    ) -> dict[str, list[Binding]]:
        out: dict[str, list[Binding]] = defaultdict(list)
        if not block_ids:
            return out
        rows = await _select_in(
            conn,
            "SELECT k.id, g.sensor, g.subject, g.selector FROM bindings g"
            " JOIN blocks k ON k.rid = g.block_rid WHERE k.id IN ",
            list(block_ids),
            " ORDER BY g.id",
        )
        for block_id, sensor, subject, selector in rows:
            out[block_id].append(binding_from_row(sensor, subject, selector))
        return out

    async def _depends_of(
        self, conn: aiosqlite.Connection, rids: Sequence[int]
    ) -> dict[int, list[str]]:
        out: dict[int, list[str]] = defaultdict(list)
        if rids:
            for rid, dep in await _select_in(
                conn,
                "SELECT block_rid, depends_on FROM dependencies WHERE block_rid IN ",
                list(rids),
                " ORDER BY depends_on",
            ):
                out[rid].append(dep)
        return out

    async def _audit(
        self, conn: aiosqlite.Connection, actor: str, action: str, block_id: str, detail: Any
    ) -> None:
        await conn.execute(
            "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, ?, ?, ?)",
            (self.clock.time(), actor, action, block_id, json.dumps(detail, default=str)),
        )

    # ------------------------------------------------------------------ MQTT outbox
    # Implemented in _outbox.py; these methods are its public face.

    async def export_blocks(
        self, *, after: str | None = None, limit: int = 500
    ) -> list[dict[str, Any]]:
        """A page of whole blocks (by id, after ``after``) as export objects: record,
        bindings, dependencies, validation history and earlier versions."""
        blocks = await self.list_blocks({"after": after, "limit": limit})
        async with self._read() as conn:
            return await _transfer.export_rows(conn, [b.model_dump(mode="json") for b in blocks])

    async def import_blocks(
        self,
        rows: Sequence[Mapping[str, Any]],
        *,
        quarantine: Mapping[tuple[int, int], str] | None = None,
        actor: str = "import",
    ) -> _transfer.ImportReport:
        """Store export objects whose block ids are new, as they were (state, validation,
        history); blocks already here are left unchanged. All or nothing per call."""
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> _transfer.ImportReport:
            report = await _transfer.import_rows(conn, rows, quarantine=quarantine, now=now)
            if report.added:
                await conn.execute(
                    "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?,?,?,?,?)",
                    (now, actor, "import", None, json.dumps({"blocks": len(report.added)})),
                )
            return report

        return await self._write(job, weight=max(1, len(rows)))  # type: ignore[no-any-return]

    async def outbox_put(
        self, messages: Sequence[tuple[str, bytes, int, bool]], *, max_rows: int
    ) -> int:
        """Keep ``(topic, payload, qos, retain)`` messages to publish later; returns how many
        of the oldest were dropped to stay within ``max_rows``."""
        return await _outbox.put(self, messages, max_rows=max_rows)

    async def outbox_peek(self, *, limit: int = 500) -> list[_outbox.OutboxMessage]:
        """The oldest messages waiting to be published."""
        return await _outbox.peek(self, limit=limit)

    async def outbox_delete(self, ids: Sequence[int]) -> None:
        """Forget messages that were published."""
        await _outbox.delete(self, ids)

    async def outbox_stats(self) -> _outbox.OutboxStats:
        """How many messages wait, and how many were ever dropped because the outbox was full."""
        return await _outbox.stats(self)

    async def agent_high_water(self, agents: Sequence[str]) -> dict[str, int]:
        """The highest ``seq`` stored for each remote agent run (absent when none)."""
        return await _outbox.agent_high_water(self, agents)

    # ------------------------------------------------------------------ human review queue
    # Implemented in _reviews.py; these methods are its public face.

    async def list_reviews(
        self, *, status: str = "pending", limit: int = 100
    ) -> list[dict[str, Any]]:
        """Review items (``pending``, ``decided`` or ``all``), each with its block's summary."""
        return await _reviews.list_reviews(self, status=status, limit=limit)

    async def get_review(self, review_id: str, *, events: int = 10) -> dict[str, Any]:
        """One review item with its block and the block's last events (the evidence)."""
        return await _reviews.get_review(self, review_id, events=events)

    async def decide_review(
        self,
        review_id: str,
        decision: str,
        *,
        reviewer: str,
        comment: str = "",
        new_content: str | None = None,
        sensor: str = "review",
    ) -> dict[str, Any]:
        """Confirm, reject or edit (``new_content``) a review item, recording who decided."""
        return await _reviews.decide_review(
            self,
            review_id,
            decision,
            reviewer=reviewer,
            comment=comment,
            new_content=new_content,
            sensor=sensor,
        )


def _apply_patch(rec: BlockRecord, changes: dict[str, Any], now: float, cfg: PolicyConfig) -> bool:
    """Apply an edit to a record; True when the text changed (a new version).

    A new text was never checked: the block becomes unverified again, its window
    restarts, and a core block is demoted (the core rule: an update demotes).
    """
    text_changed = any(
        k in changes and changes[k] != getattr(rec, k) for k in ("title", "content", "tags")
    )
    if text_changed:
        rec.version += 1
        if rec.state in (BlockState.FRESH, BlockState.STALE, BlockState.REFUTED):
            rec.state = BlockState.UNVERIFIED.value
            rec.stale_reasons = []
        demote_core(rec, cfg)
    for key in ("title", "content", "importance"):
        if key in changes:
            setattr(rec, key, changes[key])
    if "tags" in changes:
        rec.tags = list(dict.fromkeys(changes["tags"]))
    for key in ("category", "info_type", "volatility"):
        if key in changes:
            setattr(rec, key, str(changes[key].value))
    if "volatility" in changes and "validity_window" not in changes:
        rec.validity_window_s = cfg.window_s(rec.volatility)
        rec.half_life_s = cfg.half_life_s(rec.volatility)
    if "validity_window" in changes:
        rec.validity_window_s = changes["validity_window"].total_seconds()
    if "signals" in changes:
        rec.signals = {**rec.signals, **changes["signals"]}
    base = rec.validated_at if rec.validated_at is not None else rec.created_at
    rec.stale_at = (now if text_changed else base) + rec.validity_window_s
    rec.updated_at = now
    return text_changed


def _warnings(
    rec: BlockRecord, state: str, now: float, cfg: PolicyConfig, warn_below: float
) -> list[str]:
    """What a reader should know about a hit (``state`` is the effective one)."""
    out = []
    if state == _STALE:
        why = ", ".join(current_stale_reasons(rec, now, cfg)) or "expired"
        if rec.stale_at is not None and rec.stale_at <= now:
            out.append(f"stale since {from_ts(rec.stale_at).isoformat()} ({why})")
        else:  # stale before its window ran out: a change, a refutation, a dependency
            out.append(f"stale ({why})")
    elif state == BlockState.REFUTED.value:
        out.append("refuted by a sensor: do not rely on it")
    elif state == BlockState.UNVERIFIED.value:
        out.append("unverified: no sensor has confirmed it yet")
    if rec.reliability < warn_below:
        out.append(f"reliability {rec.reliability:.2f} is below {warn_below:.2f}")
    if rec.flapping:
        out.append("flapping: sensors keep changing their minds")
    return out


@functools.cache
def _search_sql(*, include_refuted: bool) -> str:
    """The ranking statement of :meth:`Store.search` (built once per variant)."""
    states = (
        "('fresh','unverified','stale','refuted')"
        if include_refuted
        else ("('fresh','unverified','stale')")
    )
    return f"""
            WITH cand AS MATERIALIZED (
                SELECT rowid AS rid, -bm25(blocks_fts, 2.0, 1.0, 1.5) AS relevance
                FROM blocks_fts WHERE blocks_fts MATCH :match
                ORDER BY bm25(blocks_fts, 2.0, 1.0, 1.5) LIMIT :cands
            ), scored AS (
                SELECT b.rid AS rid, c.relevance,
                    CASE
                        WHEN b.state = 'refuted' THEN :f_refuted
                        WHEN b.state IN ('fresh', 'unverified')
                            AND (b.stale_at IS NULL OR b.stale_at > :now)
                            THEN CASE b.state WHEN 'fresh' THEN :f_fresh ELSE :f_unverified END
                        ELSE :f_stale
                    END AS freshness,
                    b.reliability,
                    {retention_sql("b")} AS retention
                FROM cand c JOIN blocks b ON b.rid = c.rid
                WHERE b.state IN {states}
            ), ranked AS MATERIALIZED (
                SELECT *, relevance * freshness * reliability * retention AS score
                FROM scored ORDER BY score DESC LIMIT :limit
            )
            SELECT s.relevance, s.freshness, s.reliability, s.retention, s.score,
                (SELECT json_group_array(json_array(g.sensor, g.subject, g.selector))
                 FROM bindings g WHERE g.block_rid = b.rid),
                (SELECT json_group_array(d.depends_on)
                 FROM dependencies d WHERE d.block_rid = b.rid),
                {", ".join("b." + c for c in BLOCK_COLUMNS)}
            FROM ranked s JOIN blocks b ON b.rid = s.rid
            ORDER BY s.score DESC
        """


async def _apply_job(
    conn: aiosqlite.Connection,
    prepared: list[_Prepared],
    rejected: list[tuple[str, str, str]],
    now: float,
    cfg: PolicyConfig,
) -> ApplyResult:
    """The writer job behind :meth:`Store.apply_events`."""
    result = ApplyResult(rejected=[(event_id, reason) for event_id, reason, _ in rejected])
    if rejected:
        await conn.executemany(
            "INSERT INTO dead_letters (received_at, source, reason, payload) VALUES (?,?,?,?)",
            [(now, "events", reason, payload) for _, reason, payload in rejected],
        )
    batch = await _drop_duplicates(conn, prepared, result)
    if batch:
        applied = _EventBatch(now, cfg, result)
        await applied.route(conn, batch)
        await applied.run(conn, batch)
    return result


async def _reject_unbound(
    conn: aiosqlite.Connection,
    prepared: list[_Prepared],
    rejected: list[tuple[str, str, str]],
    payloads: Mapping[str, str],
) -> None:
    """Move the events whose ``block_id`` has no binding for their sensor to ``rejected``."""
    blocks = list({p[8] for p in prepared if p[0] in payloads})
    bound = {
        (r[0], r[1])
        for r in await _select_in(
            conn,
            "SELECT k.id, g.sensor FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
            " WHERE k.id IN ",
            blocks,
        )
    }
    keep = []
    for p in prepared:
        if p[0] in payloads and (p[8], p[1]) not in bound:
            reason = f"block_id: block {p[8]!r} has no binding for sensor {p[1]!r}"
            rejected.append((p[0], reason, payloads[p[0]]))
        else:
            keep.append(p)
    prepared[:] = keep


async def _drop_duplicates(
    conn: aiosqlite.Connection, prepared: list[_Prepared], result: ApplyResult
) -> list[_Prepared]:
    """The events not yet in the log (nor twice in this batch)."""
    if not prepared:
        return []
    existing = {
        r[0]
        for r in await _select_in(
            conn, "SELECT event_id FROM events WHERE event_id IN ", [p[0] for p in prepared]
        )
    }
    batch: list[_Prepared] = []
    for p in prepared:
        if p[0] in existing:
            result.duplicates += 1
        else:
            existing.add(p[0])
            batch.append(p)
    return batch


class _EventBatch:
    """Routes a batch of new events to their blocks, runs the rules and writes it all."""

    def __init__(self, now: float, cfg: PolicyConfig, result: ApplyResult) -> None:
        self.now = now
        self.cfg = cfg
        self.result = result
        self.by_subject: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.records: dict[str, Any] = {}
        self.bound: set[tuple[str, str]] = set()
        self.reviews: list[tuple[Any, ...]] = []
        self.timeout_s = cfg.staleness.revalidation_timeout.total_seconds()

    async def route(self, conn: aiosqlite.Connection, batch: list[_Prepared]) -> None:
        """Which blocks each event reaches: by (sensor, subject) binding, or by block id.

        One joined lookup fetches the bindings and the evidence of the blocks behind them.
        """
        records = self.records
        subjects = list({p[2] for p in batch if p[8] is None})
        routed: set[tuple[str, str, str]] = set()
        for row in await _select_in(conn, _ROUTE_SELECT, subjects):
            block_id = row[3]
            if (row[0], row[1], block_id) in routed:  # a block bound twice to one subject
                continue  # (two assertions on one file): the event reaches it once
            routed.add((row[0], row[1], block_id))
            self.by_subject[(row[1], row[0])].append(block_id)
            if block_id not in records:
                records[block_id] = evidence_record(row[2:])
        direct = list({p[8] for p in batch if p[8] is not None})
        if not direct:
            return
        for block_id, sensor in await _select_in(
            conn,
            "SELECT k.id, g.sensor FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
            " WHERE k.id IN ",
            direct,
        ):
            self.bound.add((block_id, sensor))
        missing = [b for b in direct if b not in records]
        for row in await _select_in(conn, _EVIDENCE_SELECT, missing):
            records[row[1]] = evidence_record(row)

    async def run(self, conn: aiosqlite.Connection, batch: list[_Prepared]) -> None:
        """Apply the rules event by event (in observation order), then write everything.

        The batch goes in parts of :data:`_RULES_PART` events: a part's writes are queued
        on the connection's thread and the rules of the next part run meanwhile, so the
        event loop and SQLite work at the same time instead of in turn. The connection
        runs what it is given in order, so the writes land as if made one after the other.
        """
        now, cfg, result = self.now, self.cfg, self.result
        async with conn.execute("SELECT coalesce(max(seq), 0) FROM events") as cur:
            first_seq = (await cur.fetchone() or (0,))[0] + 1
        answered = [(now, p[3], p[7]) for p in batch if p[7] is not None]
        result.answered = [p[7] for p in batch if p[7] is not None]
        writes = _QueuedWrites(conn)
        # Answered requests first: a new request for the same check may follow.
        await writes.queue([(_REVALIDATION_DONE, answered)])
        for start in range(0, len(batch), _RULES_PART):
            part = batch[start : start + _RULES_PART]
            await writes.queue(self._rules(part, first_seq + start))
        result.accepted = len(batch)
        await writes.done()
        fallen = [c.block_id for c in result.changes if c.after in ("stale", "refuted")]
        if fallen:
            result.changes.extend(await propagate_dependencies(conn, fallen, now=now, cfg=cfg))
        result.reviews = len(self.reviews)
        await _executemany(
            conn,
            "INSERT OR IGNORE INTO reviews (id, block_id, reason, created_at) VALUES (?,?,?,?)",
            self.reviews,
        )

    def _rules(
        self, part: list[_Prepared], first_seq: int
    ) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """Run the rules over ``part``; the statements that write what they did, in order."""
        now, cfg, result = self.now, self.cfg, self.result
        event_rows = [(seq, *p[:5], now, *p[5:]) for seq, p in enumerate(part, start=first_seq)]
        effect_rows: list[tuple[Any, ...]] = []
        touched: dict[str, Any] = {}
        requests: list[tuple[Any, ...]] = []
        demoted: list[tuple[Any, ...]] = []
        for seq, p in enumerate(part, start=first_seq):
            eid, sensor, subject, outcome, observed_at, rel, window, _, block_id = p[:9]
            targets = [block_id] if block_id is not None else self.by_subject.get((sensor, subject))
            reached = False
            for bid in targets or ():
                rec = self.records.get(bid)
                if rec is None:
                    continue
                reached = True
                eff = apply_event(
                    rec,
                    outcome=outcome,
                    sensor=sensor,
                    observed_at=observed_at,
                    now=now,
                    cfg=cfg,
                    reliability=rel,
                    validity_window_s=window,
                    settled_by_binding=block_id is None or (bid, sensor) in self.bound,
                )
                effect_rows.append(_effect_row(rec.rid, seq, eff))
                if eff.ignored is not None:
                    continue
                touched[bid] = rec
                if eff.state_after != eff.state_before:
                    result.changes.append(
                        StateChange(
                            bid,
                            eff.state_before,
                            eff.state_after,
                            rec.reliability,
                            observed_at,
                            eid,
                            sensor,
                        )
                    )
                if eff.demoted:
                    demoted.append((rec.tier, cfg.promotion.core.initial_stability, rec.rid))
                if eff.revalidate and outcome != _ERROR:
                    requests.append(
                        (
                            new_id(),
                            bid,
                            sensor,
                            subject,
                            eff.revalidate,
                            now,
                            now + eff.revalidate_after_s,
                            self.timeout_s,
                        )
                    )
                if eff.review:
                    self.reviews.append((new_id(), bid, eff.review, now))
            if not reached:
                result.unmatched += 1
        result.revalidations += len(requests)
        # Writes in key order: B-tree pages are then visited once, in sequence.
        effect_rows.sort(key=_first_two)
        updates = sorted((evidence_row(r) for r in touched.values()), key=_last)
        return [
            (_EVENT_INSERT, event_rows),
            (_EFFECT_INSERT, effect_rows),
            (_EVIDENCE_UPDATE, updates),
            ("UPDATE blocks SET tier = ?, stability = min(stability, ?) WHERE rid = ?", demoted),
            (_REVALIDATION_INSERT, requests),
        ]


class _QueuedWrites:
    """Statements handed to a connection's thread without waiting for each in turn.

    ``queue`` returns as soon as the thread has the statements (in the order given),
    so the caller can compute the next ones meanwhile; ``done`` waits for all of them
    and raises the first failure.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._pending: list[asyncio.Future[Any]] = []

    async def queue(self, statements: Sequence[tuple[str, list[tuple[Any, ...]]]]) -> None:
        started = [
            asyncio.ensure_future(self._conn.executemany(sql, rows))
            for sql, rows in statements
            if rows
        ]
        self._pending.extend(started)
        if started:
            # One pass of the loop: each task, in creation order, hands its statement to
            # the connection's queue (aiosqlite runs them in that order).
            await asyncio.sleep(0)

    async def done(self) -> None:
        outcomes = await asyncio.gather(*self._pending, return_exceptions=True)
        self._pending.clear()
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome


_first_two = operator.itemgetter(0, 1)
_last = operator.itemgetter(-1)


def _effect_row(rid: int, seq: int, eff: Effect) -> tuple[Any, ...]:
    detail = None
    if eff.ignored or eff.hard or eff.review or eff.demoted or eff.notes:
        detail = json.dumps(eff.as_dict(), separators=(",", ":"))
    return (
        rid,
        seq,
        eff.state_before,
        eff.state_after,
        eff.reliability_before,
        eff.reliability_after,
        detail,
    )


async def _insert_dependencies(
    conn: aiosqlite.Connection, news: Sequence[NewBlock], first_rid: int, new_ids: set[str]
) -> None:
    """Record ``depends_on``; every target must exist (or be added in the same call)."""
    rows = [(dep, first_rid + i) for i, n in enumerate(news) for dep in dict.fromkeys(n.depends_on)]
    if not rows:
        return
    targets = list({dep for dep, _ in rows} - new_ids)
    found = {r[0] for r in await _select_in(conn, "SELECT id FROM blocks WHERE id IN ", targets)}
    missing = [
        (f"{i}.depends_on.{j}" if len(news) > 1 else f"depends_on.{j}", f"no block {dep!r}")
        for i, n in enumerate(news)
        for j, dep in enumerate(n.depends_on)
        if dep not in found and dep not in new_ids
    ]
    if missing:
        raise ValidationInputError(missing)
    await conn.executemany(
        "INSERT OR IGNORE INTO dependencies (depends_on, block_rid) VALUES (?, ?)", rows
    )


async def propagate_dependencies(
    conn: aiosqlite.Connection,
    roots: Iterable[str],
    *,
    now: float,
    cfg: PolicyConfig,
    max_depth: int = 16,
) -> list[StateChange]:
    """Dependents of refuted or stale blocks go stale (reason ``dependency``), transitively,
    each with one revalidation request per binding. Returns their state changes."""
    changes: list[StateChange] = []
    frontier = list(dict.fromkeys(roots))
    seen = set(frontier)
    timeout_s = cfg.staleness.revalidation_timeout.total_seconds()
    for _ in range(max_depth):
        if not frontier:
            break
        rows = await _select_in(
            conn,
            "SELECT "
            + ", ".join(f"k.{c}" for c in EVIDENCE_COLUMNS)
            + " FROM dependencies d JOIN blocks k ON k.rid = d.block_rid WHERE d.depends_on IN ",
            frontier,
        )
        staled = []
        for row in rows:
            rec = evidence_record(row)
            if rec.id in seen:
                continue
            seen.add(rec.id)
            before = rec.state
            if mark_stale(rec, now, StaleReason.DEPENDENCY):
                staled.append(rec)
                changes.append(StateChange(rec.id, before, rec.state, rec.reliability, now, ""))
        if not staled:
            break
        await conn.executemany(_EVIDENCE_UPDATE, [evidence_row(r) for r in staled])
        bindings = await _select_in(
            conn,
            "SELECT k.id, g.sensor, g.subject FROM bindings g"
            " JOIN blocks k ON k.rid = g.block_rid WHERE g.quarantine IS NULL"
            " AND g.block_rid IN ",
            [r.rid for r in staled],
        )
        await _executemany(
            conn,
            _REVALIDATION_INSERT,
            [
                (new_id(), b, sensor, subject, "dependency", now, now, timeout_s)
                for b, sensor, subject in bindings
            ],
        )
        frontier = [r.id for r in staled]
    return changes


_SHORT_CHUNK = 400  # blocks per neighbour query (two host parameters each)


async def _short_ids(conn: aiosqlite.Connection, block_ids: Sequence[str]) -> dict[str, str]:
    """Short ids from the ``id_key`` index: each key's nearest neighbours decide how many
    digits tell it apart (two index probes per block, one query per chunk of blocks)."""
    out: dict[str, str] = {}
    keyed: list[tuple[str, str]] = []
    for block_id in dict.fromkeys(block_ids):
        key = _shortid.id_key(block_id)
        if key is None:
            out[block_id] = block_id
        else:
            keyed.append((block_id, key))
    for chunk in _chunks(keyed, _SHORT_CHUNK):
        values = ",".join("(?, ?)" for _ in chunk)
        rows = await conn.execute_fetchall(
            f"WITH k(id, key) AS (VALUES {values}) SELECT k.id, k.key,"
            " (SELECT id_key FROM blocks WHERE id_key < k.key ORDER BY id_key DESC LIMIT 1),"
            " (SELECT id_key FROM blocks WHERE id_key >= k.key AND id <> k.id"
            "  ORDER BY id_key LIMIT 1)"
            " FROM k",
            [v for pair in chunk for v in pair],
        )
        for block_id, key, below, above in rows:
            shared = max(
                (_shortid.common_prefix(key, str(n)) for n in (below, above) if n is not None),
                default=0,
            )
            out[block_id] = _shortid.short_form(block_id, shared + 1)
    return out


async def _find_duplicates(
    conn: aiosqlite.Connection, records: Sequence[BlockRecord], keys: Sequence[str]
) -> dict[int, str]:
    """For each new record whose content a live block (or an earlier new one) already
    holds: its index and that block's id."""
    found: dict[int, str] = {}
    first_new: dict[str, int] = {}
    for i, (rec, key) in enumerate(zip(records, keys, strict=True)):
        rows = await conn.execute_fetchall(
            "SELECT id, content FROM blocks WHERE content_key = ? AND state <> 'archived'"
            " ORDER BY id",
            (key,),
        )
        wanted = normalise_content(rec.content)
        match = next((str(r[0]) for r in rows if normalise_content(r[1]) == wanted), None)
        if match is not None:
            found[i] = match
        elif key in first_new:
            found[i] = records[first_new[key]].id
        else:
            first_new[key] = i
    return found


async def _backfill_content_keys(conn: aiosqlite.Connection) -> None:
    """Fill ``content_key`` in for rows written before the column existed (once)."""
    while True:
        rows = await conn.execute_fetchall(
            "SELECT rid, content FROM blocks WHERE content_key IS NULL LIMIT ?",
            (_BACKFILL_CHUNK,),
        )
        if not rows:
            return
        await conn.execute("BEGIN IMMEDIATE")
        try:
            await conn.executemany(
                "UPDATE blocks SET content_key = ? WHERE rid = ?",
                [(content_key(r[1]), r[0]) for r in rows],
            )
            await conn.execute("COMMIT")
        except sqlite3.Error:
            await conn.execute("ROLLBACK")
            raise


async def _executemany(conn: aiosqlite.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        await conn.executemany(sql, rows)


async def migrate(conn: aiosqlite.Connection) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the version found before."""
    async with conn.execute("PRAGMA user_version") as cur:
        found = (await cur.fetchone() or (0,))[0]
    if found > SCHEMA_VERSION:
        raise StorageError(
            f"the database has schema version {found}, newer than this memwarden "
            f"({SCHEMA_VERSION}): upgrade memwarden"
        )
    for version in range(found + 1, SCHEMA_VERSION + 1):
        await conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in split_statements(MIGRATIONS[version - 1]):
                await conn.execute(statement)
            await conn.execute(f"PRAGMA user_version = {version}")
            await conn.execute("COMMIT")
        except sqlite3.Error as err:
            await conn.execute("ROLLBACK")
            raise StorageError(f"migration to schema version {version} failed: {err}") from err
        log.info("store_migrated", to_version=version)
    return int(found)
