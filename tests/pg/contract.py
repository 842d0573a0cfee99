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
) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's ``(columns, order)`` rows as ``rows(sql)`` reads them, normalised."""
    return {
        table: [
            tuple(_normalised(v) for v in r)
            for r in await rows(f"SELECT {cols} FROM {table} ORDER BY {order}")
        ]
        for table, (cols, order) in tables.items()
    }
