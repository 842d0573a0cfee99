"""Who may send the API a body, and how large it may be: checked before the body is read.

A pure ASGI middleware in front of every route. It decides from the request line and the
headers alone, so a request without the right credentials is answered 401 while its
body is still on the wire (uvicorn buffers at most 64 KiB of it; the application reads
none), and a body is counted as it streams in, chunked or not, and refused with 413 the
moment it passes the limit, without reading the rest.

Who needs what:

- ``/healthz``: nothing (liveness for probes).
- ``/review`` pages: ``GET`` is open (the pages check the session cookie themselves and
  ``/review/login`` takes a one-time token); any other method needs a live review
  session cookie, checked here before the form is read.
- everything else (``/v1/...``, ``/metrics``, ``/docs``, ``/redoc``, ``/openapi.json``,
  unknown paths): ``Authorization: Bearer <token>`` of one of the configured agents
  (:class:`~memwarden.daemon._callers.Callers`), compared in constant time; an empty
  token never matches. What that agent may do is the routes' own check (``_deps.py``).

The routes keep their own ``Depends(require_token)`` as a second line.
"""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException, status

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from memwarden.daemon._callers import Callers

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["BodyTooLarge", "RequestGuard", "bearer_matches"]

OPEN_PATHS = frozenset({"/healthz"})
REVIEW_PREFIX = "/review"
SAFE_METHODS = frozenset({"GET", "HEAD"})
UNAUTHORIZED = "missing or wrong token (Authorization: Bearer <token from the state dir>)"


def bearer_matches(header: bytes | str | None, expected: bytes) -> bool:
    """Whether an ``Authorization`` value is ``Bearer <expected>``, in constant time.

    An empty expected token, an empty given token, another scheme or bytes that are not
    ASCII never match.
    """
    if header is None or not expected:
        return False
    raw = header.encode("latin-1", "replace") if isinstance(header, str) else header
    scheme, _, given = raw.strip().partition(b" ")
    given = given.strip()
    if scheme.lower() != b"bearer" or not given or not given.isascii():
        return False
    return hmac.compare_digest(given, expected)


def too_large_detail(limit: int) -> list[dict[str, Any]]:
    return [{"loc": ["body"], "msg": f"body larger than {limit} bytes", "type": "too_large"}]


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a body passes the limit; answered 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(status.HTTP_413_CONTENT_TOO_LARGE, too_large_detail(limit))


class RequestGuard:
    """The ASGI middleware; ``session_ok(cookie_header)`` says whether a review session is live."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        callers: Callers,
        max_body_bytes: int,
        session_ok: Callable[[str | None], bool],
        refuse_session: Callable[[], tuple[int, str]],
    ) -> None:
        self.app = app
        self.callers = callers
        self.max_body_bytes = max_body_bytes
        self.session_ok = session_ok
        self.refuse_session = refuse_session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())  # the last of a repeated header wins
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        if path == REVIEW_PREFIX or path.startswith(REVIEW_PREFIX + "/"):
            if method not in SAFE_METHODS and not self.session_ok(_cookie(headers)):
                code, page = self.refuse_session()
                await _respond(send, code, page.encode(), b"text/html; charset=utf-8")
                return
        elif path not in OPEN_PATHS and self.callers.match(headers.get(b"authorization")) is None:
            body = json.dumps({"detail": UNAUTHORIZED}).encode()
            await _respond(
                send, 401, body, b"application/json", extra=[(b"www-authenticate", b"Bearer")]
            )
            return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            body = json.dumps({"detail": too_large_detail(self.max_body_bytes)}).encode()
            await _respond(send, 413, body, b"application/json")
            return
        await self._limited(scope, receive, send)

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with a ``receive`` that counts body bytes and refuses past the limit."""
        seen = 0
        limit = self.max_body_bytes
        started = False

        async def counted() -> Message:
            nonlocal seen
            if seen > limit:
                raise BodyTooLarge(limit)
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:  # the app did not turn it into a response itself
            if started:
                raise
            body = json.dumps({"detail": too_large_detail(limit)}).encode()
            await _respond(send, 413, body, b"application/json")


def _cookie(headers: dict[bytes, bytes]) -> str | None:
    raw = headers.get(b"cookie")
    return None if raw is None else raw.decode("latin-1")


async def _respond(
    send: Send,
    code: int,
    body: bytes,
    content_type: bytes,
    *,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
