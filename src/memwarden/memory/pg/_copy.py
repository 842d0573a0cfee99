"""``memwarden migrate --to``: copy a SQLite store into PostgreSQL, verified, resumable.

What is copied: every table that carries state, row for row, values unchanged (the type
mapping in :mod:`~memwarden.memory.pg._schema` is exact). What is not: the FTS5 index
(``blocks_fts`` and its shadow tables: the generated ``search`` column is computed as
rows arrive), the generated ``id_key``, ``compaction_guard`` (a row lives only inside a
compaction transaction, never in a commit), and SQLite's own ``sqlite_*`` tables.

The source is only read: through a read-only connection in one read transaction, which
under WAL is one consistent snapshot even while the daemon writes. A source at an earlier
schema version is first copied (SQLite's online backup) into a temporary file, which is
migrated and read instead; a newer one is refused.

Resumable: tables are copied in key order, in chunks; each chunk commits in one
PostgreSQL transaction together with the table's progress row in ``copy_progress``
(the last key copied). A run that stops — killed, the network gone, an error — leaves
whole chunks only, and the next run starts after the last committed one. A target that
holds anything else (tables memwarden did not create, a store that was not copied from
this source) is refused.

Verified: at the end every table's row count and a checksum are computed on both sides
by the same function over the same canonical encoding of each row (the sum of a 128-bit
BLAKE2b per row, so the order rows come in does not matter). A source that changed
between an interrupted run and its resumption (the daemon kept writing) fails the
verification: copy from a stopped daemon's file or from a ``memwarden backup``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import asyncpg
import structlog

from memwarden.errors import ConfigError, StorageError
from memwarden.memory._backup import backup_database
from memwarden.memory._database import Database
from memwarden.memory._schema import SCHEMA_VERSION as SQLITE_CODE_VERSION
from memwarden.memory.pg._database import CONNECT_ERRORS, connect_error
from memwarden.memory.pg._dsn import check_dsn, redact_dsn
from memwarden.memory.pg._migrate import migrate
from memwarden.memory.pg._schema import (
    MIGRATIONS,
    MOVE_IDENTITIES,
    SQLITE_SCHEMA_VERSION,
    SQLITE_SINCE,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from memwarden.memory.pg._types import PgConnection

__all__ = ["DERIVED", "CopyReport", "TableCopy", "copy_to_postgres", "row_digest"]

log = structlog.get_logger("memwarden.store")

# Tables of the PostgreSQL schema that are not copied, and why.
_NOT_COPIED = {
    "schema_version": "this backend's own schema version",
    "copy_progress": "this copy's own progress",
    "compaction_guard": "transient: a row lives only inside a compaction transaction",
    "embed_claims": "transient: a node's claim on queued blocks while it embeds them",
    "vector_stamps": "derived: filled by a trigger as block_vectors rows arrive",
    "block_falls": "transient: falls told to the nodes' sessions, kept a day",
}
# What the SQLite store keeps that is derived, and rebuilt here as rows arrive.
DERIVED = {
    "blocks_fts": "the FTS5 index: PostgreSQL computes the generated 'search' column",
    "blocks.id_key": "a generated column on both backends",
}
# Parents before children (foreign keys); the rest follow in name order.
_FIRST = ("blocks", "bindings", "dependencies", "proposals", "block_vectors", "embed_queue")
_MASK = (1 << 128) - 1
# Every table the PostgreSQL schema creates (and the version table of the runner).
_OUR_TABLES = frozenset(
    {"schema_version"}
    | {m.group(1) for script in MIGRATIONS for m in re.finditer(r"CREATE TABLE (\w+)", script)}
)
# pg_try_advisory_lock key held while a copy runs (not the migrations' key).
_COPY_LOCK_KEY = -0x2A5F0C3E6B1D4978


@dataclass(frozen=True, slots=True)
class TableCopy:
    """One table's outcome: rows in it (both sides agree), rows this run copied, and the
    checksum both sides computed."""

    name: str
    rows: int
    copied: int
    checksum: str

    def as_dict(self) -> dict[str, object]:
        return {
            "table": self.name,
            "rows": self.rows,
            "copied": self.copied,
            "checksum": self.checksum,
        }


@dataclass(slots=True)
class CopyReport:
    """What :func:`copy_to_postgres` did."""

    source: str
    target: str
    source_schema: int
    resumed: bool = False
    tables: list[TableCopy] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)  # tables a later SQLite version has
    elapsed_s: float = 0.0

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def copied(self) -> int:
        return sum(t.copied for t in self.tables)

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "target": self.target,
            "source_schema": self.source_schema,
            "resumed": self.resumed,
            "verified": True,
            "rows": self.rows,
            "copied": self.copied,
            "tables": [t.as_dict() for t in self.tables],
            "absent": self.absent,
            "derived": DERIVED,
            "elapsed_s": round(self.elapsed_s, 3),
        }


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    key: tuple[str, ...]
    identity: tuple[str, ...]


def row_digest(values: Iterable[object]) -> int:
    """A row's 128-bit digest over a canonical encoding of its values (None, int, float,
    str, bytes), the same for a row read from SQLite and from PostgreSQL."""
    out = bytearray()
    for value in values:
        if value is None:
            out += b"N"
        elif isinstance(value, bool):
            out += b"T" if value else b"F"
        elif isinstance(value, int):
            out += b"I%d;" % value
        elif isinstance(value, float):
            out += b"R" + value.hex().encode() + b";"
        elif isinstance(value, str):
            data = value.encode("utf-8")
            out += b"S%d:" % len(data) + data
        elif isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
            out += b"B%d:" % len(data) + data
        else:
            raise TypeError(f"no canonical form for {type(value).__name__}")
    return int.from_bytes(hashlib.blake2b(out, digest_size=16).digest(), "big")


def _coerce(table: str, column: str, pgtype: str, value: Any, key: Sequence[Any]) -> Any:
    """A SQLite value as the PostgreSQL column's type, exactly, or a StorageError naming
    the row (SQLite columns are loosely typed; a value that cannot be carried over
    unchanged stops the copy instead of changing on the way)."""
    if value is None:
        return None
    exact = {
        "bigint": isinstance(value, int) and -(2**63) <= value < 2**63,
        "double precision": isinstance(value, float),
        "text": isinstance(value, str) and "\x00" not in value,
        "bytea": isinstance(value, bytes),
    }
    ok: Any = value if exact.get(pgtype) else None
    if pgtype == "double precision" and isinstance(value, int) and abs(value) <= 2**53:
        ok = float(value)  # an integral REAL: SQLite hands it back as an int in some paths
    elif pgtype == "bytea" and isinstance(value, str):
        ok = value.encode("utf-8")  # text in a BLOB column (SQLite's loose typing)
    if ok is None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise StorageError(
            f"{table} row {list(key)}: column {column} holds {type(value).__name__} {shown}, "
            f"which a PostgreSQL {pgtype} column cannot hold unchanged"
        )
    return ok


async def copy_to_postgres(
    source: str | Path,
    dsn: str,
    *,
    chunk_rows: int = 5000,
    connect_timeout_s: float = 10.0,
    after_chunk: Callable[[str, int], None] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> CopyReport:
    """Copy the SQLite store at ``source`` into the PostgreSQL database at ``dsn``, or
    resume an interrupted copy of it; verify every table; the report.

    ``after_chunk(table, chunks)`` runs after each committed chunk (``chunks``: how many
    this run committed so far); ``progress(table, rows)`` after each chunk too, for a
    progress bar. Raises :class:`StorageError` with one line for every refusal or
    failure (an unreachable server, a target holding other data, a newer schema, a
    checksum that does not match).
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, not {chunk_rows}")
    try:
        check_dsn(dsn)
    except ConfigError as err:
        raise StorageError(str(err)) from None
    src = Path(source)
    started = time.monotonic()
    found = _source_version(src)
    with tempfile.TemporaryDirectory(prefix="memwarden-migrate-") as tmp:
        readable = src
        if found < SQLITE_CODE_VERSION:
            readable = await _migrated_snapshot(src, Path(tmp))
        report = CopyReport(source=_identity(src), target=redact_dsn(dsn), source_schema=found)
        conn = await _connect(dsn, connect_timeout_s)
        try:
            await _run(
                readable,
                conn,
                report,
                source_version=SQLITE_CODE_VERSION,
                chunk_rows=chunk_rows,
                after_chunk=after_chunk,
                progress=progress,
            )
        finally:
            await conn.close()
    report.elapsed_s = time.monotonic() - started
    log.info(
        "store_copied",
        target=report.target,
        rows=report.rows,
        copied=report.copied,
        resumed=report.resumed,
    )
    return report


def _identity(path: Path) -> str:
    """How the target names its source (a resumed copy must come from the same file)."""
    return str(path.resolve())


def _open_readonly(path: Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.absolute()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


def _source_version(path: Path) -> int:
    if not path.is_file():
        raise StorageError(f"{path}: no such database file")
    try:
        conn = _open_readonly(path)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'blocks'")
            has_blocks = bool(tables.fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise StorageError(f"{path}: not a readable SQLite database ({err})") from err
    if version == 0 or not has_blocks:
        raise StorageError(f"{path}: not a memwarden store (no schema version, no blocks)")
    if version > SQLITE_CODE_VERSION:
        raise StorageError(
            f"{path} has schema version {version}, newer than this memwarden "
            f"({SQLITE_CODE_VERSION}): upgrade memwarden"
        )
    if version > SQLITE_SCHEMA_VERSION:
        raise StorageError(
            f"{path} has SQLite schema version {version}; this memwarden copies stores at "
            f"version {SQLITE_SCHEMA_VERSION} into PostgreSQL (its PostgreSQL schema is behind)"
        )
    return version


async def _migrated_snapshot(src: Path, tmp: Path) -> Path:
    """A consistent copy of an older store, migrated to the current version (the source
    itself is never written)."""
    snapshot = tmp / "snapshot.db"
    backup_database(src, snapshot)
    async with Database(snapshot, readers=1, inline_read_ms=0):
        pass  # opening runs the migrations
    log.info("store_snapshot_migrated", source=str(src), to_version=SQLITE_CODE_VERSION)
    return snapshot


async def _connect(dsn: str, timeout_s: float) -> PgConnection:
    try:
        conn: PgConnection = await asyncpg.connect(dsn, timeout=timeout_s)
    except CONNECT_ERRORS as err:
        raise connect_error(dsn, err) from None
    return conn


async def _run(
    readable: Path,
    conn: PgConnection,
    report: CopyReport,
    *,
    source_version: int,
    chunk_rows: int,
    after_chunk: Callable[[str, int], None] | None,
    progress: Callable[[str, int], None] | None,
) -> None:
    try:
        # One copy into a database at a time (a second would copy the same chunks): a
        # session lock on this copy's own connection, released when it closes.
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", _COPY_LOCK_KEY):
            raise StorageError(
                f"another `memwarden migrate` is copying into {report.target} now: "
                "wait for it (or stop it) and run this again"
            )
        await _check_target(conn, report)
        await migrate(conn)
        tables = await _tables(conn)
        # Tables a later SQLite version brought than this memwarden's: not in the source.
        report.absent = sorted(
            t.name for t in tables if SQLITE_SINCE.get(t.name, 0) > source_version
        )
        tables = [t for t in tables if t.name not in report.absent]
        done = await _progress(conn, report)
        report.resumed = bool(done)
        src = _open_readonly(readable)
        try:
            src.execute("BEGIN")  # one read transaction: one snapshot for the whole run
            chunks = 0
            copied: dict[str, int] = {}
            for table in tables:
                _check_columns(src, table)
                state = done.get(table.name)
                if state is not None and state[2]:
                    copied[table.name] = 0
                    continue
                n, chunks = await _copy_table(
                    src,
                    conn,
                    table,
                    source=report.source,
                    state=state,
                    chunk_rows=chunk_rows,
                    chunks=chunks,
                    after_chunk=after_chunk,
                    progress=progress,
                )
                copied[table.name] = n
            await _move_sequences(conn, tables)
            report.tables = [await _verify(src, conn, t, copied[t.name]) for t in tables]
            src.execute("COMMIT")
        finally:
            src.close()
    except sqlite3.Error as err:
        raise StorageError(f"reading {report.source}: {err}") from err
    except asyncpg.PostgresError as err:
        raise StorageError(f"writing to {report.target}: {' '.join(str(err).split())}") from err
    except (asyncpg.InterfaceError, OSError) as err:
        raise StorageError(f"lost the connection to {report.target}: {err}") from err


async def _check_target(conn: PgConnection, report: CopyReport) -> None:
    """Refuse a database holding tables memwarden did not create."""
    names = {
        r["tablename"]
        for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
    }
    foreign = sorted(names - _OUR_TABLES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise StorageError(
            f"{report.target} holds tables memwarden did not create ({shown}): "
            "migrate into an empty database"
        )


async def _tables(conn: PgConnection) -> list[_Table]:
    names = [
        r["tablename"]
        for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
        )
        if r["tablename"] not in _NOT_COPIED
    ]
    ordered = [n for n in _FIRST if n in names] + [n for n in names if n not in _FIRST]
    tables = []
    for name in ordered:
        cols = await conn.fetch(
            "SELECT a.attname, format_type(a.atttypid, NULL) AS type, a.attidentity <> '' AS ident"
            " FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0"
            " AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum",
            name,
        )
        key = await conn.fetch(
            "SELECT a.attname FROM pg_index i"
            " JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) ON true"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
            " WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n",
            name,
        )
        tables.append(
            _Table(
                name=name,
                columns=tuple(r["attname"] for r in cols),
                types=tuple(r["type"] for r in cols),
                key=tuple(r["attname"] for r in key),
                identity=tuple(r["attname"] for r in cols if r["ident"]),
            )
        )
    return tables


async def _progress(
    conn: PgConnection, report: CopyReport
) -> dict[str, tuple[list[Any] | None, int, bool]]:
    """The progress rows of an earlier run from this source (table -> last key, rows,
    done); refuses a target copied from elsewhere or holding a store of its own."""
    rows = await conn.fetch("SELECT table_name, source, last_key, rows, done FROM copy_progress")
    others = {r["source"] for r in rows} - {report.source}
    if others:
        raise StorageError(
            f"{report.target} holds a copy of another store ({min(others)}): "
            "migrate into an empty database, or resume from that file"
        )
    if rows:
        return {
            r["table_name"]: (
                json.loads(r["last_key"]) if r["last_key"] is not None else None,
                int(r["rows"]),
                bool(r["done"]),
            )
            for r in rows
        }
    for table in await _tables(conn):
        if await conn.fetchval(f'SELECT EXISTS (SELECT 1 FROM "{table.name}")'):
            raise StorageError(
                f"{report.target} already holds a memwarden store (its table {table.name} "
                "has rows) that was not copied from this file: migrate into an empty database"
            )
    return {}


def _check_columns(src: sqlite3.Connection, table: _Table) -> None:
    # table_xinfo's hidden: 0 a column, 1 hidden (virtual tables), 2/3 generated.
    source_cols = tuple(
        r[1] for r in src.execute(f'PRAGMA table_xinfo("{table.name}")') if r[6] == 0
    )
    if source_cols != table.columns:
        raise StorageError(
            f"table {table.name}: the source's columns {list(source_cols)} are not the "
            f"PostgreSQL schema's {list(table.columns)}"
        )


async def _copy_table(
    src: sqlite3.Connection,
    conn: PgConnection,
    table: _Table,
    *,
    source: str,
    state: tuple[list[Any] | None, int, bool] | None,
    chunk_rows: int,
    chunks: int,
    after_chunk: Callable[[str, int], None] | None,
    progress: Callable[[str, int], None] | None,
) -> tuple[int, int]:
    """Copy what is left of one table; (rows copied, chunks committed so far)."""
    last_key, total, _ = state if state is not None else (None, 0, False)
    cols = ", ".join(f'"{c}"' for c in table.columns)
    keys = ", ".join(f'"{k}"' for k in table.key)
    after = f"({keys}) > ({', '.join('?' * len(table.key))})"
    key_at = [table.columns.index(k) for k in table.key]
    copied = 0
    while True:
        where = f"WHERE {after} " if last_key is not None else ""
        rows = src.execute(
            f'SELECT {cols} FROM "{table.name}" {where}ORDER BY {keys} LIMIT ?',
            [*(last_key or []), chunk_rows],
        ).fetchall()
        records = [
            tuple(
                _coerce(table.name, c, t, v, [row[i] for i in key_at])
                for c, t, v in zip(table.columns, table.types, row, strict=True)
            )
            for row in rows
        ]
        if records:
            last_key = [rows[-1][i] for i in key_at]
        finished = len(rows) < chunk_rows
        async with conn.transaction():
            if records:
                # The copy brings the rows blocks' triggers would write (embed_queue,
                # retention_points): they stay off while blocks arrive (not the foreign
                # keys' system triggers), inside this chunk's transaction.
                if table.name == "blocks":
                    await conn.execute("ALTER TABLE blocks DISABLE TRIGGER USER")
                await conn.copy_records_to_table(
                    table.name, records=records, columns=list(table.columns)
                )
                if table.name == "blocks":
                    await conn.execute("ALTER TABLE blocks ENABLE TRIGGER USER")
            total += len(records)
            await conn.execute(
                "INSERT INTO copy_progress (table_name, source, last_key, rows, done, updated_at)"
                " VALUES ($1, $2, $3, $4, $5, extract(epoch FROM clock_timestamp()))"
                " ON CONFLICT (table_name) DO UPDATE SET last_key = $3, rows = $4, done = $5,"
                " updated_at = EXCLUDED.updated_at",
                table.name,
                source,
                json.dumps(last_key) if last_key is not None else None,
                total,
                finished,
            )
        copied += len(records)
        chunks += 1
        if progress is not None:
            progress(table.name, len(records))
        if after_chunk is not None:
            after_chunk(table.name, chunks)
        if finished:
            return copied, chunks


async def _move_sequences(conn: PgConnection, tables: list[_Table]) -> None:
    """Identity columns continue after the copied numbers (rids and seqs after every one
    the copied rows name, deleted blocks' and compacted events' too)."""
    for table in tables:
        for column in table.identity:
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence('\"{table.name}\"', '{column}'), "
                f'coalesce(max("{column}"), 1), max("{column}") IS NOT NULL) '
                f'FROM "{table.name}"'
            )
    await conn.execute(MOVE_IDENTITIES)


async def _verify(
    src: sqlite3.Connection, conn: PgConnection, table: _Table, copied: int
) -> TableCopy:
    cols = ", ".join(f'"{c}"' for c in table.columns)
    query = f'SELECT {cols} FROM "{table.name}"'
    key_at = [table.columns.index(k) for k in table.key]
    source_rows = 0
    source_sum = 0
    for row in src.execute(query):
        values = [
            _coerce(table.name, c, t, v, [row[i] for i in key_at])
            for c, t, v in zip(table.columns, table.types, row, strict=True)
        ]
        source_sum = (source_sum + row_digest(values)) & _MASK
        source_rows += 1
    target_rows = 0
    target_sum = 0
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        async for record in conn.cursor(query, prefetch=2000):
            target_sum = (target_sum + row_digest(record.values())) & _MASK
            target_rows += 1
    if (source_rows, source_sum) != (target_rows, target_sum):
        raise StorageError(
            f"verification failed for table {table.name}: the source has {source_rows} rows "
            f"(checksum {source_sum:032x}), PostgreSQL {target_rows} ({target_sum:032x}); "
            "did the source change since the copy began? Copy from a stopped daemon's file "
            "or a `memwarden backup`, into an empty database"
        )
    return TableCopy(table.name, target_rows, copied, f"{target_sum:032x}")
