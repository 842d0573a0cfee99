"""Bounded growth without losing the record: compaction of the event log.

The event log (``events`` + ``effects``) is the audit trail, so it is *compacted*, never
truncated. A *run* is a sequence of effects on one block from one sensor with one outcome
that changed nothing (same state, same reliability, no hard refutation, no review, no
demotion, no flapping change), none of it younger than ``compaction.after``. Any effect
on the block that did change something ends every run open on that block. A run of
three or more keeps its first and last event; the ones between are deleted and counted
in ``event_runs`` (keyed by the block and the run's last event), so a read can still say
"confirmed x N between t1 and t2". Compacting again merges: a kept last event weighs
the events it stands for. An event row leaves the log only when no block's history
holds it any more. Every event and effect that changed a block is kept.

Events that reached no block (nothing was bound to their sensor and subject) are no
block's record: older than ``compaction.after`` they are deleted and counted per sensor,
outcome and UTC day in ``unmatched_counts``. ``dead_letters`` are pruned by age and by
count. Revalidation requests that are over (``done``, ``failed``, ``expired``) are deleted
once they ended longer than ``revalidations_max_age`` ago: the event that answered one
stays in the log (its ``request_id``); an open one is never touched.

The append-only triggers refuse every other ``DELETE``: they let one through only while
the ``compaction_guard`` row exists, which each compaction job inserts and removes
inside its own writer transaction. Work is split into writer jobs of at most
``compaction.window_rows`` effects, so the writer is never held long.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Generic, Protocol, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field

from memwarden.memory._durations import Duration

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database

__all__ = [
    "WINDOW_SELECT",
    "CompactionConfig",
    "CompactionReport",
    "CompactionSteps",
    "Window",
    "compact",
    "plan_unmatched",
    "plan_window",
    "run_compaction",
]

T = TypeVar("T")
C = TypeVar("C")  # a backend's connection
C_co = TypeVar("C_co", covariant=True)

log = structlog.get_logger("memwarden.store")

# Keys of an effect's detail that say nothing changed (a replayed or outdated event).
_INERT_DETAIL = frozenset({"state", "reliability", "ignored", "notes"})
_DELETE_CHUNK = 500  # host parameters per DELETE ... IN (...)


class CompactionConfig(BaseModel):
    """``[store.compaction]``: how the event log and the dead letters stay bounded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    after: Duration = Field(
        default=timedelta(days=7),
        description="Runs of identical outcomes older than this are compacted.",
    )
    window_rows: Annotated[int, Field(ge=16, le=1_000_000)] = Field(
        default=2000, description="Effects read per writer job (keeps each job short)."
    )
    dead_letters_max_age: Duration = timedelta(days=30)
    dead_letters_max_rows: Annotated[int, Field(ge=0)] = 10_000
    revalidations_max_age: Duration = Field(
        default=timedelta(days=7),
        description="Revalidation requests that are over (done, failed, expired) are "
        "deleted this long after they ended; open ones are kept.",
    )


@dataclass(slots=True)
class CompactionReport:
    """What one compaction pass did."""

    blocks: int = 0  # blocks whose history was walked
    runs: int = 0  # runs compacted (or extended)
    effects_deleted: int = 0
    events_deleted: int = 0
    dead_letters_deleted: int = 0
    revalidations_deleted: int = 0  # requests over for longer than revalidations_max_age
    unmatched_deleted: int = 0  # events that reached no block (counted in unmatched_counts)
    jobs: int = 0  # writer jobs
    max_job_s: float = 0.0  # the longest a job held the writer
    duration_s: float = 0.0
    details: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "blocks": self.blocks,
            "runs": self.runs,
            "effects_deleted": self.effects_deleted,
            "events_deleted": self.events_deleted,
            "dead_letters_deleted": self.dead_letters_deleted,
            "revalidations_deleted": self.revalidations_deleted,
            "unmatched_deleted": self.unmatched_deleted,
            "jobs": self.jobs,
            "max_job_s": round(self.max_job_s, 4),
            "duration_s": round(self.duration_s, 3),
        }


@dataclass(slots=True)
class _Member:
    seq: int
    observed_at: float
    run: tuple[int, int, float] | None  # the event_runs row ending here: first seq, count, t1

    @property
    def weight(self) -> int:
        """How many events this kept effect stands for (the last of a run: all but one)."""
        return 1 if self.run is None else max(1, self.run[1] - 1)


@dataclass(slots=True)
class _Run:
    sensor: str
    outcome: str
    members: list[_Member] = field(default_factory=list)


@dataclass(slots=True)
class Window:
    """The deletions and run rows one writer job makes for one block."""

    rid: int
    now: float
    effects: list[int] = field(default_factory=list)
    old_runs: list[int] = field(default_factory=list)  # event_runs.last_seq to replace
    new_runs: list[tuple[Any, ...]] = field(default_factory=list)
    events_deleted: int = 0

    def close(self, run: _Run | None) -> bool:
        """Compact a run if that saves rows; True when it did."""
        if run is None:
            return False
        head, last = run.members[0], run.members[-1]
        if head.run is not None:
            # The window began at the kept last event of a run compacted before: this
            # run goes on from there, so that event goes too (the run's first stays).
            first_seq, count, first_at = head.run
            count += sum(m.weight for m in run.members[1:])
            gone = run.members[:-1]
        else:
            first_seq, first_at = head.seq, head.observed_at
            count = 1 + sum(m.weight for m in run.members[1:])
            gone = run.members[1:-1]
        if not gone:
            return False
        self.effects.extend(m.seq for m in gone)
        self.old_runs.extend(m.seq for m in gone if m.run is not None)
        self.new_runs.append(
            (
                self.rid,
                last.seq,
                first_seq,
                run.sensor,
                run.outcome,
                count,
                first_at,
                last.observed_at,
                self.now,
            )
        )
        if last.run is not None:
            self.old_runs.append(last.seq)
        return True


def _inert(
    state_before: str, state_after: str, rel_before: float, rel_after: float, detail: str | None
) -> bool:
    if state_before != state_after or rel_before != rel_after:
        return False
    if not detail:
        return True
    try:
        keys = set(json.loads(detail))
    except (ValueError, TypeError):
        return False
    return keys <= _INERT_DETAIL


WINDOW_SELECT = (
    "SELECT f.event_seq, e.sensor, e.outcome, e.observed_at, e.received_at,"
    " f.state_before, f.state_after, f.reliability_before, f.reliability_after, f.detail,"
    " r.first_seq, r.count, r.first_observed_at"
    " FROM effects f JOIN events e ON e.seq = f.event_seq"
    " LEFT JOIN event_runs r ON r.block_rid = f.block_rid AND r.last_seq = f.event_seq"
    " WHERE f.block_rid = ? AND f.event_seq >= ? ORDER BY f.event_seq LIMIT ?"
)


def _plan(rows: list[Any], window: Window, cutoff: float, limit: int) -> int | None:
    """Find the runs in one window of a block's effects; the seq to resume at, or None."""
    open_runs: dict[str, _Run] = {}
    done = True
    for row in rows:
        seq, sensor, outcome, observed_at, received_at = row[:5]
        if received_at >= cutoff:  # this one and everything after is too young
            break
        if not _inert(*row[5:10]):
            for ended in open_runs.values():
                window.close(ended)
            open_runs.clear()
            continue
        prior = None if row[10] is None else (int(row[10]), int(row[11]), float(row[12]))
        member = _Member(seq=seq, observed_at=observed_at, run=prior)
        current = open_runs.get(sensor)
        if current is not None and current.outcome == outcome:
            current.members.append(member)
        else:
            window.close(current)
            open_runs[sensor] = _Run(sensor, outcome, [member])
    else:
        done = len(rows) < limit
    if done or not rows:
        for run in open_runs.values():
            window.close(run)
        return None
    # Resume where the runs still open begin, so that they go on in the next window;
    # a run that began with this window resumes at its (kept) last event instead.
    first_seq = int(rows[0][0])
    starts = []
    for run in open_runs.values():
        compacted = window.close(run)
        head = run.members[0].seq
        if head > first_seq:
            starts.append(head)
        elif compacted:
            starts.append(run.members[-1].seq)
    resume = min(starts, default=int(rows[-1][0]) + 1)
    return resume if resume > first_seq else int(rows[-1][0]) + 1


def plan_window(
    rows: list[Any], rid: int, *, cutoff: float, limit: int, now: float
) -> tuple[int | None, Window]:
    """The runs to compact in one window of a block's effects (``WINDOW_SELECT``'s rows)
    and the seq to resume at (None: the block is done)."""
    window = Window(rid=rid, now=now)
    return _plan(rows, window, cutoff, limit), window


async def _compact_block_window(
    conn: aiosqlite.Connection, rid: int, start: int, *, cutoff: float, limit: int, now: float
) -> tuple[int | None, Window]:
    rows = list(await conn.execute_fetchall(WINDOW_SELECT, (rid, start, limit)))
    resume, window = plan_window(rows, rid, cutoff=cutoff, limit=limit, now=now)
    if not window.effects:
        return resume, window
    await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
    try:
        for part in _parts(window.old_runs):
            await conn.execute(
                f"DELETE FROM event_runs WHERE block_rid = ? AND last_seq IN {_in(len(part))}",
                (rid, *part),
            )
        await conn.executemany(
            "INSERT INTO event_runs (block_rid, last_seq, first_seq, sensor, outcome, count,"
            " first_observed_at, last_observed_at, compacted_at) VALUES (?,?,?,?,?,?,?,?,?)",
            window.new_runs,
        )
        for part in _parts(window.effects):
            await conn.execute(
                f"DELETE FROM effects WHERE block_rid = ? AND event_seq IN {_in(len(part))}",
                (rid, *part),
            )
            async with conn.execute(
                f"DELETE FROM events WHERE seq IN {_in(len(part))}"
                " AND NOT EXISTS (SELECT 1 FROM effects WHERE event_seq = events.seq)",
                part,
            ) as cur:
                window.events_deleted += max(0, cur.rowcount)
    finally:
        await conn.execute("DELETE FROM compaction_guard")
    return resume, window


def _parts(items: list[int]) -> list[list[int]]:
    return [items[i : i + _DELETE_CHUNK] for i in range(0, len(items), _DELETE_CHUNK)]


def _in(n: int) -> str:
    return "(" + ",".join("?" * n) + ")"


UNMATCHED_KEY = "compaction_unmatched_seq"  # meta: events below it were looked at


def plan_unmatched(
    rows: list[Any], *, start: int, newest: int, cutoff: float, limit: int
) -> tuple[list[int], list[tuple[Any, ...]], int, bool]:
    """One window of the log (``(seq, sensor, outcome, received_at, reached)`` rows from
    ``start``): the seqs of the events that reached no block and may go, their
    ``unmatched_counts`` rows (sensor, day, outcome, count, first, last), the seq to
    resume at and whether the log is done."""
    gone: list[int] = []
    counts: dict[tuple[str, str, str], list[float]] = {}
    resume = start
    done = len(rows) < limit
    for seq, sensor, outcome, received_at, reached in rows:
        if received_at >= cutoff:  # too young: resume here next time
            done = True
            break
        if seq == newest:
            done = True
            break
        resume = seq + 1
        if reached:
            continue
        gone.append(seq)
        key = (sensor, time.strftime("%Y-%m-%d", time.gmtime(received_at)), outcome)
        seen = counts.setdefault(key, [0, received_at, received_at])
        seen[0] += 1
        seen[1] = min(seen[1], received_at)
        seen[2] = max(seen[2], received_at)
    rows_out = [(*key, int(c), first, last) for key, (c, first, last) in counts.items()]
    return gone, rows_out, resume, done


async def _compact_unmatched(
    conn: aiosqlite.Connection, *, cutoff: float, limit: int
) -> tuple[int, int, bool]:
    """One window of the events that reached no block: counted per sensor, outcome and
    day, then deleted. Returns (rows looked at, events deleted, done)."""
    async with conn.execute("SELECT value FROM meta WHERE key = ?", (UNMATCHED_KEY,)) as cur:
        row = await cur.fetchone()
    start = int(row[0]) if row is not None else 0
    rows = list(
        await conn.execute_fetchall(
            "SELECT e.seq, e.sensor, e.outcome, e.received_at,"
            " EXISTS (SELECT 1 FROM effects f WHERE f.event_seq = e.seq)"
            " FROM events e WHERE e.seq >= ? ORDER BY e.seq LIMIT ?",
            (start, limit),
        )
    )
    # The newest event stays whatever it is: seq is max(seq) + 1, and a reused seq would
    # be skipped by a reader following the log (``events_after``).
    async with conn.execute("SELECT coalesce(max(seq), 0) FROM events") as cur:
        newest = int((await cur.fetchone() or (0,))[0])
    gone, counts, resume, done = plan_unmatched(
        rows, start=start, newest=newest, cutoff=cutoff, limit=limit
    )
    if gone:
        await conn.executemany(
            "INSERT INTO unmatched_counts (sensor, day, outcome, count, first_received_at,"
            " last_received_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (sensor, day, outcome)"
            " DO UPDATE SET count = count + excluded.count,"
            " first_received_at = min(first_received_at, excluded.first_received_at),"
            " last_received_at = max(last_received_at, excluded.last_received_at)",
            counts,
        )
        await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
        try:
            for part in _parts(gone):
                await conn.execute(f"DELETE FROM events WHERE seq IN {_in(len(part))}", part)
        finally:
            await conn.execute("DELETE FROM compaction_guard")
    if resume != start:
        await conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (UNMATCHED_KEY, str(resume)),
        )
    return len(rows), len(gone), done


async def _prune_dead_letters(
    conn: aiosqlite.Connection, cfg: CompactionConfig, now: float, limit: int
) -> int:
    """One bounded step of dead-letter pruning; returns how many rows went."""
    oldest = now - cfg.dead_letters_max_age.total_seconds()
    async with conn.execute(
        "DELETE FROM dead_letters WHERE id IN (SELECT id FROM dead_letters"
        " WHERE received_at < ? ORDER BY id LIMIT ?)",
        (oldest, limit),
    ) as cur:
        deleted = max(0, cur.rowcount)
    async with conn.execute(
        "DELETE FROM dead_letters WHERE id IN (SELECT id FROM dead_letters"
        " WHERE id <= (SELECT id FROM dead_letters ORDER BY id DESC LIMIT 1 OFFSET ?)"
        " ORDER BY id LIMIT ?)",
        (cfg.dead_letters_max_rows, limit),
    ) as cur:
        deleted += max(0, cur.rowcount)
    return deleted


async def _prune_revalidations(
    conn: aiosqlite.Connection, cfg: CompactionConfig, now: float, limit: int
) -> int:
    """One bounded step: requests over for longer than ``revalidations_max_age``."""
    oldest = now - cfg.revalidations_max_age.total_seconds()
    async with conn.execute(
        "DELETE FROM revalidations WHERE id IN (SELECT id FROM revalidations"
        " WHERE status NOT IN ('pending', 'sent') AND coalesce(finished_at, created_at) < ?"
        " LIMIT ?)",
        (oldest, limit),
    ) as cur:
        return max(0, cur.rowcount)


@dataclass(frozen=True, slots=True)
class CompactionSteps(Generic[C]):
    """A backend's steps of a compaction pass, each a function of a connection (a reader's
    for ``busy_blocks``, the writer's inside a job for the others)."""

    busy_blocks: Callable[[C], Awaitable[list[int]]]  # rids with 3 effects or more
    # (conn, rid, start, *, cutoff, limit, now) -> (resume at, window)
    block_window: Callable[..., Awaitable[tuple[int | None, Window]]]
    # (conn, *, cutoff, limit) -> (rows looked at, events deleted, done)
    unmatched: Callable[..., Awaitable[tuple[int, int, bool]]]
    dead_letters: Callable[[C, CompactionConfig, float, int], Awaitable[int]]
    revalidations: Callable[[C, CompactionConfig, float, int], Awaitable[int]]


class _Db(Protocol[C_co]):
    def read(self) -> AbstractAsyncContextManager[C_co]: ...

    async def write(self, job: Callable[[Any], Awaitable[T]], *, weight: int = 1) -> T: ...


async def _busy_blocks(conn: aiosqlite.Connection) -> list[int]:
    rows = await conn.execute_fetchall(
        "SELECT block_rid FROM effects GROUP BY block_rid HAVING count(*) >= 3"
    )
    return [int(r[0]) for r in rows]


SQLITE_STEPS: CompactionSteps[aiosqlite.Connection] = CompactionSteps(
    busy_blocks=_busy_blocks,
    block_window=_compact_block_window,
    unmatched=_compact_unmatched,
    dead_letters=_prune_dead_letters,
    revalidations=_prune_revalidations,
)


async def compact(db: Database, clock: Clock, cfg: CompactionConfig) -> CompactionReport:
    """One compaction pass over the whole event log, then the dead letters and the
    revalidation requests that are over."""
    return await run_compaction(db, clock, cfg, SQLITE_STEPS)


async def run_compaction(
    db: _Db[C], clock: Clock, cfg: CompactionConfig, steps: CompactionSteps[C]
) -> CompactionReport:
    """:func:`compact` with a backend's ``steps`` on its database (SQLite's or
    PostgreSQL's): each step is one writer job, so the writer is never held long."""
    submit, read = db.write, db.read
    report = CompactionReport()

    async def write(fn: Callable[[C], Awaitable[T]], *, weight: int) -> T:
        async def timed(conn: C) -> T:
            began = time.perf_counter()
            try:
                return await fn(conn)
            finally:
                report.max_job_s = max(report.max_job_s, time.perf_counter() - began)

        return await submit(timed, weight=weight)

    started = time.perf_counter()
    now = clock.time()
    cutoff = now - cfg.after.total_seconds()
    limit = cfg.window_rows
    async with read() as conn:
        rids = await steps.busy_blocks(conn)
    for rid in rids:
        report.blocks += 1
        start: int | None = 0
        while start is not None:

            async def job(conn: C, rid: int = rid, start: int = start) -> tuple[int | None, Window]:
                return await steps.block_window(
                    conn, rid, start, cutoff=cutoff, limit=limit, now=now
                )

            start, window = await write(job, weight=limit)
            report.jobs += 1
            report.runs += len(window.new_runs)
            report.effects_deleted += len(window.effects)
            report.events_deleted += window.events_deleted

    async def unmatched(conn: C) -> tuple[int, int, bool]:
        return await steps.unmatched(conn, cutoff=cutoff, limit=limit)

    while True:
        _, deleted_events, done = await write(unmatched, weight=limit)
        report.jobs += 1
        report.unmatched_deleted += deleted_events
        report.events_deleted += deleted_events
        if done:
            break

    async def prune(conn: C) -> int:
        return await steps.dead_letters(conn, cfg, now, limit)

    while True:
        deleted = await write(prune, weight=limit)
        report.jobs += 1
        report.dead_letters_deleted += deleted
        if deleted == 0:
            break

    async def finished(conn: C) -> int:
        return await steps.revalidations(conn, cfg, now, limit)

    while True:
        deleted = await write(finished, weight=limit)
        report.jobs += 1
        report.revalidations_deleted += deleted
        if deleted < limit:
            break
    report.duration_s = time.perf_counter() - started
    log.info("compaction_done", **report.as_dict())
    return report
