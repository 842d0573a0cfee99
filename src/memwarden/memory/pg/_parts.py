"""The PostgreSQL store's parts in one import: the :class:`~memwarden.memory.Store`
façade imports this module lazily (it needs asyncpg, the ``postgres`` extra)."""

from __future__ import annotations

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
from memwarden.memory.pg._vectors import PgVectorIndex
from memwarden.memory.pg._vectors import queue_all as queue_all_vectors

__all__ = [
    "PgBlocks",
    "PgDatabase",
    "PgErasure",
    "PgEventLog",
    "PgEvidence",
    "PgMaintenance",
    "PgMisc",
    "PgProposals",
    "PgQuarantine",
    "PgReads",
    "PgRevalidations",
    "PgReviews",
    "PgSearch",
    "PgServing",
    "PgTransfer",
    "PgVectorIndex",
    "queue_all_vectors",
]
