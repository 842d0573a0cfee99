"""The memory store: one façade over the database and the parts that use it.

:class:`Store` is the store's whole public API: this module builds its parts, opens and
closes them; its methods come in three groups, each a module of its own over
:mod:`~memwarden.memory._store_base` (what they share): writes
(:mod:`~memwarden.memory._store_writes`), reads and search
(:mod:`~memwarden.memory._store_reads`), upkeep (:mod:`~memwarden.memory._store_upkeep`).
Each method delegates to a part, a module a newcomer can read alone:

- :mod:`~memwarden.memory._database`: the connections (one writer with group commit,
  pooled readers), open, close, migrations;
- :mod:`~memwarden.memory._blocks`: adding, editing, archiving and deleting blocks;
- :mod:`~memwarden.memory._apply`: appending validation events and applying them
  (:mod:`~memwarden.memory._eventbatch`: the writer job);
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
in :class:`~memwarden.memory._store_base._PgParts`, and a method dispatches to them when
they are there. Every public method runs on both backends
(``tests/pg/test_store_facade.py``); what only one backend has is said at the method.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal, Self

from memwarden.memory import _compaction, _erasure
from memwarden.memory._apply import EventLog
from memwarden.memory._blocks import Blocks
from memwarden.memory._clock import Clock, SystemClock
from memwarden.memory._database import FLOOD_COMMIT_WEIGHT, FLOOD_WAL_MIB, Database
from memwarden.memory._evidence import Evidence
from memwarden.memory._location import store_location
from memwarden.memory._model import default_node_name
from memwarden.memory._reads import Reads
from memwarden.memory._results import (
    ApplyResult,
    BlockFilter,
    BlockPatch,
    DueBlock,
    EventRecord,
    FactEvidence,
    SearchHit,
    StateChange,
)
from memwarden.memory._revalidation import Revalidations
from memwarden.memory._scorelog import ScoreLog
from memwarden.memory._search import Search
from memwarden.memory._vectors import EmbedderLike, VectorIndex
from memwarden.memory.policy import PolicyConfig

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._misc import PgMisc

from memwarden.memory._store_base import _PgParts
from memwarden.memory._store_reads import _Reads
from memwarden.memory._store_upkeep import _Upkeep
from memwarden.memory._store_writes import _Writes

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


class Store(_Writes, _Reads, _Upkeep):
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
    (:mod:`memwarden.memory._writer`). ``maintenance_connections`` (PostgreSQL only): how
    many ranges of a decay pass run at once, each on a connection of its own
    (:meth:`~memwarden.memory.pg.PgDatabase.write_each`); SQLite has one writer.
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
        maintenance_connections: int = 2,
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
                maintenance_connections=maintenance_connections,
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
        maintenance_connections: int,
    ) -> None:
        """The PostgreSQL parts on one :class:`PgDatabase` (asyncpg is imported here)."""
        from memwarden.memory.pg import _parts as pg  # noqa: PLC0415 - an extra's driver

        self._db = None
        self.pg_db = db = pg.PgDatabase(
            dsn,
            readers=readers,
            max_jobs_per_commit=max_jobs,
            maintenance_connections=maintenance_connections,
        )
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
    def backend(self) -> Literal["sqlite", "postgresql"]:
        """Which database engine holds this store."""
        return "sqlite" if self.pg_db is None else "postgresql"

    @property
    def unreachable(self) -> tuple[str, ...]:
        """What an erasure cannot reach on this backend (an erasure's answer lists it):
        :data:`memwarden.memory.UNREACHABLE`, or PostgreSQL's own list."""
        return _erasure.UNREACHABLE if self._pg is None else self._pg.erasure.unreachable

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

    @property
    def write_backlog(self) -> int:
        """Jobs waiting for the writer."""
        return self._database.write_backlog
