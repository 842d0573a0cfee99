"""Search: full-text matches (FTS5, BM25) re-ranked by freshness, reliability and
retention in one SQL statement, each hit with the factors and warnings behind it."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from memwarden.errors import ValidationInputError
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._fts import fts_query
from memwarden.memory._model import BlockState
from memwarden.memory._results import SearchHit
from memwarden.memory._sql import namespace_clause
from memwarden.memory._sqlrules import retention_sql
from memwarden.memory.policy import current_stale_reasons, effective_state

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy import PolicyConfig

__all__ = ["Search"]

_STALE = BlockState.STALE.value


class Search:
    """Ranked search over the blocks, and what a search hides."""

    def __init__(self, db: Database, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        include_refuted: bool = False,
        namespaces: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        """Blocks matching ``query`` (words, never FTS syntax), ranked by
        relevance x freshness x reliability x retention.

        Every word must match; when no block has them all, any word may (ranked by BM25,
        so blocks with more of them come first).
        BM25 picks the best ``ranking.candidates`` matches in one pass; only those are
        joined to their blocks and re-ranked, so ranking adds no second pass over every
        match. Archived blocks are not in the index; refuted ones only when asked.
        With ``namespaces``, only their blocks are candidates (another namespace's
        matches neither rank nor crowd out the caller's).
        """
        if not 1 <= limit <= 1000:
            raise ValidationInputError([("limit", f"{limit} is not between 1 and 1000")])
        match = fts_query(query)
        if match is None:
            return []
        now = self.clock.time()
        cfg = self.policy
        rank = cfg.ranking
        decay = cfg.decay
        scoped = None if namespaces is None else sorted(set(namespaces))
        sql = _search_sql(
            include_refuted=include_refuted, scoped=None if scoped is None else len(scoped)
        )
        params: dict[str, Any] = {
            "match": match,
            "cands": max(rank.candidates, limit),
            "now": now,
            "f_fresh": rank.fresh,
            "f_unverified": rank.unverified,
            "f_stale": rank.stale,
            "f_refuted": rank.refuted,
            "core_floor": decay.core_floor,
            "floor": decay.floor,
            "stale_factor": decay.stale_half_life_factor,
            "limit": limit,
        }
        for i, namespace in enumerate(scoped or ()):
            params[f"ns{i}"] = namespace
        # One statement: bindings and links come along. A search of a few blocks is
        # answered on the loop (Database.read_inline); a larger one on a reader.
        rows = await self._rows(sql, params)
        if not rows and " " in match:
            # No block has every word: fall back to any of them (still BM25-ranked,
            # so blocks with more of the words come first).
            params["match"] = fts_query(query, any_term=True)
            rows = await self._rows(sql, params)
        hits = []
        warn_below = cfg.staleness.warn_reliability
        for row in rows:
            relevance, freshness, reliability, retention, score, bound, deps = row[:7]
            rec = record_from_row(row[7:])
            state = effective_state(rec, now)
            hits.append(
                SearchHit(
                    record=rec,
                    state=state,
                    score=score,
                    relevance=relevance,
                    freshness=freshness,
                    reliability=reliability,
                    retention=retention,
                    stale=state == _STALE,
                    warnings=_warnings(rec, state, now, cfg, warn_below),
                    bindings_json=bound,
                    depends_json=deps,
                    now=now,
                    policy=cfg,
                )
            )
        return hits

    async def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        rows = self.db.read_inline(sql, params)
        if rows is None:
            async with self.db.read() as conn:
                rows = list(await conn.execute_fetchall(sql, params))
        return rows

    async def count_refuted_matches(
        self, query: str, *, namespaces: Sequence[str] | None = None
    ) -> int:
        """How many refuted blocks match ``query`` (what a search without them hides),
        among ``namespaces`` when given."""
        match = fts_query(query)
        if match is None:
            return 0
        scope, scope_args = namespace_clause(namespaces, column="b.namespace")
        sql = (
            "SELECT count(*) FROM blocks_fts f JOIN blocks b ON b.rid = f.rowid"
            f" WHERE blocks_fts MATCH ? AND b.state = 'refuted'{scope}"
        )
        async with self.db.read() as conn:
            [(count,)] = list(await conn.execute_fetchall(sql, (match, *scope_args)))
        return int(count)


def _warnings(
    rec: BlockRecord, state: str, now: float, cfg: PolicyConfig, warn_below: float
) -> list[str]:
    """What a reader should know about a hit (``state`` is the effective one)."""
    out = []
    if state == _STALE:
        why = ", ".join(current_stale_reasons(rec, now, cfg)) or "expired"
        if rec.stale_at is not None and rec.stale_at <= now:
            out.append(f"stale since {from_ts(rec.stale_at).isoformat()} ({why})")
        else:  # stale before its window ran out: a change, a refutation, a dependency
            out.append(f"stale ({why})")
    elif state == BlockState.REFUTED.value:
        out.append("refuted by a sensor: do not rely on it")
    elif state == BlockState.UNVERIFIED.value:
        out.append("unverified: no sensor has confirmed it yet")
    if rec.reliability < warn_below:
        out.append(f"reliability {rec.reliability:.2f} is below {warn_below:.2f}")
    if rec.flapping:
        out.append("flapping: sensors keep changing their minds")
    return out


@functools.cache
def _search_sql(*, include_refuted: bool, scoped: int | None = None) -> str:
    """The ranking statement of :meth:`Search.search` (built once per variant).

    ``scoped``: how many namespaces (``:ns0``, ``:ns1``, ...) the candidates are limited
    to; ``None``: every namespace, and the candidates come from the index alone.
    """
    states = (
        "('fresh','unverified','stale','refuted')"
        if include_refuted
        else ("('fresh','unverified','stale')")
    )
    if scoped is None:
        candidates = "FROM blocks_fts WHERE blocks_fts MATCH :match"
    else:
        names = ", ".join(f":ns{i}" for i in range(scoped)) or "NULL"
        # CROSS JOIN keeps the index first (SQLite never reorders it): the matches are
        # looked up by rowid, never the namespace's blocks probed against the index.
        candidates = (
            "FROM blocks_fts CROSS JOIN blocks nb ON nb.rid = blocks_fts.rowid"
            f" WHERE blocks_fts MATCH :match AND nb.namespace IN ({names})"
        )
    return f"""
            WITH cand AS MATERIALIZED (
                SELECT blocks_fts.rowid AS rid, -bm25(blocks_fts, 2.0, 1.0, 1.5) AS relevance
                {candidates}
                ORDER BY bm25(blocks_fts, 2.0, 1.0, 1.5) LIMIT :cands
            ), scored AS (
                SELECT b.rid AS rid, c.relevance,
                    CASE
                        WHEN b.state = 'refuted' THEN :f_refuted
                        WHEN b.state IN ('fresh', 'unverified')
                            AND (b.stale_at IS NULL OR b.stale_at > :now)
                            THEN CASE b.state WHEN 'fresh' THEN :f_fresh ELSE :f_unverified END
                        ELSE :f_stale
                    END AS freshness,
                    b.reliability,
                    {retention_sql("b")} AS retention
                FROM cand c JOIN blocks b ON b.rid = c.rid
                WHERE b.state IN {states}
            ), ranked AS MATERIALIZED (
                SELECT *, relevance * freshness * reliability * retention AS score
                FROM scored ORDER BY score DESC LIMIT :limit
            )
            SELECT s.relevance, s.freshness, s.reliability, s.retention, s.score,
                (SELECT json_group_array(json_array(g.sensor, g.subject, g.selector))
                 FROM bindings g WHERE g.block_rid = b.rid),
                (SELECT json_group_array(d.depends_on)
                 FROM dependencies d WHERE d.block_rid = b.rid),
                {", ".join("b." + c for c in BLOCK_COLUMNS)}
            FROM ranked s JOIN blocks b ON b.rid = s.rid
            ORDER BY s.score DESC
        """
