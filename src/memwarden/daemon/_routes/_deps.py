"""What the routes share: the daemon and the token check as dependencies, the path's
block id resolved, and the parsers of query values that answer a 422 naming the field.

The daemon is the application's (``app.state.daemon``, set by
:func:`memwarden.daemon._api.create_app`); a route asks for it with ``daemon: DaemonDep``
and for the caller with the operation it needs (``caller: Reader``, ``Writer``,
``Forgetter``, ``Reviewer``, ``Reporter``, ``Admin``: 403 naming the operation otherwise).
The token dependency is the second line: the
:class:`~memwarden.daemon._guard.RequestGuard` middleware has already refused a request
without a known token, before any body was read. A path's block id resolves only among
the caller's namespaces (a block of another is 404).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi import Path as PathParam
from pydantic import BaseModel

from memwarden.daemon._callers import Caller, Callers
from memwarden.daemon._guard import UNAUTHORIZED
from memwarden.errors import ValidationInputError
from memwarden.memory import parse_duration, to_ts

if TYPE_CHECKING:
    from collections.abc import Callable

    from memwarden.daemon._app import Daemon

__all__ = [
    "Admin",
    "Auth",
    "BlockId",
    "DaemonDep",
    "ErrorMessage",
    "Forgetter",
    "Reader",
    "Reporter",
    "Reviewer",
    "Writer",
    "duration",
    "get_daemon",
    "if_match_version",
    "instant",
    "refuse_operation",
    "require_token",
    "resolve_block",
]


class ErrorMessage(BaseModel):
    """An error: a sentence, or a list of ``{loc, msg, type}`` for input errors."""

    detail: str | list[dict[str, Any]]


def get_daemon(request: Request) -> Daemon:
    """The running daemon the application serves."""
    daemon: Daemon = request.app.state.daemon
    return daemon


DaemonDep = Annotated["Daemon", Depends(get_daemon)]


def require_token(request: Request) -> Caller:
    """The caller's agent, from its bearer token (constant time); 401 otherwise.

    The :class:`RequestGuard` middleware has already checked it before the body was
    read; this dependency is the second line (and documents the need in the schema).
    """
    callers: Callers = request.app.state.callers
    caller = callers.match(request.headers.get("authorization"))
    if caller is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"}
        )
    return caller


Auth = Annotated[Caller, Depends(require_token)]


def refuse_operation(caller: Caller, operation: str) -> HTTPException:
    """The 403 for an operation the caller's agent may not do (names both)."""
    return HTTPException(
        status.HTTP_403_FORBIDDEN,
        f"agent {caller.name!r} may not {operation} "
        f"(its operations: {', '.join(sorted(caller.operations)) or 'none'}; "
        f"[agents.{caller.name}] operations)",
    )


def _needs(operation: str) -> Callable[[Caller], Caller]:
    def check(caller: Auth) -> Caller:
        if not caller.may(operation):
            raise refuse_operation(caller, operation)
        return caller

    check.__name__ = f"require_{operation}"
    return check


# One dependency per operation: a route asks for the one it does (docs/PRIVACY.md).
Reader = Annotated[Caller, Depends(_needs("read"))]
Writer = Annotated[Caller, Depends(_needs("write"))]
Forgetter = Annotated[Caller, Depends(_needs("forget"))]
Reviewer = Annotated[Caller, Depends(_needs("review"))]
Reporter = Annotated[Caller, Depends(_needs("report"))]
Admin = Annotated[Caller, Depends(_needs("admin"))]


async def resolve_block(
    block_id: Annotated[
        str,
        PathParam(
            max_length=100,
            description="A block's id, or its short id (the id's last hex digits, as listed).",
        ),
    ],
    caller: Auth,  # the token first: an unauthenticated caller learns nothing about ids
    daemon: DaemonDep,
) -> str:
    """The full id a path's ``block_id`` names among the caller's namespaces (404
    unknown or in another namespace, 409 ambiguous)."""
    return await daemon.store.resolve_id(block_id, namespaces=caller.scope())


BlockId = Annotated[str, Depends(resolve_block)]


def if_match_version(value: str | None) -> int | None:
    """The version an If-Match names: ``"3"``, ``3`` or ``W/"3"``; ``*`` or none: any."""
    if value is None or value.strip() == "*":
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not text.isdigit():
        raise ValidationInputError(
            [("header.If-Match", f'{value!r} is not a block version (an ETag such as "3")')]
        )
    return int(text)


def instant(text: str) -> float:
    """POSIX seconds from an ISO 8601 ``as_of`` (naive is UTC); a clear 422 otherwise."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValidationInputError(
            [("as_of", f"{text!r} is not an ISO 8601 time, e.g. 2026-11-23T22:00:00Z")]
        ) from None
    return to_ts(when)


def duration(name: str, text: str) -> float:
    """Seconds from a duration parameter; a clear 422 naming it otherwise."""
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as err:
        raise ValidationInputError([(name, str(err))]) from None
    if seconds < 0:
        raise ValidationInputError([(name, "must not be negative")])
    return seconds
