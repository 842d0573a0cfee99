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

:func:`enforce` is one pass, written against the store's public methods and its
database (it combines archive, erase and the event-log delete), run by the daemon's
scheduler every ``[retention] interval`` (the injected clock decides "now").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from memwarden.memory._durations import Duration, format_duration
from memwarden.memory._erasure import MAX_ERASE
from memwarden.memory._model import Category, Tier
from memwarden.memory._sql import chunks, placeholders

if TYPE_CHECKING:
    import aiosqlite

    from memwarden.memory._store import Store

__all__ = ["RetentionConfig", "RetentionReport", "RetentionRule", "enforce"]

_ROWS = 2000  # effects read per writer job when deleting old events


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


def _where(rule: RetentionRule) -> tuple[str, list[Any]]:
    """The SQL condition (over ``blocks``) selecting the rule's blocks."""
    where: list[str] = []
    args: list[Any] = []
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
        where.append("EXISTS (SELECT 1 FROM json_each(blocks.tags) WHERE value = ?)")
        args.append(rule.tag)
    return (" AND ".join(where) or "1"), args


async def enforce(store: Store, cfg: RetentionConfig) -> RetentionReport:
    """One retention pass: archive, purge, delete old events and score-log lines."""
    started = time.perf_counter()
    report = RetentionReport()
    now = store.clock.time()
    for rule in cfg.rules:
        if rule.max_age is not None:
            report.archived += await _archive_old(store, rule, rule.max_age)
        if rule.archived_max_age is not None:
            await _purge_archived(store, rule, rule.archived_max_age, report)
        if rule.events_max_age is not None:
            await _delete_events(store, rule, now - _s(rule.events_max_age), report)
    if cfg.events_max_age is not None:
        await _delete_events(store, None, now - _s(cfg.events_max_age), report)
    if cfg.score_log_max_age is not None and store.score_log is not None:
        cutoff = now - _s(cfg.score_log_max_age)
        report.score_log_lines = await asyncio.to_thread(store.score_log.drop_before, cutoff)
    report.duration_s = time.perf_counter() - started
    return report


def _s(age: timedelta) -> float:
    return age.total_seconds()


async def _archive_old(store: Store, rule: RetentionRule, age: timedelta) -> int:
    cond, args = _where(rule)
    reason = f"retention: {rule.describe()}, max_age {format_duration(age)}"
    now = store.clock.time()
    cutoff = now - _s(age)

    async def job(conn: aiosqlite.Connection) -> int:
        rows = await conn.execute_fetchall(
            f"SELECT id FROM blocks WHERE state <> 'archived' AND created_at < ? AND {cond}",
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
            [(now, "retention", "archive", i, '{"reason": "retention"}') for i in ids],
        )
        return len(ids)

    return await store.db.write(job)


async def _purge_archived(
    store: Store, rule: RetentionRule, age: timedelta, report: RetentionReport
) -> None:
    cond, args = _where(rule)
    reason = f"retention: {rule.describe()}, archived_max_age {format_duration(age)}"
    cutoff = store.clock.time() - _s(age)
    while True:
        async with store.db.read() as conn:
            rows = await conn.execute_fetchall(
                "SELECT id FROM blocks WHERE state = 'archived' AND archived_at < ?"
                f" AND {cond} ORDER BY rid LIMIT ?",
                (cutoff, *args, MAX_ERASE),
            )
        ids = [str(r[0]) for r in rows]
        if not ids:
            return
        erased = await store.erase(ids, actor="retention", reason=reason)
        report.purged += len(erased.erased)
        report.purged_ids += erased.erased
        if len(ids) < MAX_ERASE:
            return


async def _delete_events(
    store: Store, rule: RetentionRule | None, cutoff: float, report: RetentionReport
) -> None:
    """Delete effects (of the rule's blocks, or of all) whose event was received before
    ``cutoff``, then the events no block's history holds any more (and, for the global
    setting, events that reached no block). The newest event always stays (its ``seq``
    is where the next one starts)."""
    cond, args = _where(rule) if rule is not None else ("1", [])

    async def job(conn: aiosqlite.Connection) -> tuple[int, int, bool]:
        async with conn.execute("SELECT coalesce(max(seq), 0) FROM events") as cur:
            newest = int((await cur.fetchone() or (0,))[0])
        pairs = list(
            await conn.execute_fetchall(
                "SELECT f.block_rid, f.event_seq FROM effects f"
                " JOIN events e ON e.seq = f.event_seq JOIN blocks ON blocks.rid = f.block_rid"
                f" WHERE e.received_at < ? AND e.seq < ? AND {cond} LIMIT ?",
                (cutoff, newest, *args, _ROWS),
            )
        )
        orphans: list[int] = []
        if rule is None:
            orphans = [
                int(r[0])
                for r in await conn.execute_fetchall(
                    "SELECT seq FROM events e WHERE received_at < ? AND seq < ? AND NOT EXISTS"
                    " (SELECT 1 FROM effects f WHERE f.event_seq = e.seq) LIMIT ?",
                    (cutoff, newest, _ROWS),
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
        return len(pairs), events, len(pairs) < _ROWS and len(orphans) < _ROWS

    while True:
        effects, events, done = await store.db.write(job, weight=_ROWS)
        report.effects_deleted += effects
        report.events_deleted += events
        if done:
            return
