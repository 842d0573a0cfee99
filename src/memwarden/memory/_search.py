"""Search: full-text matches (FTS5, BM25) re-ranked by freshness, reliability and
retention in one SQL statement, each hit with the factors and warnings behind it."""

from __future__ import annotations

import functools
import json
import operator
from typing import TYPE_CHECKING, Any, Literal

from memwarden.errors import ValidationInputError
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import BLOCK_COLUMNS, record_from_row
from memwarden.memory._fts import fts_query
from memwarden.memory._model import BlockState
from memwarden.memory._results import SearchHit
from memwarden.memory._sql import namespace_clause
from memwarden.memory._sqlrules import retention_sql
from memwarden.memory.policy import current_stale_reasons, state_as_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._record import BlockRecord
    from memwarden.memory._vectors import VectorIndex
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "MODES",
    "RRF_K",
    "Search",
    "SearchMode",
    "carried_candidates",
    "explained",
    "fused_relevance",
    "vector_k",
]

_score = operator.itemgetter(4)  # a ranking row's score
# Where a hit's block columns (BLOCK_COLUMNS order) hold what ranking and warnings read.
_RID, _STATE, _STALE_AT, _RELIABILITY, _FLAPPING = (
    BLOCK_COLUMNS.index(c) for c in ("rid", "state", "stale_at", "reliability", "flapping")
)
# Plain strings: an enum member's .value is a descriptor call, on every hit.
_STALE = BlockState.STALE.value
_REFUTED = BlockState.REFUTED.value
_UNVERIFIED = BlockState.UNVERIFIED.value

SearchMode = Literal["keyword", "vector", "hybrid"]
MODES: tuple[str, ...] = ("keyword", "vector", "hybrid")
# Reciprocal rank fusion: a candidate's relevance is the sum of 1 / (RRF_K + rank) over
# the lists it is in (rank 1 = best). 60 is the constant of Cormack et al. (2009).
RRF_K = 60
# In hybrid search, the keyword list's weight in the fusion when no block has every word
# of the query (the any-word fallback: a block sharing "how" or "do" with a question is
# weak evidence next to its nearest meanings). Measured on tests/memory/retrieval_set.py.
ANY_WORD_WEIGHT = 0.2
VECTOR_CANDIDATES = 50
# The inline read budget of a vector or hybrid search's ranking statement, in multiples
# of ``store.inline_read_ms`` (see Search._fused).
RANKING_BUDGET_FACTOR = 3.0
_RECENT_NEAREST = 16
_RID_COLUMN = BLOCK_COLUMNS.index("rid")  # in a ranking row, after its 7 factors


class Search:
    """Ranked search over the blocks, and what a search hides."""

    def __init__(self, db: Database, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        self.vectors: VectorIndex | None = None  # set when an embedder is configured
        # (query, k) -> the nearest rids a vector or hybrid search found, the newest last
        # (count_refuted_matches counts among them without searching again).
        self._recent_nearest: dict[tuple[str, int], list[int]] = {}

    @property
    def default_mode(self) -> SearchMode:
        """``hybrid`` when an embedder is configured, ``keyword`` otherwise."""
        return "hybrid" if self.vectors is not None else "keyword"

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        include_refuted: bool = False,
        namespaces: Sequence[str] | None = None,
        mode: SearchMode | None = None,
    ) -> list[SearchHit]:
        """Blocks matching ``query`` (words, never FTS syntax), ranked by
        relevance x freshness x reliability x retention.

        ``mode`` (default: :attr:`default_mode`): ``keyword`` ranks BM25 matches (below);
        ``vector`` the nearest vectors by cosine; ``hybrid`` fuses the BM25 and the
        cosine candidate lists by reciprocal rank fusion (docs/SEARCH.md). Either way the
        candidates are then re-ranked by freshness x reliability x retention.

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
                mode=mode,
                namespaces=namespaces,
            )
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
        return self._hits(rows, now)

    def _hits(
        self, rows: list[Any], now: float, parts: dict[int, dict[str, float]] | None = None
    ) -> list[SearchHit]:
        cfg = self.policy
        hits = []
        warn_below = cfg.staleness.warn_reliability
        # Best first. Ordered here, not by the statement: its sorter would copy every
        # column of every hit twice, which cost more than the rest of a small search's
        # statement did (equal scores keep the order the ranking step gave them).
        for row in sorted(rows, key=_score, reverse=True):
            relevance, freshness, reliability, retention, score, bound, deps = row[:7]
            columns = row[7:]
            state = state_as_of(columns[_STATE], columns[_STALE_AT], now)
            warnings, rec = _warnings(columns, state, now, cfg, warn_below)
            hit = SearchHit(
                columns=columns,
                state=state,
                score=score,
                relevance=relevance,
                freshness=freshness,
                reliability=reliability,
                retention=retention,
                stale=state == _STALE,
                warnings=warnings,
                bindings_json=bound,
                depends_json=deps,
                now=now,
                policy=cfg,
                parts=parts.get(columns[_RID], {}) if parts is not None else {},
                _record=[] if rec is None else [rec],
            )
            hits.append(hit)
        return hits

    async def _fused(
        self,
        query: str,
        *,
        limit: int,
        include_refuted: bool,
        mode: SearchMode,
        namespaces: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        """Vector or hybrid search: candidates by cosine (and BM25), fused by rank, then
        re-ranked by freshness x reliability x retention in one statement."""
        vectors = self.vectors
        if vectors is None:  # checked by search(); here for the type checker
            return []
        cfg = self.policy
        cands = max(cfg.ranking.candidates, limit)
        scoped = None if namespaces is None else sorted(set(namespaces))
        keyword: list[tuple[int, float]] = []
        keyword_weight = 1.0
        if mode == "hybrid":  # first: the vector pass leaves SQLite's pages out of cache
            keyword, every_word = await self._keyword_candidates(query, cands, scoped)
            if not every_word:  # matched on some words only: weaker evidence
                keyword_weight = ANY_WORD_WEIGHT
        # Vector candidates: enough for the fusion to reorder the top ``limit`` (a block
        # past rank 5 x limit adds at most 1/(60 + 50) to its fused score); each one
        # costs a row in the ranking statement, and the nearest list is never empty.
        k = vector_k(cfg, limit)
        nearest = await vectors.query(query, k)
        self._remember_nearest(query, k, nearest)
        # The fused relevance of every candidate; the explanation (``parts``) is made
        # for the results only (a dict per candidate was 250 dicts a search).
        relevance = fused_relevance(mode, keyword, nearest, keyword_weight)
        if not relevance:
            return []
        # Only the best ``carried`` by fused relevance go on to the ranking statement
        # (about 3 us a candidate: the 250 of a hybrid list made it miss the inline read
        # budget and run twice). Past that rank a candidate's relevance is at most
        # 1/(60 + carried) against 2/61 at the top, so only a far worse freshness x
        # reliability x retention of every better one could have lifted it into the top
        # ``limit``. When those leave fewer than ``limit`` (hidden states, other
        # namespaces), every candidate is ranked again.
        every = relevance
        relevance = carried_candidates(relevance, limit)
        now = self.clock.time()
        ranking = cfg.ranking
        decay = cfg.decay
        params: dict[str, Any] = {
            # {"rid": relevance}: json writes int keys as strings itself (a comprehension
            # of str(rid) cost about a fifth of the dump).
            "cands": json.dumps(relevance),
            "now": now,
            "f_fresh": ranking.fresh,
            "f_unverified": ranking.unverified,
            "f_stale": ranking.stale,
            "f_refuted": ranking.refuted,
            "core_floor": decay.core_floor,
            "floor": decay.floor,
            "stale_factor": decay.stale_half_life_factor,
            "limit": limit,
        }
        for i, namespace in enumerate(scoped or ()):
            params[f"ns{i}"] = namespace
        sql = _search_sql(
            include_refuted=include_refuted,
            scoped=None if scoped is None else len(scoped),
            given=True,
        )
        # The vector pass (on the loop) leaves SQLite's pages out of the CPU's caches:
        # the statement then takes about twice its time alone (0.5 ms for 50 candidates
        # at 100 000 blocks), so it gets the budget of the pass it follows.
        rows = await self._rows(sql, params, budget_factor=RANKING_BUDGET_FACTOR)
        if len(rows) < limit and len(every) > len(relevance):
            params["cands"] = json.dumps(every)
            rows = await self._rows(sql, params, budget_factor=RANKING_BUDGET_FACTOR)
        shown = {int(row[7 + _RID_COLUMN]) for row in rows}
        fused = None if mode == "vector" else every
        return self._hits(rows, now, explained(shown, nearest, keyword, fused))

    async def _keyword_candidates(
        self, query: str, cands: int, scoped: Sequence[str] | None = None
    ) -> tuple[list[tuple[int, float]], bool]:
        """The BM25 top ``cands`` (rid, relevance) of the ``scoped`` namespaces (every
        one: ``None``), every word first, then any word; and whether they have every word."""
        match = fts_query(query)
        if match is None:
            return [], True
        within = ""
        params: dict[str, Any] = {"match": match, "cands": cands}
        if scoped is not None:
            names = ", ".join(f":ns{i}" for i in range(len(scoped))) or "NULL"
            within = (
                " CROSS JOIN blocks nb ON nb.rid = blocks_fts.rowid"
                f" WHERE nb.namespace IN ({names}) AND"
            )
            params.update({f"ns{i}": n for i, n in enumerate(scoped)})
        sql = (
            "SELECT blocks_fts.rowid, -bm25(blocks_fts, 2.0, 1.0, 1.5) FROM blocks_fts"
            f"{within or ' WHERE'} blocks_fts MATCH :match"
            " ORDER BY bm25(blocks_fts, 2.0, 1.0, 1.5) LIMIT :cands"
        )
        rows = await self._rows(sql, params)
        every_word = True
        if not rows and " " in match:
            params["match"] = fts_query(query, any_term=True)
            rows = await self._rows(sql, params)
            every_word = False
        return [(int(rid), float(rel)) for rid, rel in rows], every_word

    async def _rows(
        self, sql: str, params: dict[str, Any], *, budget_factor: float = 1.0
    ) -> list[Any]:
        rows = self.db.read_inline(sql, params, budget_factor=budget_factor)
        if rows is None:
            async with self.db.read() as conn:
                rows = list(await conn.execute_fetchall(sql, params))
        return rows

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
        its nearest vectors (``vector``: the ``max(50, 5 x limit)`` the search takes),
        either (``hybrid``)."""
        match = fts_query(query) if mode != "vector" else None
        near: list[int] = []
        if mode != "keyword" and self.vectors is not None:
            near = await self._nearest_rids(query, vector_k(self.policy, limit))
        if match is None and not near:
            return 0
        scope, scope_args = namespace_clause(namespaces, column="b.namespace")
        sources, args = [], []
        if near:
            sources.append("SELECT value AS rid FROM json_each(?)")
            args.append(json.dumps(near))
        if match is not None:
            sources.append("SELECT rowid AS rid FROM blocks_fts WHERE blocks_fts MATCH ?")
            args.append(match)
        sql = (
            f"SELECT count(*) FROM ({' UNION '.join(sources)}) c"
            f" JOIN blocks b ON b.rid = c.rid WHERE b.state = 'refuted'{scope}"
        )
        async with self.db.read() as conn:
            [(count,)] = list(await conn.execute_fetchall(sql, (*args, *scope_args)))
        return int(count)

    async def _nearest_rids(self, query: str, k: int) -> list[int]:
        """The rids of the ``k`` nearest vectors to ``query``: the list the last vector
        or hybrid search of that text found (a search and its hidden count come
        together), else searched again."""
        key = (query, k)
        rids = self._recent_nearest.get(key)
        if rids is None and self.vectors is not None:
            rids = [rid for rid, _ in await self.vectors.query(query, k)]
        return list(rids or [])

    def _remember_nearest(self, query: str, k: int, nearest: list[tuple[int, float]]) -> None:
        recent = self._recent_nearest
        recent.pop((query, k), None)
        recent[(query, k)] = [rid for rid, _ in nearest]
        while len(recent) > _RECENT_NEAREST:
            del recent[next(iter(recent))]  # the oldest


def fused_relevance(
    mode: SearchMode,
    keyword: list[tuple[int, float]],
    nearest: list[tuple[int, float]],
    keyword_weight: float = 1.0,
) -> dict[int, float]:
    """Each candidate's relevance: its similarity (``vector``), or its reciprocal-rank
    fusion of the keyword and the vector lists (``hybrid``; ``keyword_weight`` on the
    keyword ranks)."""
    relevance: dict[int, float] = {}
    if mode == "vector":
        for rid, sim in nearest:
            relevance[rid] = max(round(sim, 4), 0.0)
    else:
        for rank, (rid, _) in enumerate(keyword, 1):
            relevance[rid] = keyword_weight / (RRF_K + rank)
        for rank, (rid, _) in enumerate(nearest, 1):
            relevance[rid] = relevance.get(rid, 0.0) + 1.0 / (RRF_K + rank)
    return relevance


def carried_candidates(relevance: dict[int, float], limit: int) -> dict[int, float]:
    """The best ``max(VECTOR_CANDIDATES, 5 x limit)`` candidates by fused relevance:
    those the ranking step scores first (see ``Search._fused``)."""
    carried = max(VECTOR_CANDIDATES, 5 * limit)
    if len(relevance) <= carried:
        return relevance
    return dict(sorted(relevance.items(), key=lambda kv: -kv[1])[:carried])


def explained(
    shown: set[int],
    nearest: list[tuple[int, float]],
    keyword: list[tuple[int, float]],
    fused: dict[int, float] | None,
) -> dict[int, dict[str, float]]:
    """Each shown result's ranks in the lists it came from (vector_rank, similarity,
    keyword_rank, bm25) and, fused, its rrf."""
    parts: dict[int, dict[str, float]] = {rid: {} for rid in shown}
    for rank, (rid, sim) in enumerate(nearest, 1):
        if rid in shown:
            parts[rid].update({"vector_rank": float(rank), "similarity": round(sim, 4)})
    for rank, (rid, bm25) in enumerate(keyword, 1):
        if rid in shown:
            parts[rid].update({"keyword_rank": float(rank), "bm25": bm25})
    if fused is not None:
        for rid in shown:
            parts[rid]["rrf"] = round(fused[rid], 6)
    return parts


def vector_k(cfg: PolicyConfig, limit: int) -> int:
    """How many nearest vectors a search of ``limit`` results takes as candidates."""
    return min(max(cfg.ranking.candidates, limit), max(VECTOR_CANDIDATES, 5 * limit))


def _warnings(
    columns: tuple[Any, ...], state: str, now: float, cfg: PolicyConfig, warn_below: float
) -> tuple[list[str], BlockRecord | None]:
    """What a reader should know about a hit (``state`` is the effective one), and its
    record if it had to be made: only a stale hit's is (its warning names the reasons)."""
    out = []
    rec = None
    if state == _STALE:
        rec = record_from_row(columns)
        why = ", ".join(current_stale_reasons(rec, now, cfg)) or "expired"
        if rec.stale_at is not None and rec.stale_at <= now:
            out.append(f"stale since {from_ts(rec.stale_at).isoformat()} ({why})")
        else:  # stale before its window ran out: a change, a refutation, a dependency
            out.append(f"stale ({why})")
    elif state == _REFUTED:
        out.append("refuted by a sensor: do not rely on it")
    elif state == _UNVERIFIED:
        out.append("unverified: no sensor has confirmed it yet")
    reliability = columns[_RELIABILITY]
    if reliability < warn_below:
        out.append(f"reliability {reliability:.2f} is below {warn_below:.2f}")
    if columns[_FLAPPING]:
        out.append("flapping: sensors keep changing their minds")
    return out, rec


@functools.cache
def _search_sql(*, include_refuted: bool, scoped: int | None = None, given: bool = False) -> str:
    """The ranking statement of :meth:`Search.search` (built once per variant).

    ``scoped``: how many namespaces (``:ns0``, ``:ns1``, ...) the candidates are limited
    to; ``None``: every namespace. With ``given``, the candidates come as ``:cands``, a
    JSON object {"rid": relevance} (vector and hybrid search); else from the index.
    """
    states = (
        "('fresh','unverified','stale','refuted')"
        if include_refuted
        else ("('fresh','unverified','stale')")
    )
    names = ", ".join(f":ns{i}" for i in range(scoped or 0)) or "NULL"
    scope = ""
    if given:
        # An object {"rid": relevance}: its keys and values need no json_extract.
        cand = "SELECT CAST(j.key AS INTEGER) AS rid, j.value AS relevance FROM json_each(:cands) j"
        if scoped is not None:  # the nearest vectors are every namespace's
            scope = f" AND b.namespace IN ({names})"
    else:
        source = "FROM blocks_fts WHERE blocks_fts MATCH :match"
        if scoped is not None:
            # CROSS JOIN keeps the index first (SQLite never reorders it): the matches
            # are looked up by rowid, never the namespace's blocks probed against it.
            source = (
                "FROM blocks_fts CROSS JOIN blocks nb ON nb.rid = blocks_fts.rowid"
                f" WHERE blocks_fts MATCH :match AND nb.namespace IN ({names})"
            )
        cand = f"""SELECT blocks_fts.rowid AS rid, -bm25(blocks_fts, 2.0, 1.0, 1.5) AS relevance
                {source}
                ORDER BY bm25(blocks_fts, 2.0, 1.0, 1.5) LIMIT :cands"""
    return f"""
            WITH cand AS MATERIALIZED (
                {cand}
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
                WHERE b.state IN {states}{scope}
            ), ranked AS MATERIALIZED (
                SELECT *, relevance * freshness * reliability * retention AS score
                FROM scored ORDER BY score DESC LIMIT :limit
            )
            SELECT s.relevance, s.freshness, s.reliability, s.retention, s.score,
                (SELECT json_group_array(
                    json_array(g.sensor, g.subject, g.selector, g.nodes, g.served_by))
                 FROM bindings g WHERE g.block_rid = b.rid),
                (SELECT json_group_array(d.depends_on)
                 FROM dependencies d WHERE d.block_rid = b.rid),
                {", ".join("b." + c for c in BLOCK_COLUMNS)}
            FROM ranked s JOIN blocks b ON b.rid = s.rid
        """
