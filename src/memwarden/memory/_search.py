"""Search: full-text matches (FTS5, BM25) re-ranked by freshness, reliability and
retention in one SQL statement, each hit with the factors and warnings behind it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from memwarden.errors import ValidationInputError
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    binding_from_row,
    record_from_row,
    record_to_block,
)
from memwarden.memory._fts import fts_query
from memwarden.memory._model import Block, BlockState
from memwarden.memory._results import SearchHit
from memwarden.memory._sqlrules import retention_sql

if TYPE_CHECKING:
    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory.policy import PolicyConfig

__all__ = ["Search"]


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
    ) -> list[SearchHit]:
        """Blocks matching ``query`` (words, never FTS syntax), ranked by
        relevance x freshness x reliability x retention.

        Every word must match; when no block has them all, any word may (ranked by BM25,
        so blocks with more of them come first).
        BM25 picks the best ``ranking.candidates`` matches in one pass; only those are
        joined to their blocks and re-ranked, so ranking adds no second pass over every
        match. Archived blocks are not in the index; refuted ones only when asked.
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
        states = (
            "('fresh','unverified','stale','refuted')"
            if include_refuted
            else ("('fresh','unverified','stale')")
        )
        sql = f"""
            WITH cand AS MATERIALIZED (
                SELECT rowid AS rid, -bm25(blocks_fts, 2.0, 1.0, 1.5) AS relevance
                FROM blocks_fts WHERE blocks_fts MATCH :match
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
        params = {
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
        async with self.db.read() as conn:  # one round trip: bindings and links come along
            rows = list(await conn.execute_fetchall(sql, params))
            if not rows and " " in match:
                # No block has every word: fall back to any of them (still BM25-ranked,
                # so blocks with more of the words come first).
                params["match"] = fts_query(query, any_term=True)
                rows = list(await conn.execute_fetchall(sql, params))
        hits = []
        warn_below = cfg.staleness.warn_reliability
        for row in rows:
            relevance, freshness, reliability, retention, score, bound, deps = row[:7]
            rec = record_from_row(row[7:])
            block = record_to_block(
                rec,
                bindings=[binding_from_row(*b) for b in json.loads(bound)],
                now=now,
                cfg=cfg,
                retention=retention,
                depends_on=sorted(json.loads(deps)),
            )
            warnings = _warnings(block, now, warn_below)
            hits.append(
                SearchHit(
                    block=block,
                    score=score,
                    relevance=relevance,
                    freshness=freshness,
                    reliability=reliability,
                    retention=retention,
                    stale=block.state == BlockState.STALE,
                    warnings=warnings,
                )
            )
        return hits

    async def count_refuted_matches(self, query: str) -> int:
        """How many refuted blocks match ``query`` (what a search without them hides)."""
        match = fts_query(query)
        if match is None:
            return 0
        sql = (
            "SELECT count(*) FROM blocks_fts f JOIN blocks b ON b.rid = f.rowid"
            " WHERE blocks_fts MATCH ? AND b.state = 'refuted'"
        )
        async with self.db.read() as conn:
            [(count,)] = list(await conn.execute_fetchall(sql, (match,)))
        return int(count)


def _warnings(block: Block, now: float, warn_below: float) -> list[str]:
    out = []
    if block.state == BlockState.STALE:
        why = ", ".join(r.value for r in block.stale_reasons) or "expired"
        if block.stale_at is not None and block.stale_at.timestamp() <= now:
            out.append(f"stale since {block.stale_at.isoformat()} ({why})")
        else:  # stale before its window ran out: a change, a refutation, a dependency
            out.append(f"stale ({why})")
    elif block.state == BlockState.REFUTED:
        out.append("refuted by a sensor: do not rely on it")
    elif block.state == BlockState.UNVERIFIED:
        out.append("unverified: no sensor has confirmed it yet")
    rel = block.validation.reliability
    if rel < warn_below:
        out.append(f"reliability {rel:.2f} is below {warn_below:.2f}")
    if block.flapping:
        out.append("flapping: sensors keep changing their minds")
    return out
