"""Retention: how long blocks, archived blocks, events and score-log lines are kept.

Nothing is removed unless configured (``[retention]``). Each rule names blocks by tier,
category, source and tag (every filter given must match; none: every block) and says:

- ``max_age``: a live block created longer ago is archived (out of search, kept);
- ``archived_max_age``: a block archived longer ago is purged: erased for good, as
  ``memwarden forget`` does (:mod:`~memwarden.memory._erasure`), a tombstone with actor
  ``retention`` left;
- ``events_max_age``: the block's events (observations, messages) and their effects
  received longer ago are deleted. The block's current state, reliability and
  validation stay; only the history shrinks.

Top-level ``events_max_age`` applies to every event (those that reached no block too)
and ``score_log_max_age`` to the promotion score log's lines.

:func:`run` is one pass, written against a backend's three writes
(:class:`RetentionSteps`: archive, list archived blocks, delete old events) and its store's
erasure; :func:`enforce` runs it on the SQLite store (``pg/_retention.py`` has
PostgreSQL's steps). The daemon's scheduler runs it every ``[retention] interval`` (the
injected clock decides "now").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from memwarden.memory._durations import Duration, format_duration
from memwarden.memory._erasure import MAX_ERASE
from memwarden.memory._model import Category, Tier
from memwarden.memory._sql import chunks, placeholders

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._erasure import ErasureReport
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory._store import Store

__all__ = [
    "ARCHIVE_DETAIL",
    "RetentionConfig",
    "RetentionReport",
    "RetentionRule",
    "RetentionSteps",
    "archive_reason",
    "enforce",
    "purge_reason",
    "rule_where",
    "run",
]

_ROWS = 2000  # effects read per writer job when deleting old events
ARCHIVE_DETAIL = '{"reason": "retention"}'  # the audit row's detail of a retention archive


class RetentionRule(BaseModel):
    """One ``[[retention.rules]]`` entry: which blocks, and how long each part is kept."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Tier | None = None
    category: Category | None = None
    source: Annotated[str | None, Field(min_length=1, max_length=64)] = None
    tag: Annotated[str | None, Field(min_length=1, max_length=64)] = None
    max_age: Duration | None = Field(
        default=None, description="Live blocks created longer ago are archived."
    )
    archived_max_age: Duration | None = Field(
        default=None, description="Blocks archived longer ago are erased for good."
    )
    events_max_age: Duration | None = Field(
        default=None, description="These blocks' events received longer ago are deleted."
    )

    def describe(self) -> str:
        parts = [
            f"{k}={v.value if hasattr(v, 'value') else v}"
            for k, v in (
                ("tier", self.tier),
                ("category", self.category),
                ("source", self.source),
                ("tag", self.tag),
            )
            if v is not None
        ]
        return " ".join(parts) or "every block"


class RetentionConfig(BaseModel):
    """``[retention]``: nothing is removed unless configured here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: Duration = Field(
        default=timedelta(hours=1), description="How often the retention pass runs."
    )
    rules: tuple[RetentionRule, ...] = ()
    events_max_age: Duration | None = Field(
        default=None, description="Every event received longer ago is deleted."
    )
    score_log_max_age: Duration | None = Field(
        default=None, description="Score-log lines written longer ago are dropped."
    )

    @property
    def active(self) -> bool:
        """Whether anything is configured at all (else the pass is not scheduled)."""
        return bool(
            self.events_max_age is not None
            or self.score_log_max_age is not None
            or any(
                r.max_age is not None
                or r.archived_max_age is not None
                or r.events_max_age is not None
                for r in self.rules
            )
        )


@dataclass(slots=True)
class RetentionReport:
    """What one retention pass removed."""

    archived: int = 0
    purged: int = 0
    events_deleted: int = 0
    effects_deleted: int = 0
    score_log_lines: int = 0
    duration_s: float = 0.0
    purged_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "archived": self.archived,
            "purged": self.purged,
            "events_deleted": self.events_deleted,
            "effects_deleted": self.effects_deleted,
            "score_log_lines": self.score_log_lines,
            "duration_s": round(self.duration_s, 3),
        }

    @property
    def removed(self) -> dict[str, int]:
        """Counts by kind (what the daemon's counter adds)."""
        return {
            "archived": self.archived,
            "purged": self.purged,
            "events": self.events_deleted,
            "effects": self.effects_deleted,
            "score_log_lines": self.score_log_lines,
        }


TAG_JSON_EACH = "EXISTS (SELECT 1 FROM json_each(blocks.tags) WHERE value = ?)"


def rule_where(rule: RetentionRule | None, *, tag: str = TAG_JSON_EACH) -> tuple[str, list[Any]]:
    """The SQL condition (over ``blocks``, ``?`` parameters) selecting the rule's blocks
    (every block for None); ``tag`` is the backend's test of one tag."""
    where: list[str] = []
    args: list[Any] = []
    if rule is None:
        return "TRUE", args
    if rule.tier is not None:
        where.append("blocks.tier = ?")
        args.append(rule.tier.value)
    if rule.category is not None:
        where.append("blocks.category = ?")
        args.append(rule.category.value)
    if rule.source is not None:
        where.append("blocks.source = ?")
        args.append(rule.source)
    if rule.tag is not None:
        where.append(tag)
        args.append(rule.tag)
    return (" AND ".join(where) or "TRUE"), args


def archive_reason(rule: RetentionRule, age: timedelta) -> str:
    return f"retention: {rule.describe()}, max_age {format_duration(age)}"


def purge_reason(rule: RetentionRule, age: timedelta) -> str:
    return f"retention: {rule.describe()}, archived_max_age {format_duration(age)}"


class RetentionSteps(Protocol):
    """The three writes a retention pass is made of, in one backend's SQL."""

    async def archive_old(self, rule: RetentionRule, cutoff: float, now: float, reason: str) -> int:
        """Archive the rule's live blocks created before ``cutoff``, with ``reason``, an
        audit row each (actor ``retention``); how many."""
        ...

    async def archived_ids(self, rule: RetentionRule, cutoff: float, limit: int) -> list[str]:
        """Up to ``limit`` of the rule's blocks archived before ``cutoff``, by rid."""
        ...

    async def delete_events(
        self, rule: RetentionRule | None, cutoff: float, rows: int
    ) -> tuple[int, int, bool]:
        """One step of deleting old events: (effects deleted, events deleted, done)."""
        ...


async def enforce(store: Store, cfg: RetentionConfig) -> RetentionReport:
    """One retention pass on the SQLite store: archive, purge, delete old events and
    score-log lines."""
    return await run(
        cfg,
        steps=_SqliteSteps(store.db),
        clock=store.clock,
        erase=store.erase,
        score_log=store.score_log,
    )


async def run(
    cfg: RetentionConfig,
    *,
    steps: RetentionSteps,
    clock: Clock,
    erase: Callable[..., Awaitable[ErasureReport]],
    score_log: ScoreLog | None,
) -> RetentionReport:
    """One retention pass over any backend: ``steps`` are its SQL, ``erase`` its store's
    erasure (called as ``erase(ids, actor=, reason=)``)."""
    started = time.perf_counter()
    report = RetentionReport()
    now = clock.time()
    for rule in cfg.rules:
        if rule.max_age is not None:
            cutoff = now - _s(rule.max_age)
            reason = archive_reason(rule, rule.max_age)
            report.archived += await steps.archive_old(rule, cutoff, now, reason)
        if rule.archived_max_age is not None:
            await _purge_archived(steps, erase, rule, clock, rule.archived_max_age, report)
        if rule.events_max_age is not None:
            await _delete_events(steps, rule, now - _s(rule.events_max_age), report)
    if cfg.events_max_age is not None:
        await _delete_events(steps, None, now - _s(cfg.events_max_age), report)
    if cfg.score_log_max_age is not None and score_log is not None:
        cutoff = now - _s(cfg.score_log_max_age)
        report.score_log_lines = await asyncio.to_thread(score_log.drop_before, cutoff)
    report.duration_s = time.perf_counter() - started
    return report


def _s(age: timedelta) -> float:
    return age.total_seconds()


async def _purge_archived(  # noqa: PLR0917 - the pass's pieces, in one place
    steps: RetentionSteps,
    erase: Callable[..., Awaitable[ErasureReport]],
    rule: RetentionRule,
    clock: Clock,
    age: timedelta,
    report: RetentionReport,
) -> None:
    reason = purge_reason(rule, age)
    cutoff = clock.time() - _s(age)
    while True:
        ids = await steps.archived_ids(rule, cutoff, MAX_ERASE)
        if not ids:
            return
        erased = await erase(ids, actor="retention", reason=reason)
        report.purged += len(erased.erased)
        report.purged_ids += erased.erased
        if len(ids) < MAX_ERASE:
            return


async def _delete_events(
    steps: RetentionSteps, rule: RetentionRule | None, cutoff: float, report: RetentionReport
) -> None:
    """Delete effects (of the rule's blocks, or of all) whose event was received before
    ``cutoff``, then the events no block's history holds any more (and, for the global
    setting, events that reached no block). The newest event always stays (its ``seq``
    is where the next one starts)."""
    while True:
        effects, events, done = await steps.delete_events(rule, cutoff, _ROWS)
        report.effects_deleted += effects
        report.events_deleted += events
        if done:
            return


class _SqliteSteps:
    """:class:`RetentionSteps` on the SQLite store's database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def archive_old(self, rule: RetentionRule, cutoff: float, now: float, reason: str) -> int:
        cond, args = rule_where(rule)

        async def job(conn: aiosqlite.Connection) -> int:
            rows = await conn.execute_fetchall(
                "SELECT id FROM blocks WHERE state <> 'archived' AND created_at < ?"
                f" AND {cond} ORDER BY rid",
                (cutoff, *args),
            )
            ids = [str(r[0]) for r in rows]
            for part in chunks(ids):
                await conn.execute(
                    "UPDATE blocks SET state = 'archived', archived_at = ?, archive_reason = ?,"
                    f" updated_at = ? WHERE id IN {placeholders(len(part))}",
                    (now, reason, now, *part),
                )
            await conn.executemany(
                "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?,?,?,?,?)",
                [(now, "retention", "archive", i, ARCHIVE_DETAIL) for i in ids],
            )
            return len(ids)

        return await self.db.write(job)

    async def archived_ids(self, rule: RetentionRule, cutoff: float, limit: int) -> list[str]:
        cond, args = rule_where(rule)
        async with self.db.read() as conn:
            rows = await conn.execute_fetchall(
                "SELECT id FROM blocks WHERE state = 'archived' AND archived_at < ?"
                f" AND {cond} ORDER BY rid LIMIT ?",
                (cutoff, *args, limit),
            )
        return [str(r[0]) for r in rows]

    async def delete_events(
        self, rule: RetentionRule | None, cutoff: float, rows: int
    ) -> tuple[int, int, bool]:
        cond, args = rule_where(rule)

        async def job(conn: aiosqlite.Connection) -> tuple[int, int, bool]:
            async with conn.execute("SELECT coalesce(max(seq), 0) FROM events") as cur:
                newest = int((await cur.fetchone() or (0,))[0])
            pairs = list(
                await conn.execute_fetchall(
                    "SELECT f.block_rid, f.event_seq FROM effects f"
                    " JOIN events e ON e.seq = f.event_seq JOIN blocks ON blocks.rid = f.block_rid"
                    f" WHERE e.received_at < ? AND e.seq < ? AND {cond} LIMIT ?",
                    (cutoff, newest, *args, rows),
                )
            )
            orphans: list[int] = []
            if rule is None:
                orphans = [
                    int(r[0])
                    for r in await conn.execute_fetchall(
                        "SELECT seq FROM events e WHERE received_at < ? AND seq < ? AND NOT EXISTS"
                        " (SELECT 1 FROM effects f WHERE f.event_seq = e.seq) LIMIT ?",
                        (cutoff, newest, rows),
                    )
                ]
            if not pairs and not orphans:
                return 0, 0, True
            await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
            try:
                await conn.executemany(
                    "DELETE FROM effects WHERE block_rid = ? AND event_seq = ?", pairs
                )
                # A compacted run ending at a deleted event goes with it.
                await conn.executemany(
                    "DELETE FROM event_runs WHERE block_rid = ? AND last_seq = ?", pairs
                )
                seqs = sorted({int(p[1]) for p in pairs} | set(orphans))
                events = 0
                for part in chunks(seqs):
                    async with conn.execute(
                        f"DELETE FROM events WHERE seq IN {placeholders(len(part))}"
                        " AND NOT EXISTS (SELECT 1 FROM effects WHERE event_seq = events.seq)",
                        part,
                    ) as cur:
                        events += max(0, cur.rowcount)
            finally:
                await conn.execute("DELETE FROM compaction_guard")
            return len(pairs), events, len(pairs) < rows and len(orphans) < rows

        return await self.db.write(job, weight=rows)
