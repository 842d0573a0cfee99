"""The store's reads of blocks on PostgreSQL: ``get``, ``resolve_id``, ``list_blocks``,
``short_ids`` — the first of the store's parts ported to this backend.

The same contract as :class:`~memwarden.memory._reads.Reads` on SQLite, over the same
result types: rows are turned into records, bindings and :class:`Block` by the same
codec (:mod:`~memwarden.memory._codec`), so a block read here equals the one read from
the SQLite store it was copied from (``tests/pg/test_reads_contract.py`` checks both
backends with one parametrised fixture). Only the SQL differs: ``$n`` parameters, a tag
found with ``tags::jsonb ? $n`` (SQLite: ``json_each``), arrays instead of ``IN`` lists.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from memwarden.errors import NotFoundError
from memwarden.memory import _shortid
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    binding_from_row,
    record_from_row,
)
from memwarden.memory._model import BlockState
from memwarden.memory._reads import blocks_of, event_entry, event_record, parse_block_ref, resolved
from memwarden.memory._results import BlockFilter, EventRecord, validate_input
from memwarden.memory._sql import MAX_NAMESPACES

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._model import Binding, Block
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = ["PgReads"]

_BLOCK_SELECT = f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks"


class PgReads:
    """Reads of blocks on a :class:`PgDatabase` (the SQLite ``Reads``' first methods)."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy

    async def get(self, block_id: str) -> Block:
        """A block with its bindings, its short id and its state as of now."""
        async with self.db.read() as conn:
            row = await conn.fetchrow(_BLOCK_SELECT + " WHERE id = $1", block_id)
            if row is None:
                raise NotFoundError("block", block_id)
            rec = record_from_row(tuple(row))
            blocks = await self._blocks(conn, [rec])
        return blocks[0]

    async def resolve_id(self, ref: str, *, namespaces: Sequence[str] | None = None) -> str:
        """The full id a caller means (a full id, or a short id only one block's id ends
        with); :class:`NotFoundError`, :class:`AmbiguousIdError` or
        :class:`ValidationInputError` as on SQLite."""
        kind, value = parse_block_ref(ref, "id")
        async with self.db.read() as conn:
            if kind == "short":
                scope, scope_args = _namespace_clause(namespaces, first=3)
                rows = await conn.fetch(
                    f"SELECT id FROM blocks WHERE id_key >= $1 AND id_key < $2{scope}"
                    " ORDER BY id LIMIT 6",
                    value,
                    value + "g",  # 'g' sorts after every hex digit
                    *scope_args,
                )
            else:
                scope, scope_args = _namespace_clause(namespaces, first=2)
                rows = await conn.fetch(
                    f"SELECT id FROM blocks WHERE id = $1{scope}", value, *scope_args
                )
            ids = [str(r[0]) for r in rows]
            short = await _short_ids(conn, ids) if len(ids) > 1 else {}
        return resolved(ref, ids, short)

    async def short_ids(self, block_ids: Sequence[str]) -> dict[str, str]:
        """Each block's short id (its last 8 hex digits, more while another id ends the
        same way)."""
        async with self.db.read() as conn:
            return await _short_ids(conn, block_ids)

    async def list_blocks(self, flt: BlockFilter | Mapping[str, Any] | None = None) -> list[Block]:
        """Blocks matching a filter, ordered by id (time of creation), keyset-paginated."""
        f = validate_input(BlockFilter, flt or {})
        where: list[str] = []
        args: list[Any] = []

        def arg(value: object) -> str:
            args.append(value)
            return f"${len(args)}"

        now = self.clock.time()
        if f.state is not None:
            if f.state == BlockState.STALE:
                where.append(
                    "(state = 'stale' OR (state IN ('fresh','unverified') "
                    f"AND stale_at <= {arg(now)}))"
                )
            elif f.state in (BlockState.FRESH, BlockState.UNVERIFIED):
                where.append(
                    f"state = {arg(f.state.value)} AND (stale_at IS NULL OR stale_at > {arg(now)})"
                )
            else:
                where.append(f"state = {arg(f.state.value)}")
        for col in ("tier", "volatility"):
            value = getattr(f, col)
            if value is not None:
                where.append(f"{col} = {arg(value.value)}")
        if f.sensor is not None:
            where.append(f"rid IN (SELECT block_rid FROM bindings WHERE sensor = {arg(f.sensor)})")
        if f.tag is not None:
            # jsonb's ? is "a top-level string element equal to", json_each's value = ?.
            where.append(f"tags::jsonb ? {arg(f.tag)}")
        if f.namespaces is not None:
            where.append(f"namespace = ANY({arg(list(f.namespaces))}::text[])")
        if f.flapping is not None:
            where.append(f"flapping = {arg(int(f.flapping))}")
        if f.after is not None:
            cursor = await self._cursor(f.after, f.namespaces)
            where.append(f"id < {arg(cursor)}" if f.newest_first else f"id > {arg(cursor)}")
        sql = _BLOCK_SELECT + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC" if f.newest_first else " ORDER BY id"
        sql += f" LIMIT {arg(f.limit)}"
        async with self.db.read() as conn:
            recs = [record_from_row(tuple(r)) for r in await conn.fetch(sql, *args)]
            return await self._blocks(conn, recs, now=now)

    async def find_by_subject(self, sensor: str, subject: str) -> list[str]:
        """Ids of the blocks bound to ``sensor`` for ``subject``."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT k.id FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
                " WHERE g.subject = $1 AND g.sensor = $2 ORDER BY k.id",
                subject,
                sensor,
            )
        return [str(r[0]) for r in rows]

    async def events_after(self, seq: int, *, limit: int = 100) -> list[dict[str, Any]]:
        """The event log after ``seq`` (oldest first), each with the blocks it changed."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT seq, event_id, sensor, subject, outcome, observed_at, received_at,"
                " message, observed FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                seq,
                limit,
            )
            effects: dict[int, list[dict[str, Any]]] = defaultdict(list)
            if rows:
                for ev_seq, block_id, sb, sa, rb, ra in await conn.fetch(
                    "SELECT f.event_seq, k.id, f.state_before, f.state_after,"
                    " f.reliability_before, f.reliability_after FROM effects f"
                    " LEFT JOIN blocks k ON k.rid = f.block_rid"
                    " WHERE f.event_seq BETWEEN $1 AND $2",
                    rows[0][0],
                    rows[-1][0],
                ):
                    effects[ev_seq].append(
                        {"block_id": block_id, "state": [sb, sa], "reliability": [rb, ra]}
                    )
        return [event_entry(tuple(r), effects.get(r[0], [])) for r in rows]

    async def events_for(self, block_id: str, *, limit: int = 50) -> list[EventRecord]:
        """A block's validation history, newest first."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT e.seq, e.event_id, e.sensor, e.subject, e.outcome, e.observed_at,"
                " e.received_at, e.reliability, e.message, e.observed, e.request_id,"
                " f.state_before, f.state_after, f.reliability_before, f.reliability_after,"
                " f.detail, r.count, r.first_observed_at"
                " FROM effects f JOIN events e ON e.seq = f.event_seq"
                " LEFT JOIN event_runs r ON r.block_rid = f.block_rid AND r.last_seq = f.event_seq"
                " WHERE f.block_rid = (SELECT rid FROM blocks WHERE id = $1)"
                " ORDER BY f.event_seq DESC LIMIT $2",
                block_id,
                limit,
            )
        return [event_record(tuple(r)) for r in rows]

    async def _cursor(self, after: str, namespaces: Sequence[str] | None) -> str:
        kind, value = parse_block_ref(after, "after")
        if kind == "short":
            return await self.resolve_id(after, namespaces=namespaces)
        return value

    async def _blocks(
        self, conn: PgConnection, recs: list[BlockRecord], *, now: float | None = None
    ) -> list[Block]:
        ids = [r.id for r in recs]
        bindings = await _bindings_of(conn, ids)
        depends = await _depends_of(conn, [r.rid for r in recs])
        short = await _short_ids(conn, ids)
        at = self.clock.time() if now is None else now
        return blocks_of(recs, bindings, depends, short, now=at, cfg=self.policy)


def _namespace_clause(namespaces: Sequence[str] | None, *, first: int) -> tuple[str, list[Any]]:
    """`` AND namespace = ANY($first)`` for a caller's namespaces; nothing for None."""
    if namespaces is None:
        return "", []
    if len(namespaces) > MAX_NAMESPACES:
        raise ValueError(f"at most {MAX_NAMESPACES} namespaces, not {len(namespaces)}")
    return f" AND namespace = ANY(${first}::text[])", [list(namespaces)]


async def _bindings_of(conn: PgConnection, block_ids: Sequence[str]) -> dict[str, list[Binding]]:
    out: dict[str, list[Binding]] = defaultdict(list)
    if block_ids:
        for block_id, sensor, subject, selector in await conn.fetch(
            "SELECT k.id, g.sensor, g.subject, g.selector FROM bindings g"
            " JOIN blocks k ON k.rid = g.block_rid WHERE k.id = ANY($1::text[]) ORDER BY g.id",
            list(block_ids),
        ):
            out[block_id].append(binding_from_row(sensor, subject, selector))
    return out


async def _depends_of(conn: PgConnection, rids: Sequence[int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    if rids:
        for rid, dep in await conn.fetch(
            "SELECT block_rid, depends_on FROM dependencies WHERE block_rid = ANY($1::bigint[])"
            " ORDER BY depends_on",
            list(rids),
        ):
            out[rid].append(dep)
    return out


async def _short_ids(conn: PgConnection, block_ids: Sequence[str]) -> dict[str, str]:
    """Short ids from the ``id_key`` index: each key's nearest neighbours decide how many
    digits tell it apart (two index probes per block, one query for all)."""
    out, keyed = _shortid.keyed(block_ids)
    if not keyed:
        return out
    rows = await conn.fetch(
        "SELECT k.id, k.key,"
        " (SELECT id_key FROM blocks WHERE id_key < k.key ORDER BY id_key DESC LIMIT 1),"
        " (SELECT id_key FROM blocks WHERE id_key >= k.key AND id <> k.id"
        "  ORDER BY id_key LIMIT 1)"
        " FROM unnest($1::text[], $2::text[]) AS k(id, key)",
        [k[0] for k in keyed],
        [k[1] for k in keyed],
    )
    for block_id, key, below, above in rows:
        out[block_id] = _shortid.from_neighbours(block_id, key, below, above)
    return out
