"""The review queue: ask a person to confirm a block, list and read the queue, decide,
and sign-in links to the review pages (which ``daemon/_web.py`` serves)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from memwarden.daemon._callers import Caller, privacy_profile_for
from memwarden.daemon._routes._deps import Admin, BlockId, DaemonDep, Reader, Reviewer, Writer
from memwarden.errors import NotFoundError
from memwarden.memory import MAX_CONTENT_CHARS

if TYPE_CHECKING:
    from memwarden.daemon._app import Daemon

__all__ = ["ReviewDecision", "ReviewLinkRequest", "ReviewRequest", "router"]

router = APIRouter(tags=["reviews"])


class ReviewLinkRequest(BaseModel):
    reviewer: str = Field(min_length=1, max_length=128, description="Who will sign in.")


class ReviewRequest(BaseModel):
    reason: str = Field(min_length=1, max_length=1000)


class ReviewDecision(BaseModel):
    """A person's decision on a review item."""

    decision: Literal["confirm", "reject", "edit"]
    decided_by: str = Field(min_length=1, max_length=128, description="Who decides (recorded).")
    comment: str = Field(default="", max_length=4096)
    content: str | None = Field(
        default=None, min_length=1, max_length=MAX_CONTENT_CHARS, description="For an edit."
    )


@router.post("/v1/review-links")
async def review_link(body: ReviewLinkRequest, request: Request, _: Admin) -> dict[str, str]:
    """A one-time sign-in link to the review page for a named reviewer (10 minutes).
    The page shows every namespace's items: the ``admin`` operation."""
    token = request.app.state.review_sessions.new_link(body.reviewer)
    base = str(request.base_url).rstrip("/")
    return {"url": f"{base}/review/login?token={token}", "reviewer": body.reviewer}


@router.post("/v1/blocks/{block_id}/review")
async def ask_review(
    block_id: BlockId, body: ReviewRequest, caller: Writer, daemon: DaemonDep
) -> dict[str, Any]:
    """Ask a human to confirm a block: it joins the review queue with the reason."""
    return await daemon.request_review(
        block_id, reason=body.reason, source=privacy_profile_for(caller)
    )


@router.get("/v1/reviews")
async def reviews(
    caller: Reader,
    daemon: DaemonDep,
    status: Literal["pending", "decided", "all"] = "pending",
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
) -> list[dict[str, Any]]:
    """The human review queue: each item with its block and the reason."""
    return await daemon.store.list_reviews(status=status, limit=limit, namespaces=caller.scope())


@router.get("/v1/reviews/{review_id}")
async def review(
    review_id: str,
    caller: Reader,
    daemon: DaemonDep,
    events: Annotated[int, Query(ge=0, le=1000)] = 10,
) -> dict[str, Any]:
    """One item: the block, the reason and the evidence (the block's last events)."""
    await _own_review(daemon, caller, review_id)
    return await daemon.store.get_review(review_id, events=events)


async def _own_review(daemon: Daemon, caller: Caller, review_id: str) -> None:
    """A review item of a block of another namespace is not found to this caller."""
    scope = caller.scope()
    if scope is None:
        return
    item = await daemon.store.get_review(review_id, events=0)
    if not await daemon.store.visible_ids([str(item["review"]["block_id"])], scope):
        raise NotFoundError("review", review_id)


@router.post("/v1/reviews/{review_id}/decision")
async def decide_review(
    review_id: str, body: ReviewDecision, caller: Reviewer, daemon: DaemonDep
) -> dict[str, Any]:
    """Confirm, reject or edit: an event from the review sensor, with who decided."""
    await _own_review(daemon, caller, review_id)
    return await daemon.decide_review(
        review_id,
        body.decision,
        reviewer=body.decided_by,
        comment=body.comment,
        new_content=body.content,
    )
