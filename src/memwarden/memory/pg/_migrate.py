"""Bringing a PostgreSQL database to the current schema.

Each migration runs in its own transaction together with the version bump, and each
transaction first takes a transaction-level advisory lock
(:data:`~memwarden.memory.pg._schema.ADVISORY_LOCK_KEY`): two daemons starting at once
take turns, and the second finds the work done. A transaction-level lock (not a session
one) also holds behind a transaction-pooling proxy such as pgbouncer, where a session
lock could be left on a server connection someone else gets next.

A database whose schema is newer than this memwarden is refused, never touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from memwarden.errors import StorageError
from memwarden.memory.pg._schema import ADVISORY_LOCK_KEY, MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    from memwarden.memory.pg._types import PgConnection

__all__ = ["migrate", "schema_version"]

log = structlog.get_logger("memwarden.store")

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now()
)
"""


async def schema_version(conn: PgConnection) -> int:
    """The schema version the database is at (0: no memwarden schema in it)."""
    exists = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists:
        return 0
    found = await conn.fetchval("SELECT version FROM schema_version WHERE id = 1")
    return int(found) if found is not None else 0


async def migrate(conn: PgConnection) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the version found before.

    Raises :class:`StorageError` for a schema newer than this code, or a migration that
    fails (rolled back: the database stays at the version before it).
    """
    import asyncpg  # noqa: PLC0415 - the postgres extra is optional

    before = await schema_version(conn)
    if before > SCHEMA_VERSION:
        raise _too_new(before)
    if before == SCHEMA_VERSION:  # the common start: no lock, no DDL, no CREATE privilege
        return before
    found = before
    while True:
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", ADVISORY_LOCK_KEY)
                await conn.execute(_VERSION_TABLE)
                found = await schema_version(conn)
                if found > SCHEMA_VERSION:
                    raise _too_new(found)
                if found == SCHEMA_VERSION:
                    return before
                version = found + 1
                await conn.execute(MIGRATIONS[version - 1])
                await conn.execute(
                    "INSERT INTO schema_version (id, version) VALUES (1, $1) "
                    "ON CONFLICT (id) DO UPDATE SET version = $1, migrated_at = now()",
                    version,
                )
        except asyncpg.PostgresError as err:
            raise StorageError(
                f"PostgreSQL migration to schema version {found + 1} failed: {err}"
            ) from err
        log.info("store_migrated", backend="postgresql", to_version=version)


def _too_new(found: int) -> StorageError:
    return StorageError(
        f"the database has memwarden schema version {found}, newer than this memwarden "
        f"({SCHEMA_VERSION}): upgrade memwarden"
    )
