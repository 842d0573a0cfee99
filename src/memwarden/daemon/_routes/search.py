"""``/v1/search`` and ``/v1/stale``: ranked answers with their receipts, and what is stale.

The read models (:class:`Receipt`, :class:`BlockRead`, :class:`BelievedAt`) are here
too: a block read (``GET /v1/blocks/{id}``) answers with the same receipt as a search.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from memwarden.daemon._routes._deps import Admin, DaemonDep, Reader, duration, instant
from memwarden.memory import Block

__all__ = [
    "BelievedAt",
    "BlockRead",
    "Receipt",
    "ReembedAnswer",
    "SearchAnswer",
    "SearchResult",
    "router",
]

router = APIRouter(tags=["search"])


class Receipt(BaseModel):
    """How a result is known: who verified it, when, and what an agent should make of it."""

    verdict: Literal["verified", "checking", "unverified", "stale", "unreachable", "refuted"]
    verified_by: str | None
    verified_at: str | None
    age_s: float | None = Field(description="Seconds since its last validation.")
    checked_now: bool = Field(description="Checked by a sensor for this read.")
    observation: dict[str, Any] | None = Field(
        description="The confirmation behind its validation: sensor, observed_at, observed."
    )
    why: str | None = None
    since: str | None = Field(default=None, description="Unreachable since (when known).")


class SearchResult(BaseModel):
    block: Block
    score: float
    rank: float | None = Field(
        default=None,
        description="0-1: match (relevance / best relevance of this answer) x freshness x "
        "reliability x retention, halved when unreachable (docs/RULES.md, Ranking).",
    )
    stale: bool
    warnings: list[str]
    factors: dict[str, float]
    receipt: Receipt | None = None


class BelievedAt(BaseModel):
    """What memwarden believed about a block at ``as_of`` (from the event log and history)."""

    as_of: str
    block_id: str
    version: int
    title: str
    content: str
    tags: list[str]
    state: str
    stale_reasons: list[str]
    reliability: float
    validated_by: str | None
    validated_at: str | None
    stale_at: str | None
    last_evidence: dict[str, Any] | None = Field(
        description="The last evidence committed before as_of: sensor, outcome, "
        "observed_at (when the world was seen), committed_at (when we learned it)."
    )
    current_version: int


class BlockRead(Block):
    """A block with the receipt of this read."""

    receipt: Receipt | None = None


class SearchAnswer(BaseModel):
    query: str
    mode: Literal["keyword", "vector", "hybrid"] | None = Field(
        default=None, description="How this answer was searched."
    )
    results: list[SearchResult]
    checked: list[str] = Field(default_factory=list, description="Read through: revalidated.")
    timed_out: list[str] = Field(
        default_factory=list, description="Read through: no answer in time."
    )
    observations: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Read through: what each checked block's sensor saw."
    )
    hidden_refuted: int = Field(
        default=0,
        description="Refuted facts the search left out (include_refuted): those with the"
        " query's words (keyword), among its nearest vectors (vector), either (hybrid).",
    )
    as_of: str | None = Field(default=None, description="With as_of: the instant answered.")
    believed: list[BelievedAt] | None = Field(
        default=None, description="With as_of: each match as believed then (results empty)."
    )


@router.get("/v1/search")
async def search(
    caller: Reader,
    daemon: DaemonDep,
    q: Annotated[str, Query(max_length=1000)],
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    fresh: bool = False,
    session: Annotated[str | None, Query(max_length=128)] = None,
    include_refuted: bool = False,
    wait: Annotated[str, Query()] = "2s",
    max_age: Annotated[
        str | None,
        Query(description="Re-check results (when quick) validated longer ago: 30s."),
    ] = None,
    as_of: Annotated[
        str | None,
        Query(max_length=64, description="Answer what was believed then, in `believed`."),
    ] = None,
    mode: Annotated[
        Literal["keyword", "vector", "hybrid"] | None,
        Query(
            description="keyword (BM25), vector (cosine of embeddings) or hybrid (both, "
            "fused by reciprocal rank); default hybrid when an embedder is configured, "
            "else keyword (docs/SEARCH.md)."
        ),
    ] = None,
) -> SearchAnswer:
    """Ranked results, each with its receipt; ``fresh`` = ``max_age=0`` for quick checks.
    With ``as_of``: the matches as believed then (``believed``)."""
    if as_of is not None:
        return SearchAnswer(
            **await daemon.search_as_of(
                q,
                instant(as_of),
                limit=limit,
                include_refuted=include_refuted,
                namespaces=caller.scope(),
            )
        )
    wait_s = duration("wait", wait)
    max_age_s = duration("max_age", max_age) if max_age is not None else None
    answer = await daemon.search(
        q,
        limit=limit,
        fresh=fresh,
        max_age_s=max_age_s,
        session=caller.session_key(session),
        include_refuted=include_refuted,
        wait_s=min(wait_s, 30.0),
        namespaces=caller.scope(),
        mode=mode,
    )
    return SearchAnswer.model_validate(answer)  # the response model, built at the edge


class ReembedAnswer(BaseModel):
    queued: int = Field(description="Blocks queued for a new vector.")
    embedder: str | None = Field(description="The model that will embed them (none: no embedder).")


@router.post("/v1/search/reembed")
async def reembed(_: Admin, daemon: DaemonDep) -> ReembedAnswer:
    """Queue every block for a new vector (after changing the embedder's model); the
    embedding task works through the queue in the background."""
    vectors = daemon.store.vectors
    return ReembedAnswer(
        queued=await daemon.store.reembed(),
        embedder=vectors.model if vectors is not None else None,
    )


@router.get("/v1/stale")
async def stale(
    caller: Reader, daemon: DaemonDep, limit: Annotated[int, Query(ge=1, le=10000)] = 100
) -> list[Block]:
    """What is stale now, and why."""
    return await daemon.store.list_blocks(
        {"state": "stale", "limit": limit, "namespaces": caller.scope()}
    )
