"""The rest of the store's everyday calls on PostgreSQL: dead letters, the MQTT outbox,
agents' high-water marks, counting retrievals (the core rule), the health report and
what a search hides.

The same contract as on SQLite (:mod:`~memwarden.memory._outbox`,
:func:`~memwarden.memory._promotion.record_accesses`,
:func:`~memwarden.memory._explain.health`, ``Search.count_refuted_matches``, ``EventLog.
dead_letter``): the rules are the shared ones (:func:`~memwarden.memory.policy.
record_access`, :func:`~memwarden.memory.policy.health_report`); only the SQL differs.
``tests/pg/test_misc_contract.py`` runs one script on both backends and holds the
answers and rows equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwarden.memory._explain import health_from_counts
from memwarden.memory._outbox import DROPPED_KEY, OutboxMessage, OutboxStats
from memwarden.memory._promotion import (
    _ACCESS_COLUMNS,
    _access_record,
    count_accesses,
    tell_core_promotions,
)
from memwarden.memory._sql import one_row
from memwarden.memory.pg._reads import storable

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._compaction import CompactionConfig
    from memwarden.memory._record import BlockRecord
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import HealthReport, PolicyConfig

__all__ = ["PgMisc"]


_DEAD_LETTER_INSERT = (
    "INSERT INTO dead_letters (received_at, source, reason, payload) VALUES ($1, $2, $3, $4)"
)
_DEAD_LETTERS_CAP = "DELETE FROM dead_letters WHERE id <= (SELECT max(id) FROM dead_letters) - $1"

# Twin of _sqlrules.retention_sql with $1 now, $2 floor, $3 core floor, $4 stale factor.
# The exponent is clamped at -900: PostgreSQL raises on a float underflow where SQLite
# gives 0 (2^-900 times any importance is far below every floor).
_TOUCHED = (
    "greatest(b.created_at, coalesce(b.validated_at, b.created_at),"
    " coalesce(b.last_accessed_at, b.created_at))"
)
_STALE = (
    "(b.state = 'stale' OR (b.state IN ('fresh', 'unverified')"
    " AND coalesce(b.stale_at <= $1, false)))"
)
_HALF_LIFE = f"(b.half_life_s * CASE WHEN {_STALE} THEN $4::float8 ELSE 1.0 END)"
_RETENTION = (
    "greatest(CASE WHEN b.tier = 'core' THEN $3::float8 ELSE $2::float8 END,"
    f" CASE WHEN $1::float8 <= {_TOUCHED} THEN b.importance"
    f" WHEN {_HALF_LIFE} <= 0.0 THEN 0.0"
    f" ELSE b.importance * power(2.0::float8, greatest(({_TOUCHED} - $1) / {_HALF_LIFE},"
    " -900.0)) END)"
)


class PgMisc:
    """Dead letters, outbox, high-water marks, retrievals, health and hidden matches on a
    :class:`PgDatabase`."""

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

    # ------------------------------------------------------------------ dead letters

    async def dead_letter(self, *, source: str, reason: str, payload: str | bytes) -> None:
        """Keep a rejected input with the reason (never applied)."""
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        data = text[:65536].encode("utf-8", "replace")
        now = self.clock.time()
        cfg = self.compaction
        cap = cfg.dead_letters_max_rows if cfg is not None and cfg.enabled else None

        async def job(conn: PgConnection) -> None:
            await conn.execute(_DEAD_LETTER_INSERT, now, source, reason, data)
            if cap is not None:
                await conn.execute(_DEAD_LETTERS_CAP, cap)

        await self.db.write(job)

    # ------------------------------------------------------------------ outbox

    async def outbox_put(
        self, messages: Sequence[tuple[str, bytes, int, bool]], *, max_rows: int
    ) -> int:
        """Append ``(topic, payload, qos, retain)`` messages; how many old ones it dropped."""
        if not messages:
            return 0
        now = self.clock.time()
        rows = [
            (now, topic, bytes(data), qos, int(retain)) for topic, data, qos, retain in messages
        ]

        async def job(conn: PgConnection) -> int:
            await conn.executemany(
                "INSERT INTO outbox (created_at, topic, payload, qos, retain)"
                " VALUES ($1, $2, $3, $4, $5)",
                rows,
            )
            total = int(await conn.fetchval("SELECT count(*) FROM outbox"))
            excess = total - max_rows
            if excess <= 0:
                return 0
            await conn.execute(
                "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT $1)",
                excess,
            )
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE"
                " SET value = (meta.value::bigint + $3)::text",
                DROPPED_KEY,
                str(excess),
                excess,
            )
            return excess

        return await self.db.write(job)

    async def outbox_peek(self, *, limit: int = 500) -> list[OutboxMessage]:
        """The oldest waiting messages, in the order they were put."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT id, topic, payload, qos, retain FROM outbox ORDER BY id LIMIT $1", limit
            )
        return [
            OutboxMessage(
                id=int(r[0]), topic=r[1], payload=bytes(r[2]), qos=int(r[3]), retain=bool(r[4])
            )
            for r in rows
        ]

    async def outbox_delete(self, ids: Sequence[int]) -> None:
        """Forget messages that were published."""
        if not ids:
            return
        keys = [int(i) for i in ids]

        async def job(conn: PgConnection) -> None:
            await conn.execute("DELETE FROM outbox WHERE id = ANY($1::bigint[])", keys)

        await self.db.write(job)

    async def outbox_stats(self) -> OutboxStats:
        """How many messages wait, how many were ever dropped."""
        async with self.db.read() as conn:
            row = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM outbox), (SELECT value FROM meta WHERE key = $1)",
                DROPPED_KEY,
            )
        row = one_row(row, "the outbox's counts")  # a SELECT without FROM has one row
        return OutboxStats(queued=int(row[0]), dropped=int(row[1] or 0))

    async def agent_high_water(self, agents: Sequence[str]) -> dict[str, int]:
        """The highest sequence number stored for each agent run (absent: none stored)."""
        if not agents:
            return {}
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT a.agent, (SELECT max(agent_seq) FROM events WHERE agent = a.agent)"
                " FROM unnest($1::text[]) AS a(agent)",
                storable(dict.fromkeys(agents)),
            )
        return {str(agent): int(seq) for agent, seq in rows if seq is not None}

    # ------------------------------------------------------------------ retrievals

    async def record_access(
        self,
        block_ids: Sequence[str],
        *,
        session: str | None = None,
        score_log: ScoreLog | None = None,
    ) -> list[str]:
        """Count one retrieval of each block (the core rule); the ids promoted to core.

        In one writer job, as on SQLite: an ``accesses`` row per retrieval, the ``(block,
        session)`` pair upserted, :func:`policy.record_access` on each block, the access
        columns (and tier) written back; promotions audited and score-logged."""
        ids = list(block_ids)
        if not ids:
            return []
        now = self.clock.time()
        cfg = self.policy
        select = f"SELECT {', '.join(_ACCESS_COLUMNS)} FROM blocks WHERE id = ANY($1::text[])"

        async def job(conn: PgConnection) -> list[BlockRecord]:
            unique = storable(dict.fromkeys(ids))
            records = {
                row[1]: _access_record(tuple(row)) for row in await conn.fetch(select, unique)
            }
            seen: set[str] = set()
            if session is not None:
                seen = {
                    r[0]
                    for r in await conn.fetch(
                        "SELECT block_id FROM sessions WHERE session_id = $1"
                        " AND block_id = ANY($2::text[])",
                        session,
                        unique,
                    )
                }
            writes = count_accesses(ids, records, seen, session=session, now=now, cfg=cfg)
            if not writes.accesses:
                return []
            await conn.executemany(
                "INSERT INTO accesses (block_id, session_id, at) VALUES ($1, $2, $3)",
                writes.accesses,
            )
            if writes.sessions:
                await conn.executemany(
                    "INSERT INTO sessions (block_id, session_id, first_at, last_at, count)"
                    " VALUES ($1, $2, $3, $4, 1) ON CONFLICT (block_id, session_id) DO UPDATE"
                    " SET last_at = greatest(sessions.last_at, excluded.last_at),"
                    " count = sessions.count + 1",
                    writes.sessions,
                )
            await conn.executemany(
                "UPDATE blocks SET access_count = $1, recent_access_count = $2,"
                " last_accessed_at = $3, session_count = $4, stability = $5, tier = $6"
                " WHERE rid = $7",
                writes.blocks,
            )
            if writes.audits:
                await conn.executemany(
                    "INSERT INTO audit (at, actor, action, block_id, detail)"
                    " VALUES ($1, $2, $3, $4, $5)",
                    writes.audits,
                )
            return writes.promoted

        promoted: list[BlockRecord] = await self.db.write(job)
        await tell_core_promotions(promoted, cfg=cfg, now=now, score_log=score_log)
        return [r.id for r in promoted]

    # ------------------------------------------------------------------ health

    async def health(
        self,
        *,
        failing_sensors: Iterable[str] = (),
        sensors_total: int = 0,
        namespaces: Sequence[str] | None = None,
    ) -> HealthReport:
        """The health report from two aggregate queries (over ``namespaces``' blocks and
        their pending work only, when given)."""
        cfg = self.policy
        now = self.clock.time()
        decay = cfg.decay
        args: list[Any] = [now, decay.floor, decay.core_floor, decay.stale_half_life_factor]
        names = sorted(set(storable(namespaces))) if namespaces is not None else None
        scope = owned = ""
        if names is not None:
            scope = " AND b.namespace = ANY($5::text[])"
            owned = " AND block_id IN (SELECT id FROM blocks WHERE namespace = ANY($1::text[]))"
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT eff, count(*), sum(kept)::float8, sum(access_count)::float8,"
                " sum(flapping)::bigint FROM ("
                " SELECT CASE WHEN b.state IN ('fresh', 'unverified') AND b.stale_at <= $1"
                f" THEN 'stale' ELSE b.state END AS eff, {_RETENTION} AS kept,"
                " b.access_count AS access_count, b.flapping AS flapping"
                f" FROM blocks b WHERE b.state <> 'archived'{scope}) s GROUP BY eff",
                *args,
                *([names] if names is not None else []),
            )
            pending = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM revalidations WHERE status IN ('pending', 'sent')"
                f"{owned}), (SELECT count(*) FROM reviews WHERE status = 'pending'{owned})",
                *([names] if names is not None else []),
            )
        backlog, reviews = pending if pending is not None else (0, 0)
        return health_from_counts(
            rows,
            backlog=backlog,
            reviews=reviews,
            failing_sensors=failing_sensors,
            sensors_total=sensors_total,
            cfg=cfg,
        )
