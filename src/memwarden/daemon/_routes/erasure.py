"""``/v1/forget`` and ``/v1/erasures``: erase blocks for good (by ids, a tag or a query;
a dry run first, if you like) and read the erasure log's tombstones.

``DELETE /v1/blocks/{id}?erase=true`` (in ``blocks``) is the one-block form. What an
erasure reaches and what it cannot: docs/PRIVACY.md.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from memwarden.daemon._callers import privacy_profile_for
from memwarden.daemon._routes._deps import Admin, DaemonDep, Forgetter
from memwarden.memory import MAX_ERASE, from_ts

__all__ = ["ErasureTarget", "ForgetAnswer", "ForgetRequest", "Tombstone", "router"]

router = APIRouter(tags=["privacy"])


class ForgetRequest(BaseModel):
    """Which blocks to erase: exactly one of ``ids``, ``tag``, ``query``."""

    model_config = {"extra": "forbid"}

    ids: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list,
        max_length=MAX_ERASE,
        description="Block ids (short ids accepted); each must exist (404 otherwise).",
    )
    tag: str | None = Field(default=None, min_length=1, max_length=64)
    query: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="Words: the blocks holding every one of them (archived ones too). Matched "
        "as words, never as full-text syntax.",
    )
    reason: str = Field(
        default="",
        max_length=500,
        description="Why, kept in the tombstone as given: do not repeat the content here.",
    )
    dry_run: bool = Field(default=False, description="List what would go; change nothing.")
    vacuum: bool = Field(
        default=False,
        description="Also rewrite the whole database file (VACUUM): reaches copies freed "
        "before secure_delete was on. Costs time in proportion to the file.",
    )


class ErasureTarget(BaseModel):
    """A block an erasure takes (or, on a dry run, would take)."""

    id: str
    title: str
    state: str
    text: str = Field(description="Its title, else the start of its content.")


class ForgetAnswer(BaseModel):
    """What an erasure chose and did. ``removed`` counts rows per table; the file fields
    say what was done to the database file and its WAL; ``unreachable`` lists the copies
    the daemon cannot reach."""

    dry_run: bool
    blocks: list[ErasureTarget]
    erased: list[str]
    unreachable: list[str]
    removed: dict[str, int] = Field(default_factory=dict)
    score_log_lines: int = 0
    fts: str | None = Field(default=None, description="What was done to the search index.")
    vacuumed: bool = False
    wal_truncated: bool | None = Field(
        default=None, description="false: a reader kept the WAL from being truncated; retry."
    )
    wal_checkpoint: dict[str, int] = Field(default_factory=dict)


class Tombstone(BaseModel):
    """One erased block: which, when, who, why (as given) and the rows removed."""

    id: int
    block_id: str
    erased_at: str
    actor: str
    reason: str
    removed: dict[str, int]


@router.post("/v1/forget")
async def forget(body: ForgetRequest, caller: Forgetter, daemon: DaemonDep) -> ForgetAnswer:
    """Erase blocks for good: their content leaves every table, the search index, the
    WAL and the score log; a tombstone stays. ``dry_run`` lists them and changes nothing."""
    answer = await daemon.forget(
        ids=body.ids,
        tag=body.tag,
        query=body.query,
        actor=caller.actor,
        reason=body.reason,
        dry_run=body.dry_run,
        vacuum=body.vacuum,
        namespaces=caller.scope(),
        source=privacy_profile_for(caller),
    )
    return ForgetAnswer.model_validate(answer)


@router.get("/v1/erasures")
async def erasures(
    _: Admin,
    daemon: DaemonDep,
    block_id: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Tombstone]:
    """The erasure log, newest first: tombstones, never content."""
    rows = await daemon.store.erasures(block_id=block_id, limit=limit)
    return [
        Tombstone.model_validate({**r, "erased_at": from_ts(r["erased_at"]).isoformat()})
        for r in rows
    ]
