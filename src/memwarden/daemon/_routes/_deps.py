"""What the routes share: the daemon and the token check as dependencies, the path's
block id resolved, and the parsers of query values that answer a 422 naming the field.

The daemon is the application's (``app.state.daemon``, set by
:func:`memwarden.daemon._api.create_app`); a route asks for it with ``daemon: DaemonDep``
and for the token with ``_: Auth``. The token dependency is the second line: the
:class:`~memwarden.daemon._guard.RequestGuard` middleware has already refused a request
without it, before any body was read.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi import Path as PathParam
from pydantic import BaseModel

from memwarden.daemon._guard import UNAUTHORIZED, bearer_matches
from memwarden.errors import ValidationInputError
from memwarden.memory import parse_duration, to_ts

if TYPE_CHECKING:
    from memwarden.daemon._app import Daemon

__all__ = [
    "Auth",
    "BlockId",
    "DaemonDep",
    "ErrorMessage",
    "duration",
    "get_daemon",
    "if_match_version",
    "instant",
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
    _: Auth,  # the token first: an unauthenticated caller learns nothing about ids
    daemon: DaemonDep,
) -> str:
    """The full id a path's ``block_id`` names (404 unknown, 409 ambiguous)."""
    return await daemon.store.resolve_id(block_id)


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
