"""Keyword search on PostgreSQL: the generated ``search`` column, ``ts_rank_cd``, then
the same re-ranking by freshness x reliability x retention as on SQLite.

What is the same as :class:`~memwarden.memory._search.Search` (keyword mode): the query
is words, never syntax (:func:`~memwarden.memory._fts.query_terms`); every word must
match, and when no block has them all any word may; archived blocks are not in the
index, refuted ones only when asked; ``namespaces`` limit the candidates; the best
``ranking.candidates`` matches by text relevance are re-ranked by relevance x freshness
x reliability x retention and come back as the same :class:`SearchHit`, warnings and all.

What differs, and why: **relevance is ``ts_rank_cd``** (cover density, with weights in
the ratios of SQLite's ``bm25(blocks_fts, 2.0, 1.0, 1.5)``: title 2, content 1, tags 1.5),
not BM25: PostgreSQL's full text has no corpus statistics (no inverse document frequency), so
a rare word does not weigh more than a common one, and the scores are on another scale.
Orderings agree where one block is clearly the better match; they may differ between
blocks of similar text. Freshness, reliability and retention are computed by the rules
in :mod:`memwarden.memory.policy` on the candidates (SQLite computes the same in SQL).
Vector and hybrid modes are not ported yet.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memwarden.errors import ValidationInputError
from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._fts import query_terms
from memwarden.memory._model import BlockState
from memwarden.memory._results import SearchHit
from memwarden.memory._search import _warnings
from memwarden.memory.policy import effective_state, retention

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = ["CONFIG", "RANK_WEIGHTS", "WORDS", "PgSearch"]

# ts_rank_cd's weights for {D, C, B, A}, each at most 1: SQLite's title 2.0, content 1.0,
# tags 1.5, halved (the ratios are what ranks). Normalisation 32 (rank / (rank + 1))
# keeps relevance in 0..1 (docs/SCALE.md).
RANK_WEIGHTS = "{0.0, 0.75, 0.5, 1.0}"
CONFIG = "memwarden_search"
# The query's words as the index saw the block's: the same punctuation-to-space rule.
WORDS = "regexp_replace($1, '[!-/:-@\\[-`{-~]+', ' ', 'g')"
_LIVE = ("fresh", "unverified", "stale")


def _tsquery(lexemes: Sequence[str], *, any_term: bool) -> str:
    """A tsquery text of quoted lexemes (each already normalised by the configuration)."""
    quoted = ["'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes]
    return (" | " if any_term else " & ").join(quoted)


class PgSearch:
    """Ranked keyword search over the blocks of a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
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
        mode: str | None = None,
    ) -> list[SearchHit]:
        """Blocks matching ``query``, ranked by relevance x freshness x reliability x
        retention (see the module docstring for how relevance differs from SQLite's)."""
        if not 1 <= limit <= 1000:
            raise ValidationInputError([("limit", f"{limit} is not between 1 and 1000")])
        if mode not in (None, "keyword"):
            raise ValidationInputError(
                [("mode", f"{mode!r} is not available on PostgreSQL yet (keyword only)")]
            )
        terms = query_terms(query)
        if not terms:
            return []
        now = self.clock.time()
        states = [*_LIVE, BlockState.REFUTED.value] if include_refuted else list(_LIVE)
        cands = max(self.policy.ranking.candidates, limit)
        async with self.db.read() as conn:
            lexemes = await self._lexemes(conn, " ".join(terms))
            if not lexemes:
                return []
            rows = await self._candidates(
                conn, _tsquery(lexemes, any_term=False), states, namespaces, cands
            )
            if not rows and len(lexemes) > 1:
                rows = await self._candidates(
                    conn, _tsquery(lexemes, any_term=True), states, namespaces, cands
                )
        return self._ranked(rows, now, limit)

    @staticmethod
    async def _lexemes(conn: PgConnection, text: str) -> list[str]:
        found = await conn.fetchval(
            f"SELECT tsvector_to_array(to_tsvector('{CONFIG}', {WORDS}))", text
        )
        return list(found or [])

    @staticmethod
    async def _candidates(
        conn: PgConnection,
        tsquery: str,
        states: list[str],
        namespaces: Sequence[str] | None,
        cands: int,
    ) -> list[tuple[float, str, str, tuple[Any, ...]]]:
        scope = "" if namespaces is None else " AND b.namespace = ANY($4::text[])"
        args: list[object] = [tsquery, states, cands]
        if namespaces is not None:
            args.append(sorted(set(namespaces)))
        rows = await conn.fetch(
            f"""
            SELECT ts_rank_cd('{RANK_WEIGHTS}', b.search, q, 32) AS relevance,
                coalesce((SELECT json_agg(json_build_array(g.sensor, g.subject, g.selector)
                                          ORDER BY g.id)
                          FROM bindings g WHERE g.block_rid = b.rid)::text, '[]'),
                coalesce((SELECT json_agg(d.depends_on ORDER BY d.depends_on)
                          FROM dependencies d WHERE d.block_rid = b.rid)::text, '[]'),
                {", ".join("b." + c for c in BLOCK_COLUMNS)}
            FROM blocks b, CAST($1 AS tsquery) AS q
            WHERE b.search @@ q AND b.state <> 'archived' AND b.state = ANY($2::text[]){scope}
            ORDER BY relevance DESC, b.rid LIMIT $3
            """,
            *args,
        )
        return [(float(r[0]), str(r[1]), str(r[2]), tuple(r)[3:]) for r in rows]

    def _ranked(
        self, rows: list[tuple[float, str, str, tuple[Any, ...]]], now: float, limit: int
    ) -> list[SearchHit]:
        cfg = self.policy
        rank = cfg.ranking
        warn_below = cfg.staleness.warn_reliability
        factor = {
            BlockState.FRESH.value: rank.fresh,
            BlockState.UNVERIFIED.value: rank.unverified,
            BlockState.STALE.value: rank.stale,
            BlockState.REFUTED.value: rank.refuted,
        }
        hits = []
        for relevance, bound, deps, columns in rows:
            rec = record_from_row(columns)  # the freshness rules read the record here
            state = effective_state(rec, now)
            freshness = factor[state]
            kept = retention(rec, now, cfg)
            hits.append(
                SearchHit(
                    columns=columns,
                    state=state,
                    score=relevance * freshness * rec.reliability * kept,
                    relevance=relevance,
                    freshness=freshness,
                    reliability=rec.reliability,
                    retention=kept,
                    stale=state == BlockState.STALE.value,
                    warnings=_warnings(columns, state, now, cfg, warn_below)[0],
                    bindings_json=bound,
                    depends_json=json.dumps(json.loads(deps)),
                    now=now,
                    policy=cfg,
                    parts={},
                    _record=[rec],
                )
            )
        hits.sort(key=lambda h: h.score, reverse=True)
        return hits[:limit]
