"""Export and import: whole blocks, as they are, from one store into another.

One JSON object per block (``format: memwarden.export/1``): the public view of the block
(``block``), its stored columns (``record``), its bindings, what it depends on, its
validation history (each event with what it did to this block, and a compacted run's
count) and its earlier versions. Sequence numbers and internal row ids stay behind:
events are named by their ``event_id``, so an export is the same whichever store wrote it.

Import is idempotent by block id: a block the store already holds is left as it is.
Columns are matched by name, so an export of an older or newer schema imports (unknown
columns are dropped, missing ones take their defaults); every imported block must read
back as a valid block, or nothing of the batch is written.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from memwarden.errors import ValidationInputError
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    binding_from_row,
    content_key,
    record_from_row,
    record_to_block,
)
from memwarden.memory._model import Binding, Outcome
from memwarden.memory.policy import PolicyConfig

if TYPE_CHECKING:
    from collections.abc import Mapping

    import aiosqlite

__all__ = [
    "EXPORT_FORMAT",
    "ImportReport",
    "check_readable",
    "check_rows",
    "export_object",
    "export_objects",
    "export_rows",
    "history_entry",
    "import_rows",
    "is_export_row",
]

EXPORT_FORMAT = "memwarden.export/1"
_OUTCOMES = frozenset(o.value for o in Outcome)
_POLICY = PolicyConfig()  # only to read a record back as a block: any policy does


@dataclass
class ImportReport:
    """What an import did: block ids added, and those already there (left unchanged)."""

    added: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    sensors: set[str] = field(default_factory=set)  # whose bindings changed

    def as_dict(self) -> dict[str, Any]:
        return {"added": len(self.added), "existing": len(self.existing)}


def is_export_row(row: Mapping[str, Any]) -> bool:
    return row.get("format") == EXPORT_FORMAT


async def _columns(conn: aiosqlite.Connection, table: str) -> list[str]:
    """The table's stored columns (generated ones left out: they are computed)."""
    async with conn.execute(f"PRAGMA table_xinfo({table})") as cur:
        return [r[1] for r in await cur.fetchall() if r[6] == 0]


async def _dicts(conn: aiosqlite.Connection, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
    async with conn.execute(sql, args) as cur:
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


async def export_rows(
    conn: aiosqlite.Connection, blocks: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The export objects of ``blocks`` (their public views, in order)."""

    async def columns(table: str) -> list[str]:
        return await _columns(conn, table)

    async def rows_among(
        select: str, column: str, values: Sequence[Any], order: str
    ) -> list[dict[str, Any]]:
        marks = ",".join("?" * len(values))
        return await _dicts(conn, f"{select} WHERE {column} IN ({marks}){order}", values)

    return await export_objects(blocks, columns, rows_among)


ColumnsOf = Callable[[str], Awaitable[list[str]]]
"""``columns(table)``: the table's stored columns, in order."""

RowsAmong = Callable[[str, str, Sequence[Any], str], Awaitable[list[dict[str, Any]]]]
"""``rows_among(select, column, values, order)``: the rows of ``select`` whose ``column``
is one of ``values``, ordered by ``order`` (``" ORDER BY …"`` or empty), as dicts."""


async def export_objects(
    blocks: Sequence[Mapping[str, Any]], columns: ColumnsOf, rows_among: RowsAmong
) -> list[dict[str, Any]]:
    """The export objects of ``blocks`` from either backend's reads (its columns and its
    way of asking for rows among a list of values)."""
    ids = [str(b["id"]) for b in blocks]
    if not ids:
        return []
    block_cols = [c for c in await columns("blocks") if c != "rid"]
    select = f"SELECT rid AS _rid, {', '.join(block_cols)} FROM blocks"
    records = {r["id"]: r for r in await rows_among(select, "id", ids, "")}
    binding_cols = [c for c in await columns("bindings") if c not in ("id", "block_rid")]
    event_cols = [c for c in await columns("events") if c != "seq"]
    effect_cols = [c for c in await columns("effects") if c not in ("block_rid", "event_seq")]
    rids = [records[i]["_rid"] for i in ids]
    bindings: dict[int, list[dict[str, Any]]] = defaultdict(list)
    select = f"SELECT block_rid AS _rid, {', '.join(binding_cols)} FROM bindings"
    for row in await rows_among(select, "block_rid", rids, " ORDER BY block_rid, id"):
        bindings[row.pop("_rid")].append(row)
    depends: dict[int, list[str]] = defaultdict(list)
    select = "SELECT block_rid, depends_on FROM dependencies"
    for row in await rows_among(select, "block_rid", rids, " ORDER BY block_rid, depends_on"):
        depends[row["block_rid"]].append(row["depends_on"])
    history: dict[int, list[dict[str, Any]]] = defaultdict(list)
    select = (
        "SELECT f.block_rid AS _rid, "
        + ", ".join(f"e.{c}" for c in event_cols)
        + ", "
        + ", ".join(f"f.{c} AS _effect_{c}" for c in effect_cols)
        + ", r.count AS _run_count, r.first_observed_at AS _run_first_observed_at,"
        " r.last_observed_at AS _run_last_observed_at, r.compacted_at AS _run_compacted_at,"
        " (SELECT event_id FROM events WHERE seq = r.first_seq) AS _run_first_event_id"
        " FROM effects f JOIN events e ON e.seq = f.event_seq"
        " LEFT JOIN event_runs r ON r.block_rid = f.block_rid AND r.last_seq = f.event_seq"
    )
    for row in await rows_among(select, "f.block_rid", rids, " ORDER BY f.block_rid, f.event_seq"):
        history[row["_rid"]].append(history_entry(row, event_cols, effect_cols))
    versions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    select = "SELECT * FROM block_history"
    for row in await rows_among(select, "block_id", ids, " ORDER BY block_id, version"):
        versions[row["block_id"]].append(row)
    out = []
    for block in blocks:
        rec = dict(records[block["id"]])
        rid = rec.pop("_rid")
        out.append(
            export_object(
                block,
                rec,
                bindings=bindings[rid],
                depends_on=depends[rid],
                history=history[rid],
                versions=versions[block["id"]],
            )
        )
    return out


def history_entry(
    row: Mapping[str, Any], event_cols: Sequence[str], effect_cols: Sequence[str]
) -> dict[str, Any]:
    """One event of a block's history as exported: the event, its effect on the block,
    and the compacted run it ends (``_effect_*`` and ``_run_*`` keys of ``row``)."""
    run = (
        None
        if row["_run_count"] is None
        else {
            "count": row["_run_count"],
            "first_observed_at": row["_run_first_observed_at"],
            "last_observed_at": row["_run_last_observed_at"],
            "compacted_at": row["_run_compacted_at"],
            "first_event_id": row["_run_first_event_id"],
        }
    )
    return {
        "event": {c: row[c] for c in event_cols},
        "effect": {c: row[f"_effect_{c}"] for c in effect_cols},
        "run": run,
    }


def export_object(
    block: Mapping[str, Any],
    record: dict[str, Any],
    *,
    bindings: list[dict[str, Any]],
    depends_on: list[str],
    history: list[dict[str, Any]],
    versions: list[dict[str, Any]],
) -> dict[str, Any]:
    """The export object of one block (``block``: its public view)."""
    view = {k: v for k, v in block.items() if k != "short_id"}  # short ids are per store
    return {
        "format": EXPORT_FORMAT,
        "id": block["id"],
        "block": view,
        "record": record,
        "bindings": bindings,
        "depends_on": depends_on,
        "history": history,
        "versions": versions,
    }


def _check_row(i: int, row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Shape errors of one export object, named by its place in the input."""
    problems: list[tuple[str, str]] = []
    rec = row.get("record")
    if not isinstance(row.get("id"), str) or not isinstance(rec, dict):
        return [(f"{i}", "an export object needs an id and a record")]
    if rec.get("id") != row["id"]:
        problems.append((f"{i}.record.id", "differs from the object's id"))
    problems.extend(
        (f"{i}.{name}", "must be a list")
        for name in ("bindings", "depends_on", "history", "versions")
        if not isinstance(row.get(name, []), list)
    )
    if problems:
        return problems
    for j, b in enumerate(row.get("bindings", [])):
        try:
            binding_from_row(str(b["sensor"]), str(b["subject"]), str(b.get("selector") or "{}"))
            if b.get("nodes") is not None:  # the leader's pass reads it as a JSON list
                Binding.model_validate({"sensor": b["sensor"], "nodes": json.loads(b["nodes"])})
            if b.get("served_by") is not None:
                Binding.model_validate({"sensor": b["sensor"], "served_by": b["served_by"]})
        except (KeyError, TypeError, ValueError, ValidationError) as err:
            problems.append((f"{i}.bindings.{j}", f"not a binding: {err}"))
    for j, h in enumerate(row.get("history", [])):
        event = h.get("event") if isinstance(h, dict) else None
        if (
            not isinstance(event, dict)
            or not isinstance(event.get("event_id"), str)
            or event.get("outcome") not in _OUTCOMES
            or not isinstance(h.get("effect"), dict)
        ):
            problems.append((f"{i}.history.{j}", "not an event with its effect"))
    for name in ("record", "bindings", "depends_on", "history", "versions"):
        problems.extend(_text_problems(f"{i}.{name}", row.get(name)))
    return problems


def _text_problems(path: str, value: Any) -> list[tuple[str, str]]:
    """Strings under ``value`` that no store keeps as given: with NUL (PostgreSQL text
    cannot hold one, so neither backend takes it) or not valid UTF-8."""
    if isinstance(value, str):
        if "\x00" in value:
            return [(path, "must not contain NUL characters")]
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            return [(path, f"is not valid UTF-8 text (bad character at position {err.start})")]
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _text_problems(f"{path}.{k}", v)]
    if isinstance(value, list):
        return [p for j, v in enumerate(value) for p in _text_problems(f"{path}.{j}", v)]
    return []


def check_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    """:class:`ValidationInputError` naming every malformed export object of ``rows``."""
    problems = [p for i, row in enumerate(rows) for p in _check_row(i, row)]
    if problems:
        raise ValidationInputError(problems)


async def import_rows(
    conn: aiosqlite.Connection,
    rows: Sequence[Mapping[str, Any]],
    *,
    quarantine: Mapping[tuple[int, int], str] | None = None,
    now: float,
) -> ImportReport:
    """Insert the export objects whose block ids are new; in the caller's transaction.

    ``quarantine`` maps (object, binding) positions to the rule a binding breaks here:
    those are stored quarantined (never checked, listed by health), not refused.
    Raises :class:`ValidationInputError` naming the object when one is malformed or does
    not read back as a valid block; the caller's transaction then writes nothing.
    """
    check_rows(rows)
    report = ImportReport()
    ids = [str(r["id"]) for r in rows]
    existing: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        async with conn.execute(
            f"SELECT id FROM blocks WHERE id IN ({','.join('?' * len(chunk))})", chunk
        ) as cur:
            existing.update(r[0] for r in await cur.fetchall())
    cols = {t: set(await _columns(conn, t)) for t in ("blocks", "bindings", "events", "effects")}
    history_cols = set(await _columns(conn, "block_history"))
    # Never reuse a deleted block's rid: its effects (the event history) keep it.
    async with conn.execute(
        "SELECT max(coalesce((SELECT max(rid) FROM blocks), 0),"
        " coalesce((SELECT max(block_rid) FROM effects), 0))"
    ) as cur:
        rid = (await cur.fetchone() or (0,))[0]
    for i, row in enumerate(rows):
        block_id = str(row["id"])
        if block_id in existing:
            report.existing.append(block_id)
            continue
        existing.add(block_id)
        rid += 1
        try:
            await _import_block(
                conn,
                i,
                row,
                rid=rid,
                cols=cols,
                history_cols=history_cols,
                quarantine=quarantine or {},
                now=now,
            )
        except (sqlite3.Error, OverflowError) as err:  # a missing column, a value too big
            raise ValidationInputError([(f"{i}", f"cannot be stored: {err}")]) from None
        report.sensors.update(str(b["sensor"]) for b in row.get("bindings", []))
        report.added.append(block_id)
    return report


async def _import_block(
    conn: aiosqlite.Connection,
    i: int,
    row: Mapping[str, Any],
    *,
    rid: int,
    cols: Mapping[str, set[str]],
    history_cols: set[str],
    quarantine: Mapping[tuple[int, int], str],
    now: float,
) -> None:
    rec = {k: v for k, v in row["record"].items() if k in cols["blocks"] and k != "rid"}
    if "content_key" in cols["blocks"] and isinstance(rec.get("content"), str):
        rec["content_key"] = content_key(rec["content"])  # dedupe sees imported blocks too
    await _insert(conn, "blocks", {**rec, "rid": rid})
    for j, b in enumerate(row.get("bindings", [])):
        values = {k: v for k, v in b.items() if k in cols["bindings"] and k != "id"}
        reason = quarantine.get((i, j))
        if reason is not None and "quarantine" in cols["bindings"]:
            values.update(quarantine=reason, quarantined_at=now)
        await _insert(conn, "bindings", {**values, "block_rid": rid})
    for dep in row.get("depends_on", []):
        await conn.execute(
            "INSERT OR IGNORE INTO dependencies (depends_on, block_rid) VALUES (?, ?)",
            (str(dep), rid),
        )
    for h in row.get("history", []):
        await _import_event(conn, h, rid, cols)
    for v in row.get("versions", []):
        if isinstance(v, dict):
            values = {k: val for k, val in v.items() if k in history_cols}
            await _insert(conn, "block_history", values, ignore=True)
    await _check_readable(conn, i, str(row["id"]))


async def _import_event(
    conn: aiosqlite.Connection, h: Mapping[str, Any], rid: int, cols: Mapping[str, set[str]]
) -> None:
    event = {k: v for k, v in h["event"].items() if k in cols["events"] and k != "seq"}
    await _insert(conn, "events", event, ignore=True)  # another block may have brought it
    async with conn.execute("SELECT seq FROM events WHERE event_id = ?", (event["event_id"],)) as c:
        seq = (await c.fetchone() or (None,))[0]
    effect = {
        k: v
        for k, v in h["effect"].items()
        if k in cols["effects"] and k not in ("block_rid", "event_seq")
    }
    await _insert(conn, "effects", {**effect, "block_rid": rid, "event_seq": seq}, ignore=True)
    run = h.get("run")
    if isinstance(run, dict):
        first = seq
        if run.get("first_event_id"):
            async with conn.execute(
                "SELECT seq FROM events WHERE event_id = ?", (run["first_event_id"],)
            ) as c:
                first = (await c.fetchone() or (seq,))[0]
        await conn.execute(
            "INSERT OR IGNORE INTO event_runs (block_rid, last_seq, first_seq, sensor, outcome,"
            " count, first_observed_at, last_observed_at, compacted_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rid,
                seq,
                first,
                event.get("sensor"),
                event.get("outcome"),
                run.get("count"),
                run.get("first_observed_at"),
                run.get("last_observed_at"),
                run.get("compacted_at"),
            ),
        )


async def _insert(
    conn: aiosqlite.Connection, table: str, values: Mapping[str, Any], *, ignore: bool = False
) -> None:
    names = list(values)
    verb = "INSERT OR IGNORE" if ignore else "INSERT"
    data = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in values.values()]
    await conn.execute(
        f"{verb} INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", data
    )


async def _check_readable(conn: aiosqlite.Connection, i: int, block_id: str) -> None:
    async with conn.execute(
        f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks WHERE id = ?", (block_id,)
    ) as cur:
        check_readable(i, await cur.fetchone())


def check_readable(i: int, row: Sequence[Any] | None) -> None:
    """:class:`ValidationInputError` unless the ``BLOCK_COLUMNS`` row of the ``i``-th
    imported object reads back as a valid block."""
    if row is None:  # inserted just before, in the same transaction
        raise RuntimeError(f"the block of imported object {i} is not there after its insert")
    try:
        rec = record_from_row(tuple(row))
        record_to_block(rec, bindings=[], now=rec.created_at, cfg=_POLICY)
    except (ValueError, TypeError, KeyError, AttributeError, ValidationError) as err:
        raise ValidationInputError([(f"{i}.record", f"not a valid block: {err}")]) from None
