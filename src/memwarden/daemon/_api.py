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
import grp
import json
import logging
import os
import socket
import stat
from typing import TYPE_CHECKING, Any

import structlog
import uvicorn
from fastapi import FastAPI
from fastapi.routing import APIRoute

from memwarden import __version__
from memwarden._files import write_private
from memwarden.daemon._callers import Callers
from memwarden.daemon._console import console as console_pages
from memwarden.daemon._guard import RequestGuard
from memwarden.daemon._routes import EXCEPTION_HANDLERS, ROUTERS, ErrorMessage
from memwarden.daemon._token import TOKEN_FILE, ensure_token
from memwarden.daemon._web import ReviewSessions, signed_out_page
from memwarden.daemon._web import router as review_pages
from memwarden.errors import AddressInUseError, ConfigError, MemwardenError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator
    from pathlib import Path

    from memwarden.daemon._app import Daemon

__all__ = ["TOKEN_FILE", "ApiServer", "create_app", "ensure_token"]

log = structlog.get_logger("memwarden.api")
API_FILE = "api.json"

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorMessage, "description": "The request could not be used."},
    401: {"model": ErrorMessage, "description": "Missing or wrong token."},
    403: {"model": ErrorMessage, "description": "The token's agent may not do this."},
    404: {"model": ErrorMessage, "description": "No such block."},
    409: {"model": ErrorMessage, "description": "A short id that matches several blocks."},
    413: {"model": ErrorMessage, "description": "Body too large."},
    422: {"model": ErrorMessage, "description": "Invalid input: each field named."},
    503: {"model": ErrorMessage, "description": "The store is unavailable."},
}


def create_app(
    daemon: Daemon,
    *,
    token: str,
    max_body_bytes: int = 1024 * 1024,
    docs: bool = True,
    callers: Callers | None = None,
) -> FastAPI:
    """The FastAPI application over a running daemon.

    The routes are the routers of ``daemon/_routes`` (one per resource), which get the
    daemon (``app.state.daemon``) and the token check through ``Depends``; the error
    handlers are registered here, all at once. ``docs``: serve ``/docs``, ``/redoc`` and
    ``/openapi.json`` (behind the token like every other route); ``False`` removes them.
    ``callers``: the agents and their tokens (default: ``token`` alone, as the agent
    ``default`` with every operation and namespace).
    """
    app = FastAPI(
        title="memwarden",
        version=__version__,
        description="Keeps an AI agent's memory true. docs/ARCHITECTURE.md describes the contract.",
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
        responses=_ERRORS,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.daemon = daemon
    app.state.token = token.encode()
    app.state.callers = callers if callers is not None else Callers.single(token)
    sessions = ReviewSessions()
    app.state.review_sessions = sessions
    app.add_middleware(
        RequestGuard,
        callers=app.state.callers,
        max_body_bytes=max_body_bytes,
        session_ok=sessions.cookie_ok,
        refuse_session=signed_out_page,
    )
    app.include_router(console_pages)
    app.include_router(review_pages)
    for router in ROUTERS:
        app.include_router(router)
    # Which methods each path has, for the Allow header of a 405 (``_routes/_errors.py``).
    app.state.route_methods = [
        (route.path_regex, frozenset(route.methods or ()))
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
    ]
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
        callers: Callers | None = None,
    ) -> None:
        app = create_app(
            daemon, token=token, max_body_bytes=max_body_bytes, docs=docs, callers=callers
        )
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
    """Advertise the API URL in the state dir while it serves (0600, replaced atomically),
    with this process's pid and host: a client on this host refuses the file of a daemon
    that died without removing it (``kill -9``)."""
    path = home / API_FILE
    advert = {"url": url, "pid": os.getpid(), "host": socket.gethostname()}
    write_private(path, (json.dumps(advert) + "\n").encode())
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
