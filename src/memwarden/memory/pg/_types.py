"""The connection type the PostgreSQL parts are written against.

A job or a read receives a connection of the database's pool (asyncpg hands out a
proxy); migrations and tools may also run on a connection of their own. Both answer the
same calls (``execute``, ``fetch``, ``fetchrow``, ``fetchval``, ``transaction``,
``copy_records_to_table``...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

__all__ = ["PgConnection"]

PgConnection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
