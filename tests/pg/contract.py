"""What the backend contract tests share: ids both backends hand out alike, and the rows
a backend left, normalised so that SQLite's and PostgreSQL's compare equal."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

__all__ = ["dump_tables", "sequential_ids"]


def sequential_ids() -> Callable[[], str]:
    """Ids both backends hand out alike (UUIDv7-shaped, increasing)."""
    counter = itertools.count(1)
    return lambda: f"0190a0b0-0000-7000-8000-{next(counter):012x}"


def _normalised(value: Any) -> Any:
    if isinstance(value, bytes):  # dead letters' payload: bytea on PostgreSQL
        return value.decode()
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
