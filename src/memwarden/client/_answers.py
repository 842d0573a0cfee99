"""The API's answers as typed dictionaries: what :class:`~memwarden.client.Client` and
:class:`~memwarden.client.AsyncClient` return where the API documents the shape.

They are ``TypedDict``\\ s, so an answer is still the plain ``dict`` decoded from JSON
(``answer["accepted"]`` and ``answer.get("mqtt")`` work as before) while a type checker
knows its keys. Each mirrors the model the route declares (``docs/openapi.v1.json``);
``tests/api/test_client.py`` checks that they list the same fields.
"""

# No ``from __future__ import annotations``: TypedDict reads NotRequired from the evaluated
# annotations (``__required_keys__``), and pydantic validates these as the API's models.
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict  # pydantic validates these on Python 3.11 too

from memwarden.memory import Block
from memwarden.memory.policy import CoverageDict, CoverageShareDict, HealthReportDict

__all__ = [
    "AddedBlock",
    "BelievedAt",
    "BindAnswer",
    "BlockPage",
    "ClusterHealth",
    "Coverage",
    "CoverageShare",
    "DryRun",
    "EventsAccepted",
    "ForgetAnswer",
    "HealthAnswer",
    "Liveness",
    "RevalidateAnswer",
    "SearchHealth",
    "SpoolHealth",
    "StoreInfo",
    "SuggestAnswer",
    "Suggestion",
    "Tombstone",
]


class Liveness(TypedDict):
    """``GET /healthz``."""

    status: Literal["ok"]
    version: str


Coverage = CoverageDict  # the share of live facts a running sensor can check
CoverageShare = CoverageShareDict


class SearchHealth(TypedDict):
    """Search by meaning in ``GET /v1/health`` (docs/SEARCH.md): the embedder's model id
    (``None`` without one: keyword search only), the vectors held, and the blocks waiting
    for one (the embedding backlog: found by their words alone until embedded)."""

    embedder: str | None
    vectors: int
    embedding_backlog: int


class StoreInfo(TypedDict):
    """Which database engine holds the memory (``[store]``; never its address or password)."""

    backend: Literal["sqlite", "postgresql"]


class SpoolHealth(TypedDict):
    """A node's local spool (docs/SCALE.md): events kept while the database was away."""

    unsent: int  # in the spool now, to be delivered
    dropped: int  # dropped (oldest first) past [cluster] spool_max_unsent, ever
    delivered: int  # delivered to the database and removed, ever


class ClusterHealth(TypedDict):
    """This daemon as a node on PostgreSQL (``[cluster]``; docs/SCALE.md): its name and
    instance id, whether it leads (runs the singleton passes), the lease's holder now
    (``<node>/<random>``; None when nobody holds a valid lease or the database is away)
    and its spool."""

    node: str
    instance: str
    leader: bool
    leader_holder: str | None
    spool: SpoolHealth


class HealthAnswer(HealthReportDict):
    """``GET /v1/health``: the 0-100 score, its status and warnings (worst first), and what
    is behind them, and the coverage (the share of live facts with a binding whose
    sensor is alive, by source and tier). ``mqtt`` only when the MQTT bridge is configured."""

    counts: dict[str, Any]
    quarantined_bindings: list[dict[str, Any]]
    sensors: list[dict[str, Any]]
    dead_letters: int
    coverage: Coverage  # the share of live facts a running sensor can check
    store: StoreInfo
    cluster: NotRequired[ClusterHealth]  # on PostgreSQL only
    mqtt: NotRequired[dict[str, Any]]
    search: NotRequired[SearchHealth]


class DryRun(TypedDict):
    """A binding checked once now by its sensor (nothing stored)."""

    outcome: Literal["confirmed", "refuted", "changed", "error"]
    observed: Any
    message: str


class Suggestion(TypedDict):
    """A binding that could check a fact: how sure, why, and its dry run."""

    binding: dict[str, Any]
    confidence: float
    why: str
    check: DryRun


class SuggestAnswer(TypedDict):
    """``POST /v1/suggest-bindings``: confirmed suggestions (best first) and the bindings
    of what the text says that the world refutes."""

    suggestions: list[Suggestion]
    contradicts: list[Suggestion]


class BindAnswer(TypedDict):
    """``POST /v1/blocks`` with ``bind``: the binding chosen (auto) or none and why, and
    every suggestion and contradiction found."""

    mode: Literal["auto", "suggest"]
    chosen: Suggestion | None
    why: str
    suggestions: list[Suggestion]
    contradicts: list[Suggestion]


class AddedBlock(TypedDict):
    """:meth:`~memwarden.client.AsyncClient.add_with_bind`: the stored block, and what
    ``bind`` did (``None`` when the daemon's ``[suggest] bind`` is ``none``)."""

    block: Block
    bind: BindAnswer | None


class BlockPage(TypedDict):
    """One page of ``GET /v1/blocks``: pass ``next`` as ``after`` for the next page."""

    blocks: list[Block]
    next: str | None


class BelievedAt(TypedDict):
    """``GET /v1/blocks/{id}?as_of=``: what memwarden believed about a block then."""

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
    last_evidence: dict[str, Any] | None
    current_version: int


class RevalidateAnswer(TypedDict):
    """``POST /v1/blocks/{id}/revalidate``: the checks asked for, those answered (within
    ``wait``) and not, and the block (as JSON) afterwards."""

    requested: list[str]
    answered: list[str]
    timed_out: list[str]
    block: dict[str, Any]


class EventsAccepted(TypedDict):
    """``POST /v1/events``: what happened to the events sent (after commit)."""

    accepted: int
    duplicates: int
    unmatched: int
    rejected: list[dict[str, str]]
    capped: list[dict[str, str]]
    spooled: int


class ForgetAnswer(TypedDict):
    """``POST /v1/forget`` (and ``DELETE /v1/blocks/{id}?erase=true``): the blocks chosen
    (id, title, state), those erased (none on a dry run), the rows removed per table,
    what was done to the database file and its WAL, and what the daemon cannot reach."""

    dry_run: bool
    blocks: list[dict[str, str]]
    erased: list[str]
    unreachable: list[str]
    removed: dict[str, int]
    score_log_lines: int
    fts: str | None
    vacuumed: bool
    wal_truncated: bool | None
    wal_checkpoint: dict[str, int]


class Tombstone(TypedDict):
    """One row of ``GET /v1/erasures``: which block, when, who, why, rows removed."""

    id: int
    block_id: str
    erased_at: str
    actor: str
    reason: str
    removed: dict[str, int]
