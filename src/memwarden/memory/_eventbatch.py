"""The writer job behind :meth:`~memwarden.memory._apply.EventLog.apply_events`: a batch
of new events routed to their blocks (one joined read of the bindings, the blocks'
evidence and the bindings' open requests), the rules run event by event in observation
order, and events, effects, the blocks' evidence and the requests written in key order.
PostgreSQL's ingestion (:mod:`memwarden.memory.pg._apply`) runs the same batch.

**Answers close requests.** A request asks for a check of one binding (block, sensor,
subject). Whatever brings a newer look at that binding answers it, not only the event
naming it (``request_id``): a confirmation or refutation of the binding observed *after*
the request was made closes it as ``done`` in the same transaction, and its id goes into
:attr:`ApplyResult.answered` like any other answer, so reads waiting on it wake at once
and the scheduler never sends it. That is how a polling sensor's timeline and the
revalidation queue share one notion of "checked". ``changed`` and ``error`` answer
nothing: one asks for a check, the other could not make one. The comparison is with the
event's ``observed_at``, never with the block's last validation: an event the rules
ignore as outdated (another sensor validated the block later) still closes the request
it answers, or that request would be sent again for nothing. A request an event queues
(a change, a soft refutation) counts as made at that event's observation, so a later
observation answers it even when both arrive in one batch. The route read brings each
binding's open request along (one probe of the unique index ``revalidations_open``), so
the job closes the answered ones by id; for an event naming its block directly, whose
requests were not read, one ``UPDATE … FROM (VALUES …)`` over that index does it.

**A block is written once per run.** On SQLite the event jobs of one hand-off to the
writer's thread (in a flood, dozens of jobs in one transaction) leave their blocks' new
evidence in the run's :class:`PendingEvidence` instead of writing it job by job: a later
job of the run that reaches the same block takes its record from there (the database row
is not written yet), and the run writes each block once, at its end, before the
``COMMIT``. A flood of 200 000 events over 100 000 blocks now writes 151 000 block rows
where it wrote 199 000, one per block and job (docs/BENCHMARKS.md, session 12). What
else reads or writes a block's row inside the run flushes first: the dependency
propagation (when a block it would read is pending) and a demotion.
"""

from __future__ import annotations

import json
import operator
from collections import defaultdict
from itertools import chain
from typing import TYPE_CHECKING, Any

from memwarden.memory._codec import (
    EVIDENCE_COLUMNS,
    EVIDENCE_UPDATE_COLUMNS,
    evidence_record,
    evidence_row,
)
from memwarden.memory._ids import new_id
from memwarden.memory._model import Outcome
from memwarden.memory._results import ApplyResult, StateChange
from memwarden.memory._sql import (
    EVIDENCE_SELECT,
    EVIDENCE_UPDATE,
    REVALIDATION_INSERT,
    chunks,
    select_in_now,
)
from memwarden.memory.policy import Effect, PolicyConfig, apply_event

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence


from memwarden.memory._dependencies import propagate_on_thread

__all__: list[str] = []

_ERROR = Outcome.ERROR.value
#: The outcomes that answer a check of their binding (see the module's note).
ANSWERING = frozenset({Outcome.CONFIRMED.value, Outcome.REFUTED.value})
_CLOSE_CHUNK = 2000  # bindings per closing statement (5 host parameters each)

# A prepared event: plain values computed outside the writer's transaction.
_Prepared = tuple[
    str,  # 0 event_id
    str,  # 1 sensor
    str,  # 2 subject
    str,  # 3 outcome
    float,  # 4 observed_at
    float | None,  # 5 reliability
    float | None,  # 6 validity_window_s
    str | None,  # 7 request_id
    str | None,  # 8 block_id
    str,  # 9 message
    str | None,  # 10 observed (JSON)
    str | None,  # 11 agent
    int | None,  # 12 agent seq
]

# The bindings of the events' subjects, the evidence of the blocks behind them and each
# binding's open request (id, created_at; NULLs when none): the request comes along in
# the same probe of the unique index ``revalidations_open`` that closing it would cost.
_ROUTE_SELECT = (
    "SELECT g.subject, g.sensor, "
    + ", ".join(f"k.{c}" for c in EVIDENCE_COLUMNS)
    + ", r.id, r.created_at FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
    " LEFT JOIN revalidations r ON r.block_id = k.id AND r.sensor = g.sensor"
    " AND r.subject = g.subject AND r.status IN ('pending', 'sent')"
    " WHERE g.subject IN "
)
_ROUTE_REQUEST = 2 + len(EVIDENCE_COLUMNS)  # where a route row's request id is


class _ValuesUpdate:
    """``UPDATE blocks SET <columns> ... WHERE rid = ?`` for many rows (each: the
    columns' values, then the rid) as a few statements of the form ``WITH v(...) AS
    (VALUES (...), ...) UPDATE blocks SET c = v.c ... FROM v WHERE blocks.rid = v.rid``.

    SQLite runs such a statement in one step; an ``executemany`` steps, resets and
    re-binds the statement once per row: 13 % of the bulk update's instructions
    (docs/BENCHMARKS.md, helper ``ingest16``, second pass). The rows go in parts
    of 512, 256, ... 1 (a statement text per size, kept by the connection's statement
    cache: a text of any other length would be compiled anew). The same triggers fire,
    row by row, as for the one-row statement; ``rows`` must not name a rid twice.
    """

    _PART = 512

    def __init__(self, columns: Sequence[str]) -> None:
        self.width = len(columns) + 1
        names = ", ".join(f"c{i}" for i in range(len(columns)))
        sets = ", ".join(f"{c} = v.c{i}" for i, c in enumerate(columns))
        self._head = f"WITH v({names}, rid) AS (VALUES "
        self._tail = f") UPDATE blocks SET {sets} FROM v WHERE blocks.rid = v.rid"
        self._row = "(" + ",".join("?" * self.width) + ")"
        self._texts: dict[int, str] = {}

    def text(self, n: int) -> str:
        sql = self._texts.get(n)
        if sql is None:
            sql = self._texts[n] = self._head + ",".join([self._row] * n) + self._tail
        return sql

    def run(self, conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        i, n, size = 0, len(rows), self._PART
        while i < n:
            while size > n - i:
                size //= 2
            conn.execute(self.text(size), list(chain.from_iterable(rows[i : i + size])))
            i += size


# The evidence UPDATE without ``state`` and ``stale_reasons``, for a block whose state and
# reasons the batch left as they were (most confirmations of a fresh block): the
# triggers ``AFTER UPDATE OF state`` (the index's archive and restore) then do not run.
_EVIDENCE_UPDATE_SAME_STATE = (
    "UPDATE blocks SET "
    + ", ".join(f"{c} = ?" for c in EVIDENCE_UPDATE_COLUMNS[2:])
    + " WHERE rid = ?"
)
# How SQLite writes the rows of these two one-row statements (``_EventBatch._rules``
# returns the statements, which PostgreSQL's ingestion runs as they are).
_BULK_UPDATES = {
    EVIDENCE_UPDATE: _ValuesUpdate(EVIDENCE_UPDATE_COLUMNS),
    _EVIDENCE_UPDATE_SAME_STATE: _ValuesUpdate(EVIDENCE_UPDATE_COLUMNS[2:]),
}
# A hard refutation's demotion from core (a tier the evidence UPDATE does not write).
_DEMOTE = "UPDATE blocks SET tier = ?, stability = min(stability, ?) WHERE rid = ?"
_EVENT_INSERT = (
    "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at, received_at,"
    " reliability, validity_window_s, request_id, block_id, message, observed, agent, agent_seq)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_REVALIDATION_DONE = (
    "UPDATE revalidations SET status = 'done', finished_at = ?, outcome = ?"
    " WHERE id = ? AND status IN ('pending', 'sent')"
)
# A key (block, sensor, subject) is the open request's unique index: one index probe each.
_CLOSE_ANSWERED = (
    "WITH v(block_id, sensor, subject, observed_at, outcome) AS (VALUES {values})"
    " UPDATE revalidations SET status = 'done', finished_at = ?, outcome = v.outcome FROM v"
    " WHERE revalidations.block_id = v.block_id AND revalidations.sensor = v.sensor"
    " AND revalidations.subject = v.subject AND revalidations.status IN ('pending', 'sent')"
    " AND revalidations.created_at < v.observed_at RETURNING id"
)
_EVENT_IDS_SELECT = "SELECT event_id FROM events WHERE event_id IN "
_BOUND_SELECT = (
    "SELECT k.id, g.sensor FROM bindings g JOIN blocks k ON k.rid = g.block_rid WHERE k.id IN "
)
_EFFECT_INSERT = (
    "INSERT INTO effects (block_rid, event_seq, state_before, state_after,"
    " reliability_before, reliability_after, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# The same two inserts for the common rows, with their NULLs written in the statement:
# the sqlite3 module binds a None parameter through its adapter lookup (a tuple, a dict
# lookup and two attribute lookups, ~0.2 us), which for six NULLs an event cost more
# than the row's insert itself.
_EVENT_INSERT_PLAIN = (
    "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at, received_at,"
    " reliability, validity_window_s, request_id, block_id, message, observed, agent, agent_seq)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, ?, NULL, NULL, NULL)"
)
_EFFECT_INSERT_PLAIN = (
    "INSERT INTO effects (block_rid, event_seq, state_before, state_after,"
    " reliability_before, reliability_after, detail) VALUES (?, ?, ?, ?, ?, ?, NULL)"
)


class PendingEvidence:
    """The blocks' evidence the event jobs of one run changed and have not written yet
    (a :class:`~memwarden.memory._writer.RunPart`; see the module's note)."""

    __slots__ = ("records", "stored")

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}  # block id -> its record, as the rules left it
        # block id -> (state, stale_reasons) as the database holds them: which UPDATE
        # writes the block (_EVIDENCE_UPDATE_SAME_STATE when the run left both as they were)
        self.stored: dict[str, tuple[str, str]] = {}

    def add(self, touched: dict[str, Any], loaded: dict[str, tuple[str, str]]) -> None:
        """Keep the records a job's rules changed (``loaded``: as the job read them)."""
        records = self.records
        for block_id, rec in touched.items():
            if block_id not in records:
                records[block_id] = rec
                self.stored[block_id] = loaded[block_id]

    def take(self) -> list[_Statement]:
        """The statements that write every pending block, each once, in key order (the
        rows of ``EVIDENCE_UPDATE`` and ``_EVIDENCE_UPDATE_SAME_STATE``); none pending
        after."""
        changed, same = _evidence_updates(self.records, self.stored)
        self.records = {}
        self.stored = {}
        return [(EVIDENCE_UPDATE, changed), (_EVIDENCE_UPDATE_SAME_STATE, same)]

    def flush(self, conn: sqlite3.Connection) -> None:
        """Write every pending block, each once, in key order."""
        for sql, rows in self.take():
            if rows:
                _BULK_UPDATES[sql].run(conn, rows)


class _Reads:
    """Everything an event job reads before its rules run."""

    existing: set[str]  # event ids already in the log
    routes: list[Any]  # _ROUTE_SELECT rows of the events' subjects
    bound: list[Any]  # (block id, sensor) of the blocks events name directly
    direct: list[Any]  # EVIDENCE_SELECT rows of those blocks
    first_seq: int  # the seq of the job's first event

    @classmethod
    def fetch(cls, conn: sqlite3.Connection, prepared: list[_Prepared]) -> _Reads:
        subjects = list({p[2] for p in prepared if p[8] is None})
        direct = list({p[8] for p in prepared if p[8] is not None})
        reads = cls()
        reads.first_seq = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0] + 1
        reads.existing = {
            r[0] for r in select_in_now(conn, _EVENT_IDS_SELECT, [p[0] for p in prepared])
        }
        reads.routes = select_in_now(conn, _ROUTE_SELECT, subjects)
        reads.bound = select_in_now(conn, _BOUND_SELECT, direct)
        reads.direct = select_in_now(conn, EVIDENCE_SELECT, direct)
        return reads


def _drop_duplicates(
    prepared: list[_Prepared], existing: set[str], result: ApplyResult
) -> list[_Prepared]:
    """The events not yet in the log (nor twice in this batch)."""
    seen = set(existing)
    batch: list[_Prepared] = []
    for p in prepared:
        if p[0] in seen:
            result.duplicates += 1
        else:
            seen.add(p[0])
            batch.append(p)
    return batch


class _EventBatch:
    """Routes a batch of new events to their blocks, runs the rules and writes it all."""

    def __init__(
        self,
        now: float,
        cfg: PolicyConfig,
        result: ApplyResult,
        pending: PendingEvidence | None = None,
    ) -> None:
        self.now = now
        self.cfg = cfg
        self.result = result
        # Where the blocks' evidence goes, when the batch is one job of a run (SQLite's
        # writer): left there for the run's end instead of written by this job.
        self.pending = pending
        self.touched: dict[str, Any] = {}  # block id -> record the rules changed
        # (sensor, subject) -> the bindings (block, sensor, subject) it reaches
        self.by_subject: dict[tuple[str, str], list[tuple[str, str, str]]] = defaultdict(list)
        self.records: dict[str, Any] = {}
        # Each loaded block's (state, stale_reasons) as stored: a block the batch leaves
        # in both is written without them (_EVIDENCE_UPDATE_SAME_STATE).
        self.loaded: dict[str, tuple[str, str]] = {}
        # Per routed binding (block, sensor, subject): its open request as read with the
        # routes, (id, created_at), or None when it had none.
        self.open_requests: dict[tuple[str, str, str], tuple[str, float] | None] = {}
        self.bound: set[tuple[str, str]] = set()
        self.reviews: list[tuple[Any, ...]] = []
        # Per binding (block, sensor, subject): the latest observation answering a check of
        # it, and its outcome (see the module's note on answers).
        self.answers: dict[tuple[str, str, str], tuple[float, str]] = {}
        self.timeout_s = cfg.staleness.revalidation_timeout.total_seconds()

    def route(self, reads: _Reads) -> None:
        """Which blocks each event reaches: by (sensor, subject) binding, or by block id.

        One joined lookup fetched the bindings, the evidence of the blocks behind them
        and the bindings' open requests.
        """
        records, loaded, open_requests = self.records, self.loaded, self.open_requests
        # A block an earlier job of the run changed: its record as that job left it (the
        # row read is as stored, which ``loaded`` keeps).
        pending = self.pending.records if self.pending is not None else {}
        at = _ROUTE_REQUEST
        for row in reads.routes:
            block_id = row[3]
            key = (block_id, row[1], row[0])
            if key in open_requests:  # a block bound twice to one subject (two assertions
                continue  # on one file): the event reaches it once
            open_requests[key] = None if row[at] is None else (row[at], row[at + 1])
            self.by_subject[(row[1], row[0])].append(key)
            if block_id not in records:
                rec = pending.get(block_id)
                records[block_id] = evidence_record(row[2:at]) if rec is None else rec
                loaded[block_id] = (row[5], row[6])
        for block_id, sensor in reads.bound:
            self.bound.add((block_id, sensor))
        for row in reads.direct:
            if row[1] not in records:
                rec = pending.get(row[1])
                records[row[1]] = evidence_record(row) if rec is None else rec
                loaded[row[1]] = (row[3], row[4])

    def run(self, conn: sqlite3.Connection, batch: list[_Prepared], first_seq: int) -> None:
        """Apply the rules event by event (in observation order), then write everything."""
        now, result = self.now, self.result
        answered = [(now, p[3], p[7]) for p in batch if p[7] is not None]
        result.answered = [p[7] for p in batch if p[7] is not None]
        statements, requests = self._rules(batch, first_seq)
        # Answered requests first (by id, then the bindings newer events answered): a new
        # request for the same check may follow.
        by_id, unknown = self._closing()
        if answered or by_id:
            conn.executemany(_REVALIDATION_DONE, answered + by_id)
        closed = [row[2] for row in by_id]
        closed += [row[0] for sql, params in unknown for row in conn.execute(sql, params)]
        if self.pending is not None:
            self.pending.add(self.touched, self.loaded)
            if any(rows for sql, rows in statements if sql == _DEMOTE):
                # The rare demotion writes the block's row now: its evidence goes first,
                # so the row's history (retention points) never mixes the two.
                self.pending.flush(conn)
        for sql, rows in [*statements, requests]:
            if not rows:
                continue
            bulk = _BULK_UPDATES.get(sql)
            if bulk is not None:
                bulk.run(conn, rows)
            else:
                conn.executemany(sql, rows)
        result.accepted = len(batch)
        fallen = [c.block_id for c in result.changes if c.after in ("stale", "refuted")]
        if fallen:
            result.changes.extend(
                propagate_on_thread(conn, fallen, now=now, cfg=self.cfg, pending=self.pending)
            )
        if closed:
            result.answered = list(dict.fromkeys([*result.answered, *closed]))
        result.reviews = len(self.reviews)
        if self.reviews:
            conn.executemany(
                "INSERT OR IGNORE INTO reviews (id, block_id, reason, created_at) VALUES (?,?,?,?)",
                self.reviews,
            )

    def _closing(
        self,
    ) -> tuple[list[tuple[float, str, str]], list[tuple[str, tuple[Any, ...]]]]:
        """What closes the open requests this batch's observations answered: the
        ``_REVALIDATION_DONE`` rows of those read with the routes, and the statements
        (each returning the ids it closed) for bindings not routed, whose requests were
        not read (an event naming its block directly)."""
        now, known = self.now, self.open_requests
        by_id: list[tuple[float, str, str]] = []
        keys = []
        for key, (at, outcome) in self.answers.items():
            if key not in known:
                keys.append((*key, at, outcome))
                continue
            request = known[key]
            if request is not None and request[1] < at:  # made before it was observed
                by_id.append((now, outcome, request[0]))
        out = []
        for part in chunks(keys, _CLOSE_CHUNK):
            values = ",".join(["(?,?,?,?,?)"] * len(part))
            params = tuple(v for row in part for v in row)
            out.append((_CLOSE_ANSWERED.format(values=values), (*params, now)))
        return by_id, out

    def _rules(self, part: list[_Prepared], first_seq: int) -> tuple[list[_Statement], _Statement]:
        """Run the rules over ``part``; the statements that write what they did, in order,
        and apart from them the requests it queues (written after the answered ones are
        closed, see :meth:`run`). The blocks' evidence is among the statements unless the
        batch has a run's :attr:`pending` to leave it in (:attr:`touched` either way)."""
        now, cfg, result = self.now, self.cfg, self.result
        event_rows, plain_events = _event_rows(part, first_seq, now)
        effect_rows: list[tuple[Any, ...]] = []  # with a detail
        plain_effects: list[tuple[Any, ...]] = []  # without (most)
        touched: dict[str, Any] = {}
        requests: dict[tuple[str, str, str], tuple[Any, ...]] = {}
        answers = self.answers
        demoted: list[tuple[Any, ...]] = []
        for seq, p in enumerate(part, start=first_seq):
            eid, sensor, subject, outcome, observed_at, rel, window, _, block_id, _, _, _, _ = p
            targets = (
                [(block_id, sensor, subject)]
                if block_id is not None
                else self.by_subject.get((sensor, subject))
            )
            answers_check = outcome in ANSWERING
            reached = False
            for key in targets or ():
                bid = key[0]
                rec = self.records.get(bid)
                if rec is None:
                    continue
                reached = True
                if answers_check:  # outdated or not: it is a look at the binding
                    answers[key] = (observed_at, outcome)  # events go in observation order
                    queued = requests.get(key)
                    if queued is not None and queued[5] < observed_at:
                        del requests[key]  # queued earlier in this batch, answered already
                eff = apply_event(
                    rec,
                    outcome=outcome,
                    sensor=sensor,
                    observed_at=observed_at,
                    now=now,
                    cfg=cfg,
                    reliability=rel,
                    validity_window_s=window,
                    settled_by_binding=block_id is None or (bid, sensor) in self.bound,
                )
                if eff.ignored or eff.hard or eff.review or eff.demoted or eff.notes:
                    effect_rows.append(_effect_row(rec.rid, seq, eff))
                else:
                    plain_effects.append(
                        (
                            rec.rid,
                            seq,
                            eff.state_before,
                            eff.state_after,
                            eff.reliability_before,
                            eff.reliability_after,
                        )
                    )
                if eff.ignored is not None:
                    continue
                touched[bid] = rec
                if eff.state_after != eff.state_before:
                    result.changes.append(
                        StateChange(
                            bid,
                            eff.state_before,
                            eff.state_after,
                            rec.reliability,
                            observed_at,
                            eid,
                            sensor,
                        )
                    )
                if eff.demoted:
                    demoted.append((rec.tier, cfg.promotion.core.initial_stability, rec.rid))
                if eff.revalidate and outcome != _ERROR and key not in requests:
                    # Made at the observation that raised it: a later one answers it.
                    requests[key] = (
                        new_id(),
                        bid,
                        sensor,
                        subject,
                        eff.revalidate,
                        min(observed_at, now),
                        now + eff.revalidate_after_s,
                        self.timeout_s,
                    )
                if eff.review:
                    self.reviews.append((new_id(), bid, eff.review, now))
            if not reached:
                result.unmatched += 1
        result.revalidations += len(requests)
        # Writes in key order: B-tree pages are then visited once, in sequence. (An
        # effect's key, block and event, is unique: its first two values order it.)
        effect_rows.sort()
        plain_effects.sort()
        self.touched = touched
        updates: list[tuple[Any, ...]] = []
        same_state: list[tuple[Any, ...]] = []
        if self.pending is None:
            updates, same_state = _evidence_updates(touched, self.loaded)
        return [
            (_EVENT_INSERT_PLAIN, plain_events),
            (_EVENT_INSERT, event_rows),
            (_EFFECT_INSERT_PLAIN, plain_effects),
            (_EFFECT_INSERT, effect_rows),
            (EVIDENCE_UPDATE, updates),
            (_EVIDENCE_UPDATE_SAME_STATE, same_state),
            (_DEMOTE, demoted),
        ], (REVALIDATION_INSERT, list(requests.values()))


def _evidence_updates(
    touched: dict[str, Any], stored: dict[str, tuple[str, str]]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """``EVIDENCE_UPDATE`` rows of the touched blocks whose state or reasons changed from
    ``stored``, ``_EVIDENCE_UPDATE_SAME_STATE`` rows of the others; each in key order."""
    changed: list[tuple[Any, ...]] = []
    same: list[tuple[Any, ...]] = []
    for block_id, rec in touched.items():
        row = evidence_row(rec)
        state, reasons = stored[block_id]
        if row[0] == state and row[1] == reasons:
            same.append(row[2:])
        else:
            changed.append(row)
    changed.sort(key=_last)
    same.sort(key=_last)
    return changed, same


_Statement = tuple[str, list[tuple[Any, ...]]]


_NO_OPTIONAL = (None,) * 6  # window, request id, block id, observed, agent, agent seq


def _event_rows(
    part: list[_Prepared], first_seq: int, now: float
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """``_EVENT_INSERT`` rows of the events with an optional field set, and
    ``_EVENT_INSERT_PLAIN`` rows of the others (most: no window, request, block id,
    observed value or agent)."""
    full: list[tuple[Any, ...]] = []
    plain: list[tuple[Any, ...]] = []
    for seq, p in enumerate(part, start=first_seq):
        if (p[6], p[7], p[8], p[10], p[11], p[12]) == _NO_OPTIONAL:
            plain.append((seq, p[0], p[1], p[2], p[3], p[4], now, p[5], p[9]))
        else:
            full.append((seq, *p[:5], now, *p[5:]))
    return full, plain


_last = operator.itemgetter(-1)


def _effect_row(rid: int, seq: int, eff: Effect) -> tuple[Any, ...]:
    """An ``_EFFECT_INSERT`` row, for an effect worth a detail (ignored, hard, a review,
    a demotion, notes); the others go to ``_EFFECT_INSERT_PLAIN``."""
    detail = json.dumps(eff.as_dict(), separators=(",", ":"))
    return (
        rid,
        seq,
        eff.state_before,
        eff.state_after,
        eff.reliability_before,
        eff.reliability_after,
        detail,
    )
