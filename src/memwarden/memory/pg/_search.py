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
Vector and hybrid modes (with a :class:`~memwarden.memory.pg._vectors.PgVectorIndex` as
``vectors``) are SQLite's: the same nearest vectors, the same fusion by rank
(:func:`~memwarden.memory._search.fused_relevance`), the same re-ranking; in hybrid mode
the keyword list is ranked by ``ts_rank_cd``, so its order, and the fused order with it,
may differ where BM25 and cover density disagree.
"""

from __future__ import annotations

import functools
import json
import operator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from memwarden.errors import ValidationInputError
from memwarden.memory._codec import BLOCK_COLUMNS
from memwarden.memory._fts import query_terms
from memwarden.memory._model import BlockState
from memwarden.memory._record import touched_at
from memwarden.memory._results import SearchHit
from memwarden.memory._search import (
    ANY_WORD_WEIGHT,
    MODES,
    _warnings,
    carried_candidates,
    explained,
    fused_relevance,
    vector_k,
)
from memwarden.memory._sql import namespace_clause
from memwarden.memory.pg._reads import storable
from memwarden.memory.policy import retention_of, state_as_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._search import SearchMode
    from memwarden.memory._vectors import VectorIndex
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
# Every word of $1 as one tsquery: the lexemes ``_tsquery(lexemes, any_term=False)``
# makes, in the words' order, a lexeme twice when two words make it ("café cafe"); the
# order and a repeat change neither the matches nor ``ts_rank_cd``
# (tests/pg/test_search_statement.py). An empty tsquery, which matches nothing, when
# there are none. ``plainto_tsquery`` parses the words once, where building
# the same query from ``to_tsvector``'s lexemes cost 30-40 us more a search
# (docs/BENCHMARKS.md, "Session 11").
_EVERY_WORD = f"plainto_tsquery('{CONFIG}', {WORDS})"
# A tsquery given as text ($1), as ``_tsquery`` makes it.
_GIVEN = "CAST($1 AS tsquery)"
_LIVE = ("fresh", "unverified", "stale")
_RID = BLOCK_COLUMNS.index("rid")
_STATE = BLOCK_COLUMNS.index("state")
_STALE_AT = BLOCK_COLUMNS.index("stale_at")
_RELIABILITY = BLOCK_COLUMNS.index("reliability")
# What the retention rule reads of a row (policy.retention_of).
_TIER = BLOCK_COLUMNS.index("tier")
_IMPORTANCE = BLOCK_COLUMNS.index("importance")
_HALF_LIFE = BLOCK_COLUMNS.index("half_life_s")
_CREATED = BLOCK_COLUMNS.index("created_at")
_VALIDATED = BLOCK_COLUMNS.index("validated_at")
_ACCESSED = BLOCK_COLUMNS.index("last_accessed_at")
# Plain strings on the hot path (an enum member's value is a descriptor call).
_STALE = BlockState.STALE.value
# The states in the order of their ranking factors (fresh, unverified, stale, refuted).
_STATES = (BlockState.FRESH.value, BlockState.UNVERIFIED.value, _STALE, BlockState.REFUTED.value)
# A candidate's bindings, each a JSON array (the hit's JSON text is made of them, as
# SQLite's json_group_array makes it), and its dependencies: ARRAY subqueries, which cost
# less a statement than aggregates (json_agg, array_agg: 5-10 us of a search of 0.3 ms;
# docs/BENCHMARKS.md, "Session 11").
_ATTACHED = """ARRAY(SELECT json_build_array(g.sensor, g.subject, g.selector, g.nodes, g.served_by)
              FROM bindings g WHERE g.block_rid = b.rid ORDER BY g.id),
        ARRAY(SELECT d.depends_on FROM dependencies d WHERE d.block_rid = b.rid
              ORDER BY d.depends_on)"""
_COLUMNS = ", ".join("b." + c for c in BLOCK_COLUMNS)
# A candidate as the statements give it: relevance, bindings (JSON), dependencies, row.
_Candidate = tuple[float, str, list[str], tuple[Any, ...]]


def _tsquery(lexemes: Sequence[str], *, any_term: bool) -> str:
    """A tsquery text of quoted lexemes (each already normalised by the configuration)."""
    quoted = ["'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes]
    return (" | " if any_term else " & ").join(quoted)


@functools.cache
def _candidates_sql(query_sql: str, scope: str) -> str:
    """:meth:`PgSearch._candidates`' statement (made once per shape)."""
    return f"""
            SELECT ts_rank_cd('{RANK_WEIGHTS}', b.search, q, 32) AS relevance, {_ATTACHED},
                {_COLUMNS}
            FROM blocks b, {query_sql} AS q
            WHERE b.search @@ q AND b.state <> 'archived' AND b.state = ANY($2::text[]){scope}
            ORDER BY relevance DESC, b.rid LIMIT $3
            """


def _scope(namespaces: Sequence[str] | None, args: list[object]) -> tuple[str, list[object]]:
    """The candidates statement's namespace clause and its arguments: ``args`` (the
    query, the states, how many), and the namespaces after them when given."""
    if namespaces is None:
        return "", args
    return " AND b.namespace = ANY($4::text[])", [*args, sorted(set(namespaces))]


def _as_candidates(rows: Sequence[Any]) -> list[_Candidate]:
    """The candidates' rows as :data:`_Candidate` tuples."""
    return [(float(r[0]), _json_list(r[1]), list(r[2]), tuple(r)[3:]) for r in rows]


def _json_list(items: list[str]) -> str:
    """JSON texts as the text of one JSON array."""
    return "[" + ", ".join(items) + "]" if items else "[]"


class PgSearch:
    """Ranked keyword search over the blocks of a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        # Set when an embedder is configured (a PgVectorIndex, memory/pg/_vectors.py).
        self.vectors: VectorIndex | None = None
        self._made_factors: tuple[PolicyConfig, dict[str, float], float] | None = None

    @property
    def default_mode(self) -> SearchMode:
        """``hybrid`` with an embedder, ``keyword`` without (as on SQLite)."""
        return "hybrid" if self.vectors is not None else "keyword"

    async def _fused(
        self,
        query: str,
        *,
        limit: int,
        include_refuted: bool,
        mode: SearchMode,
        namespaces: Sequence[str] | None,
    ) -> list[SearchHit]:
        """Vector or hybrid search, as SQLite's ``Search._fused``: the nearest vectors
        (and, hybrid, the keyword matches), fused by rank, re-ranked by freshness x
        reliability x retention. The keyword list is ranked by ``ts_rank_cd`` here (the
        explanation's ``bm25`` part holds it)."""
        vectors = self.vectors
        if vectors is None:  # checked by search(); here for the type checker
            return []
        cfg = self.policy
        cands = max(cfg.ranking.candidates, limit)
        keyword: list[tuple[int, float]] = []
        keyword_weight = 1.0
        if mode == "hybrid":
            keyword, every_word = await self._keyword_candidates(query, cands, namespaces)
            if not every_word:  # matched on some words only: weaker evidence
                keyword_weight = ANY_WORD_WEIGHT
        nearest = await vectors.query(query, vector_k(cfg, limit))
        every = fused_relevance(mode, keyword, nearest, keyword_weight)
        if not every:
            return []
        relevance = carried_candidates(every, limit)
        now = self.clock.time()
        states = [*_LIVE, BlockState.REFUTED.value] if include_refuted else list(_LIVE)
        async with self.db.read() as conn:
            rows = await self._given(conn, relevance, states, namespaces)
            if len(rows) < limit and len(every) > len(relevance):
                rows = await self._given(conn, every, states, namespaces)
        ranked = self._ranked(rows, now, limit)
        shown = {int(h.columns[_RID]) for h in ranked}
        parts = explained(shown, nearest, keyword, None if mode == "vector" else every)
        return [replace(h, parts=parts.get(int(h.columns[_RID]), {})) for h in ranked]

    async def count_refuted_matches(
        self,
        query: str,
        *,
        namespaces: Sequence[str] | None = None,
        mode: SearchMode = "keyword",
        limit: int = 10,
    ) -> int:
        """How many refuted blocks a search without them hides, among ``namespaces``
        when given: those matching every word of ``query`` (``keyword``), those among
        its nearest vectors (``vector``), either (``hybrid``), as on SQLite."""
        near: list[int] = []
        if mode != "keyword" and self.vectors is not None:
            near = [rid for rid, _ in await self.vectors.query(query, vector_k(self.policy, limit))]
        terms = query_terms(query) if mode != "vector" else []
        if namespaces is not None:
            namespace_clause(namespaces)  # SQLite's limit, SQLite's error
        async with self.db.read() as conn:
            lexemes = await self._lexemes(conn, " ".join(terms)) if terms else []
            if not lexemes and not near:
                return 0
            scope = "" if namespaces is None else " AND b.namespace = ANY($3::text[])"
            count = await conn.fetchval(
                "SELECT count(*) FROM blocks b WHERE b.state = 'refuted'"
                # No words: $2 is NULL, which matches nothing.
                " AND (b.rid = ANY($1::bigint[]) OR b.search @@ CAST($2::text AS tsquery))" + scope,
                near,
                _tsquery(lexemes, any_term=False) if lexemes else None,
                *([] if namespaces is None else [storable(namespaces)]),
            )
        return int(count)

    async def _keyword_candidates(
        self, query: str, cands: int, namespaces: Sequence[str] | None
    ) -> tuple[list[tuple[int, float]], bool]:
        """The ``cands`` best keyword matches (rid, relevance) of any state in the index
        (as SQLite's), every word first, then any word; and whether they had every word."""
        terms = query_terms(query)
        if not terms:
            return [], True
        states = [*_LIVE, BlockState.REFUTED.value]
        async with self.db.read() as conn:
            lexemes = await self._lexemes(conn, " ".join(terms))
            if not lexemes:
                return [], True
            rows = await self._candidates(
                conn, _tsquery(lexemes, any_term=False), states, namespaces, cands
            )
            every_word = True
            if not rows and len(lexemes) > 1:
                rows = await self._candidates(
                    conn, _tsquery(lexemes, any_term=True), states, namespaces, cands
                )
                every_word = False
        return [(int(r[3][_RID]), r[0]) for r in rows], every_word

    @staticmethod
    async def _given(
        conn: PgConnection,
        relevance: dict[int, float],
        states: list[str],
        namespaces: Sequence[str] | None,
    ) -> list[_Candidate]:
        """The candidates ``relevance`` names, of ``states`` (and ``namespaces``), with
        their bindings and dependencies, as :meth:`_candidates` gives them."""
        scope = "" if namespaces is None else " AND b.namespace = ANY($3::text[])"
        args: list[object] = [list(relevance), states]
        if namespaces is not None:
            args.append(sorted(set(namespaces)))
        rows = await conn.fetch(
            f"""
            SELECT {_ATTACHED}, {_COLUMNS}
            FROM blocks b WHERE b.rid = ANY($1::bigint[]) AND b.state = ANY($2::text[]){scope}
            """,
            *args,
        )
        # In the candidates' order (the ranking's sort keeps it among equal scores, as
        # SQLite's statement does).
        at = {int(r[2 + _RID]): r for r in rows}
        return [
            (rel, _json_list(at[rid][0]), list(at[rid][1]), tuple(at[rid])[2:])
            for rid, rel in relevance.items()
            if rid in at
        ]

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
        mode = mode or self.default_mode
        if mode not in MODES:
            raise ValidationInputError([("mode", f"{mode!r} is not one of {', '.join(MODES)}")])
        if mode != "keyword":
            if self.vectors is None:
                raise ValidationInputError(
                    [("mode", f"{mode!r} needs an embedder ([search] embedder in the config)")]
                )
            return await self._fused(
                query,
                limit=limit,
                include_refuted=include_refuted,
                mode=cast("SearchMode", mode),
                namespaces=namespaces,
            )
        terms = query_terms(query)
        if not terms:
            return []
        now = self.clock.time()
        states = [*_LIVE, BlockState.REFUTED.value] if include_refuted else list(_LIVE)
        cands = max(self.policy.ranking.candidates, limit)
        # Every word, the tsquery made in the same statement (one round trip); only when
        # nothing matched, the lexemes alone: none, or any word of several.
        scope, args = _scope(namespaces, [" ".join(terms), states, cands])
        rows = _as_candidates(await self.db.fetch(_candidates_sql(_EVERY_WORD, scope), *args))
        if rows:
            return self._ranked(rows, now, limit)
        async with self.db.read() as conn:
            lexemes = await self._lexemes(conn, " ".join(terms))
            if len(lexemes) > 1:
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
    ) -> list[_Candidate]:
        """The ``cands`` best matches of ``tsquery``, of ``states`` (and ``namespaces``),
        with bindings and dependencies."""
        scope, args = _scope(namespaces, [tsquery, states, cands])
        return _as_candidates(await conn.fetch(_candidates_sql(_GIVEN, scope), *args))

    def _factors(self, cfg: PolicyConfig) -> tuple[dict[str, float], float]:
        """The freshness factor of each state and the reliability below which a hit is
        warned about, made once per policy (a policy is immutable; a reload brings a new
        one)."""
        made = self._made_factors
        if made is None or made[0] is not cfg:
            rank = cfg.ranking
            factor = dict(
                zip(_STATES, (rank.fresh, rank.unverified, rank.stale, rank.refuted), strict=True)
            )
            made = self._made_factors = (cfg, factor, cfg.staleness.warn_reliability)
        return made[1], made[2]

    def _ranked(self, rows: list[_Candidate], now: float, limit: int) -> list[SearchHit]:
        cfg = self.policy
        factor, warn_below = self._factors(cfg)
        # Every candidate's score first; the hits (their warnings, their JSON) only for
        # the ``limit`` best: a stable sort by score, as sorting the hits themselves was.
        # No record is made to score (as on SQLite): the state from its two columns, the
        # retention rule from the columns it reads; a hit's record is made when first
        # read (SearchHit.record).
        scored = []
        for i, (relevance, _bound, _deps, columns) in enumerate(rows):
            state = state_as_of(columns[_STATE], columns[_STALE_AT], now)
            freshness = factor[state]
            kept = retention_of(
                columns[_TIER],
                columns[_IMPORTANCE],
                touched_at(columns[_CREATED], columns[_VALIDATED], columns[_ACCESSED]),
                columns[_HALF_LIFE],
                state == _STALE,
                now,
                cfg,
            )
            reliability = columns[_RELIABILITY]
            score = relevance * freshness * reliability * kept
            scored.append((score, i, state, freshness, reliability, kept))
        scored.sort(key=operator.itemgetter(0), reverse=True)
        hits = []
        for score, i, state, freshness, reliability, kept in scored[:limit]:
            relevance, bound, deps, columns = rows[i]
            warnings, rec = _warnings(columns, state, now, cfg, warn_below)
            hits.append(
                SearchHit(
                    columns=columns,
                    state=state,
                    score=score,
                    relevance=relevance,
                    freshness=freshness,
                    reliability=reliability,
                    retention=kept,
                    stale=state == _STALE,
                    warnings=warnings,
                    bindings_json=bound,
                    depends_json=json.dumps(deps) if deps else "[]",
                    now=now,
                    policy=cfg,
                    parts={},
                    _record=[] if rec is None else [rec],
                )
            )
        return hits
