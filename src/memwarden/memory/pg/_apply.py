"""Event ingestion on PostgreSQL: :meth:`PgEventLog.apply_events`, exactly-once by event id.

The same contract as :class:`~memwarden.memory._apply.EventLog` on SQLite, and the same
code wherever no SQL is involved: the events are prepared by
:func:`~memwarden.memory._apply.split_events`, routed and run through the rules by the
SQLite ``_EventBatch`` (:mod:`memwarden.memory._eventbatch`, which returns its writes as
statements and rows); this module reads what the batch needs and writes those rows with
PostgreSQL's SQL (:func:`pg_sql` turns the statements' ``?`` into ``$n``). Only the
closing of answered requests and the dependency propagation have SQL of their own here
(arrays instead of ``VALUES`` lists and ``IN``).

Several writers (nodes) may ingest into one database: an ingestion job first takes a
transaction-level advisory lock (:data:`INGEST_LOCK_KEY`; nodes' ingestion transactions
take turns, and seqs follow commit order), appends the events with ``ON CONFLICT
(event_id) DO NOTHING`` before any rule runs (only those stored are applied: exactly
once by event id, whichever node delivers an event), takes their seqs from the log's
sequence and locks the blocks they reach before reading their evidence.

A job keeps nothing from one run to the next: the writer runs it again alone when
another job of its batch failed, and again when its transaction was a deadlock victim.
"""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING, Any, NamedTuple

from memwarden.memory import _eventbatch
from memwarden.memory._apply import move_unbound, named_blocks, split_events
from memwarden.memory._codec import EVIDENCE_COLUMNS, evidence_row
from memwarden.memory._dependencies import dependency_requests, stale_dependents
from memwarden.memory._model import StaleReason
from memwarden.memory._results import ApplyResult, StateChange
from memwarden.memory._sql import EVIDENCE_UPDATE, REVALIDATION_INSERT
from memwarden.memory.pg._ids import allocate

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._compaction import CompactionConfig
    from memwarden.memory._model import ValidationEvent
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "EFFECTS_CHANNEL",
    "EVENTS_CHANNEL",
    "FALLS_KEPT_S",
    "INGEST_LOCK_KEY",
    "Fall",
    "FallenEffect",
    "PgEventLog",
    "fallen_effects_after",
    "falls_after",
    "falls_start",
    "last_effect_seq",
    "pg_sql",
    "record_falls",
]

_Prepared = Any  # memwarden.memory._eventbatch._Prepared
# The channel a committed ingestion notifies, with its last seq (a wake-up, never data).
EVENTS_CHANNEL = "memwarden_events"
# The channel a committed ingestion that made blocks stale or refuted notifies, with its
# last seq (each node's session notices re-read the effects log after their cursor).
EFFECTS_CHANNEL = "memwarden_effects"
_FALLEN = ("stale", "refuted")
# pg_advisory_xact_lock key of ingestion: the first 8 bytes of sha256(b"memwarden.ingest").
INGEST_LOCK_KEY = int.from_bytes(hashlib.sha256(b"memwarden.ingest").digest()[:8], signed=True)
_EVENT_INSERTS = frozenset({_eventbatch._EVENT_INSERT, _eventbatch._EVENT_INSERT_PLAIN})  # noqa: SLF001
_EFFECT_INSERTS = frozenset({_eventbatch._EFFECT_INSERT, _eventbatch._EFFECT_INSERT_PLAIN})  # noqa: SLF001
_EVIDENCE = ", ".join(f"k.{c}" for c in EVIDENCE_COLUMNS)
_CLOSE_ANSWERED = (
    "UPDATE revalidations r SET status = 'done', finished_at = $6, outcome = v.outcome"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[])"
    " AS v(block_id, sensor, subject, observed_at, outcome)"
    " WHERE r.block_id = v.block_id AND r.sensor = v.sensor AND r.subject = v.subject"
    " AND r.status IN ('pending', 'sent') AND r.created_at < v.observed_at RETURNING r.id"
)
_DEAD_LETTER_INSERT = (
    "INSERT INTO dead_letters (received_at, source, reason, payload) VALUES ($1, $2, $3, $4)"
)
_DEAD_LETTERS_CAP = "DELETE FROM dead_letters WHERE id <= (SELECT max(id) FROM dead_letters) - $1"


@functools.cache
def pg_sql(sql: str) -> str:
    """A SQLite statement of the ingestion as PostgreSQL runs it: ``?`` → ``$n``,
    ``INSERT OR IGNORE`` → ``ON CONFLICT DO NOTHING``, scalar ``min`` → ``least``. For the
    statements of this module's callers only (no ``?`` inside their literals)."""
    parts = sql.split("?")
    out = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], start=1))
    if out.startswith("INSERT OR IGNORE INTO"):
        out = "INSERT INTO" + out[len("INSERT OR IGNORE INTO") :] + " ON CONFLICT DO NOTHING"
    return out.replace("min(stability,", "least(stability,")


class PgEventLog:
    """Appends events and applies them, on a :class:`PgDatabase`."""

    def __init__(
        self,
        db: PgDatabase,
        clock: Clock,
        policy: PolicyConfig,
        compaction: CompactionConfig | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        self.compaction = compaction
        # The node whose events these are (the daemon's ``[cluster] node``): an event
        # reaches only the bindings that node serves (docs/SCALE.md); None: every binding.
        self.node: str | None = None

    async def apply_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> ApplyResult:
        """Append events to the log and apply them to every block they reach, atomically
        (SQLite's ``EventLog.apply_events``): an event id already in the log is stored
        once, an observation from the future is dead-lettered, with ``bound_only`` an
        event naming a block not bound to its sensor too."""
        now = self.clock.time()
        prepared, rejected, direct = split_events(events, now, bound_only=bound_only)
        cfg, node = self.policy, self.node
        cap = (
            self.compaction.dead_letters_max_rows
            if self.compaction is not None and self.compaction.enabled
            else None
        )

        async def job(conn: PgConnection) -> ApplyResult:
            todo, refused = list(prepared), list(rejected)
            erased = await _drop_erased(conn, todo)
            if direct:
                await _reject_unbound(conn, todo, refused, direct, node)
            # The blocks' evidence is written once for the writer's transaction, as on
            # SQLite (memory._eventbatch's note): the blocks stay locked until it commits.
            pending = self.db.run_part(PgPendingEvidence)
            result = await _apply_job(conn, todo, refused, now, cfg, node=node, pending=pending)
            result.erased = erased
            if refused and cap is not None:
                await conn.execute(_DEAD_LETTERS_CAP, cap)
            return result

        return await self.db.write(job, weight=len(prepared))


async def _drop_erased(conn: PgConnection, prepared: list[_Prepared]) -> int:
    named = list({p[8] for p in prepared if p[8] is not None})
    if not named:
        return 0
    rows = await conn.fetch("SELECT block_id FROM erasures WHERE block_id = ANY($1::text[])", named)
    erased = {r[0] for r in rows}
    if not erased:
        return 0
    before = len(prepared)
    prepared[:] = [p for p in prepared if p[8] not in erased]
    return before - len(prepared)


async def _reject_unbound(
    conn: PgConnection,
    prepared: list[_Prepared],
    rejected: list[tuple[str, str, str]],
    payloads: Mapping[str, str],
    node: str | None,
) -> None:
    """With ``bound_only``: an event naming a block is refused unless the block has a
    binding for its sensor served by the event's node."""
    bound = await conn.fetch(
        _BOUND_SELECT + " AND ($2::text IS NULL OR g.served_by = $2)",
        named_blocks(prepared, payloads),
        node,
    )
    move_unbound(prepared, rejected, payloads, bound)


_BOUND_SELECT = (
    "SELECT k.id, g.sensor FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
    " WHERE k.id = ANY($1::text[])"
)


async def _apply_job(
    conn: PgConnection,
    prepared: list[_Prepared],
    rejected: list[tuple[str, str, str]],
    now: float,
    cfg: PolicyConfig,
    *,
    node: str | None = None,
    pending: PgPendingEvidence | None = None,
) -> ApplyResult:
    result = ApplyResult(rejected=[(event_id, reason) for event_id, reason, _ in rejected])
    if rejected:
        await conn.executemany(
            _DEAD_LETTER_INSERT,
            [(now, "events", reason, payload.encode()) for _, reason, payload in rejected],
        )
    if not prepared:
        return result
    # Ingestion transactions take turns across nodes (held until this one commits): with
    # many calls grouped in one transaction, each locking its blocks, two nodes' would
    # otherwise deadlock on each other's rows; and the seqs are then handed out in commit
    # order, so a reader following the log by seq never sees a later seq committed before
    # an earlier one.
    await conn.execute("SELECT pg_advisory_xact_lock($1)", INGEST_LOCK_KEY)
    existing = {
        r[0]
        for r in await conn.fetch(
            "SELECT event_id FROM events WHERE event_id = ANY($1::text[])",
            [p[0] for p in prepared],
        )
    }
    batch = _eventbatch._drop_duplicates(prepared, existing, result)  # noqa: SLF001
    batch, seqs = await _append(conn, batch, now, result)
    if batch:
        await _lock_blocks(conn, batch)
        reads = await _fetch(conn, batch, node)
        applied = _eventbatch._EventBatch(  # noqa: SLF001
            now, cfg, result, None if pending is None else pending.evidence
        )
        applied.route(reads)
        await _run(conn, applied, batch, seqs, pending)
        # Wakes the other nodes' followers of the log (`GET /v1/events?wait=`): delivered
        # at commit, and only if this transaction commits (docs/SCALE.md).
        await conn.execute("SELECT pg_notify($1, $2)", EVENTS_CHANNEL, str(max(seqs)))
        if any(c.after in _FALLEN and c.before != c.after for c in result.changes):
            # Wakes every node's session notices (they read the effects log after it).
            await conn.execute("SELECT pg_notify($1, $2)", EFFECTS_CHANNEL, str(max(seqs)))
    return result


class FallenEffect(NamedTuple):
    """A row of the effects log that made a block stale or refuted."""

    seq: int  # the event's seq and the block's rid: the follower's cursor
    rid: int
    block_id: str
    before: str
    after: str
    reliability: float
    event_id: str


async def last_effect_seq(conn: PgConnection) -> int:
    """The highest event seq in the effects log (0 when empty): a new follower's cursor."""
    return int(await conn.fetchval("SELECT coalesce(max(event_seq), 0) FROM effects"))


async def fallen_effects_after(
    conn: PgConnection, cursor: tuple[int, int], *, limit: int = 500
) -> list[FallenEffect]:
    """The effects after ``cursor`` (event seq, block rid) that made a block stale or
    refuted, in that order (seqs follow commit order: ingestion takes
    :data:`INGEST_LOCK_KEY`); the last one's ``(seq, rid)`` is the next cursor."""
    rows = await conn.fetch(
        "SELECT f.event_seq, f.block_rid, k.id, f.state_before, f.state_after,"
        " f.reliability_after, e.event_id FROM effects f JOIN blocks k ON k.rid = f.block_rid"
        " JOIN events e ON e.seq = f.event_seq"
        " WHERE (f.event_seq, f.block_rid) > ($1, $2) AND f.state_after = ANY($3::text[])"
        " AND f.state_before <> f.state_after ORDER BY f.event_seq, f.block_rid LIMIT $4",
        cursor[0],
        cursor[1],
        list(_FALLEN),
        max(1, limit),
    )
    return [FallenEffect(int(r[0]), int(r[1]), r[2], r[3], r[4], float(r[5]), r[6]) for r in rows]


_EVENT_APPEND = (
    "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at, received_at,"
    " reliability, validity_window_s, request_id, block_id, message, observed, agent, agent_seq)"
    " SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],"
    " $6::float8[], $7::float8[], $8::float8[], $9::float8[], $10::text[], $11::text[],"
    " $12::text[], $13::text[], $14::text[], $15::bigint[]) ORDER BY 2"
    " ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
)


async def _append(
    conn: PgConnection, batch: list[_Prepared], now: float, result: ApplyResult
) -> tuple[list[_Prepared], list[int]]:
    """Append the events not yet in the log, each with a seq of the log's identity (in the
    batch's order); the events stored and their seqs. An event id another writer stored
    meanwhile (a node ingesting the same event: ``ON CONFLICT DO NOTHING`` waited for its
    transaction and found the id) is a duplicate, as one read before. The rows go in
    event id order, so two writers' unique-index locks are taken in one order."""
    if not batch:
        return [], []
    seqs = await allocate(conn, "events", "seq", len(batch))
    rows = [(seq, *p[:5], now, *p[5:]) for seq, p in zip(seqs, batch, strict=True)]
    columns = [list(c) for c in zip(*rows, strict=True)]
    stored = {r[0] for r in await conn.fetch(_EVENT_APPEND, *columns)}
    if len(stored) == len(batch):
        return batch, seqs
    kept = [(p, seq) for p, seq in zip(batch, seqs, strict=True) if p[0] in stored]
    result.duplicates += len(batch) - len(kept)
    return [p for p, _ in kept], [seq for _, seq in kept]


async def _lock_blocks(conn: PgConnection, batch: list[_Prepared]) -> None:
    """Lock the blocks the events can reach, in rid order, before reading their evidence:
    a writer on another node applying events to the same block waits for this
    transaction, then reads what it wrote (no lost update), and two writers lock in one
    order."""
    subjects = list({p[2] for p in batch if p[8] is None})
    direct = list({p[8] for p in batch if p[8] is not None})
    await conn.execute(
        "SELECT rid FROM blocks WHERE rid IN (SELECT block_rid FROM bindings"
        " WHERE subject = ANY($1::text[])) OR id = ANY($2::text[]) ORDER BY rid FOR UPDATE",
        subjects,
        direct,
    )


async def _fetch(conn: PgConnection, prepared: list[_Prepared], node: str | None) -> Any:
    """What the rules read; an event about a subject reaches only the bindings its node
    serves (``node``; None: every binding). The events stay in the log either way."""
    subjects = list({p[2] for p in prepared if p[8] is None})
    direct = list({p[8] for p in prepared if p[8] is not None})
    reads = _eventbatch._Reads()  # noqa: SLF001
    reads.routes = [
        tuple(r)
        for r in await conn.fetch(
            f"SELECT g.subject, g.sensor, {_EVIDENCE}, r.id, r.created_at FROM bindings g"
            " JOIN blocks k ON k.rid = g.block_rid"
            " LEFT JOIN revalidations r ON r.block_id = k.id AND r.sensor = g.sensor"
            " AND r.subject = g.subject AND r.status IN ('pending', 'sent')"
            " WHERE g.subject = ANY($1::text[]) AND ($2::text IS NULL OR g.served_by = $2)",
            subjects,
            node,
        )
    ]
    reads.bound = [tuple(r) for r in await conn.fetch(_BOUND_SELECT, direct)]
    reads.direct = [
        tuple(r)
        for r in await conn.fetch(
            f"SELECT {_EVIDENCE} FROM blocks k WHERE k.id = ANY($1::text[])", direct
        )
    ]
    return reads


async def _run(
    conn: PgConnection,
    applied: Any,
    batch: list[_Prepared],
    seqs: list[int],
    pending: PgPendingEvidence | None,
) -> None:
    """``_EventBatch.run`` with PostgreSQL's SQL; the events are in the log already
    (:func:`_append`), ``seqs`` theirs; the blocks' evidence left in ``pending`` when
    given (flushed first when a demotion writes a block's row)."""
    now, result = applied.now, applied.result
    answered = [(now, p[3], p[7]) for p in batch if p[7] is not None]
    result.answered = [p[7] for p in batch if p[7] is not None]
    # The rules number the events from 0; each number becomes the event's seq.
    statements, requests = applied._rules(batch, 0)  # noqa: SLF001
    # As on SQLite: the requests read with the routes close by id; the bindings not routed
    # (an event naming its block) by one statement over their keys.
    by_id, _ = applied._closing()  # noqa: SLF001
    if answered or by_id:
        done = pg_sql(_eventbatch._REVALIDATION_DONE)  # noqa: SLF001
        await conn.executemany(done, answered + by_id)
    closed: list[str] = [row[2] for row in by_id]
    keys = [
        (*key, at, outcome)
        for key, (at, outcome) in applied.answers.items()
        if key not in applied.open_requests
    ]
    if keys:
        columns = [list(c) for c in zip(*keys, strict=True)]
        closed += [r[0] for r in await conn.fetch(_CLOSE_ANSWERED, *columns, now)]
    if pending is not None:
        pending.evidence.add(applied.touched, applied.loaded)
        if any(rows for sql, rows in statements if sql == _eventbatch._DEMOTE):  # noqa: SLF001
            await pending.flush(conn)
    for sql, rows in [*statements, requests]:
        if sql in _EVENT_INSERTS or not rows:
            continue
        if sql in _EFFECT_INSERTS:  # (block_rid, event number, ...): the number's seq
            await conn.executemany(pg_sql(sql), [(r[0], seqs[r[1]], *r[2:]) for r in rows])
        else:
            await conn.executemany(pg_sql(sql), rows)
    result.accepted = len(batch)
    fallen = [c.block_id for c in result.changes if c.after in ("stale", "refuted")]
    if fallen:
        result.changes.extend(
            await propagate_dependencies(conn, fallen, now=now, cfg=applied.cfg, pending=pending)
        )
    if closed:
        result.answered = list(dict.fromkeys([*result.answered, *closed]))
    result.reviews = len(applied.reviews)
    if applied.reviews:
        await conn.executemany(
            "INSERT INTO reviews (id, block_id, reason, created_at) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT DO NOTHING",
            applied.reviews,
        )


class PgPendingEvidence:
    """The blocks' evidence the event jobs of one writer transaction changed and have not
    written yet (:class:`~memwarden.memory._eventbatch.PendingEvidence`), as a part of
    the transaction (:class:`~memwarden.memory.pg._writer.PgRun`)."""

    __slots__ = ("evidence",)

    def __init__(self) -> None:
        self.evidence = _eventbatch.PendingEvidence()

    async def flush(self, conn: PgConnection) -> None:
        """Write every pending block, each once, in key order."""
        for sql, rows in self.evidence.take():
            if rows:
                await conn.executemany(pg_sql(sql), rows)


# The evidence of the blocks that depend on any of a set of blocks, locked.
_DEPENDENTS_SELECT = (
    f"SELECT {_EVIDENCE} FROM dependencies d JOIN blocks k ON k.rid = d.block_rid"
    " WHERE d.depends_on = ANY($1::text[]) ORDER BY k.rid FOR UPDATE OF k"
)


async def propagate_dependencies(
    conn: PgConnection,
    roots: Iterable[str],
    *,
    now: float,
    cfg: PolicyConfig,
    max_depth: int = 16,
    pending: PgPendingEvidence | None = None,
) -> list[StateChange]:
    """Dependents of refuted or stale blocks go stale (reason ``dependency``), transitively,
    each with one revalidation request per binding (SQLite's ``propagate_dependencies``).
    ``pending``: the evidence the writer's transaction has not written yet, flushed
    before a dependent it holds is read."""
    changes: list[StateChange] = []
    frontier = list(dict.fromkeys(roots))
    seen = set(frontier)
    timeout_s = cfg.staleness.revalidation_timeout.total_seconds()
    for _ in range(max_depth):
        if not frontier:
            break
        rows = await conn.fetch(_DEPENDENTS_SELECT, frontier)
        if pending is not None and any(r[1] in pending.evidence.records for r in rows):
            await pending.flush(conn)
            rows = await conn.fetch(_DEPENDENTS_SELECT, frontier)
        step = len(changes)
        staled = stale_dependents(rows, seen, now, changes)
        if not staled:
            break
        await record_falls(
            conn,
            [(c.block_id, c.before, c.after, c.reliability) for c in changes[step:]],
            reason=StaleReason.DEPENDENCY.value,
            now=now,
        )
        await conn.executemany(pg_sql(EVIDENCE_UPDATE), [evidence_row(r) for r in staled])
        bindings = await conn.fetch(
            "SELECT k.id, g.sensor, g.subject FROM bindings g"
            " JOIN blocks k ON k.rid = g.block_rid WHERE g.quarantine IS NULL"
            " AND g.block_rid = ANY($1::bigint[])",
            [r.rid for r in staled],
        )
        rows_in = dependency_requests(bindings, now, timeout_s)
        if rows_in:
            await conn.executemany(pg_sql(REVALIDATION_INSERT), rows_in)
        frontier = [r.id for r in staled]
    return changes


# ------------------------------------------------------------------ falls of no event
# A block made stale by the sweep or by a dependency has no effects row: it goes to
# `block_falls`, which each node's session notices follow too (docs/SCALE.md).

# How long a fall stays in `block_falls` (seconds of the store's clock): far longer than
# any reconnect, after which a follower re-reads from its cursor.
FALLS_KEPT_S = 86_400.0
_FALL_INSERT = (
    "INSERT INTO block_falls (block_id, state_before, state_after, reason, reliability, at)"
    " SELECT b, s, a, $4, r, $6 FROM unnest($1::text[], $2::text[], $3::text[],"
    " $5::float8[]) AS v(b, s, a, r)"
)
# Never waits: two transactions trimming at once each skip the rows the other holds.
_FALLS_TRIM = (
    "DELETE FROM block_falls WHERE id IN (SELECT id FROM block_falls WHERE at < $1"
    " FOR UPDATE SKIP LOCKED)"
)
_XMIN = "pg_snapshot_xmin(pg_current_snapshot())"


class Fall(NamedTuple):
    """A row of ``block_falls``: a block made stale with no effects row."""

    xid: str  # the writing transaction (xid8 as text) and the row's id: the cursor
    id: int
    block_id: str
    before: str
    after: str
    reason: str
    reliability: float
    at: float


async def record_falls(
    conn: PgConnection,
    falls: Sequence[tuple[str, str, str, float]],
    *,
    reason: str,
    now: float,
) -> None:
    """Record ``falls`` (block id, state before, state after, reliability) in this
    transaction and wake every node's session notices at its commit."""
    if not falls:
        return
    await conn.execute(_FALLS_TRIM, now - FALLS_KEPT_S)
    ids, before, after, rel = (list(c) for c in zip(*falls, strict=True))
    await conn.execute(_FALL_INSERT, ids, before, after, reason, rel, now)
    await conn.execute("SELECT pg_notify($1, $2)", EFFECTS_CHANNEL, "falls")


async def falls_start(conn: PgConnection) -> tuple[str, int]:
    """A new follower's cursor: after every fall of a transaction already finished."""
    return str(await conn.fetchval(f"SELECT {_XMIN}::text")), 0


async def falls_after(
    conn: PgConnection, cursor: tuple[str, int], *, limit: int = 500
) -> tuple[list[Fall], bool]:
    """The falls after ``cursor`` (xid, id) written by transactions older than any still
    running (so none can commit behind the cursor later), in that order; and whether
    there are committed ones after them not read (held back by an older transaction, or
    committed since): the caller reads again a little later."""
    rows = await conn.fetch(
        "SELECT xid::text, id, block_id, state_before, state_after, reason, reliability, at"
        f" FROM block_falls WHERE (xid, id) > ($1::text::xid8, $2) AND xid < {_XMIN}"
        " ORDER BY xid, id LIMIT $3",
        cursor[0],
        cursor[1],
        max(1, limit),
    )
    falls = [Fall(r[0], int(r[1]), r[2], r[3], r[4], r[5], float(r[6]), float(r[7])) for r in rows]
    held = False
    if len(falls) < max(1, limit):
        # Committed after the cursor but not read: held back by an older transaction,
        # or committed since the read above (its own snapshot; one ended in between makes
        # no difference). Either way: read again soon.
        held = bool(
            await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM block_falls WHERE (xid, id) > ($1::text::xid8, $2))",
                *(falls[-1][:2] if falls else cursor),
            )
        )
    return falls, held
