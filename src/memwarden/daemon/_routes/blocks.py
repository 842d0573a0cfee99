"""``/v1/blocks``: add, list, read (with its receipt, or as believed then), edit (If-Match),
archive, a block's events, why it stands where it does, and revalidating it now."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from memwarden.daemon._callers import privacy_profile_for
from memwarden.daemon._routes._deps import (
    BlockId,
    DaemonDep,
    ErrorMessage,
    Reader,
    Writer,
    duration,
    if_match_version,
    instant,
    refuse_operation,
)
from memwarden.daemon._routes.erasure import ForgetAnswer
from memwarden.daemon._routes.search import BelievedAt, BlockRead
from memwarden.daemon._routes.suggest import Suggestion
from memwarden.daemon._suggest import suggest_bindings
from memwarden.errors import ValidationInputError, VersionConflictError
from memwarden.memory import (
    Binding,
    Block,
    BlockPatch,
    BlockState,
    NewBlock,
    Tier,
    Volatility,
    parse_duration,
)

if TYPE_CHECKING:
    from memwarden.daemon._app import Daemon

__all__ = [
    "AddedBlock",
    "BindAnswer",
    "BindRequest",
    "BlockPage",
    "NewBlockRequest",
    "RevalidateAnswer",
    "router",
]

router = APIRouter(tags=["blocks"])


class BlockPage(BaseModel):
    """One page of ``GET /v1/blocks``."""

    blocks: list[Block]
    next: str | None = Field(description="Pass as `after` for the next page; null at the end.")


class RevalidateAnswer(BaseModel):
    requested: list[str]
    answered: list[str]
    timed_out: list[str]
    block: Block


class NewBlockRequest(NewBlock):
    """A new block, and whether memwarden should look for a binding (docs/SUGGESTIONS.md)."""

    bind: Literal["auto", "suggest", "none"] | None = Field(
        default=None,
        description="auto: bind the best suggestion whose dry run confirms, if at least "
        "[suggest] auto_min_confidence; suggest: store unbound, answer the suggestions; "
        "none: neither. Default: [suggest] bind. Ignored when the block names bindings.",
    )


class BindAnswer(BaseModel):
    """What ``bind`` found: the binding chosen (auto) and every suggestion."""

    mode: Literal["auto", "suggest"]
    chosen: Suggestion | None = Field(description="The binding stored with the block (auto).")
    why: str
    suggestions: list[Suggestion]
    contradicts: list[Suggestion]


class AddedBlock(Block):
    """The stored block; ``bind`` only when the request asked for auto or suggest."""

    bind: BindAnswer | None = Field(default=None, exclude_if=lambda v: v is None)


@router.post(
    "/v1/blocks",
    status_code=201,
    responses={200: {"model": AddedBlock, "description": "dedupe: the block already stored."}},
)
async def add_block(
    body: NewBlockRequest,
    response: Response,
    caller: Writer,
    daemon: DaemonDep,
    dedupe: Annotated[
        bool,
        Query(
            description="Opt in: when a live block has the same content (casefolded, "
            "whitespace collapsed), answer 200 with it (duplicate_of set) and store nothing."
        ),
    ] = False,
) -> AddedBlock:
    """Add a block (with bindings): 201. With dedupe, a duplicate answers 200. With
    ``bind``, memwarden looks for a binding itself (see ``POST /v1/suggest-bindings``).
    It goes to ``namespace`` (one the token's agent may write: 403 otherwise), by
    default the agent's first."""
    namespace = caller.namespace_for_write(body.namespace)
    if namespace is None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"agent {caller.name!r} may not write namespace {body.namespace!r} "
            f"([agents.{caller.name}] namespaces)",
        )
    mode = body.bind or daemon.settings.suggest.bind
    new = body.model_dump(mode="json", exclude={"bind"}, exclude_unset=True)
    new["namespace"] = namespace
    answer: BindAnswer | None = None
    if mode != "none":
        answer, binding = await _find_binding(daemon, body, mode)
        if binding is not None:
            new["bindings"] = [binding]
    block = await daemon.add_block(
        new,
        actor=caller.actor,
        dedupe=dedupe,
        namespaces=[namespace],
        source=privacy_profile_for(caller),
    )
    if block.duplicate_of is not None:
        response.status_code = status.HTTP_200_OK
    return AddedBlock.model_validate({**block.model_dump(), "bind": answer})


async def _find_binding(
    daemon: Daemon, body: NewBlockRequest, mode: Literal["auto", "suggest"]
) -> tuple[BindAnswer, dict[str, Any] | None]:
    if body.bindings:
        why = "the block names its own bindings: none was looked for"
        return BindAnswer(mode=mode, chosen=None, why=why, suggestions=[], contradicts=[]), None
    text = f"{body.title}\n{body.content}" if body.title else body.content
    return await _suggest_binding(daemon, text, mode, unbound="stored unbound")


async def _suggest_binding(
    daemon: Daemon, text: str, mode: Literal["auto", "suggest"], *, unbound: str
) -> tuple[BindAnswer, dict[str, Any] | None]:
    """The suggestions for ``text``, and with ``auto`` the best one whose dry run
    confirms at ``[suggest] auto_min_confidence`` or more; ``why`` says which and why
    (``unbound``: what happens to the block when none is chosen)."""
    found = await suggest_bindings(daemon.runners, text, limit=5)
    suggestions = [Suggestion.model_validate(s.as_dict()) for s in found.suggestions]
    contradicts = [Suggestion.model_validate(s.as_dict()) for s in found.contradicts]
    chosen: Suggestion | None = None
    threshold = daemon.settings.suggest.auto_min_confidence
    if not found.searched:
        why = (
            f"{unbound}: no running sensor offers binding suggestions (an fs sensor "
            "with its index on: [sensors.fs] index = true; code_test, runtime, http)"
        )
    elif mode == "suggest":
        why = f"{unbound}: pick a suggestion and add it as a binding"
    elif not suggestions:
        why = (
            f"no binding whose dry run confirms was found: {unbound} (values in files "
            "are found only while [sensors.fs] index = true, the default)"
        )
    elif suggestions[0].confidence < threshold:
        why = (
            f"the best suggestion's confidence {suggestions[0].confidence} is below "
            f"auto_min_confidence {threshold}: {unbound}"
        )
    else:
        chosen = suggestions[0]
        why = f"bound: {chosen.why} (confidence {chosen.confidence}, its dry run confirmed)"
    answer = BindAnswer(
        mode=mode, chosen=chosen, why=why, suggestions=suggestions, contradicts=contradicts
    )
    return answer, (chosen.binding if chosen is not None else None)


@router.get("/v1/blocks")
async def list_blocks(
    caller: Reader,
    daemon: DaemonDep,
    state: BlockState | None = None,
    tag: Annotated[str | None, Query(max_length=64)] = None,
    sensor: Annotated[str | None, Query(max_length=64)] = None,
    tier: Tier | None = None,
    volatility: Volatility | None = None,
    after: Annotated[
        str | None, Query(max_length=100, description="The `next` of the previous page.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> BlockPage:
    """Every block matching the filters, oldest first, a page at a time."""
    flt = {
        "state": state,
        "tag": tag,
        "sensor": sensor,
        "tier": tier,
        "volatility": volatility,
        "after": after,
        "limit": limit,
        "namespaces": caller.scope(),
    }
    blocks = await daemon.store.list_blocks(flt)
    return BlockPage(blocks=blocks, next=blocks[-1].id if len(blocks) == limit else None)


@router.get("/v1/blocks/{block_id}")
async def get_block(
    block_id: BlockId,
    response: Response,
    caller: Reader,
    daemon: DaemonDep,
    max_age: Annotated[
        str | None,
        Query(description="Re-check first (when quick) if validated longer ago: 30s."),
    ] = None,
    fresh: Annotated[bool, Query(description="max_age=0 for quick checks.")] = False,
    wait: Annotated[str, Query(description="How long a re-check may take: 2s.")] = "2s",
    session: Annotated[
        str | None,
        Query(max_length=128, description="Told (GET /v1/events?session=) if it falls."),
    ] = None,
    as_of: Annotated[
        str | None,
        Query(max_length=64, description="Answer what was believed then (ISO 8601; naive: UTC)."),
    ] = None,
) -> BlockRead | BelievedAt:
    """One block with its receipt (verdict, who verified it, when, the observation);
    with ``as_of``, what memwarden believed about it at that time."""
    if as_of is not None:
        return BelievedAt(**await daemon.store.believed_at(block_id, instant(as_of)))
    max_age_s = duration("max_age", max_age) if max_age is not None else None
    wait_s = duration("wait", wait)
    block = BlockRead.model_validate(
        await daemon.read_block(
            block_id,
            max_age_s=max_age_s,
            fresh=fresh,
            wait_s=min(wait_s, 30.0),
            session=caller.session_key(session),
        )
    )
    response.headers["ETag"] = f'"{block.version}"'  # If-Match for a PATCH
    return block


@router.patch(
    "/v1/blocks/{block_id}",
    responses={412: {"model": ErrorMessage, "description": "If-Match: edited meanwhile."}},
)
async def edit_block(
    block_id: BlockId,
    body: BlockPatch,
    response: Response,
    caller: Writer,
    daemon: DaemonDep,
    if_match: Annotated[
        str | None,
        Header(
            alias="If-Match",
            max_length=40,
            description='The version the edit is based on ("3", as the ETag said): '
            "412 if the block was edited since. Without it the edit always applies.",
        ),
    ] = None,
) -> Block:
    """Edit a block; the answer's ETag is its new version (use it as If-Match)."""
    block = await daemon.edit_block(
        block_id,
        body,
        actor=caller.actor,
        expected_version=if_match_version(if_match),
        source=privacy_profile_for(caller),
    )
    response.headers["ETag"] = f'"{block.version}"'
    return block


class BindRequest(BaseModel):
    """How to bind a stored block: ``auto`` (docs/SUGGESTIONS.md)."""

    model_config = ConfigDict(extra="forbid")

    bind: Literal["auto"] = Field(
        description="auto: bind the best suggestion for the block's text whose dry run "
        "confirms, if at least [suggest] auto_min_confidence (added to its bindings)."
    )


BIND_ATTEMPTS = 5  # compare-and-set rounds against concurrent changes of bindings


@router.post(
    "/v1/blocks/{block_id}/bind",
    responses={
        409: {
            "model": ErrorMessage,
            "description": "A short id that matches several blocks; or the block's text "
            "was edited while its binding was looked for (the suggestion was for the old "
            "text), or its bindings kept changing: nothing bound, ask again.",
        }
    },
)
async def bind_block(
    block_id: BlockId, body: BindRequest, caller: Writer, daemon: DaemonDep
) -> AddedBlock:
    """Look for a binding for a stored block now, as ``POST /v1/blocks`` does with
    ``bind``: the best confirming suggestion is added to its bindings (the block is
    unverified until its sensor checks it, and its ``version`` goes up); ``bind`` says
    what was chosen and why, or why nothing was. To set bindings by hand, ``PATCH`` the
    block's ``bindings``.

    The binding is added by compare-and-set on the block's version: a binding another
    request added meanwhile is kept (both land); an edit of the text meanwhile answers
    409 and changes nothing."""
    block = await daemon.store.get(block_id)
    text = _text_of(block)
    answer, binding = await _suggest_binding(daemon, text, body.bind, unbound="left unbound")
    if binding is None:
        return AddedBlock.model_validate({**block.model_dump(), "bind": answer})
    wanted = Binding.model_validate(binding)
    for _ in range(BIND_ATTEMPTS):
        if _text_of(block) != text:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"block {block.id} was edited while its binding was looked for (now "
                f"version {block.version}): nothing was bound; ask again for its new text",
                headers={"ETag": f'"{block.version}"'},
            )
        if wanted in block.bindings:
            answer.why = f"already bound so: {answer.why.removeprefix('bound: ')}"
            break
        kept = [b.model_dump(mode="json") for b in block.bindings]
        try:
            block = await daemon.edit_block(
                block_id,
                {"bindings": [*kept, binding]},
                actor=caller.actor,
                expected_version=block.version,
                source=privacy_profile_for(caller),
            )
            break
        except VersionConflictError:  # changed since it was read: read it again, merge
            block = await daemon.store.get(block_id)
    else:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"block {block.id}'s bindings changed {BIND_ATTEMPTS} times while this binding "
            "was added: nothing was bound; ask again",
            headers={"ETag": f'"{block.version}"'},
        )
    return AddedBlock.model_validate({**block.model_dump(), "bind": answer})


def _text_of(block: Block) -> str:
    """What a suggestion is looked for in: the title, then the content."""
    return f"{block.title}\n{block.content}" if block.title else block.content


@router.delete("/v1/blocks/{block_id}")
async def archive_block(
    block_id: BlockId,
    caller: Writer,
    daemon: DaemonDep,
    reason: Annotated[str, Query(max_length=500)] = "archived via API",
    erase: Annotated[
        bool,
        Query(
            description="Erase it for good instead (its content leaves every table, the "
            "search index and the WAL; a tombstone stays): answers a ForgetAnswer."
        ),
    ] = False,
    vacuum: Annotated[
        bool, Query(description="With erase: also rewrite the whole database file.")
    ] = False,
) -> Block | ForgetAnswer:
    """Archive a block (cold storage, out of search); with ``erase=true``, erase it
    (the agent needs the ``forget`` operation as well)."""
    if erase:
        if not caller.may("forget"):
            raise refuse_operation(caller, "forget")
        answer = await daemon.forget(
            ids=[block_id],
            actor=caller.actor,
            reason="" if reason == "archived via API" else reason,
            vacuum=vacuum,
            namespaces=caller.scope(),
            source=privacy_profile_for(caller),
        )
        return ForgetAnswer.model_validate(answer)
    return await daemon.archive_block(
        block_id, reason=reason, actor=caller.actor, source=privacy_profile_for(caller)
    )


@router.get("/v1/blocks/{block_id}/events")
async def block_events(
    block_id: BlockId,
    _: Reader,
    daemon: DaemonDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[dict[str, Any]]:
    await daemon.store.get(block_id)
    return [e.as_dict() for e in await daemon.store.events_for(block_id, limit=limit)]


@router.get("/v1/blocks/{block_id}/explain")
async def explain(block_id: BlockId, _: Reader, daemon: DaemonDep) -> dict[str, Any]:
    """Why the block has this rank, retention, reliability and state."""
    # The store's Explanation is JSON already; the response keeps its documented shape.
    return dict(await daemon.store.explain(block_id))


@router.post("/v1/blocks/{block_id}/revalidate")
async def revalidate(
    block_id: BlockId,
    _: Writer,
    daemon: DaemonDep,
    wait: Annotated[str, Query(description="How long to wait for the outcome, e.g. 2s.")] = "0s",
) -> RevalidateAnswer:
    """Ask the block's sensors to check it now; optionally wait for the outcome."""
    try:
        wait_s = parse_duration(wait).total_seconds()
    except ValueError as err:
        raise ValidationInputError([("wait", str(err))]) from None
    result = await daemon.revalidate(block_id, wait_s=min(wait_s, 60.0))
    return RevalidateAnswer(**result)
