"""``/v1/proposals``: what the periodic suggestion pass proposes for unbound facts (a
binding, or that a fact depends on another), to list, accept or reject, and a pass run
now. Accepting a binding binds the fact; nothing is applied before (docs/SUGGESTIONS.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from memwarden.daemon._routes._deps import Admin, DaemonDep, Reader, Reviewer
from memwarden.errors import NotFoundError

__all__ = ["ProposalDecision", "ProposalModel", "ProposalPage", "ProposeRun", "router"]

router = APIRouter(tags=["suggestions"])

ProposalId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-f-]+$")]


class ProposalModel(BaseModel):
    """A proposal: a ``binding`` for the block, or that it ``depends_on`` another block."""

    id: str
    block_id: str
    kind: Literal["binding", "depends_on"]
    proposal: dict[str, Any] = Field(
        description='The binding (as a block\'s bindings hold it), or {"depends_on": id}.'
    )
    confidence: float
    why: str
    status: Literal["pending", "accepted", "rejected", "obsolete"]
    created_at: str
    decided_at: str | None
    decided_by: str | None


class ProposalPage(BaseModel):
    proposals: list[ProposalModel]


class ProposalDecision(BaseModel):
    """Accept (apply it) or reject a pending proposal."""

    action: Literal["accept", "reject"]
    decided_by: str = Field(min_length=1, max_length=128, description="Who decides (recorded).")


class ProposeRun(BaseModel):
    """One proposal pass: unbound facts looked at, proposals newly stored."""

    looked_at: int
    proposed: int


@router.get("/v1/proposals")
async def list_proposals(
    caller: Reader,
    daemon: DaemonDep,
    status: Literal["pending", "accepted", "rejected", "obsolete", "all"] = "pending",
    block_id: Annotated[str | None, Query(max_length=64, description="One block's.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ProposalPage:
    """Proposals of a status (pending by default), oldest first."""
    scope = caller.scope()
    block = (
        await daemon.store.resolve_id(block_id, namespaces=scope) if block_id is not None else None
    )
    found = await daemon.store.list_proposals(
        status=status, block_id=block, limit=limit, namespaces=scope
    )
    return ProposalPage(proposals=[ProposalModel(**p.as_dict()) for p in found])


@router.post("/v1/proposals/{proposal_id}")
async def decide_proposal(
    proposal_id: ProposalId, body: ProposalDecision, caller: Reviewer, daemon: DaemonDep
) -> ProposalModel:
    """Accept (bind the block, or record the dependency) or reject a pending proposal;
    a rejected proposal is not made again. One about a block of another namespace than
    the agent's is not found."""
    scope = caller.scope()
    if scope is not None:
        proposal = await daemon.store.get_proposal(proposal_id)
        if not await daemon.store.visible_ids([proposal.block_id], scope):
            raise NotFoundError("proposal", proposal_id)
    decided = await daemon.decide_proposal(
        proposal_id, accept=body.action == "accept", actor=body.decided_by
    )
    return ProposalModel(**decided.as_dict())


@router.post("/v1/proposal-pass")
async def run_pass(_: Admin, daemon: DaemonDep) -> ProposeRun:
    """Run the proposal pass now (it also runs every ``[suggest] propose_interval``)."""
    report = await daemon.propose_once()
    return ProposeRun(looked_at=report.looked_at, proposed=report.proposed)
