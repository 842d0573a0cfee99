"""The memory store: one façade over the database and the parts that use it.

:class:`Store` keeps the store's whole public API in one place; each method delegates
to a part, a module a newcomer can read alone:

- :mod:`~memwarden.memory._database`: the connections (one writer with group commit,
  pooled readers), open, close, migrations;
- :mod:`~memwarden.memory._blocks`: adding, editing, archiving and deleting blocks;
- :mod:`~memwarden.memory._apply`: appending validation events and applying them;
- :mod:`~memwarden.memory._revalidation`: due blocks, staleness, revalidation requests;
- :mod:`~memwarden.memory._search`: ranked full-text search;
- :mod:`~memwarden.memory._reads`: blocks, listings, bindings, the event log, counts;
- :mod:`~memwarden.memory._evidence`: receipts and what we believed at a past time;
- maintenance, quarantine, compaction, transfer, outbox and reviews in their modules.

Each part receives the :class:`~memwarden.memory._database.Database` (plus the clock and
the rules it needs), never the store.

**Two backends, one façade.** ``Store(path)`` (or ``Store("sqlite:///path")``) is SQLite;
``Store("postgresql://…")`` builds the PostgreSQL parts of :mod:`memwarden.memory.pg` on
a :class:`~memwarden.memory.pg.PgDatabase` instead (imported only then: asyncpg is an
extra). A part's attribute is typed as the union of both backends' classes, which keep
the same signatures; the PostgreSQL parts that SQLite has as module functions are held
in :class:`_PgParts`, and a method dispatches to them when they are there. Every public
method runs on both backends (``tests/pg/test_store_facade.py``); what only one backend
has is said at the method.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from memwarden.errors import ConfigError, StorageError, ValidationInputError
from memwarden.memory import (
    _compaction,
    _decayline,
    _erasure,
    _explain,
    _maintenance,
    _outbox,
    _promotion,
    _proposals,
    _quarantine,
    _retention,
    _reviews,
    _series,
    _transfer,
)
from memwarden.memory._apply import EventLog
from memwarden.memory._blocks import Blocks
from memwarden.memory._clock import Clock, SystemClock
from memwarden.memory._database import FLOOD_COMMIT_WEIGHT, FLOOD_WAL_MIB, Database
from memwarden.memory._evidence import Evidence
from memwarden.memory._location import store_location
from memwarden.memory._model import (
    NODE_NAME_PATTERN,
    RevalidationReason,
    StaleReason,
    default_node_name,
)
from memwarden.memory._reads import Reads
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
)
from memwarden.memory._revalidation import Revalidations
from memwarden.memory._scorelog import ScoreLog
from memwarden.memory._search import Search, SearchMode
from memwarden.memory._serving import serve_all
from memwarden.memory._vectors import EmbedderLike, VectorIndex, queue_all
from memwarden.memory.policy import PolicyConfig

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
    from datetime import timedelta
    from pathlib import Path
    from types import TracebackType

    import aiosqlite

    from memwarden.memory._model import (
        Binding,
        Block,
        NewBlock,
        RevalidationRequest,
        ValidationEvent,
    )
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.pg._apply import PgEventLog
    from memwarden.memory.pg._blocks import PgBlocks
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._erasure import PgErasure
    from memwarden.memory.pg._evidence import PgEvidence
    from memwarden.memory.pg._maintenance import PgMaintenance
    from memwarden.memory.pg._misc import PgMisc
    from memwarden.memory.pg._proposals import PgProposals
    from memwarden.memory.pg._quarantine import PgQuarantine
    from memwarden.memory.pg._reads import PgReads
    from memwarden.memory.pg._revalidation import PgRevalidations
    from memwarden.memory.pg._reviews import PgReviews
    from memwarden.memory.pg._search import PgSearch
    from memwarden.memory.pg._serving import PgServing
    from memwarden.memory.pg._transfer import PgTransfer
    from memwarden.memory.policy import CoverageDict, HealthReport

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


@dataclasses.dataclass(frozen=True, slots=True)
class _PgParts:
    """The PostgreSQL parts whose SQLite counterparts are module functions (or need the
    file): a :class:`Store` on PostgreSQL holds one, and its methods dispatch to it."""

    misc: PgMisc
    maintenance: PgMaintenance
    reviews: PgReviews
    proposals: PgProposals
    quarantine: PgQuarantine
    erasure: PgErasure
    transfer: PgTransfer
    evidence: PgEvidence
    serving: PgServing
    queue_vectors: Callable[[], Awaitable[int]]  # every block, for a new vector


class Store:
    """The memory store.

    Use it as an async context manager (``async with Store(path) as store``). Writes go
    through one writer task and return once committed; reads use a pool of their own
    connections and never wait for the writer. ``store.db`` is the
    :class:`~memwarden.memory._database.Database` underneath (SQLite), ``store.pg_db``
    the :class:`~memwarden.memory.pg.PgDatabase` (PostgreSQL).

    ``path`` is a file path, ``sqlite:///path``, or a ``postgresql://`` (``postgres://``)
    URL. On PostgreSQL the SQLite-only settings (``synchronous``: every commit is durable
    there; ``inline_read_ms``, ``secure_delete``, ``flood_commit_events``,
    ``flood_wal_mib``) do not apply. ``flood_commit_events`` bounds a transaction while
    the writer's queue stays deep (see :mod:`memwarden.memory._batching`);
    ``flood_wal_mib`` the WAL meanwhile, whose checkpoint waits for the flood's last commit
    (:mod:`memwarden.memory._writer`).
    """

    _blocks: Blocks | PgBlocks
    _events: EventLog | PgEventLog
    _search: Search | PgSearch
    _reads: Reads | PgReads
    _revalidations: Revalidations | PgRevalidations
    _evidence: Evidence | PgEvidence

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        policy: PolicyConfig | None = None,
        readers: int = 2,
        synchronous: Literal["normal", "full"] = "normal",
        max_jobs_per_commit: int = 256,
        flood_commit_events: int = FLOOD_COMMIT_WEIGHT,
        flood_wal_mib: int = FLOOD_WAL_MIB,
        score_log: ScoreLog | str | Path | None = None,
        compaction: _compaction.CompactionConfig | None = None,
        inline_read_ms: float = 0.5,
        secure_delete: bool = True,
        embedder: EmbedderLike | None = None,
        embed_batch: int = 256,
        embed_claim_s: float = 120.0,
        node: str | None = None,
    ) -> None:
        where = store_location(path)
        self.compaction = compaction or _compaction.CompactionConfig()
        self.clock: Clock = clock or SystemClock()
        self.policy = policy or PolicyConfig()
        # A path is opened (and closed) with the store; a ScoreLog given stays the caller's.
        self._score_log_path = None if isinstance(score_log, ScoreLog) else score_log
        self.score_log: ScoreLog | None = score_log if isinstance(score_log, ScoreLog) else None
        self.vectors: VectorIndex | None = None
        self._misc: PgMisc | None = None
        self._pg: _PgParts | None = None
        self.pg_db: PgDatabase | None = None
        if isinstance(where, str):
            self._path: Path | None = None
            self._open_pg(
                where,
                readers=readers,
                max_jobs=max_jobs_per_commit,
                embedder=embedder,
                batch=embed_batch,
                claim_s=embed_claim_s,
                node=node,
            )
            return
        self._path = where
        self._db: Database | None = Database(
            where,
            readers=readers,
            synchronous=synchronous,
            max_jobs_per_commit=max_jobs_per_commit,
            flood_commit_weight=flood_commit_events,
            flood_wal_mib=flood_wal_mib,
            inline_read_ms=inline_read_ms,
            secure_delete=secure_delete,
        )
        self._blocks = Blocks(self.db, self.clock, self.policy)
        self._events = EventLog(self.db, self.clock, self.policy, self.compaction)
        self._revalidations = Revalidations(self.db, self.clock, self.policy)
        self._search = Search(self.db, self.clock, self.policy)
        # Search by meaning: vectors of the blocks, when an embedder is configured.
        self.vectors = (
            VectorIndex(self.db, embedder, batch=embed_batch, clock=self.clock)
            if embedder is not None
            else None
        )
        self._search.vectors = self.vectors
        self._reads = Reads(self.db, self.clock, self.policy)
        self._evidence = Evidence(self.db)
        self.node = node or default_node_name()

    def _open_pg(
        self,
        dsn: str,
        *,
        readers: int,
        max_jobs: int,
        embedder: EmbedderLike | None,
        batch: int,
        claim_s: float,
        node: str | None,
    ) -> None:
        """The PostgreSQL parts on one :class:`PgDatabase` (asyncpg is imported here)."""
        from memwarden.memory.pg import _parts as pg  # noqa: PLC0415 - an extra's driver

        self._db = None
        self.pg_db = db = pg.PgDatabase(dsn, readers=readers, max_jobs_per_commit=max_jobs)
        clock, policy = self.clock, self.policy
        self._blocks = pg.PgBlocks(db, clock, policy)
        self._events = pg.PgEventLog(db, clock, policy, self.compaction)
        self._revalidations = pg.PgRevalidations(db, clock, policy)
        self._search = pg.PgSearch(db, clock, policy)
        self.vectors = (
            pg.PgVectorIndex(db, embedder, batch=batch, clock=clock, claim_s=claim_s)
            if embedder is not None
            else None
        )
        self._search.vectors = self.vectors
        self._reads = pg.PgReads(db, clock, policy)
        self._evidence = evidence = pg.PgEvidence(db, clock, policy)
        self._misc = misc = pg.PgMisc(db, clock, policy, self.compaction)
        self._pg = _PgParts(
            misc=misc,
            maintenance=pg.PgMaintenance(db, clock, policy, self.compaction),
            reviews=pg.PgReviews(db, self),
            proposals=pg.PgProposals(db, clock),
            quarantine=pg.PgQuarantine(db, clock, apply=self.apply_events),
            erasure=pg.PgErasure(db, clock, vectors=self.vectors),
            transfer=pg.PgTransfer(db, clock, policy),
            evidence=evidence,
            serving=pg.PgServing(db),
            queue_vectors=functools.partial(pg.queue_all_vectors, db),
        )
        self._share_score_log()
        self.node = node or default_node_name()

    def _share_score_log(self) -> None:
        """The PostgreSQL parts that write the score log read it from their attribute:
        given the store's (at open and close, as the store opens and closes its log)."""
        if self._pg is not None:
            self._pg.maintenance.score_log = self.score_log
            self._pg.erasure.score_log = self.score_log

    # ------------------------------------------------------------------ backend

    @property
    def node(self) -> str:
        """The node this store writes as (docs/SCALE.md, "Node-scoped bindings"): a new
        binding's default ``nodes``; on PostgreSQL, events applied through this store
        reach only the bindings it serves."""
        return self._node

    @node.setter
    def node(self, value: str) -> None:
        if not re.fullmatch(NODE_NAME_PATTERN, value):
            raise ConfigError(f"node: {value!r} is not a valid node name")
        self._node = value
        self._blocks.node = value
        if not isinstance(self._events, EventLog):  # SQLite: one node, every binding
            self._events.node = value

    @property
    def backend(self) -> Literal["sqlite", "postgresql"]:
        """Which database engine holds this store."""
        return "sqlite" if self.pg_db is None else "postgresql"

    @property
    def location(self) -> str:
        """Where the store is, safe to show: the file's path, or the URL without its
        password."""
        return str(self._path) if self.pg_db is None else self.pg_db.shown

    @property
    def unreachable(self) -> tuple[str, ...]:
        """What an erasure cannot reach on this backend (an erasure's answer lists it):
        :data:`memwarden.memory.UNREACHABLE`, or PostgreSQL's own list."""
        return _erasure.UNREACHABLE if self._pg is None else self._pg.erasure.unreachable

    @property
    def path(self) -> Path:
        """The SQLite file (:class:`StorageError` on PostgreSQL: there is no file)."""
        if self._path is None:
            raise StorageError(f"the store is on PostgreSQL ({self.location}): it has no file")
        return self._path

    @property
    def db(self) -> Database:
        """The SQLite database (:class:`StorageError` on PostgreSQL: see ``pg_db``)."""
        db = self._db
        if db is None:
            raise StorageError(f"the store is on PostgreSQL ({self.location}), not SQLite")
        return db

    @property
    def _database(self) -> Database | PgDatabase:
        if self.pg_db is not None:
            return self.pg_db
        return self.db

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
        if self._database.is_open:
            return self
        await self._database.open()
        if self.vectors is not None:
            try:
                await self.vectors.load()
            except BaseException:  # a model that failed to load (ConfigError): not left open
                await self.db.close()
                raise
        if self._score_log_path is not None:
            self.score_log = ScoreLog(self._score_log_path)
            self._share_score_log()
        return self

    async def close(self) -> None:
        """Commit what was accepted, stop the writer and close every connection."""
        if not self._database.is_open:
            return
        await self._database.close()
        if self._score_log_path is not None and self.score_log is not None:
            self.score_log.close()
            self.score_log = None
            self._share_score_log()

    def _queued(self) -> None:
        """Blocks were added or their text changed: wake the embedding task (the
        triggers queued them; without an embedder there is nothing to wake)."""
        if self.vectors is not None:
            self.vectors.notify()

    @property
    def write_backlog(self) -> int:
        """Jobs waiting for the writer."""
        return self._database.write_backlog

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
        ids = await self._blocks.add_many(news, actor=actor, dedupe=dedupe, duplicates=duplicates)
        self._queued()
        return ids

    async def update(
        self,
        block_id: str,
        patch: BlockPatch | Mapping[str, Any],
        *,
        actor: str = "agent",
        expected_version: int | None = None,
    ) -> Block:
        """Edit a block. A new text (title, content, tags) or new bindings are a new
        ``version``: the old one is kept in history, the block is unverified again, and a
        new text demotes it from core. With ``expected_version`` the edit applies only to
        that version (else :class:`VersionConflictError`, nothing changed)."""
        await self._blocks.update(block_id, patch, actor=actor, expected_version=expected_version)
        self._queued()
        return await self.get(block_id)

    async def archive(self, block_id: str, *, reason: str, actor: str = "agent") -> Block:
        """Move a block to cold storage (out of search) with a reason."""
        await self._blocks.archive(block_id, reason=reason, actor=actor)
        return await self.get(block_id)

    async def restore(self, block_id: str, *, actor: str = "agent") -> Block:
        """Bring an archived block back; it returns unverified until a sensor confirms it."""
        await self._blocks.restore(block_id, actor=actor)
        return await self.get(block_id)

    async def delete(self, block_id: str, *, actor: str = "agent", reason: str = "") -> None:
        """Delete a block for good. The event log and an audit row keep the trace."""
        await self._blocks.delete(block_id, actor=actor, reason=reason)

    async def request_review(self, block_id: str, *, reason: str) -> dict[str, Any]:
        """Put a block in the human review queue (one open item per block)."""
        return await self._blocks.request_review(block_id, reason=reason)

    # ------------------------------------------------------------------ erasure
    # Implemented in _erasure.py; these methods are its public face.

    async def erasure_targets(
        self,
        *,
        ids: Sequence[str] = (),
        tag: str | None = None,
        query: str | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> list[_erasure.ErasureTarget]:
        """The blocks an erasure by full ``ids``, ``tag`` or ``query`` (words; archived
        blocks included) would take: what a dry run lists. An unknown id (or one of a
        namespace not in ``namespaces``, when given) is :class:`NotFoundError`."""
        if self._pg is not None:
            return await self._pg.erasure.erasure_targets(
                ids=ids, tag=tag, query=query, namespaces=namespaces
            )
        return await _erasure.select_targets(
            self.db, ids=ids, tag=tag, query=query, namespaces=namespaces
        )

    async def visible_ids(self, block_ids: Sequence[str], namespaces: Sequence[str]) -> list[str]:
        """Those of ``block_ids`` that are blocks of ``namespaces``."""
        if self._pg is not None:
            return await self._pg.erasure.visible_ids(block_ids, namespaces)
        return await cast("Reads", self._reads).visible_ids(block_ids, namespaces)

    async def erase(
        self, block_ids: Sequence[str], *, actor: str, reason: str = "", vacuum: bool = False
    ) -> _erasure.ErasureReport:
        """Remove these blocks' content from everywhere the store keeps it (see
        :mod:`~memwarden.memory._erasure`): rows, history, bindings, the search index,
        the events that reached them, reviews, the score log, the outbox; a tombstone per
        block stays. Then the WAL is checkpointed and truncated (after a ``VACUUM`` of
        the whole file, with ``vacuum``). All or nothing: an unknown id changes nothing.
        On PostgreSQL, ``vacuum`` is ``VACUUM (FULL, ANALYZE)`` of the tables it touched
        (:mod:`~memwarden.memory.pg._erasure`).
        """
        if self._pg is not None:
            return await self._pg.erasure.erase(
                block_ids, actor=actor, reason=reason, vacuum=vacuum
            )
        report = await _erasure.erase(self.db, self.clock, block_ids, actor=actor, reason=reason)
        if self.vectors is not None:  # the rows went with the blocks (cascade); memory too
            await self.vectors.prune()
        score_log = self.score_log
        if score_log is not None:
            report.score_log_lines = await asyncio.to_thread(score_log.drop_blocks, report.erased)
        answer = await _erasure.checkpoint(self.path, vacuum=vacuum)
        report.vacuumed = vacuum
        report.wal_checkpoint = answer
        report.wal_truncated = answer["busy"] == 0
        return report

    async def enforce_retention(
        self, cfg: _retention.RetentionConfig
    ) -> _retention.RetentionReport:
        """One retention pass (``[retention]``): archive, purge, drop old events and score
        lines as configured; nothing when nothing is (see :mod:`~memwarden.memory._retention`)."""
        if self._pg is not None:
            return await self._pg.erasure.enforce_retention(cfg)
        return await _retention.enforce(self, cfg)

    async def erasures(
        self, *, block_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The erasure log (tombstones: id, when, who, why, rows removed), newest first."""
        if self._pg is not None:
            return await self._pg.erasure.erasures(block_id=block_id, limit=limit)
        return await _erasure.tombstones(self.db, block_id=block_id, limit=limit)

    async def get_meta(self, key: str) -> str | None:
        """A small fact the daemon keeps about itself."""
        return await self._reads.get_meta(key)

    async def set_meta(self, key: str, value: str) -> None:
        await self._blocks.set_meta(key, value)

    # ------------------------------------------------------------------ events

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
        return await self._events.apply_events(events, bound_only=bound_only)

    async def dead_letter(self, *, source: str, reason: str, payload: str | bytes) -> None:
        """Keep a rejected input with the reason (never applied)."""
        if self._misc is not None:
            await self._misc.dead_letter(source=source, reason=reason, payload=payload)
            return
        await cast("EventLog", self._events).dead_letter(
            source=source, reason=reason, payload=payload
        )

    # ------------------------------------------------------------------ staleness

    async def due_for_revalidation(
        self, *, limit: int = 1000, now: float | None = None
    ) -> list[DueBlock]:
        """Fresh or unverified blocks whose window has run out, oldest first (index range scan)."""
        return await self._revalidations.due_for_revalidation(limit=limit, now=now)

    async def mark_stale(
        self,
        block_ids: Sequence[str],
        *,
        reason: StaleReason = StaleReason.EXPIRED,
        request: bool = True,
        send_at: Mapping[str, float] | None = None,
        dependents: list[StateChange] | None = None,
    ) -> list[str]:
        """Mark blocks stale (the sweep) and queue one revalidation request per binding.

        Returns the ids that actually changed state. Their dependents go stale too
        (reason ``dependency``); their state changes are appended to ``dependents``.
        """
        return await self._revalidations.mark_stale(
            block_ids, reason=reason, request=request, send_at=send_at, dependents=dependents
        )

    async def due_revalidations(
        self, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """Pending revalidation requests whose send time has come, oldest first."""
        return await self._revalidations.due_revalidations(limit=limit, now=now)

    async def set_revalidation_status(
        self, request_ids: Sequence[str], status: str, *, outcome: str | None = None
    ) -> None:
        """Mark requests ``sent``, ``done``, ``failed`` or ``expired``."""
        await self._revalidations.set_revalidation_status(request_ids, status, outcome=outcome)

    async def answered_requests(self, request_ids: Sequence[str]) -> set[str]:
        """Which of these revalidation requests an event has answered (status ``done``),
        whichever node applied it."""
        return await self._revalidations.answered_requests(request_ids)

    async def put_back_revalidation(self, request_id: str, *, send_at: float) -> bool:
        """A sent request that was not run (its binding's check is still running):
        pending again, sent at ``send_at``. False if it was answered meanwhile."""
        return await self._revalidations.put_back_revalidation(request_id, send_at=send_at)

    async def requeue_sent_revalidations(self, *, node: str | None = None) -> int:
        """Requests left ``sent`` by a daemon that died before the answer: pending again;
        with ``node``, only those that node claimed (a node of several restarting).

        Call at start, before the scheduler runs; returns how many were requeued.
        """
        return await self._revalidations.requeue_sent_revalidations(node=node)

    async def claim_revalidations(
        self, *, limit: int = 200, now: float | None = None
    ) -> list[RevalidationRequest]:
        """This node's due requests, marked ``sent`` as they are taken: on PostgreSQL
        those whose binding this store's :attr:`node` serves, claimed ``FOR UPDATE SKIP
        LOCKED`` (docs/SCALE.md); on SQLite (one node) every due request."""
        revalidations = self._revalidations
        if isinstance(revalidations, Revalidations):
            due = await revalidations.due_revalidations(limit=limit, now=now)
            await revalidations.set_revalidation_status([r.id for r in due], "sent")
            return due
        return await revalidations.claim_revalidations(self.node, limit=limit, now=now)

    async def keep_servers(self) -> tuple[int, int]:
        """Who serves each binding (docs/SCALE.md, "Node-scoped bindings"): on SQLite this
        node serves all; on PostgreSQL (the leader's pass) the first live node of each
        binding's list, and the checks claimed by dead nodes go back to pending. Each
        change is audited. Returns (bindings moved, checks requeued)."""
        now = self.clock.time()
        actor = f"node:{self.node}"
        if self._pg is None:
            node = self.node

            async def job(conn: Any) -> int:
                return await serve_all(conn, node, now=now, actor=actor)

            return await self.db.write(job), 0
        return await self._pg.serving.keep(now=now, actor=actor)

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
        return await self._revalidations.request_revalidation(
            block_id, reason=reason, send_at=send_at
        )

    async def request_checks(
        self, block_ids: Sequence[str], *, reason: RevalidationReason
    ) -> dict[str, list[tuple[str, float]]]:
        """Queue a check of every binding of each block, in one transaction.

        A binding with an open request keeps it (concurrent readers share one check).
        Returns, per block, its open requests as ``(request id, send_at)``: a request
        whose ``send_at`` is in the future is a retry that waits its interval.
        """
        return await self._revalidations.request_checks(block_ids, reason=reason)

    # ------------------------------------------------------------------ evidence

    async def receipts_for(self, block_ids: Sequence[str]) -> dict[str, FactEvidence]:
        """What a receipt needs about each block, in one read: its error streak, its open
        checks and the confirmation behind its current validation."""
        return await self._evidence.receipts_for(block_ids)

    async def believed_at(self, block_id: str, at: float) -> dict[str, Any]:
        """What we believed about a block at ``at``: its content version, state,
        reliability, validation and the last evidence committed before then.

        Rebuilt from the append-only event log (events and their effects, in commit
        order), the block's history of edits (``block_history``) and the audit log
        (archive, restore). Bi-temporal as far as the evidence goes: each piece of
        evidence says when the world was observed (``observed_at``) and when we learned
        it (``committed_at``); ``at`` is compared with the latter.
        """
        return await self._evidence.believed_at(block_id, at)

    # ------------------------------------------------------------------ reads

    async def get(self, block_id: str) -> Block:
        """A block with its bindings, its short id and its state as of now."""
        return await self._reads.get(block_id)

    async def resolve_id(self, ref: str, *, namespaces: Sequence[str] | None = None) -> str:
        """The full id a caller means: a full id, or a short id (the id's last hex digits,
        at least 8, dashes optional) that only one block's id ends with. With
        ``namespaces``, a block of any other namespace does not exist (not found).

        Raises :class:`NotFoundError` ("no block with id …"), :class:`AmbiguousIdError`
        naming the candidates, or :class:`ValidationInputError` for too short a ref.
        """
        return await self._reads.resolve_id(ref, namespaces=namespaces)

    async def short_ids(self, block_ids: Sequence[str]) -> dict[str, str]:
        """Each block's short id: its last 8 hex digits, more while another id ends
        the same way (git's abbreviations, from the end of the id)."""
        return await self._reads.short_ids(block_ids)

    async def get_record(self, block_id: str) -> BlockRecord:
        """The raw record of a block (for rules and explanations)."""
        return await self._reads.get_record(block_id)

    async def list_blocks(self, flt: BlockFilter | Mapping[str, Any] | None = None) -> list[Block]:
        """Blocks matching a filter, ordered by id (time of creation), keyset-paginated."""
        return await self._reads.list_blocks(flt)

    async def find_by_subject(self, sensor: str, subject: str) -> list[str]:
        """Ids of the blocks bound to ``sensor`` for ``subject``."""
        return await self._reads.find_by_subject(sensor, subject)

    async def sensors_bound(self, block_ids: Sequence[str]) -> dict[str, set[str]]:
        """For each of these blocks that exists, the sensors it has a binding for."""
        return await self._reads.sensors_bound(block_ids)

    async def validity_windows(self, block_ids: Sequence[str]) -> dict[str, timedelta]:
        """For each of these blocks that exists, its validity window (its own, else its
        volatility's)."""
        return await self._reads.validity_windows(block_ids)

    async def bindings_for_sensor(
        self, sensor: str, *, served_by: str | None = None
    ) -> list[tuple[str, Binding]]:
        """Every (block id, binding) a sensor owns: what it must watch; with
        ``served_by``, only the bindings that node serves (docs/SCALE.md)."""
        return await self._reads.bindings_for_sensor(sensor, served_by=served_by)

    async def events_after(self, seq: int, *, limit: int = 100) -> list[dict[str, Any]]:
        """The event log after ``seq`` (oldest first), each with the blocks it changed."""
        return await self._reads.events_after(seq, limit=limit)

    async def events_for(self, block_id: str, *, limit: int = 50) -> list[EventRecord]:
        """A block's validation history, newest first."""
        return await self._reads.events_for(block_id, limit=limit)

    async def versions(self, block_id: str) -> list[dict[str, Any]]:
        """A block's earlier texts, oldest first (the current one is the block)."""
        return await self._reads.versions(block_id)

    async def event_counts(
        self, *, since: float, bucket_s: float, scan: int = 50_000
    ) -> dict[str, dict[int, dict[str, int]]]:
        """Events received since ``since`` by sensor, time bucket and outcome (the newest
        ``scan`` events at most): what the console's sensor charts draw."""
        return await self._reads.event_counts(since=since, bucket_s=bucket_s, scan=scan)

    async def recent_event_counts(
        self, *, since: float, bucket_s: float
    ) -> dict[str, dict[int, dict[str, int]]]:
        """Events received since a recent ``since``, by sensor, bucket and outcome, reading
        only those events (found by a binary search on the log's order)."""
        return await self._reads.recent_event_counts(since=since, bucket_s=bucket_s)

    async def record_series(self) -> int:
        """Sample blocks by state and tier, the revalidation backlog and each sensor's
        events and errors into the current 5-minute slot of the time series, dropping
        rows past its 14-day retention (:mod:`~memwarden.memory._series`)."""
        if self._pg is not None:
            return await self._pg.maintenance.record_series()
        return await _series.record(self.db, self.clock)

    async def series(self, metric: str, *, since: float) -> dict[str, list[tuple[float, int]]]:
        """One metric of the time series since ``since``, by key: (slot start, value)."""
        if self._pg is not None:
            return await self._pg.maintenance.series(metric, since=since)
        return await _series.read(self.db, metric, since=since)

    async def retention_points(self, block_id: str) -> list[_decayline.RetentionPoint]:
        """The block's retention history: the decay formula's inputs at each change,
        oldest first (:mod:`~memwarden.memory._decayline`); none for an unknown id."""
        if self._pg is not None:
            return await self._pg.maintenance.retention_points(block_id)
        return await _decayline.read_points(self.db, block_id)

    async def retention_histogram(self, *, bins: int = 10) -> list[int]:
        """Live blocks by retention, in ``bins`` equal ranges of 0-1 (the decay picture)."""
        if self._pg is not None:
            return await self._pg.maintenance.retention_histogram(bins=bins)
        return await cast("Reads", self._reads).retention_histogram(bins=bins)

    async def dependents(self, block_id: str) -> list[str]:
        """Ids of the blocks that depend on this one."""
        return await self._reads.dependents(block_id)

    async def counts(self, *, namespaces: Sequence[str] | None = None) -> dict[str, Any]:
        """Blocks by state (as of now), tier and volatility; events; pending work (of
        ``namespaces`` only, when given)."""
        return await self._reads.counts(namespaces=namespaces)

    async def coverage(
        self, alive: Sequence[str], *, namespaces: Sequence[str] | None = None
    ) -> CoverageDict:
        """The share of live blocks with a binding to one of the ``alive`` sensors, overall
        and by source and tier (:func:`~memwarden.memory.policy.coverage_of`)."""
        return await self._reads.coverage(alive, namespaces=namespaces)

    # ------------------------------------------------------------------ search

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        include_refuted: bool = False,
        session: str | None = None,
        record: bool = True,
        namespaces: Sequence[str] | None = None,
        mode: SearchMode | None = None,
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
        were before this retrieval. With ``namespaces``, only blocks of those are found
        (so only they are reinforced by the retrieval).
        """
        hits = await self._search.search(
            query,
            limit=limit,
            include_refuted=include_refuted,
            namespaces=namespaces,
            mode=mode,
        )
        if session is not None and record and hits:
            await self.record_access([h.id for h in hits], session=session)
        return hits

    @property
    def default_search_mode(self) -> SearchMode:
        """``hybrid`` with an embedder, ``keyword`` without."""
        return self._search.default_mode

    async def reembed(self) -> int:
        """Queue every block for a new vector (after a model change); how many."""
        if self.vectors is None:  # a daemon with an embedder embeds them when it runs
            if self._pg is not None:
                return await self._pg.queue_vectors()
            return await queue_all(self.db)
        return await self.vectors.reembed()

    async def count_refuted_matches(
        self,
        query: str,
        *,
        namespaces: Sequence[str] | None = None,
        mode: SearchMode = "keyword",
        limit: int = 10,
    ) -> int:
        """How many refuted blocks a search of ``query`` in ``mode`` hides: those
        matching its words, or among its nearest vectors, or either (hybrid)."""
        return await self._search.count_refuted_matches(
            query, namespaces=namespaces, mode=mode, limit=limit
        )

    # ------------------------------------------------------------------ maintenance
    # The passes live in _promotion.py, _maintenance.py and _explain.py; these methods
    # are their public face.

    async def record_access(
        self, block_ids: Sequence[str], *, session: str | None = None
    ) -> list[str]:
        """Count a retrieval of each block (in ``session``); returns the ids made core.
        A session id holding a NUL is refused (:class:`ValidationInputError`) on both
        backends: PostgreSQL text cannot store one."""
        if session is not None and "\x00" in session:
            raise ValidationInputError([("session", "must not contain a NUL character")])
        if self._misc is not None:
            return await self._misc.record_access(
                block_ids, session=session, score_log=self.score_log
            )
        return await _promotion.record_accesses(
            self.db, self.clock, self.policy, block_ids, session=session, score_log=self.score_log
        )

    async def decay_cycle(self, *, chunk_rows: int | None = None) -> _maintenance.DecayReport:
        """Recompute retention set-based and archive what decayed below the threshold."""
        if self._pg is not None:
            return await self._pg.maintenance.decay_cycle(chunk_rows=chunk_rows)
        return await _maintenance.decay_cycle(
            self.db, self.clock, self.policy, chunk_rows=chunk_rows
        )

    async def heuristic_cycle(self, *, chunk_rows: int | None = None) -> dict[str, Any]:
        """The self-tuning rules' self-tuning pass over the blocks read since the previous one."""
        if self._pg is not None:
            return await self._pg.maintenance.heuristic_cycle(chunk_rows=chunk_rows)
        return await _maintenance.heuristic_cycle(
            self.db, self.policy, chunk_rows=chunk_rows, now=self.clock.time()
        )

    async def consolidate(self, *, limit: int | None = None) -> _promotion.ConsolidationReport:
        """The consolidation pass: score short_term blocks, promote the ones that pass."""
        if self._pg is not None:
            return await self._pg.maintenance.consolidate(limit=limit)
        return await _promotion.consolidate(
            self.db, self.clock, self.policy, limit=limit, score_log=self.score_log
        )

    # ------------------------------------------------------------------ quarantine
    # Implemented in _quarantine.py; these methods are its public face.

    async def stored_bindings(self, sensors: Sequence[str]) -> list[_quarantine.StoredBinding]:
        """Every stored binding of these sensors, raw (quarantined ones included)."""
        if self._pg is not None:
            return await self._pg.quarantine.stored_bindings(sensors)
        return await _quarantine.stored_bindings(self.db, sensors)

    async def quarantined_bindings(self) -> list[_quarantine.StoredBinding]:
        """The bindings quarantined because today's rules refuse them."""
        if self._pg is not None:
            return await self._pg.quarantine.quarantined_bindings()
        return await _quarantine.quarantined(self.db)

    async def set_quarantine(
        self,
        failing: Sequence[tuple[_quarantine.StoredBinding, str]],
        released: Sequence[int] = (),
    ) -> int:
        """Quarantine ``(binding, rule)`` pairs (an error event each), release others."""
        if self._pg is not None:
            return await self._pg.quarantine.set_quarantine(failing, released)
        return await _quarantine.set_quarantine(
            self.db, self.clock, failing, released, apply=self.apply_events
        )

    async def compact_events(
        self, cfg: _compaction.CompactionConfig | None = None
    ) -> _compaction.CompactionReport:
        """Compact old runs of identical outcomes in the event log; prune dead letters."""
        if self._pg is not None:
            return await self._pg.maintenance.compact_events(cfg or self.compaction)
        return await _compaction.compact(self.db, self.clock, cfg or self.compaction)

    async def explain(self, block_id: str) -> Explanation:
        """Why a block stands where it does: state, reliability, retention, rank, promotion."""
        if self._pg is not None:
            return await self._pg.evidence.explain(block_id)
        return await _explain.explain(self.db, self.clock, self.policy, block_id)

    async def health(
        self,
        *,
        failing_sensors: Iterable[str] = (),
        sensors_total: int = 0,
        namespaces: Sequence[str] | None = None,
    ) -> HealthReport:
        """The 0-100 health score and its warnings, from aggregate queries (over the
        blocks of ``namespaces`` only, when given)."""
        if self._misc is not None:
            return await self._misc.health(
                failing_sensors=failing_sensors,
                sensors_total=sensors_total,
                namespaces=namespaces,
            )
        return await _explain.health(
            self.db,
            self.clock,
            self.policy,
            failing_sensors=failing_sensors,
            sensors_total=sensors_total,
            namespaces=namespaces,
        )

    # ------------------------------------------------------------------ helpers

    # ------------------------------------------------------------------ transfer
    # Implemented in _transfer.py; these methods are its public face.

    async def export_blocks(
        self, *, after: str | None = None, limit: int = 500
    ) -> list[dict[str, Any]]:
        """A page of whole blocks (by id, after ``after``) as export objects: record,
        bindings, dependencies, validation history and earlier versions."""
        if self._pg is not None:
            return await self._pg.transfer.export_blocks(after=after, limit=limit)
        blocks = await self.list_blocks({"after": after, "limit": limit})
        async with self.db.read() as conn:
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
        if self._pg is not None:
            added = await self._pg.transfer.import_blocks(rows, quarantine=quarantine, actor=actor)
            self._queued()
            return added
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> _transfer.ImportReport:
            report = await _transfer.import_rows(conn, rows, quarantine=quarantine, now=now)
            if report.added:
                await conn.execute(
                    "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?,?,?,?,?)",
                    (now, actor, "import", None, json.dumps({"blocks": len(report.added)})),
                )
            return report

        report = await self.db.write(job, weight=max(1, len(rows)))
        self._queued()
        return report

    # ------------------------------------------------------------------ MQTT outbox
    # Implemented in _outbox.py; these methods are its public face.

    async def outbox_put(
        self, messages: Sequence[tuple[str, bytes, int, bool]], *, max_rows: int
    ) -> int:
        """Keep ``(topic, payload, qos, retain)`` messages to publish later; returns how many
        of the oldest were dropped to stay within ``max_rows``."""
        if self._misc is not None:
            return await self._misc.outbox_put(messages, max_rows=max_rows)
        return await _outbox.put(self.db, self.clock, messages, max_rows=max_rows)

    async def outbox_peek(self, *, limit: int = 500) -> list[_outbox.OutboxMessage]:
        """The oldest messages waiting to be published."""
        if self._misc is not None:
            return await self._misc.outbox_peek(limit=limit)
        return await _outbox.peek(self.db, limit=limit)

    async def outbox_delete(self, ids: Sequence[int]) -> None:
        """Forget messages that were published."""
        if self._misc is not None:
            await self._misc.outbox_delete(ids)
            return
        await _outbox.delete(self.db, ids)

    async def outbox_stats(self) -> _outbox.OutboxStats:
        """How many messages wait, and how many were ever dropped because the outbox was full."""
        if self._misc is not None:
            return await self._misc.outbox_stats()
        return await _outbox.stats(self.db)

    async def agent_high_water(self, agents: Sequence[str]) -> dict[str, int]:
        """The highest ``seq`` stored for each remote agent run (absent when none)."""
        if self._misc is not None:
            return await self._misc.agent_high_water(agents)
        return await _outbox.agent_high_water(self.db, agents)

    # ------------------------------------------------------------------ proposals
    # Implemented in _proposals.py; these methods are its public face.

    async def add_proposals(self, proposals: Iterable[_proposals.NewProposal]) -> int:
        """Store the proposals not made before (a rejected one is not made again)."""
        if self._pg is not None:
            return await self._pg.proposals.add_proposals(proposals)
        return await _proposals.add_proposals(self.db, self.clock, proposals)

    async def list_proposals(
        self,
        *,
        status: _proposals.ProposalStatus | Literal["all"] = "pending",
        block_id: str | None = None,
        limit: int = 100,
        namespaces: Sequence[str] | None = None,
    ) -> list[_proposals.Proposal]:
        """Proposals of a status (and block; of ``namespaces``' blocks), oldest first."""
        if self._pg is not None:
            return await self._pg.proposals.list_proposals(
                status=status, block_id=block_id, limit=limit, namespaces=namespaces
            )
        return await _proposals.list_proposals(
            self.db, status=status, block_id=block_id, limit=limit, namespaces=namespaces
        )

    async def get_proposal(self, proposal_id: str) -> _proposals.Proposal:
        if self._pg is not None:
            return await self._pg.proposals.get_proposal(proposal_id)
        return await _proposals.get(self.db, proposal_id)

    async def decide_proposal(
        self,
        proposal_id: str,
        *,
        accept: bool,
        actor: str,
        binding: Binding | None = None,
    ) -> _proposals.Proposal:
        """Accept (apply it; ``binding``: a binding proposal as its sensor validated it) or
        reject a pending proposal."""
        if self._pg is not None:
            return await self._pg.proposals.decide_proposal(
                proposal_id, accept=accept, actor=actor, binding=binding
            )
        return await _proposals.decide(
            self.db, self.clock, proposal_id, accept=accept, actor=actor, binding=binding
        )

    async def retire_proposals(self) -> int:
        """Pending proposals that no longer apply (the block bound since, archived or
        refuted) become ``obsolete``; how many."""
        if self._pg is not None:
            return await self._pg.proposals.retire_proposals()
        return await _proposals.retire(self.db, self.clock)

    async def unbound_live(
        self, *, after_rid: int = 0, limit: int = 100
    ) -> list[tuple[int, str, str, str, str]]:
        """Live blocks without a binding, by rid: ``(rid, id, title, content, namespace)``."""
        if self._pg is not None:
            return await self._pg.proposals.unbound_live(after_rid=after_rid, limit=limit)
        return await _proposals.unbound_live(self.db, after_rid=after_rid, limit=limit)

    async def bound_to(
        self,
        subjects: Iterable[tuple[str, str]],
        *,
        per_subject: int = 3,
        namespace: str | None = None,
    ) -> dict[tuple[str, str], list[str]]:
        """The live blocks bound to each ``(sensor, subject)`` (of ``namespace`` only)."""
        if self._pg is not None:
            return await self._pg.proposals.bound_to(
                subjects, per_subject=per_subject, namespace=namespace
            )
        return await _proposals.bound_to(
            self.db, subjects, per_subject=per_subject, namespace=namespace
        )

    # ------------------------------------------------------------------ human review queue
    # Implemented in _reviews.py; these methods are its public face.

    async def list_reviews(
        self, *, status: str = "pending", limit: int = 100, namespaces: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Review items (``pending``, ``decided`` or ``all``), each with its block's summary
        (of ``namespaces``' blocks only, when given)."""
        if self._pg is not None:
            return await self._pg.reviews.list_reviews(
                status=status, limit=limit, namespaces=namespaces
            )
        return await _reviews.list_reviews(self, status=status, limit=limit, namespaces=namespaces)

    async def get_review(self, review_id: str, *, events: int = 10) -> dict[str, Any]:
        """One review item with its block and the block's last events (the evidence)."""
        if self._pg is not None:
            return await self._pg.reviews.get_review(review_id, events=events)
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
        apply: Callable[[Sequence[ValidationEvent]], Awaitable[ApplyResult]] | None = None,
    ) -> dict[str, Any]:
        """Confirm, reject or edit (``new_content``) a review item, recording who decided.
        The decision's event goes through ``apply`` (the daemon's bus; by default
        :meth:`apply_events`) while the item is still open."""
        if self._pg is not None:
            return await self._pg.reviews.decide_review(
                review_id,
                decision,
                reviewer=reviewer,
                comment=comment,
                new_content=new_content,
                sensor=sensor,
                apply=apply,
            )
        return await _reviews.decide_review(
            self,
            review_id,
            decision,
            reviewer=reviewer,
            comment=comment,
            new_content=new_content,
            sensor=sensor,
            apply=apply,
        )

    async def queue_review(self, block_id: str, *, reason: str) -> _reviews.Review:
        """Put a block in the review queue with a reason; the open item if it already
        has one (what a review sensor queues)."""
        if self._pg is not None:
            return await self._pg.reviews.queue_review(block_id, reason=reason)
        return await _reviews.queue_review(self, block_id, reason=reason)

    async def escalation_candidates(
        self,
        *,
        block_ids: Sequence[str],
        below: float,
        now: float,
        unbound_low_volatility: bool = True,
        limit: int = 500,
    ) -> list[tuple[str, str]]:
        """Blocks a human should look at, with the reason, that have no open item yet
        (:func:`memwarden.memory._reviews.escalation_candidates`)."""
        if self._pg is not None:
            return await self._pg.reviews.escalation_candidates(
                block_ids=block_ids,
                below=below,
                now=now,
                unbound_low_volatility=unbound_low_volatility,
                limit=limit,
            )
        return await _reviews.escalation_candidates(
            self,
            block_ids=block_ids,
            below=below,
            now=now,
            unbound_low_volatility=unbound_low_volatility,
            limit=limit,
        )
