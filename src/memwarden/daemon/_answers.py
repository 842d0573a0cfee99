"""What the daemon's reads answer, typed: JSON-ready dictionaries that the API's routes
turn into their response models (``daemon/_routes``) and that in-process callers (the
demo, tests) read as they are."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from memwarden.memory.policy import CoverageDict, CoverageShareDict

__all__ = [
    "CoverageDict",
    "CoverageShareDict",
    "SearchAnswerDict",
    "SearchFactors",
    "SearchResultDict",
]

# :meth:`Daemon.coverage` (and ``coverage`` in :meth:`Daemon.health`): the share of live
# facts with a binding whose sensor is alive, by source and tier; the store computes it
# (``memory.policy.coverage_of``), so the type lives there and is named here too.


class SearchFactors(TypedDict):
    """The factors a hit's score multiplies (docs/RULES.md, Ranking); vector and hybrid
    search add the parts of the fused rank (docs/SEARCH.md)."""

    relevance: float
    freshness: float
    reliability: float
    retention: float
    keyword_rank: NotRequired[float]  # 1 = best BM25 candidate
    bm25: NotRequired[float]
    vector_rank: NotRequired[float]  # 1 = nearest vector
    similarity: NotRequired[float]  # cosine
    rrf: NotRequired[float]  # hybrid: sum of 1 / (60 + rank) over both lists


class SearchResultDict(TypedDict):
    """One result of :meth:`Daemon.search`."""

    block: dict[str, Any]  # the Block as JSON, with its short_id
    score: float
    stale: bool
    warnings: list[str]
    factors: SearchFactors
    rank: float  # 0-1: match x freshness x reliability x retention x the receipt's factor
    receipt: dict[str, Any]  # daemon._freshness.receipt


class SearchAnswerDict(TypedDict):
    """:meth:`Daemon.search`: the ranked results and what reading through them did."""

    query: str
    mode: str  # keyword, vector or hybrid
    results: list[SearchResultDict]
    checked: list[str]  # re-checked for this read
    timed_out: list[str]  # asked, no answer in time (or a retry waiting its interval)
    observations: dict[str, dict[str, Any]]  # what each check saw (the block's last event)
    hidden_refuted: int  # refuted matches left out
