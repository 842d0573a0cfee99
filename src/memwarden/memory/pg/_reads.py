"""The store's reads on PostgreSQL: blocks (``get``, ``resolve_id``, ``list_blocks``,
``short_ids``, ``get_record``), bindings, history, the event log's counts, the store's
counts and coverage, and ``meta``.

The same contract as :class:`~memwarden.memory._reads.Reads` on SQLite, over the same
result types: rows are turned into records, bindings and :class:`Block` by the same
codec (:mod:`~memwarden.memory._codec`), so a block read here equals the one read from
the SQLite store it was copied from (``tests/pg/test_reads_contract.py`` checks both
backends with one parametrised fixture; ``tests/pg/test_misc_contract.py`` the rest).
Only the SQL differs: ``$n`` parameters, a tag found with ``tags::jsonb ? $n`` (SQLite:
``json_each``), arrays instead of ``IN`` lists, ``trunc(x)::bigint`` for SQLite's
``CAST(x AS INTEGER)`` (which truncates; PostgreSQL's cast rounds).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from memwarden.errors import NotFoundError
from memwarden.memory import _shortid
from memwarden.memory._answers import (
    blocks_of,
    counts_answer,
    event_entry,
    event_record,
    events_by_sensor,
    first_seq_since,
    parse_block_ref,
    resolved,
    version_entry,
)
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    binding_from_row,
    record_from_row,
)
from memwarden.memory._model import BlockState
from memwarden.memory._results import BlockFilter, EventRecord, validate_input
from memwarden.memory._sql import MAX_NAMESPACES, one_row
from memwarden.memory.policy import coverage_of

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._model import Binding, Block
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import CoverageDict, PolicyConfig

__all__ = ["NUL", "PgReads", "storable"]

# PostgreSQL text cannot hold a NUL (SQLite's can): a key with one names nothing stored,
# so a read leaves it out (or answers "none") where SQLite finds no row.
NUL = "\x00"


def storable(values: Iterable[str]) -> list[str]:
    """``values`` without those holding a NUL (which no PostgreSQL text row can equal)."""
    return [v for v in values if NUL not in v]


log = structlog.get_logger("memwarden.store")

_BLOCK_SELECT = f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks"


class PgReads:
    """Reads of blocks on a :class:`PgDatabase` (the SQLite ``Reads``' first methods)."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy

    async def get(self, block_id: str) -> Block:
        """A block with its bindings, its short id and its state as of now."""
        if NUL in block_id:
            raise NotFoundError("block", block_id)
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
            return await _short_ids(conn, storable(block_ids))

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
        if NUL in sensor or NUL in subject:
            return []
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
        if NUL in block_id:
            return []
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

    async def get_record(self, block_id: str) -> BlockRecord:
        """The raw record of a block (for rules and explanations)."""
        if NUL in block_id:
            raise NotFoundError("block", block_id)
        async with self.db.read() as conn:
            row = await conn.fetchrow(_BLOCK_SELECT + " WHERE id = $1", block_id)
        if row is None:
            raise NotFoundError("block", block_id)
        return record_from_row(tuple(row))

    async def sensors_bound(self, block_ids: Sequence[str]) -> dict[str, set[str]]:
        """For each of these blocks that exists, the sensors it has a binding for."""
        out: dict[str, set[str]] = {}
        async with self.db.read() as conn:
            for block_id, sensor in await conn.fetch(
                "SELECT k.id, g.sensor FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
                " WHERE k.id = ANY($1::text[])",
                storable(block_ids),
            ):
                out.setdefault(block_id, set()).add(sensor)
        return out

    async def validity_windows(self, block_ids: Sequence[str]) -> dict[str, timedelta]:
        """For each of these blocks that exists, its validity window (its own, else its
        volatility's): what a polling sensor answering for it renews."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT id, validity_window_s FROM blocks WHERE id = ANY($1::text[])",
                storable(block_ids),
            )
        return {block_id: timedelta(seconds=window_s) for block_id, window_s in rows}

    async def bindings_for_sensor(
        self, sensor: str, *, served_by: str | None = None
    ) -> list[tuple[str, Binding]]:
        """Every (block id, binding) a sensor owns: what it must watch; with
        ``served_by``, only those that node serves."""
        if NUL in sensor or (served_by is not None and NUL in served_by):
            return []
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT k.id, b.sensor, b.subject, b.selector, b.nodes, b.served_by"
                " FROM bindings b JOIN blocks k ON k.rid = b.block_rid"
                " WHERE b.sensor = $1 AND k.state <> 'archived' AND b.quarantine IS NULL"
                " AND ($2::text IS NULL OR b.served_by = $2) ORDER BY b.id",
                sensor,
                served_by,
            )
        out = []
        for block_id, name, subject, selector, nodes, server in rows:
            try:
                out.append((block_id, binding_from_row(name, subject, selector, nodes, server)))
            except (ValueError, ValidationError) as err:  # stored by an older memwarden
                log.warning("binding_unreadable", sensor=name, block_id=block_id, error=str(err))
        return out

    async def versions(self, block_id: str) -> list[dict[str, Any]]:
        """A block's earlier texts (``block_history``), oldest first."""
        if NUL in block_id:
            return []
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT version, title, content, tags, replaced_at, replaced_by"
                " FROM block_history WHERE block_id = $1 ORDER BY version",
                block_id,
            )
        return [version_entry(r) for r in rows]

    async def event_counts(
        self, *, since: float, bucket_s: float, scan: int = 50_000
    ) -> dict[str, dict[int, dict[str, int]]]:
        """Events received since ``since`` by sensor, bucket and outcome (the newest
        ``scan`` events at most)."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT sensor, outcome, trunc((received_at - $1) / $2)::bigint AS b, count(*)"
                " FROM (SELECT sensor, outcome, received_at FROM events"
                " ORDER BY seq DESC LIMIT $3) e WHERE received_at >= $1"
                " GROUP BY sensor, outcome, b",
                since,
                bucket_s,
                scan,
            )
        return events_by_sensor(rows)

    async def recent_event_counts(
        self, *, since: float, bucket_s: float
    ) -> dict[str, dict[int, dict[str, int]]]:
        """Like :meth:`event_counts`, reading only the events received since ``since``:
        the first such ``seq`` by a binary search on the primary key (the log is in
        commit order), then those events."""
        async with self.db.read() as conn:
            first = await _first_seq_since(conn, since)
            if first is None:
                return {}
            rows = await conn.fetch(
                "SELECT sensor, outcome, trunc((received_at - $1) / $2)::bigint AS b, count(*)"
                " FROM events WHERE seq >= $3 AND received_at >= $1"
                " GROUP BY sensor, outcome, b",
                since,
                bucket_s,
                first,
            )
        return events_by_sensor(rows)

    async def dependents(self, block_id: str) -> list[str]:
        """Ids of the blocks that depend on this one, in id order."""
        if NUL in block_id:
            return []
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT b.id FROM dependencies d JOIN blocks b ON b.rid = d.block_rid"
                " WHERE d.depends_on = $1 ORDER BY b.id",
                block_id,
            )
        return [str(r[0]) for r in rows]

    async def counts(self, *, namespaces: Sequence[str] | None = None) -> dict[str, Any]:
        """Blocks by state (as of now), tier and volatility; events; pending work (the
        blocks, revalidations and reviews of ``namespaces`` only, when given)."""
        now = self.clock.time()
        scope, scope_args = _namespace_clause(namespaces, first=2)
        owned, owned_args = _namespace_clause(namespaces, first=1)
        if namespaces is not None:
            owned = f" AND block_id IN (SELECT id FROM blocks WHERE true{owned})"
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT CASE WHEN state IN ('fresh','unverified') AND stale_at <= $1"
                " THEN 'stale' ELSE state END AS s, tier, volatility, count(*)"
                f" FROM blocks WHERE true{scope} GROUP BY s, tier, volatility",
                now,
                *scope_args,
            )
            events = await conn.fetchval("SELECT max(seq) FROM events") or 0
            backlog = await conn.fetchval(
                f"SELECT count(*) FROM revalidations WHERE status IN ('pending', 'sent'){owned}",
                *owned_args,
            )
            reviews = await conn.fetchval(
                f"SELECT count(*) FROM reviews WHERE status = 'pending'{owned}", *owned_args
            )
            dead = await conn.fetchval("SELECT count(*) FROM dead_letters")
        return counts_answer(rows, events, backlog, reviews, dead)

    async def coverage(
        self, alive: Sequence[str], *, namespaces: Sequence[str] | None = None
    ) -> CoverageDict:
        """The share of live blocks with an unquarantined binding whose sensor is in
        ``alive``, by source and tier (of ``namespaces``' blocks only, when given)."""
        scope, scope_args = _namespace_clause(namespaces, first=2)
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT b.source, b.tier, count(*), count(c.block_rid) FROM blocks b"
                " LEFT JOIN (SELECT DISTINCT block_rid FROM bindings WHERE quarantine IS NULL"
                " AND sensor = ANY($1::text[])) c ON c.block_rid = b.rid"
                f" WHERE b.state <> 'archived'{scope}"
                " GROUP BY b.source, b.tier",
                sorted(set(storable(alive))),
                *scope_args,
            )
        return coverage_of((str(s), str(t), int(n), int(c or 0)) for s, t, n, c in rows)

    async def get_meta(self, key: str) -> str | None:
        """A small fact the daemon keeps about itself."""
        if NUL in key:
            return None
        async with self.db.read() as conn:
            value = await conn.fetchval("SELECT value FROM meta WHERE key = $1", key)
        return None if value is None else str(value)

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
    return f" AND namespace = ANY(${first}::text[])", [storable(namespaces)]


async def _bindings_of(conn: PgConnection, block_ids: Sequence[str]) -> dict[str, list[Binding]]:
    out: dict[str, list[Binding]] = defaultdict(list)
    if block_ids:
        for block_id, *binding in await conn.fetch(
            "SELECT k.id, g.sensor, g.subject, g.selector, g.nodes, g.served_by FROM bindings g"
            " JOIN blocks k ON k.rid = g.block_rid WHERE k.id = ANY($1::text[]) ORDER BY g.id",
            list(block_ids),
        ):
            out[block_id].append(binding_from_row(*binding))
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


async def _first_seq_since(conn: PgConnection, since: float) -> int | None:
    """The ``seq`` of the first event received at or after ``since`` (None: none was),
    by binary search over the primary key (gaps from deleted events are skipped)."""
    bounds = await conn.fetchrow("SELECT min(seq), max(seq) FROM events")
    if bounds is None or bounds[1] is None:
        return None
    lo, hi = int(bounds[0]), int(bounds[1])

    async def at_or_after(seq: int) -> tuple[int, float]:
        row = await conn.fetchrow(
            "SELECT seq, received_at FROM events WHERE seq >= $1 ORDER BY seq LIMIT 1", seq
        )
        row = one_row(row, f"the event at or after {seq}")  # seq <= max(seq): there is one
        return int(row[0]), float(row[1])

    return await first_seq_since(lo, hi, since, at_or_after)
