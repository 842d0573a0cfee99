"""Export and import on PostgreSQL: the SQLite store's ``export_blocks`` and
``import_blocks`` (:mod:`~memwarden.memory._transfer`), with this backend's SQL.

The export objects are the same, key for key and value for value, whichever store wrote
them (``tests/pg/test_transfer_contract.py``): the object's shape, the history entries
and the checks of an import are :mod:`~memwarden.memory._transfer`'s. What differs here:

- the stored columns come from ``information_schema`` (generated ones left out: ``id_key``
  and the full-text ``search`` column, as SQLite's ``table_xinfo`` leaves out ``id_key``);
- an imported value is given the column's type where JSON blurred it (an integral float
  into a ``bigint``, an integer into a ``double precision``), as SQLite's affinity does;
  a value of another kind is refused by name (SQLite would store it and refuse the block
  when it does not read back);
- rids and event sequence numbers are handed out as SQLite does (the next after the
  highest, never a deleted block's rid), and the ``events`` identity moved past them.

The embedding queue is filled by the blocks' insert trigger; waking the embedding task
is the store's part, as on SQLite.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import asyncpg

from memwarden.errors import ValidationInputError
from memwarden.memory._codec import BLOCK_COLUMNS, content_key
from memwarden.memory._transfer import (
    ImportReport,
    check_readable,
    check_rows,
    export_objects,
)
from memwarden.memory.pg._reads import PgReads

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = ["PgTransfer"]

_INTEGER = "bigint"
_FLOAT = "double precision"


async def _columns(conn: PgConnection, table: str) -> dict[str, str]:
    """The table's stored columns and their types, in order (generated ones left out)."""
    rows = await conn.fetch(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER'"
        " ORDER BY ordinal_position",
        table,
    )
    return {str(r[0]): str(r[1]) for r in rows}


async def _dicts(conn: PgConnection, sql: str, *args: Any) -> list[dict[str, Any]]:
    return [dict(r.items()) for r in await conn.fetch(sql, *args)]


def _typed(value: Any, kind: str | None) -> Any:
    """``value`` as the column of ``kind`` stores it: JSON text for lists and objects, a
    float for a ``double precision`` column given an int, an int for a ``bigint`` column
    given an integral float."""
    if isinstance(value, dict | list):
        return json.dumps(value)
    if kind == _FLOAT and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == _INTEGER and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == _INTEGER and isinstance(value, bool):
        return int(value)
    return value


class PgTransfer:
    """Export and import of whole blocks on a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self._reads = PgReads(db, clock, policy)

    async def export_blocks(
        self, *, after: str | None = None, limit: int = 500
    ) -> list[dict[str, Any]]:
        """A page of whole blocks (by id, after ``after``) as export objects: record,
        bindings, dependencies, validation history and earlier versions."""
        blocks = await self._reads.list_blocks({"after": after, "limit": limit})
        async with self.db.read() as conn:
            return await _export_rows(conn, [b.model_dump(mode="json") for b in blocks])

    async def import_blocks(
        self,
        rows: Sequence[Mapping[str, Any]],
        *,
        quarantine: Mapping[tuple[int, int], str] | None = None,
        actor: str = "import",
    ) -> ImportReport:
        """Store export objects whose block ids are new, as they were (state, validation,
        history); blocks already here are left unchanged. All or nothing per call."""
        check_rows(rows)
        now = self.clock.time()

        async def job(conn: PgConnection) -> ImportReport:
            report = await _import_rows(conn, rows, quarantine=quarantine or {}, now=now)
            if report.added:
                await conn.execute(
                    "INSERT INTO audit (at, actor, action, block_id, detail)"
                    " VALUES ($1, $2, $3, $4, $5)",
                    now,
                    actor,
                    "import",
                    None,
                    json.dumps({"blocks": len(report.added)}),
                )
            return report

        return await self.db.write(job, weight=max(1, len(rows)))


async def _export_rows(
    conn: PgConnection, blocks: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    async def columns(table: str) -> list[str]:
        return list(await _columns(conn, table))

    async def rows_among(
        select: str, column: str, values: Sequence[Any], order: str
    ) -> list[dict[str, Any]]:
        kind = "bigint" if column.endswith("block_rid") else "text"
        return await _dicts(
            conn, f"{select} WHERE {column} = ANY($1::{kind}[]){order}", list(values)
        )

    return await export_objects(blocks, columns, rows_among)


async def _import_rows(
    conn: PgConnection,
    rows: Sequence[Mapping[str, Any]],
    *,
    quarantine: Mapping[tuple[int, int], str],
    now: float,
) -> ImportReport:
    """SQLite's ``import_rows`` (the objects already checked), in the writer's job."""
    report = ImportReport()
    ids = [str(r["id"]) for r in rows]
    existing = {
        str(r[0]) for r in await conn.fetch("SELECT id FROM blocks WHERE id = ANY($1::text[])", ids)
    }
    cols = {
        t: await _columns(conn, t)
        for t in ("blocks", "bindings", "events", "effects", "block_history")
    }
    # Never reuse a deleted block's rid: its effects (the event history) keep it.
    rid = int(
        await conn.fetchval(
            "SELECT greatest(coalesce((SELECT max(rid) FROM blocks), 0),"
            " coalesce((SELECT max(block_rid) FROM effects), 0))"
        )
    )
    for i, row in enumerate(rows):
        block_id = str(row["id"])
        if block_id in existing:
            report.existing.append(block_id)
            continue
        existing.add(block_id)
        rid += 1
        try:
            await _import_block(conn, i, row, rid=rid, cols=cols, quarantine=quarantine, now=now)
        except (
            asyncpg.PostgresError,
            asyncpg.DataError,
            TypeError,
            ValueError,
            OverflowError,
        ) as err:
            # a missing column, a value of the wrong kind
            if isinstance(err, ValidationInputError):
                raise
            raise ValidationInputError([(f"{i}", f"cannot be stored: {err}")]) from None
        report.sensors.update(str(b["sensor"]) for b in row.get("bindings", []))
        report.added.append(block_id)
    if report.added:  # the log's seq was handed out here, as on SQLite
        await conn.execute(
            "SELECT setval(pg_get_serial_sequence('events', 'seq'), max(seq)) FROM events"
            " HAVING max(seq) IS NOT NULL"
        )
    return report


async def _import_block(
    conn: PgConnection,
    i: int,
    row: Mapping[str, Any],
    *,
    rid: int,
    cols: Mapping[str, dict[str, str]],
    quarantine: Mapping[tuple[int, int], str],
    now: float,
) -> None:
    rec = {k: v for k, v in row["record"].items() if k in cols["blocks"] and k != "rid"}
    if "content_key" in cols["blocks"] and isinstance(rec.get("content"), str):
        rec["content_key"] = content_key(rec["content"])  # dedupe sees imported blocks too
    try:
        await _insert(conn, "blocks", {**rec, "rid": rid}, cols["blocks"])
    except (asyncpg.DataError, asyncpg.PostgresError, OverflowError):
        # A value of the wrong kind: SQLite stores it and refuses the block when it does
        # not read back; the same check names the same field here.
        check_readable(i, tuple(rec.get(c, rid if c == "rid" else None) for c in BLOCK_COLUMNS))
        raise
    for j, b in enumerate(row.get("bindings", [])):
        values = {k: v for k, v in b.items() if k in cols["bindings"] and k != "id"}
        reason = quarantine.get((i, j))
        if reason is not None and "quarantine" in cols["bindings"]:
            values.update(quarantine=reason, quarantined_at=now)
        await _insert(conn, "bindings", {**values, "block_rid": rid}, cols["bindings"])
    for dep in row.get("depends_on", []):
        await conn.execute(
            "INSERT INTO dependencies (depends_on, block_rid) VALUES ($1, $2)"
            " ON CONFLICT DO NOTHING",
            str(dep),
            rid,
        )
    for h in row.get("history", []):
        await _import_event(conn, h, rid, cols)
    for v in row.get("versions", []):
        if isinstance(v, dict):
            values = {k: val for k, val in v.items() if k in cols["block_history"]}
            await _insert(conn, "block_history", values, cols["block_history"], ignore=True)
    found = await conn.fetchrow(
        f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks WHERE id = $1", str(row["id"])
    )
    check_readable(i, None if found is None else tuple(found))


async def _import_event(
    conn: PgConnection, h: Mapping[str, Any], rid: int, cols: Mapping[str, dict[str, str]]
) -> None:
    event = {k: v for k, v in h["event"].items() if k in cols["events"] and k != "seq"}
    seq = await conn.fetchval("SELECT seq FROM events WHERE event_id = $1", event["event_id"])
    if seq is None:  # as SQLite's INSERT OR IGNORE: another block may have brought it
        seq = int(await conn.fetchval("SELECT coalesce(max(seq), 0) + 1 FROM events"))
        await _insert(conn, "events", {**event, "seq": seq}, cols["events"])
    effect = {
        k: v
        for k, v in h["effect"].items()
        if k in cols["effects"] and k not in ("block_rid", "event_seq")
    }
    await _insert(
        conn,
        "effects",
        {**effect, "block_rid": rid, "event_seq": seq},
        cols["effects"],
        ignore=True,
    )
    run = h.get("run")
    if isinstance(run, dict):
        first = seq
        if run.get("first_event_id"):
            found = await conn.fetchval(
                "SELECT seq FROM events WHERE event_id = $1", str(run["first_event_id"])
            )
            first = seq if found is None else found
        values = (
            rid,
            seq,
            first,
            event.get("sensor"),
            event.get("outcome"),
            run.get("count"),
            run.get("first_observed_at"),
            run.get("last_observed_at"),
            run.get("compacted_at"),
        )
        kinds = (_INTEGER, _INTEGER, _INTEGER, None, None, _INTEGER, _FLOAT, _FLOAT, _FLOAT)
        await conn.execute(
            "INSERT INTO event_runs (block_rid, last_seq, first_seq, sensor, outcome,"
            " count, first_observed_at, last_observed_at, compacted_at)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
            *(_typed(v, k) for v, k in zip(values, kinds, strict=True)),
        )


async def _insert(
    conn: PgConnection,
    table: str,
    values: Mapping[str, Any],
    kinds: Mapping[str, str],
    *,
    ignore: bool = False,
) -> None:
    names = list(values)
    data = [_typed(values[n], kinds.get(n)) for n in names]
    marks = ", ".join(f"${k + 1}" for k in range(len(names)))
    conflict = " ON CONFLICT DO NOTHING" if ignore else ""
    await conn.execute(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks}){conflict}", *data
    )
