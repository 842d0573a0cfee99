"""Bringing a SQLite file to the current schema: the migrations, then one-off backfills.

:func:`prepare_schema` is the :class:`~memwarden.memory._database.Database`'s default
``prepare`` hook; it runs on the writer connection at open, before any reader exists.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import structlog

from memwarden.errors import StorageError
from memwarden.memory._codec import content_key
from memwarden.memory._schema import MIGRATIONS, SCHEMA_VERSION, split_statements

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["SCHEMA_VERSION", "backfill_content_keys", "migrate", "prepare_schema"]

log = structlog.get_logger("memwarden.store")

_BACKFILL_CHUNK = 5000  # rows per transaction when content_key is filled in after migration


async def prepare_schema(conn: aiosqlite.Connection) -> None:
    """Migrate, then fill in what a migration added but could not compute in SQL."""
    await migrate(conn)
    await backfill_content_keys(conn)


async def backfill_content_keys(conn: aiosqlite.Connection) -> None:
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
