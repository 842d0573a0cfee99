"""The rules the store evaluates in SQL, on PostgreSQL: SQLite's expressions
(:mod:`memwarden.memory._sqlrules`) translated, not written again.

:func:`pg_rule` turns one of those expressions into PostgreSQL's (``max``/``min`` of
values are ``greatest``/``least``; a comparison is a boolean, not 0/1), and
:func:`pg_named` numbers its ``:name`` parameters. Only :func:`retention_sql` is
assembled here, from the translated parts, for PostgreSQL's one difference: it refuses
a float that underflows (``power`` and ``*`` raise "value out of range: underflow"
where C rounds to 0), so a block more than 1 022 half-lives old (or of an importance
below 2.3e-16) decays to exactly 0 before the floor applies. The stored retention then
differs from SQLite's only with a ``[decay] floor`` of 0, and by less than 1e-300.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from memwarden.memory._sql import split_range
from memwarden.memory._sqlrules import effective_half_life_sql, last_touched_sql

if TYPE_CHECKING:
    from collections.abc import Mapping

    from memwarden.memory.pg._types import PgConnection

__all__ = ["arguments", "pg_named", "pg_rule", "retention_sql", "rid_ranges"]

# Below 2^-1022 PostgreSQL's float arithmetic raises instead of rounding to 0.
_MIN_EXPONENT = -1022.0
_MIN_IMPORTANCE = 2.3e-16  # x 2^-1022 is still above the smallest float (2^-1074)

_NAME = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_SCALAR = re.compile(r"\b(max|min)\(")
_BOOL_OR_ZERO = re.compile(r"coalesce\(([^(),]+ <= :now), 0\)")


def pg_rule(sql: str) -> str:
    """A rule expression of :mod:`~memwarden.memory._sqlrules` as PostgreSQL writes it:
    ``max(a, b)`` -> ``greatest(a, b)``, ``min`` -> ``least`` (the expressions hold no
    aggregate), and ``coalesce(x <= :now, 0)`` (0/1 in SQLite) -> ``coalesce(x <= :now,
    false)``. Named parameters stay; :func:`pg_named` numbers them."""
    out = _BOOL_OR_ZERO.sub(r"coalesce(\1, false)", sql)
    out = _SCALAR.sub(lambda m: "greatest(" if m.group(1) == "max" else "least(", out)
    if re.search(r",\s*0\)", out):  # a 0/1 left where PostgreSQL wants a boolean
        raise ValueError(f"pg_rule cannot translate {sql!r}")
    return out


def _cast(value: object) -> str:
    if isinstance(value, bool):
        return "::boolean"
    if isinstance(value, int):
        return "::bigint"
    if isinstance(value, float):
        return "::float8"
    if isinstance(value, str):
        return "::text"
    return ""


def pg_named(sql: str, params: Mapping[str, Any]) -> tuple[str, list[str]]:
    """``:name`` parameters as ``$n`` (each name one number, cast by the type of its value
    in ``params``, so PostgreSQL never has to guess the type of a bare ``$n`` in a
    ``CASE``) and the names in their numbers' order (:func:`arguments`)."""
    order: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in order:
            order[name] = len(order) + 1
        return f"${order[name]}{_cast(params[name])}"

    out = _NAME.sub(number, sql)
    return out, list(order)


def arguments(names: list[str], params: Mapping[str, Any]) -> list[Any]:
    """The values of ``names`` (from :func:`pg_named`), in order."""
    return [params[name] for name in names]


def _col(table: str, name: str) -> str:
    return f"{table}.{name}" if table else name


def retention_sql(table: str = "") -> str:
    """Twin of :func:`memwarden.memory._sqlrules.retention_sql` (and of
    ``policy.retention``) on PostgreSQL, with the underflow guard of the module note.
    Parameters ``:now``, ``:floor``, ``:core_floor``, ``:stale_factor``."""
    touched = pg_rule(last_touched_sql(table))
    half_life = pg_rule(effective_half_life_sql(table))
    importance = _col(table, "importance")
    exponent = f"(({touched} - :now) / {half_life})"
    return (
        f"greatest(CASE WHEN {_col(table, 'tier')} = 'core' THEN :core_floor ELSE :floor END,"
        f" CASE WHEN :now <= {touched} THEN {importance}"
        f" WHEN {half_life} <= 0.0 THEN 0.0"
        f" WHEN {exponent} < {_MIN_EXPONENT} OR {importance} < {_MIN_IMPORTANCE} THEN 0.0"
        f" ELSE {importance} * power(2.0::float8, {exponent}) END)"
    )


async def rid_ranges(conn: PgConnection, chunk_rows: int) -> list[tuple[int, int]]:
    """Consecutive ``(lo, hi)`` ranges of ``chunk_rows`` rids covering every block now."""
    row = await conn.fetchrow("SELECT min(rid), max(rid) FROM blocks")
    if row is None or row[0] is None:
        return []
    return split_range(int(row[0]), int(row[1]), chunk_rows)
