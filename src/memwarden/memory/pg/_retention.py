"""Retention's three writes on PostgreSQL (:class:`~memwarden.memory._retention.RetentionSteps`).

The pass itself (:func:`~memwarden.memory._retention.run`: which rule does what, the
purge through the store's erasure, the score log) is the SQLite store's; so is the rule's
condition over ``blocks`` (:func:`~memwarden.memory._retention.rule_where`), with a tag
tested by ``jsonb_exists`` (SQLite: ``json_each``) and ``?`` turned into ``$n`` by
:func:`~memwarden.memory.pg._apply.pg_sql`. Deleting old events lifts the append-only
triggers with the guard row, as on SQLite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwarden.memory._retention import ARCHIVE_DETAIL, rule_where
from memwarden.memory.pg._apply import pg_sql

if TYPE_CHECKING:
    from memwarden.memory._retention import RetentionRule
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["TAG_JSONB", "PgRetentionSteps"]

TAG_JSONB = "jsonb_exists(blocks.tags::jsonb, ?)"  # jsonb's ? operator, as a function


def _rows(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


class PgRetentionSteps:
    """Archive old blocks, list archived ones, delete old events: on a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def archive_old(self, rule: RetentionRule, cutoff: float, now: float, reason: str) -> int:
        cond, args = rule_where(rule, tag=TAG_JSONB)
        select = pg_sql(
            "SELECT id FROM blocks WHERE state <> 'archived' AND created_at < ?"
            f" AND {cond} ORDER BY rid"
        )

        async def job(conn: PgConnection) -> int:
            ids = [str(r[0]) for r in await conn.fetch(select, cutoff, *args)]
            if ids:
                await conn.execute(
                    "UPDATE blocks SET state = 'archived', archived_at = $1,"
                    " archive_reason = $2, updated_at = $1 WHERE id = ANY($3::text[])",
                    now,
                    reason,
                    ids,
                )
                await conn.executemany(
                    "INSERT INTO audit (at, actor, action, block_id, detail)"
                    " VALUES ($1, $2, $3, $4, $5)",
                    [(now, "retention", "archive", i, ARCHIVE_DETAIL) for i in ids],
                )
            return len(ids)

        return await self.db.write(job)

    async def archived_ids(self, rule: RetentionRule, cutoff: float, limit: int) -> list[str]:
        cond, args = rule_where(rule, tag=TAG_JSONB)
        async with self.db.read() as conn:
            rows = await conn.fetch(
                pg_sql(
                    "SELECT id FROM blocks WHERE state = 'archived' AND archived_at < ?"
                    f" AND {cond} ORDER BY rid LIMIT ?"
                ),
                cutoff,
                *args,
                limit,
            )
        return [str(r[0]) for r in rows]

    async def delete_events(
        self, rule: RetentionRule | None, cutoff: float, rows: int
    ) -> tuple[int, int, bool]:
        cond, args = rule_where(rule, tag=TAG_JSONB)
        select = pg_sql(
            "SELECT f.block_rid, f.event_seq FROM effects f"
            " JOIN events e ON e.seq = f.event_seq JOIN blocks ON blocks.rid = f.block_rid"
            f" WHERE e.received_at < ? AND e.seq < ? AND {cond}"
            " ORDER BY f.block_rid, f.event_seq LIMIT ?"
        )

        async def job(conn: PgConnection) -> tuple[int, int, bool]:
            newest = int(await conn.fetchval("SELECT coalesce(max(seq), 0) FROM events"))
            pairs = [
                (int(r[0]), int(r[1]))
                for r in await conn.fetch(select, cutoff, newest, *args, rows)
            ]
            orphans: list[int] = []
            if rule is None:
                orphans = [
                    int(r[0])
                    for r in await conn.fetch(
                        "SELECT seq FROM events e WHERE received_at < $1 AND seq < $2 AND NOT"
                        " EXISTS (SELECT 1 FROM effects f WHERE f.event_seq = e.seq)"
                        " ORDER BY seq LIMIT $3",
                        cutoff,
                        newest,
                        rows,
                    )
                ]
            if not pairs and not orphans:
                return 0, 0, True
            rids = [p[0] for p in pairs]
            seqs_of_pairs = [p[1] for p in pairs]
            # No try/finally: a failed statement aborts the transaction, guard row and all.
            await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
            await conn.execute(
                "DELETE FROM effects WHERE (block_rid, event_seq) IN"
                " (SELECT * FROM unnest($1::bigint[], $2::bigint[]))",
                rids,
                seqs_of_pairs,
            )
            # A compacted run ending at a deleted event goes with it.
            await conn.execute(
                "DELETE FROM event_runs WHERE (block_rid, last_seq) IN"
                " (SELECT * FROM unnest($1::bigint[], $2::bigint[]))",
                rids,
                seqs_of_pairs,
            )
            events = _rows(
                await conn.execute(
                    "DELETE FROM events WHERE seq = ANY($1::bigint[])"
                    " AND NOT EXISTS (SELECT 1 FROM effects WHERE event_seq = events.seq)",
                    sorted(set(seqs_of_pairs) | set(orphans)),
                )
            )
            await conn.execute("DELETE FROM compaction_guard")
            return len(pairs), events, len(pairs) < rows and len(orphans) < rows

        return await self.db.write(job, weight=rows)
