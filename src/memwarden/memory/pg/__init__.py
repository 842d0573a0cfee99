"""The PostgreSQL backend (the ``postgres`` extra: asyncpg): its schema and migrations,
:class:`PgDatabase` (group commit, readers), and the copy from a SQLite store that
``memwarden migrate --to`` runs.

Importing this package needs asyncpg; ``memwarden.memory`` does not import it.
"""

from __future__ import annotations

from memwarden.memory.pg._copy import CopyReport, TableCopy, copy_to_postgres
from memwarden.memory.pg._database import PgDatabase
from memwarden.memory.pg._dsn import check_dsn, redact_dsn
from memwarden.memory.pg._migrate import migrate, schema_version
from memwarden.memory.pg._schema import SCHEMA_VERSION, SQLITE_SCHEMA_VERSION
from memwarden.memory.pg._types import PgConnection

__all__ = [
    "SCHEMA_VERSION",
    "SQLITE_SCHEMA_VERSION",
    "CopyReport",
    "PgConnection",
    "PgDatabase",
    "TableCopy",
    "check_dsn",
    "copy_to_postgres",
    "migrate",
    "redact_dsn",
    "schema_version",
]
