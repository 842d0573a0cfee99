"""The cluster's own tables, created idempotently, and the one way to reach PostgreSQL.

Every primitive in this package works on ``cluster_*`` tables that :func:`ensure_tables`
creates if they are missing (``CREATE … IF NOT EXISTS`` under a transaction-level
advisory lock, so two nodes starting at once do not race on the catalog). The store's
own schema can adopt them as they are: nothing here depends on the store's tables.

- ``cluster_leases``: one row per lease (``_leader``). Times are the **database's**
  (``timestamptz``, ``clock_timestamp()``): every node judges expiry by one clock.
- ``cluster_nodes``: one row per node name, its instance and heartbeats (``_nodes``;
  the database's times).

asyncpg's errors are translated here into :class:`~memwarden.errors.StorageError`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg

from memwarden.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "CONNECTION_ERRORS",
    "DATABASE_ERRORS",
    "DDL",
    "SESSION_ERRORS",
    "Executor",
    "connect",
    "ensure_tables",
    "translated",
]

DDL = """
CREATE TABLE IF NOT EXISTS cluster_leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
-- One row per node name: the instance holding it and its heartbeats (``_nodes``).
CREATE TABLE IF NOT EXISTS cluster_nodes (
    node text PRIMARY KEY,
    instance text NOT NULL,
    host text NOT NULL,
    pid integer,
    started_at timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at timestamptz
);
-- Made by earlier versions and never used by the daemon (revalidation requests are the
-- store's ``revalidations`` rows, claimed per node: docs/SCALE.md).
DROP TABLE IF EXISTS cluster_revalidations;
"""

# Any constant shared by every node: the key of the transaction-level advisory lock that
# serialises the DDL (two CREATE TABLE IF NOT EXISTS at once can still collide).
_DDL_LOCK = 0x6D656D77_61726431  # "memward1"

# What a broken or unreachable connection raises (beside PostgreSQL's own errors).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
)
# ... and anything PostgreSQL may answer instead of a result.
DATABASE_ERRORS: tuple[type[Exception], ...] = (asyncpg.PostgresError, *CONNECTION_ERRORS)
# ... and the same translated (what a session of the leader or the listener may end with).
SESSION_ERRORS: tuple[type[Exception], ...] = (StorageError, *DATABASE_ERRORS)


class Executor(Protocol):
    """What the primitives need of a connection: an asyncpg ``Connection`` or ``Pool``
    (``timeout`` is asyncpg's own parameter, so ASYNC109 is silenced here)."""

    async def execute(self, query: str, *args: object, timeout: float | None = ...) -> str: ...  # noqa: ASYNC109

    async def fetch(self, query: str, *args: object, timeout: float | None = ...) -> list[Any]: ...  # noqa: ASYNC109

    async def fetchval(
        self,
        query: str,
        *args: object,
        column: int = ...,
        timeout: float | None = ...,  # noqa: ASYNC109
    ) -> Any: ...


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """asyncpg's and the socket's errors as :class:`StorageError` (``what`` failed: …)."""
    try:
        yield
    except DATABASE_ERRORS as err:
        raise StorageError(f"{what}: {type(err).__name__}: {err}") from err


async def connect(
    dsn: str, *, timeout_s: float = 5.0, application_name: str = "memwarden"
) -> asyncpg.Connection[Any]:
    """One dedicated connection (the leader's, the listener's): never from a pool, so
    that its life is the primitive's to manage. No statement cache: a transaction-pooling
    proxy may hand each statement to another server connection (docs/SCALE.md).
    ``application_name`` is what ``pg_stat_activity`` shows (at most 63 characters)."""
    with translated(f"cannot connect to {_safe(dsn)}"):
        return await asyncpg.connect(
            dsn,
            timeout=timeout_s,
            statement_cache_size=0,
            server_settings={"application_name": application_name[:63]},
        )


def _safe(dsn: str) -> str:
    """The DSN without its password, for messages."""
    scheme, sep, rest = dsn.partition("://")
    if not sep or "@" not in rest:
        return dsn
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"


async def ensure_tables(conn: asyncpg.Connection[Any]) -> None:
    """Create the ``cluster_*`` tables and indexes that are missing (idempotent, safe to
    run from several nodes at once)."""
    with translated("cannot create the cluster tables"):
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK)
            await conn.execute(DDL)
