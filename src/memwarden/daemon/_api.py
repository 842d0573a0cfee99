"""The HTTP API (``/v1``): FastAPI served by uvicorn inside the daemon's own loop.

Loopback by default; every route but ``/healthz`` (and the review pages, which have
their own sign-in) needs ``Authorization: Bearer <token>``, checked before any body is
read (``_guard.py``), the token being created on first start in the state dir with mode
0600 and compared in constant time (``_token.py``). Bodies are limited while they
stream. Errors are JSON naming the field and the expectation, never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import json
import logging
import os
import socket
import stat
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

import structlog
import uvicorn
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, status
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memwarden import __version__
from memwarden.daemon._guard import UNAUTHORIZED, RequestGuard, bearer_matches
from memwarden.daemon._ingest import Refused
from memwarden.daemon._token import TOKEN_FILE, ensure_token
from memwarden.daemon._web import ReviewSessions, review_router, signed_out_page
from memwarden.errors import (
    AddressInUseError,
    AmbiguousIdError,
    ConfigError,
    MemwardenError,
    NotFoundError,
    StorageError,
    ValidationInputError,
    VersionConflictError,
)
from memwarden.memory import (
    Block,
    BlockPatch,
    BlockState,
    NewBlock,
    Tier,
    ValidationEvent,
    Volatility,
    _reviews,
    parse_duration,
    to_ts,
)
from memwarden.memory._files import write_private
from memwarden.memory._model import MAX_CONTENT_CHARS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator
    from pathlib import Path

    from memwarden.daemon._app import Daemon

__all__ = ["TOKEN_FILE", "ApiServer", "create_app", "ensure_token"]

log = structlog.get_logger("memwarden.api")
API_FILE = "api.json"


def require_token(request: Request) -> str:
    """The bearer token check, in constant time; 401 otherwise.

    The :class:`RequestGuard` middleware has already checked it before the body was
    read; this dependency is the second line (and documents the need in the schema).
    """
    if not bearer_matches(request.headers.get("authorization"), request.app.state.token):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"}
        )
    return "api"


Auth = Annotated[str, Depends(require_token)]


async def resolve_block(
    block_id: Annotated[
        str,
        PathParam(
            max_length=100,
            description="A block's id, or its short id (the id's last hex digits, as listed).",
        ),
    ],
    request: Request,
    _: Auth,  # the token first: an unauthenticated caller learns nothing about ids
) -> str:
    """The full id a path's ``block_id`` names (404 unknown, 409 ambiguous)."""
    daemon: Daemon = request.app.state.daemon
    return await daemon.store.resolve_id(block_id)


BlockId = Annotated[str, Depends(resolve_block)]


def _if_match(value: str | None) -> int | None:
    """The version an If-Match names: ``"3"``, ``3`` or ``W/"3"``; ``*`` or none: any."""
    if value is None or value.strip() == "*":
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not text.isdigit():
        raise ValidationInputError(
            [("header.If-Match", f'{value!r} is not a block version (an ETag such as "3")')]
        )
    return int(text)


class ErrorMessage(BaseModel):
    """An error: a sentence, or a list of ``{loc, msg, type}`` for input errors."""

    detail: str | list[dict[str, Any]]


class EventsAccepted(BaseModel):
    """What ``POST /v1/events`` did."""

    accepted: int
    duplicates: int
    unmatched: int
    rejected: list[dict[str, str]]
    capped: list[dict[str, str]] = Field(
        default_factory=list,
        description="Values above the sensor's cap, stored clamped: event, field, given, stored.",
    )


class EventRefused(Exception):  # noqa: N818 - answered as 403/422, like HTTPException
    """A request to ``POST /v1/events`` carrying an event its sender may not report."""

    def __init__(self, index: int, refusal: Refused) -> None:
        super().__init__(str(refusal))
        self.index = index
        self.refusal = refusal


async def _authorise(daemon: Daemon, payloads: list[Any]) -> tuple[list[Any], list[dict[str, str]]]:
    """The payloads with each schema-valid event checked (and capped) by the event gate.

    Raises :class:`EventRefused` on the first event the gate refuses: nothing is stored.
    Payloads that do not fit the schema stay as they are (the bus dead-letters them).
    """
    out: list[Any] = []
    capped: list[dict[str, str]] = []
    skew = daemon.settings.api.max_future_skew
    events: list[tuple[int, ValidationEvent]] = []
    for i, payload in enumerate(payloads):
        try:
            event = ValidationEvent.model_validate(payload)
        except ValidationError:
            out.append(payload)
            continue
        try:
            event, caps = daemon.gate.check(event, via="http", max_future_skew=skew)
        except Refused as refusal:
            raise EventRefused(i, refusal) from None
        capped.extend(
            {"event": str(i), "field": c.field, "given": c.given, "stored": c.stored} for c in caps
        )
        events.append((i, event))
        out.append(event)
    unbound = await daemon.gate.first_unbound(daemon.store, [e for _, e in events])
    if unbound is not None:
        position, why = unbound
        raise EventRefused(events[position][0], why)
    return out, capped


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
    results: list[SearchResult]
    checked: list[str] = Field(default_factory=list, description="Read through: revalidated.")
    timed_out: list[str] = Field(
        default_factory=list, description="Read through: no answer in time."
    )
    observations: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Read through: what each checked block's sensor saw."
    )
    hidden_refuted: int = Field(
        default=0, description="Refuted facts matching the query, left out (include_refuted)."
    )
    as_of: str | None = Field(default=None, description="With as_of: the instant answered.")
    believed: list[BelievedAt] | None = Field(
        default=None, description="With as_of: each match as believed then (results empty)."
    )


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


class BlockPage(BaseModel):
    """One page of ``GET /v1/blocks``."""

    blocks: list[Block]
    next: str | None = Field(description="Pass as `after` for the next page; null at the end.")


class RevalidateAnswer(BaseModel):
    requested: list[str]
    answered: list[str]
    timed_out: list[str]
    block: Block


def _instant(text: str) -> float:
    """POSIX seconds from an ISO 8601 ``as_of`` (naive is UTC); a clear 422 otherwise."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValidationInputError(
            [("as_of", f"{text!r} is not an ISO 8601 time, e.g. 2026-11-23T22:00:00Z")]
        ) from None
    return to_ts(when)


def _duration(name: str, text: str) -> float:
    """Seconds from a duration parameter; a clear 422 naming it otherwise."""
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as err:
        raise ValidationInputError([(name, str(err))]) from None
    if seconds < 0:
        raise ValidationInputError([(name, "must not be negative")])
    return seconds


def create_app(
    daemon: Daemon, *, token: str, max_body_bytes: int = 1024 * 1024, docs: bool = True
) -> FastAPI:
    """The FastAPI application over a running daemon.

    ``docs``: serve ``/docs``, ``/redoc`` and ``/openapi.json`` (behind the token like
    every other route); ``False`` removes them.
    """
    app = FastAPI(
        title="memwarden",
        version=__version__,
        description="Keeps an AI agent's memory true. docs/ARCHITECTURE.md describes the contract.",
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
        responses={
            400: {"model": ErrorMessage, "description": "The request could not be used."},
            401: {"model": ErrorMessage, "description": "Missing or wrong token."},
            404: {"model": ErrorMessage, "description": "No such block."},
            409: {"model": ErrorMessage, "description": "A short id that matches several blocks."},
            413: {"model": ErrorMessage, "description": "Body too large."},
            422: {"model": ErrorMessage, "description": "Invalid input: each field named."},
            503: {"model": ErrorMessage, "description": "The store is unavailable."},
        },
    )
    app.state.token = token.encode()
    sessions = ReviewSessions()
    app.state.review_sessions = sessions
    app.add_middleware(
        RequestGuard,
        token=app.state.token,
        max_body_bytes=max_body_bytes,
        session_ok=sessions.cookie_ok,
        refuse_session=signed_out_page,
    )

    @app.exception_handler(ValidationInputError)
    async def _invalid(_: Request, exc: ValidationInputError) -> JSONResponse:
        return JSONResponse(
            {
                "detail": [
                    {"loc": f.split(".") if f else [], "msg": m, "type": "value_error"}
                    for f, m in exc.errors
                ]
            },
            status_code=422,
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {
                "detail": [
                    {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
                    for e in exc.errors()
                ]
            },
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # name every method the path has, not just one route's
            methods = {
                m
                for route in app.routes
                if isinstance(route, APIRoute) and route.path_regex.match(request.url.path)
                for m in route.methods or ()
            }
            headers["Allow"] = ", ".join(sorted(methods))
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(EventRefused)
    async def _refused(_: Request, exc: EventRefused) -> JSONResponse:
        refusal = exc.refusal
        log.warning(
            "event_refused", via="http", kind=refusal.kind, index=exc.index, reason=refusal.reason
        )
        return JSONResponse(
            {
                "detail": [
                    {
                        "loc": ["body", exc.index, refusal.field],
                        "msg": refusal.reason,
                        "type": "forbidden" if refusal.forbidden else "value_error",
                    }
                ]
            },
            status_code=403 if refusal.forbidden else 422,
        )

    @app.exception_handler(NotFoundError)
    async def _not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(AmbiguousIdError)
    async def _ambiguous(_: Request, exc: AmbiguousIdError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "candidates": exc.candidates}, status_code=409)

    @app.exception_handler(VersionConflictError)
    async def _conflict(_: Request, exc: VersionConflictError) -> JSONResponse:
        return JSONResponse(
            {"detail": str(exc), "version": exc.current},
            status_code=412,
            headers={"ETag": f'"{exc.current}"'},
        )

    @app.exception_handler(MemwardenError)
    async def _failed(_: Request, exc: MemwardenError) -> JSONResponse:
        code = 503 if isinstance(exc, StorageError) else 400
        return JSONResponse({"detail": str(exc)}, status_code=code)

    @app.exception_handler(Exception)
    async def _crashed(_: Request, exc: Exception) -> JSONResponse:
        log.error("api_error", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
        return JSONResponse({"detail": "internal error (see the daemon log)"}, status_code=500)

    app.state.daemon = daemon
    app.include_router(review_router(daemon, sessions))

    @app.post("/v1/review-links", tags=["reviews"])
    async def review_link(body: ReviewLinkRequest, request: Request, _: Auth) -> dict[str, str]:
        """A one-time sign-in link to the review page for a named reviewer (10 minutes)."""
        token = sessions.new_link(body.reviewer)
        base = str(request.base_url).rstrip("/")
        return {"url": f"{base}/review/login?token={token}", "reviewer": body.reviewer}

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: open, no token."""
        return {"status": "ok", "version": __version__}

    @app.post(
        "/v1/blocks",
        status_code=201,
        tags=["blocks"],
        responses={200: {"model": Block, "description": "dedupe: the block already stored."}},
    )
    async def add_block(
        body: NewBlock,
        response: Response,
        _: Auth,
        dedupe: Annotated[
            bool,
            Query(
                description="Opt in: when a live block has the same content (casefolded, "
                "whitespace collapsed), answer 200 with it (duplicate_of set) and store nothing."
            ),
        ] = False,
    ) -> Block:
        """Add a block (with bindings): 201. With dedupe, a duplicate answers 200."""
        block = await daemon.add_block(body, actor="api", dedupe=dedupe)
        if block.duplicate_of is not None:
            response.status_code = status.HTTP_200_OK
        return block

    @app.get("/v1/blocks", tags=["blocks"])
    async def list_blocks(
        _: Auth,
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
        }
        blocks = await daemon.store.list_blocks(flt)
        return BlockPage(blocks=blocks, next=blocks[-1].id if len(blocks) == limit else None)

    @app.get("/v1/blocks/{block_id}", tags=["blocks"])
    async def get_block(
        block_id: BlockId,
        response: Response,
        _: Auth,
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
            Query(
                max_length=64, description="Answer what was believed then (ISO 8601; naive: UTC)."
            ),
        ] = None,
    ) -> BlockRead | BelievedAt:
        """One block with its receipt (verdict, who verified it, when, the observation);
        with ``as_of``, what memwarden believed about it at that time."""
        if as_of is not None:
            return BelievedAt(**await daemon.store.believed_at(block_id, _instant(as_of)))
        max_age_s = _duration("max_age", max_age) if max_age is not None else None
        wait_s = _duration("wait", wait)
        block = BlockRead.model_validate(
            await daemon.read_block(
                block_id,
                max_age_s=max_age_s,
                fresh=fresh,
                wait_s=min(wait_s, 30.0),
                session=session,
            )
        )
        response.headers["ETag"] = f'"{block.version}"'  # If-Match for a PATCH
        return block

    @app.patch(
        "/v1/blocks/{block_id}",
        tags=["blocks"],
        responses={412: {"model": ErrorMessage, "description": "If-Match: edited meanwhile."}},
    )
    async def edit_block(
        block_id: BlockId,
        body: BlockPatch,
        response: Response,
        _: Auth,
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
        block = await daemon.store.update(
            block_id, body, actor="api", expected_version=_if_match(if_match)
        )
        response.headers["ETag"] = f'"{block.version}"'
        return block

    @app.delete("/v1/blocks/{block_id}", tags=["blocks"])
    async def archive_block(
        block_id: BlockId,
        _: Auth,
        reason: Annotated[str, Query(max_length=500)] = "archived via API",
    ) -> Block:
        """Archive a block (cold storage, out of search)."""
        return await daemon.store.archive(block_id, reason=reason, actor="api")

    @app.get("/v1/blocks/{block_id}/events", tags=["blocks"])
    async def block_events(
        block_id: BlockId, _: Auth, limit: Annotated[int, Query(ge=1, le=1000)] = 50
    ) -> list[dict[str, Any]]:
        await daemon.store.get(block_id)
        return [e.as_dict() for e in await daemon.store.events_for(block_id, limit=limit)]

    @app.get("/v1/blocks/{block_id}/explain", tags=["blocks"])
    async def explain(block_id: BlockId, _: Auth) -> dict[str, Any]:
        """Why the block has this rank, retention, reliability and state."""
        fn = getattr(daemon.store, "explain", None)
        if fn is None:
            block = await daemon.store.get(block_id)
            events = await daemon.store.events_for(block_id, limit=10)
            return {"block": block.model_dump(mode="json"), "events": [e.as_dict() for e in events]}
        return await fn(block_id)  # type: ignore[no-any-return]

    @app.post("/v1/blocks/{block_id}/revalidate", tags=["blocks"])
    async def revalidate(
        block_id: BlockId,
        _: Auth,
        wait: Annotated[
            str, Query(description="How long to wait for the outcome, e.g. 2s.")
        ] = "0s",
    ) -> RevalidateAnswer:
        """Ask the block's sensors to check it now; optionally wait for the outcome."""
        try:
            wait_s = parse_duration(wait).total_seconds()
        except ValueError as err:
            raise ValidationInputError([("wait", str(err))]) from None
        result = await daemon.revalidate(block_id, wait_s=min(wait_s, 60.0))
        return RevalidateAnswer(**result)

    @app.post("/v1/blocks/{block_id}/review", tags=["reviews"])
    async def ask_review(block_id: BlockId, body: ReviewRequest, _: Auth) -> dict[str, Any]:
        """Ask a human to confirm a block: it joins the review queue with the reason."""
        return await daemon.store.request_review(block_id, reason=body.reason)

    @app.get("/v1/reviews", tags=["reviews"])
    async def reviews(
        _: Auth,
        status: Literal["pending", "decided", "all"] = "pending",
        limit: Annotated[int, Query(ge=1, le=10000)] = 100,
    ) -> list[dict[str, Any]]:
        """The human review queue: each item with its block and the reason."""
        return await daemon.store.list_reviews(status=status, limit=limit)

    @app.get("/v1/reviews/{review_id}", tags=["reviews"])
    async def review(
        review_id: str, _: Auth, events: Annotated[int, Query(ge=0, le=1000)] = 10
    ) -> dict[str, Any]:
        """One item: the block, the reason and the evidence (the block's last events)."""
        return await daemon.store.get_review(review_id, events=events)

    @app.post("/v1/reviews/{review_id}/decision", tags=["reviews"])
    async def decide_review(review_id: str, body: ReviewDecision, _: Auth) -> dict[str, Any]:
        """Confirm, reject or edit: an event from the review sensor, with who decided."""
        sensor = next(
            (n for n, r in sorted(daemon.runners.items()) if r.kind == "review"), "review"
        )
        return await _reviews.decide_review(
            daemon.store,
            review_id,
            body.decision,
            reviewer=body.decided_by,
            comment=body.comment,
            new_content=body.content,
            sensor=sensor,
            apply=functools.partial(daemon.bus.submit, sensor),  # committed before closing
        )

    @app.get("/v1/search", tags=["search"])
    async def search(
        _: Auth,
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
    ) -> SearchAnswer:
        """Ranked results, each with its receipt; ``fresh`` = ``max_age=0`` for quick checks.
        With ``as_of``: the matches as believed then (``believed``)."""
        if as_of is not None:
            return SearchAnswer(
                **await daemon.search_as_of(
                    q, _instant(as_of), limit=limit, include_refuted=include_refuted
                )
            )
        wait_s = _duration("wait", wait)
        max_age_s = _duration("max_age", max_age) if max_age is not None else None
        return SearchAnswer(
            **await daemon.search(
                q,
                limit=limit,
                fresh=fresh,
                max_age_s=max_age_s,
                session=session,
                include_refuted=include_refuted,
                wait_s=min(wait_s, 30.0),
            )
        )

    @app.get("/v1/export", tags=["blocks"])
    async def export_blocks(
        _: Auth,
        after: Annotated[
            str | None, Query(max_length=64, description="Blocks with ids after this one.")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> list[dict[str, Any]]:
        """Whole blocks, by id, as `memwarden import` reads them: the block, its stored
        record, bindings, dependencies, validation history and earlier versions."""
        return await daemon.store.export_blocks(after=after, limit=limit)

    @app.post("/v1/import", tags=["blocks"])
    async def import_blocks(request: Request, _: Auth) -> dict[str, int]:
        """Import export objects (idempotent by block id: blocks already here are left
        unchanged; bindings this daemon's sensors refuse are stored quarantined). Objects
        without ``format`` are new blocks, added as by ``POST /v1/blocks``."""
        try:
            body = json.loads(await request.body())
        except ValueError as err:
            raise ValidationInputError([("body", f"not JSON: {err}")]) from None
        if not isinstance(body, list) or not all(isinstance(r, dict) for r in body):
            raise ValidationInputError([("body", "a list of export objects")])
        if len(body) > 10_000:
            raise ValidationInputError([("body", "at most 10000 objects per request")])
        return await daemon.import_blocks(body)

    @app.get("/v1/stale", tags=["search"])
    async def stale(_: Auth, limit: Annotated[int, Query(ge=1, le=10000)] = 100) -> list[Block]:
        """What is stale now, and why."""
        return await daemon.store.list_blocks({"state": "stale", "limit": limit})

    @app.get("/v1/events", tags=["sensors"])
    async def follow_events(
        _: Auth,
        after: Annotated[
            int, Query(ge=0, le=2**63 - 1, description="Return events after this seq.")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        wait: Annotated[str, Query(description="Long-poll up to this long: 10s.")] = "0s",
        session: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=128,
                description="Instead of the log: this session's notices (a fact it read was "
                "refuted or went stale), numbered per session; ``after`` is that number.",
            ),
        ] = None,
    ) -> list[dict[str, Any]]:
        """The event log after ``after``; with ``wait``, hold the request until there is some."""
        try:
            wait_s = min(parse_duration(wait).total_seconds(), 60.0)
        except ValueError as err:
            raise ValidationInputError([("wait", str(err))]) from None
        if session is not None:
            notices = daemon.sessions.after(session, after, limit=limit)
            if not notices and wait_s > 0:
                await daemon.sessions.wait(session, after, wait_s)
                notices = daemon.sessions.after(session, after, limit=limit)
            return notices
        events = await daemon.store.events_after(after, limit=limit)
        if not events and wait_s > 0:
            await daemon.wait_for_events(wait_s)
            events = await daemon.store.events_after(after, limit=limit)
        return events

    @app.post(
        "/v1/events",
        tags=["sensors"],
        responses={403: {"model": ErrorMessage, "description": "A sensor may not report this."}},
    )
    async def ingest(request: Request, _: Auth) -> EventsAccepted:
        """Ingest events from remote sensors (the MQTT payload schema); answers after commit.

        Only sensors configured ``remote = true`` (with ``"http"`` in ``report_via``) may
        report, and only about blocks bound to them. One refused event refuses the whole
        request (403 for who, 422 for an ``observed_at`` ahead of our clock) and nothing
        is stored; events that do not fit the schema are listed in ``rejected``.
        """
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValidationInputError([("body", f"not JSON: {err}")]) from None
        payloads: list[Any] = body if isinstance(body, list) else [body]
        if len(payloads) > 10_000:
            raise ValidationInputError([("body", "at most 10000 events per request")])
        checked, capped = await _authorise(daemon, payloads)
        result = await daemon.bus.submit("remote:http", checked, bound_only=True)
        return EventsAccepted(
            accepted=result.accepted,
            duplicates=result.duplicates,
            unmatched=result.unmatched,
            rejected=[{"event": i, "reason": r} for i, r in result.rejected],
            capped=capped,
        )

    @app.get("/v1/sensors", tags=["sensors"])
    async def sensors(_: Auth) -> list[dict[str, Any]]:
        """Every configured sensor and its status. Each running one also says what a
        binding to it may name (``binds``: roots, test files, checks, allowed hosts),
        its ``binding_keys`` and ``examples`` of whole bindings to adapt."""
        return daemon.sensor_status(describe=True)

    @app.get("/v1/health", tags=["ops"])
    async def health(_: Auth) -> dict[str, Any]:
        """0-100 health with categorized warnings."""
        return await daemon.health()

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    async def metrics(_: Auth) -> PlainTextResponse:
        """Prometheus text format."""
        from memwarden.daemon._metrics import render  # noqa: PLC0415

        body, content_type = await render(daemon)
        return PlainTextResponse(body, media_type=content_type)

    return app


class _NoBindNoise(logging.Filter):
    """Drops uvicorn's own bind failure line: the daemon reports it once, clearly."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "error while attempting to bind" not in record.getMessage()


logging.getLogger("uvicorn.error").addFilter(_NoBindNoise())


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class ApiServer:
    """Serves the API in the current loop; an async context manager."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        host: str,
        port: int,
        unix_socket: Path | None,
        token: str,
        max_body_bytes: int,
        docs: bool = True,
        socket_group: str | None = None,
    ) -> None:
        app = create_app(daemon, token=token, max_body_bytes=max_body_bytes, docs=docs)
        self._unix_socket = unix_socket
        self._socket_group = socket_group
        self._sockets: list[socket.socket] | None = None
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            uds=str(unix_socket) if unix_socket else None,
            log_config=None,
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=10,  # then what is still running is cancelled
        )
        self._server = _Server(config)
        self.url = ""
        self.failure: MemwardenError | None = None  # why it could not listen, once it gave up

    async def serve(self) -> None:
        """Serve until stopped; when it cannot listen, end with :attr:`failure` set."""
        try:
            if self._unix_socket is not None and self._sockets is None:
                self._sockets = [bind_unix_socket(self._unix_socket, group=self._socket_group)]
            await self._server.serve(sockets=self._sockets)
        except ConfigError as err:  # the socket could not be made
            self.failure = err
        except SystemExit:  # uvicorn exits the process when it cannot listen: say why, once
            self.failure = self._listen_error()
        finally:
            if self._unix_socket is not None and self._sockets:
                for sock in self._sockets:
                    sock.close()
                with contextlib.suppress(OSError):
                    self._unix_socket.unlink()

    def _listen_error(self) -> MemwardenError:
        cfg = self._server.config
        if cfg.uds:
            return ConfigError(f"api: could not listen on unix:{cfg.uds}")
        try:
            with socket.create_server((cfg.host, cfg.port)):
                pass
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return AddressInUseError(
                    f"api: {cfg.host}:{cfg.port} is already in use (another memwarden? "
                    "`memwarden status` says which; set [api] port = 0 for a free port)"
                )
            return ConfigError(f"api: could not listen on {cfg.host}:{cfg.port}: {err.strerror}")
        return ConfigError(f"api: could not listen on {cfg.host}:{cfg.port}")

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    def bound_url(self) -> str:
        cfg = self._server.config
        if cfg.uds:
            return f"unix:{cfg.uds}"
        for server in self._server.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                return f"http://{shown}:{port}"
        return f"http://{cfg.host}:{cfg.port}"

    def stop(self) -> None:
        self._server.should_exit = True


def bind_unix_socket(path: Path, *, group: str | None = None) -> socket.socket:
    """A listening Unix socket at ``path``, 0600 (0660 and that group with ``group``)
    from the moment anyone can connect: bound under a temporary name, chmod-ed, then
    renamed into place (no umask window). A stale socket at ``path`` is replaced; any
    other file there is refused."""
    mode = 0o600
    gid = -1
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise ConfigError(f"api.socket_group: no group named {group!r}") from None
        mode = 0o660
    if path.exists() and not stat.S_ISSOCK(path.lstat().st_mode):
        raise ConfigError(f"api.unix_socket: {path} exists and is not a socket")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(tmp))
        try:
            if gid != -1:
                os.chown(tmp, -1, gid)
            tmp.chmod(mode)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        sock.listen(2048)
        sock.setblocking(False)  # noqa: FBT003 - the stdlib signature
    except OSError as err:
        sock.close()
        raise ConfigError(f"api.unix_socket: cannot listen on {path}: {err}") from None
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.asynccontextmanager
async def api_file(home: Path, url: str) -> AsyncIterator[None]:
    """Advertise the API URL in the state dir while it serves (0600, replaced atomically)."""
    path = home / API_FILE
    write_private(path, (json.dumps({"url": url, "pid": os.getpid()}) + "\n").encode())
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
