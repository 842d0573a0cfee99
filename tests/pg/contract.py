"""What the backend contract tests share: ids both backends hand out alike, and the rows
a backend left, normalised so that SQLite's and PostgreSQL's compare equal."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Mapping

__all__ = [
    "database_copy",
    "dump_tables",
    "every_row",
    "pg_holding",
    "pg_tables",
    "sequential_ids",
]


def sequential_ids() -> Callable[[], str]:
    """Ids both backends hand out alike (UUIDv7-shaped, increasing)."""
    counter = itertools.count(1)
    return lambda: f"0190a0b0-0000-7000-8000-{next(counter):012x}"


def _normalised(value: Any) -> Any:
    if isinstance(value, bytes):  # dead letters' payload: bytea on PostgreSQL
        return value.decode(errors="surrogateescape")  # a vector's bytes are no UTF-8
    return float(value) if isinstance(value, int | float) else value


async def dump_tables(
    rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
    tables: Mapping[str, tuple[str, str]],
    renumber: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's ``(columns, order)`` rows as ``rows(sql)`` reads them, normalised.

    ``renumber``: numbers that may legitimately differ between the backends but must keep
    their order and what they refer to (a block's rid, an event's seq: SQLite hands out
    the highest plus one, PostgreSQL's identity also spends numbers in rolled-back
    writes), each group as ``{table: column}``: every value of the group's columns is
    replaced by its rank among them all (1, 2, ...), so references stay equal."""
    dump = {
        table: [
            tuple(_normalised(v) for v in r)
            for r in await rows(f"SELECT {cols} FROM {table} ORDER BY {order}")
        ]
        for table, (cols, order) in tables.items()
    }
    for columns in (renumber or {}).values():
        at = {t: [c.strip() for c in tables[t][0].split(",")].index(c) for t, c in columns.items()}
        values = sorted({r[i] for t, i in at.items() for r in dump[t] if r[i] is not None})
        rank = {v: float(n) for n, v in enumerate(values, start=1)}
        for t, i in at.items():
            dump[t] = [(*r[:i], rank.get(r[i]), *r[i + 1 :]) for r in dump[t]]
    return dump


async def pg_tables(conn: Any) -> dict[str, list[str]]:
    """Each table of a PostgreSQL store with the columns both backends store (generated
    ones left out), but the ones only a copy or a transaction uses."""
    rows = await conn.fetch(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND is_generated = 'NEVER'"
        " AND table_name NOT IN ('schema_version', 'copy_progress', 'compaction_guard',"
        " 'embed_claims', 'vector_stamps', 'block_falls')"
        " ORDER BY table_name, ordinal_position"
    )
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


async def every_row(
    rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]], tables: Mapping[str, list[str]]
) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``tables`` as ``rows(sql)`` reads them, normalised, in a sorted order
    (not the backends' own: they sort NULL apart)."""
    return {
        table: sorted(
            (
                tuple(_normalised(v) for v in r)
                for r in await rows(f"SELECT {', '.join(cols)} FROM {table}")
            ),
            key=repr,
        )
        for table, cols in tables.items()
    }


async def pg_holding(conn: Any, text: str) -> list[str]:
    """``table.column`` of every text, JSON, bytea and tsvector value of a PostgreSQL
    database that holds ``text`` (case-insensitive; a tsvector's lexemes are lowercase)."""
    columns = await conn.fetch(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND data_type IN"
        " ('text', 'character varying', 'json', 'jsonb', 'bytea', 'tsvector')"
    )
    found = []
    for table, column, kind in columns:
        value = f'"{column}"'
        if kind == "bytea":
            value = f"encode(\"{column}\", 'escape')"
        hits = await conn.fetchval(
            f'SELECT count(*) FROM "{table}" WHERE strpos(lower({value}::text), lower($1)) > 0',
            text,
        )
        if hits:
            found.append(f"{table}.{column}")
    return found


@contextlib.contextmanager
def database_copy(server: Any, template: str) -> Iterator[str]:
    """A new database copied from ``template`` on ``server`` (a ``PgServer``), its name;
    dropped on the way out (so a session's server keeps few files to remove)."""
    name = f"c_{uuid.uuid4().hex[:12]}"
    server.psql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield name
    finally:
        server.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
