"""``/v1/suggest-bindings``: which binding could check a fact, each one tried once now."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from memwarden.daemon._routes._deps import DaemonDep, Reader
from memwarden.daemon._suggest import suggest_bindings

__all__ = ["SuggestAnswer", "SuggestRequest", "router"]

router = APIRouter(tags=["suggestions"])


class SuggestRequest(BaseModel):
    """A fact as it would be added: its content and title."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=20_000)
    title: str = Field(default="", max_length=500)
    limit: int = Field(default=5, ge=1, le=50)


class DryRun(BaseModel):
    """The binding checked once now by its sensor (nothing stored)."""

    outcome: Literal["confirmed", "refuted", "changed", "error"]
    observed: Any = None
    message: str = ""


class Suggestion(BaseModel):
    binding: dict[str, Any] = Field(description="A binding, ready for a block's bindings.")
    confidence: float = Field(ge=0.0, le=1.0)
    why: str
    check: DryRun


class SuggestAnswer(BaseModel):
    suggestions: list[Suggestion] = Field(description="Best first; each dry run confirmed.")
    contradicts: list[Suggestion] = Field(
        description="Bindings of what the text says whose dry run refutes it."
    )


@router.post("/v1/suggest-bindings")
async def suggest(body: SuggestRequest, _: Reader, daemon: DaemonDep) -> SuggestAnswer:
    """Bindings that could check this fact, found in what the sensors see (no LLM);
    only those whose dry run confirms are suggested, refuted ones are contradictions."""
    text = f"{body.title}\n{body.content}" if body.title else body.content
    found = await suggest_bindings(daemon.runners, text, limit=body.limit)
    return SuggestAnswer.model_validate(found.as_dict())
