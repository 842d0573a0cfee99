"""How the API answers errors, registered in one place (:data:`EXCEPTION_HANDLERS`).

JSON always: ``{"detail": "a sentence"}``, or for input errors ``{"detail": [{loc, msg,
type}, ...]}`` naming each field. Library errors map to their status (404 unknown, 409
ambiguous, 412 edited meanwhile, 503 the store, 400 any other); anything unexpected is
logged and answered 500 without a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from memwarden.errors import (
    AmbiguousIdError,
    MemwardenError,
    NotFoundError,
    StorageError,
    ValidationInputError,
    VersionConflictError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from fastapi import Request

    from memwarden.daemon._ingest import RefusalError

__all__ = ["EXCEPTION_HANDLERS", "EventRefusedError"]

log = structlog.get_logger("memwarden.api")


class EventRefusedError(Exception):  # answered as 403/422, like HTTPException
    """A request to ``POST /v1/events`` carrying an event its sender may not report."""

    def __init__(self, index: int, refusal: RefusalError) -> None:
        super().__init__(str(refusal))
        self.index = index
        self.refusal = refusal


async def _invalid(_: Request, exc: ValidationInputError) -> JSONResponse:
    return JSONResponse(
        {
            "detail": [
                {"loc": f.split(".") if f else [], "msg": m, "type": exc.error_type}
                for f, m in exc.errors
            ]
        },
        status_code=422,
    )


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


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # name every method the path has, not just one route's
        methods = {
            m
            for path_regex, route_methods in request.app.state.route_methods
            if path_regex.match(request.url.path)
            for m in route_methods
        }
        headers["Allow"] = ", ".join(sorted(methods))
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


async def _refused(_: Request, exc: EventRefusedError) -> JSONResponse:
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


async def _not_found(_: Request, exc: NotFoundError) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _ambiguous(_: Request, exc: AmbiguousIdError) -> JSONResponse:
    return JSONResponse({"detail": str(exc), "candidates": exc.candidates}, status_code=409)


async def _conflict(_: Request, exc: VersionConflictError) -> JSONResponse:
    return JSONResponse(
        {"detail": str(exc), "version": exc.current},
        status_code=412,
        headers={"ETag": f'"{exc.current}"'},
    )


def _unavailable(request: Request, exc: BaseException) -> bool:
    """Whether ``exc`` says the daemon's PostgreSQL store cannot be reached just now
    (never on SQLite: an OSError there is not the database being away)."""
    daemon = getattr(request.app.state, "daemon", None)
    return daemon is not None and bool(daemon.store_unavailable(exc))


def _storage_unavailable(exc: BaseException) -> JSONResponse:
    return JSONResponse(
        {"detail": f"storage unavailable: {exc}"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


async def _failed(request: Request, exc: MemwardenError) -> JSONResponse:
    if isinstance(exc, StorageError) and _unavailable(request, exc):
        return _storage_unavailable(exc)
    code = 503 if isinstance(exc, StorageError) else 400
    return JSONResponse({"detail": str(exc)}, status_code=code)


async def _crashed(request: Request, exc: Exception) -> JSONResponse:
    if _unavailable(request, exc):  # the driver's own error: a connection refused or lost
        log.warning("api_storage_unavailable", error=f"{type(exc).__name__}: {exc}")
        return _storage_unavailable(exc)
    log.error("api_error", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
    return JSONResponse({"detail": "internal error (see the daemon log)"}, status_code=500)


# Starlette picks the handler of the most specific class in the exception's MRO, so the
# order here is for the reader: the specific ones first, then MemwardenError, then 500.
EXCEPTION_HANDLERS: dict[
    int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]
] = {
    ValidationInputError: _invalid,
    RequestValidationError: _invalid_request,
    StarletteHTTPException: _http_error,
    EventRefusedError: _refused,
    NotFoundError: _not_found,
    AmbiguousIdError: _ambiguous,
    VersionConflictError: _conflict,
    MemwardenError: _failed,
    Exception: _crashed,
}
