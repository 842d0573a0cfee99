"""What the parts of :class:`~memwarden.memory.Store` share: the backend's parts and
settings the store holds, and the few properties every group of its methods reads.

:class:`Store` (:mod:`memwarden.memory._store`) is one class made of groups of methods,
each in a module of its own and each a subclass of :class:`_StoreBase`: writes
(:mod:`~memwarden.memory._store_writes`), reads and search
(:mod:`~memwarden.memory._store_reads`), and upkeep, the maintenance passes and the
queues (:mod:`~memwarden.memory._store_upkeep`). :class:`Store` itself builds the parts
and opens and closes them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, cast

from memwarden.errors import ConfigError, StorageError
from memwarden.memory._apply import EventLog
from memwarden.memory._model import NODE_NAME_PATTERN

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from memwarden.memory import _compaction
    from memwarden.memory._blocks import Blocks
    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._evidence import Evidence
    from memwarden.memory._reads import Reads
    from memwarden.memory._revalidation import Revalidations
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory._search import Search
    from memwarden.memory._store import Store
    from memwarden.memory._vectors import VectorIndex
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
    from memwarden.memory.policy import PolicyConfig


__all__: list[str] = []


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


class _StoreBase:
    """The attributes :class:`Store` sets up (see :mod:`memwarden.memory._store`) and
    the properties its groups of methods share."""

    _blocks: Blocks | PgBlocks
    _events: EventLog | PgEventLog
    _search: Search | PgSearch
    _reads: Reads | PgReads
    _revalidations: Revalidations | PgRevalidations
    _evidence: Evidence | PgEvidence
    _db: Database | None
    _path: Path | None
    _node: str
    _misc: PgMisc | None
    _pg: _PgParts | None
    pg_db: PgDatabase | None
    clock: Clock
    policy: PolicyConfig
    compaction: _compaction.CompactionConfig
    score_log: ScoreLog | None
    vectors: VectorIndex | None

    @property
    def _store(self) -> Store:
        """This object as the :class:`Store` it is (for the functions that take one, and
        the methods of another group)."""
        return cast("Store", self)

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
    def location(self) -> str:
        """Where the store is, safe to show: the file's path, or the URL without its
        password."""
        return str(self._path) if self.pg_db is None else self.pg_db.shown

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

    def _queued(self) -> None:
        """Blocks were added or their text changed: wake the embedding task (the
        triggers queued them; without an embedder there is nothing to wake)."""
        if self.vectors is not None:
            self.vectors.notify()
