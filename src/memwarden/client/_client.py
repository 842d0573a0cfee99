"""Python clients for a running daemon: :class:`Client` (sync) and :class:`AsyncClient`.

A client finds its daemon the way ``git`` finds a repository (:func:`find_home`): the
``home`` argument, then ``MEMWARDEN_HOME``, then ``./.memwarden`` in the current
directory or the nearest parent that has one, then the user state dir. The URL
(``api.json``) and the token always come from that one state dir, so a directory can
never pair its own URL with a token kept elsewhere; a URL or token given explicitly
(arguments, ``MEMWARDEN_URL`` / ``MEMWARDEN_TOKEN``) is used as given. Errors map to
memwarden's own exceptions.

Blocks come back as :class:`~memwarden.memory.Block` models; the answers whose shape the
API documents as typed dictionaries (``_answers.py``: :class:`HealthAnswer`,
:class:`BlockPage`, ...), which are the decoded JSON ``dict`` itself, so code that indexes
them as dicts keeps working; the others as that JSON.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import quote

import httpx

from memwarden.errors import (
    AmbiguousIdError,
    NotFoundError,
    TransportError,
    ValidationInputError,
    VersionConflictError,
)
from memwarden.memory import Block, NewBlock, ValidationEvent

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import TracebackType

    from memwarden.client._answers import (
        AddedBlock,
        BelievedAt,
        BlockPage,
        EventsAccepted,
        ForgetAnswer,
        HealthAnswer,
        Liveness,
        RevalidateAnswer,
        SuggestAnswer,
        Tombstone,
    )
    from memwarden.memory import Binding

__all__ = [
    "AsyncClient",
    "Client",
    "DaemonNotRunningError",
    "Endpoint",
    "Home",
    "find_home",
    "resolve_endpoint",
]

BindMode = Literal["auto", "suggest", "none"]

STATE_DIR_NAME = ".memwarden"  # a project's own state dir, as `memwarden init` sets it up
DEFAULT_URL = "http://127.0.0.1:7077"  # [api] port's default: with a token given, no URL


class DaemonNotRunningError(TransportError):
    """Nothing answers at the daemon's address."""


@dataclass(frozen=True, slots=True)
class Home:
    """A daemon's state dir and how it was found (``--home``, ``MEMWARDEN_HOME``, ...)."""

    path: Path
    found_by: str


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the daemon listens (``url`` is empty while no daemon advertises one)."""

    url: str
    token: str
    uds: str | None = None
    home: Home | None = None
    dead_pid: int | None = None  # the pid of a daemon whose api.json outlived it

    @property
    def shown(self) -> str:
        """The address as a person would write it."""
        return f"unix:{self.uds}" if self.uds else self.url

    def console_url(self, block_id: str) -> str | None:
        """The memory console's page of a block (docs/CONSOLE.md): just the address, a
        browser still needs a sign-in (``memwarden open ID`` prints a one-time link).
        None over a Unix socket or with no daemon address (a browser cannot open those)."""
        if self.uds or not self.url.startswith(("http://", "https://")):
            return None
        return f"{self.url.rstrip('/')}/review/blocks/{quote(block_id, safe='')}"


def find_home(home: str | Path | None = None, *, cwd: str | Path | None = None) -> Home:
    """The state dir a client talks to: like ``git`` finds its repository.

    ``home`` (the ``--home`` flag), then ``MEMWARDEN_HOME``, then ``.memwarden`` in
    ``cwd`` (default: the current directory) or its nearest parent that has one, then
    the user state dir (``$XDG_STATE_HOME/memwarden``, ``~/.local/state/memwarden``).
    """
    if home:
        return Home(Path(home), "--home")
    if env := os.environ.get("MEMWARDEN_HOME"):
        return Home(Path(env), "MEMWARDEN_HOME")
    here = Path(cwd or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        candidate = directory / STATE_DIR_NAME
        if candidate.is_dir():
            return Home(candidate, f"{STATE_DIR_NAME} of {directory}")
    return Home(_default_home(), "the user state dir")


def resolve_endpoint(
    url: str | None = None, token: str | None = None, home: str | Path | None = None
) -> Endpoint:
    """Where the daemon listens and the token to use, both from one state dir.

    Arguments win, then ``MEMWARDEN_URL`` / ``MEMWARDEN_TOKEN``, then the state dir
    found by :func:`find_home`: its ``api.json`` and its ``token``. The URL is never
    taken from one state dir and the token from another: with only the token given, the
    URL is the one of a state dir the user named (``--home``, ``MEMWARDEN_HOME``), else
    the default ``http://127.0.0.1:7077``.
    """
    state = find_home(home)
    url = url or os.environ.get("MEMWARDEN_URL") or None
    token = token or os.environ.get("MEMWARDEN_TOKEN") or None
    # A state dir named by the user (--home, MEMWARDEN_HOME) is trusted for its URL; one
    # found by looking around only when the token comes from it too.
    url_from_home = token is None or state.found_by in ("--home", "MEMWARDEN_HOME")
    if url is None and not url_from_home:
        url = DEFAULT_URL
    if token is None:
        try:
            token = (state.path / "token").read_text().strip()
        except OSError:
            token = ""
    if not token:
        raise TransportError(
            f"no API token: none in {state.path / 'token'} (found by {state.found_by}); "
            "start the daemon there (`memwarden run`), or point at its state dir with "
            "--home or MEMWARDEN_HOME, or set MEMWARDEN_TOKEN"
        )
    dead_pid = None
    if url is None:
        try:
            advert = json.loads((state.path / "api.json").read_text())
            url = str(advert["url"])
            dead_pid = _dead_daemon(advert)
        except (OSError, ValueError, KeyError, TypeError):
            url = ""  # not running: the first call says so
        if dead_pid is not None:
            url = ""  # its daemon died (kill -9) and left it: never call what it named
    if url.startswith("unix:"):
        return Endpoint("http://memwarden", token, uds=url.removeprefix("unix:"), home=state)
    return Endpoint(url.rstrip("/"), token, home=state, dead_pid=dead_pid)


def _dead_daemon(advert: Any) -> int | None:
    """The pid an ``api.json`` names when that process is gone on this host (its daemon
    was killed before it could remove the file); None when alive, elsewhere or unsaid."""
    pid, host = advert.get("pid"), advert.get("host")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or os.name != "posix":
        return None
    if host is not None and host != socket.gethostname():
        return None  # a state dir shared between hosts: this one cannot tell
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except OSError:  # PermissionError: alive, another user's
        return None
    return None


def _default_home() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "memwarden"


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    if response.status_code == 404:
        raise NotFoundError("resource", str(detail), message=str(detail))
    if response.status_code == 412 and isinstance(detail, str):
        current = int(response.json().get("version") or 0)
        raise VersionConflictError("", 0, current, message=detail)
    if response.status_code == 409 and isinstance(detail, str):
        body = response.json()
        if "candidates" not in body:  # the block changed under a bind: ETag is its version
            etag = response.headers.get("ETag", "").strip('"')
            raise VersionConflictError("", 0, int(etag) if etag.isdigit() else 0, message=detail)
        raise AmbiguousIdError("", [str(c) for c in body["candidates"] or []], message=detail)
    if response.status_code == 422 and isinstance(detail, list):
        raise ValidationInputError(
            [
                (".".join(str(p) for p in d.get("loc", []) if p != "body"), d.get("msg", ""))
                for d in detail
            ]
        )
    if response.status_code == 401:
        raise TransportError(
            "the daemon refused the token (check MEMWARDEN_TOKEN or the state dir)"
        )
    raise TransportError(
        f"{response.request.method} {response.request.url.path}: {response.status_code} {detail}"
    )


def _block(data: Any) -> Block:
    """A block from the daemon's answer; fields this client does not know are ignored
    (a newer daemon may add fields: additive changes must not break older clients)."""
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k in Block.model_fields}
    return Block.model_validate(data)


def _added(data: Any) -> AddedBlock:
    """The block and what ``bind`` did, from ``POST /v1/blocks``."""
    bind = data.get("bind") if isinstance(data, dict) else None
    return {"block": _block(data), "bind": bind}


def _if_match(version: int | None) -> dict[str, str] | None:
    return None if version is None else {"If-Match": f'"{version}"'}


def _body(data: Any) -> Any:
    if hasattr(data, "model_dump"):
        return data.model_dump(mode="json", exclude_unset=True)
    return data


def _unreachable(endpoint: Endpoint, err: Exception | None) -> DaemonNotRunningError:
    home = endpoint.home.path if endpoint.home else None
    if endpoint.dead_pid is not None:
        return DaemonNotRunningError(
            f"memwarden is not running for {home}: its api.json names pid"
            f" {endpoint.dead_pid}, which has exited (the daemon was killed or crashed"
            " before removing it); start it again with `memwarden run`"
        )
    if not endpoint.url:
        return DaemonNotRunningError(
            f"memwarden is not running for {home} (no api.json there; start it with "
            "`memwarden run` in its project, or `make run`)"
        )
    cause = f" [{type(err).__name__}]" if err is not None else ""
    return DaemonNotRunningError(
        f"memwarden is not running at {endpoint.shown} (start it with `memwarden run` or "
        f"`make run`){cause}"
    )


class _Ops:
    """The operations, shared by both clients: (method, path, params, json) and a parser."""

    @staticmethod
    def add(block: NewBlock | Mapping[str, Any], *, dedupe: bool) -> tuple[str, str, Any, Any]:
        return "POST", "/v1/blocks", {"dedupe": "true"} if dedupe else None, _body(block)

    @staticmethod
    def add_with_bind(
        block: NewBlock | Mapping[str, Any], bind: BindMode | None, *, dedupe: bool
    ) -> tuple[str, str, Any, Any]:
        body = {**_body(block), **({"bind": bind} if bind is not None else {})}
        return "POST", "/v1/blocks", {"dedupe": "true"} if dedupe else None, body

    @staticmethod
    def proposals(status: str, block_id: str | None, limit: int) -> tuple[str, str, Any, Any]:
        params: dict[str, Any] = {"status": status, "limit": limit}
        if block_id is not None:
            params["block_id"] = block_id
        return "GET", "/v1/proposals", params, None

    @staticmethod
    def suggest(content: str, title: str, limit: int) -> tuple[str, str, Any, Any]:
        body = {"content": content, "title": title, "limit": limit}
        return "POST", "/v1/suggest-bindings", None, body

    @staticmethod
    def blocks(filters: Mapping[str, Any]) -> tuple[str, str, Any, Any]:
        params = {k: v for k, v in filters.items() if v is not None}
        return "GET", "/v1/blocks", params, None

    @staticmethod
    def get(
        block_id: str,
        *,
        max_age: str | None = None,
        fresh: bool = False,
        wait: str = "2s",
        session: str | None = None,
    ) -> tuple[str, str, Any, Any]:
        params: dict[str, Any] = {}
        if max_age is not None or fresh:
            params = {"fresh": fresh, "wait": wait}
            if max_age is not None:
                params["max_age"] = max_age
        if session:
            params["session"] = session
        return "GET", f"/v1/blocks/{block_id}", params or None, None

    @staticmethod
    def update(block_id: str, patch: Mapping[str, Any]) -> tuple[str, str, Any, Any]:
        return "PATCH", f"/v1/blocks/{block_id}", None, _body(patch)

    @staticmethod
    def bind(block_id: str, bindings: Sequence[Any]) -> tuple[str, str, Any, Any]:
        return "PATCH", f"/v1/blocks/{block_id}", None, {"bindings": [_body(b) for b in bindings]}

    @staticmethod
    def auto_bind(block_id: str) -> tuple[str, str, Any, Any]:
        return "POST", f"/v1/blocks/{block_id}/bind", None, {"bind": "auto"}

    @staticmethod
    def archive(block_id: str, reason: str) -> tuple[str, str, Any, Any]:
        return "DELETE", f"/v1/blocks/{block_id}", {"reason": reason}, None

    @staticmethod
    def forget(
        ids: Sequence[str],
        *,
        tag: str | None,
        query: str | None,
        reason: str,
        dry_run: bool,
        vacuum: bool,
    ) -> tuple[str, str, Any, Any]:
        body: dict[str, Any] = {"reason": reason, "dry_run": dry_run, "vacuum": vacuum}
        if ids:
            body["ids"] = list(ids)
        if tag is not None:
            body["tag"] = tag
        if query is not None:
            body["query"] = query
        return "POST", "/v1/forget", None, body

    @staticmethod
    def erasures(block_id: str | None, limit: int) -> tuple[str, str, Any, Any]:
        params: dict[str, Any] = {"limit": limit}
        if block_id:
            params["block_id"] = block_id
        return "GET", "/v1/erasures", params, None

    @staticmethod
    def search(
        query: str,
        *,
        limit: int,
        fresh: bool,
        session: str | None,
        include_refuted: bool,
        wait: str,
        max_age: str | None = None,
        mode: str | None = None,
    ) -> tuple[str, str, Any, Any]:
        params: dict[str, Any] = {
            "q": query,
            "limit": limit,
            "fresh": fresh,
            "include_refuted": include_refuted,
            "wait": wait,
        }
        if max_age is not None:
            params["max_age"] = max_age
        if session:
            params["session"] = session
        if mode is not None:
            params["mode"] = mode
        return "GET", "/v1/search", params, None


class AsyncClient:
    """An asyncio client for the daemon's HTTP API."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        home: str | Path | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.endpoint = resolve_endpoint(url, token, home)
        transport = httpx.AsyncHTTPTransport(uds=self.endpoint.uds) if self.endpoint.uds else None
        self._http = httpx.AsyncClient(
            base_url=self.endpoint.url or "http://memwarden.invalid",
            headers={"Authorization": f"Bearer {self.endpoint.token}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        params: Any = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        if not self.endpoint.url:
            raise _unreachable(self.endpoint, None)
        try:
            response = await self._http.request(
                method, path, params=params, json=body, headers=headers
            )
        except httpx.TransportError as err:
            raise _unreachable(self.endpoint, err) from err
        _raise_for(response)
        return response.json()

    async def add(self, block: NewBlock | Mapping[str, Any], *, dedupe: bool = False) -> Block:
        """Store a block. With ``dedupe``, a live block with the same content (casefolded,
        whitespace collapsed) comes back instead, its ``duplicate_of`` set."""
        return _block(await self._call(*_Ops.add(block, dedupe=dedupe)))

    async def add_with_bind(
        self,
        block: NewBlock | Mapping[str, Any],
        bind: BindMode | None = "auto",
        *,
        dedupe: bool = False,
    ) -> AddedBlock:
        """Store a block and let memwarden look for its binding: ``auto`` binds the best
        suggestion whose dry run confirms (if confident enough), ``suggest`` stores it
        unbound with the suggestions, ``None`` leaves it to the daemon's ``[suggest] bind``.
        ``{"block", "bind"}``: ``bind`` says what was chosen and why (docs/SUGGESTIONS.md)."""
        return _added(await self._call(*_Ops.add_with_bind(block, bind, dedupe=dedupe)))

    async def list_blocks(self, **filters: Any) -> BlockPage:
        """One page: ``{"blocks": [Block], "next": cursor | None}``; filters ``state``,
        ``tag``, ``sensor``, ``tier``, ``volatility``, ``after`` (the cursor), ``limit``."""
        data = await self._call(*_Ops.blocks(filters))
        return {"blocks": [_block(b) for b in data["blocks"]], "next": data.get("next")}

    async def get(
        self, block_id: str, *, max_age: str | None = None, fresh: bool = False, wait: str = "2s"
    ) -> Block:
        """A block; with ``max_age`` (``30s``) or ``fresh``, re-checked first when old and
        its check is quick. :meth:`read` also returns the receipt."""
        data = await self.read(block_id, max_age=max_age, fresh=fresh, wait=wait)
        data.pop("receipt", None)
        return _block(data)

    async def session_events(
        self, session: str, *, after: int = 0, wait: str = "10s", limit: int = 100
    ) -> list[dict[str, Any]]:
        """Notices for ``session`` after number ``after``: a fact it read was refuted or
        went stale (long-polls up to ``wait``)."""
        params = {"session": session, "after": after, "wait": wait, "limit": limit}
        answer: list[dict[str, Any]] = await self._call("GET", "/v1/events", params, None)
        return answer

    async def believed_at(self, block_id: str, as_of: str) -> BelievedAt:
        """What was believed about a block at ``as_of`` (ISO 8601): version, content,
        state, reliability, validation and the last evidence before then."""
        params = {"as_of": as_of}
        then: BelievedAt = await self._call("GET", f"/v1/blocks/{block_id}", params, None)
        return then

    async def read(
        self,
        block_id: str,
        *,
        max_age: str | None = None,
        fresh: bool = False,
        wait: str = "2s",
        session: str | None = None,
    ) -> dict[str, Any]:
        """A block as JSON with its ``receipt`` (verdict, verified_by/at, age_s, ...); a
        ``session`` is told (:meth:`session_events`) if it later falls."""
        answer: dict[str, Any] = await self._call(
            *_Ops.get(block_id, max_age=max_age, fresh=fresh, wait=wait, session=session)
        )
        return answer

    async def update(
        self, block_id: str, patch: Mapping[str, Any], *, if_version: int | None = None
    ) -> Block:
        """Edit a block. With ``if_version`` (the ``version`` you read), the edit applies
        only if nobody edited it since (else :class:`VersionConflictError`)."""
        return _block(await self._call(*_Ops.update(block_id, patch), _if_match(if_version)))

    async def bind(
        self,
        block_id: str,
        bindings: Sequence[Binding | Mapping[str, Any]],
        *,
        if_version: int | None = None,
    ) -> Block:
        """Replace a stored block's bindings (``[]`` unbinds it): checked as an added
        block's are; the block is unverified until its sensors check the new ones."""
        return _block(await self._call(*_Ops.bind(block_id, bindings), _if_match(if_version)))

    async def auto_bind(self, block_id: str) -> AddedBlock:
        """Look for a binding for a stored block now and add the best one whose dry run
        confirms (if confident enough): ``{"block", "bind"}``, ``bind`` saying what was
        chosen and why (docs/SUGGESTIONS.md). :class:`VersionConflictError` when the
        block's text was edited meanwhile (nothing bound: ask again)."""
        return _added(await self._call(*_Ops.auto_bind(block_id)))

    async def archive(self, block_id: str, reason: str = "archived via client") -> Block:
        return _block(await self._call(*_Ops.archive(block_id, reason)))

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        fresh: bool = False,
        session: str | None = None,
        include_refuted: bool = False,
        wait: str = "2s",
        max_age: str | None = None,
        mode: str | None = None,
    ) -> dict[str, Any]:
        """``{"query", "results": [{"block", "score", "rank", "stale", "warnings", "factors",
        "receipt"}], "checked", "timed_out", "hidden_refuted"}``; ``max_age`` (``30s``)
        re-checks older results first when their check is quick, ``fresh`` any age.
        ``mode``: ``keyword``, ``vector`` or ``hybrid`` (the daemon's default: hybrid
        when it has an embedder)."""
        answer: dict[str, Any] = await self._call(
            *_Ops.search(
                query,
                limit=limit,
                fresh=fresh,
                session=session,
                include_refuted=include_refuted,
                wait=wait,
                max_age=max_age,
                mode=mode,
            )
        )
        return answer

    async def reembed(self) -> dict[str, Any]:
        """Queue every block for a new vector: ``{"queued", "embedder"}``."""
        answer: dict[str, Any] = await self._call("POST", "/v1/search/reembed", None, None)
        return answer

    async def stale(self, limit: int = 100) -> list[Block]:
        data = await self._call("GET", "/v1/stale", {"limit": limit})
        return [_block(b) for b in data]

    async def events(self, block_id: str, limit: int = 50) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = await self._call(
            "GET", f"/v1/blocks/{block_id}/events", {"limit": limit}
        )
        return answer

    async def explain(self, block_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self._call("GET", f"/v1/blocks/{block_id}/explain")
        return answer

    async def suggest_bindings(
        self, content: str, *, title: str = "", limit: int = 5
    ) -> SuggestAnswer:
        """Bindings that could check this fact, each dry-run now: ``{"suggestions",
        "contradicts"}`` (docs/SUGGESTIONS.md)."""
        answer: SuggestAnswer = await self._call(*_Ops.suggest(content, title, limit))
        return answer

    async def proposals(
        self, *, status: str = "pending", block_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """What the proposal pass proposes for unbound facts (a binding, or depends_on)."""
        data = await self._call(*_Ops.proposals(status, block_id, limit))
        return list(data["proposals"])

    async def decide_proposal(
        self, proposal_id: str, action: Literal["accept", "reject"], *, decided_by: str
    ) -> dict[str, Any]:
        """Accept (bind the fact, or record its dependency) or reject a proposal."""
        body = {"action": action, "decided_by": decided_by}
        answer: dict[str, Any] = await self._call(
            "POST", f"/v1/proposals/{proposal_id}", None, body
        )
        return answer

    async def revalidate(self, block_id: str, *, wait: str = "0s") -> RevalidateAnswer:
        """Ask the block's sensors to check it now; wait up to ``wait`` for the outcome."""
        answer: RevalidateAnswer = await self._call(
            "POST", f"/v1/blocks/{block_id}/revalidate", {"wait": wait}
        )
        return answer

    async def ingest(self, events: Sequence[ValidationEvent | Mapping[str, Any]]) -> EventsAccepted:
        """Report events as a remote sensor (answers after commit): accepted, duplicates,
        unmatched, rejected (schema) and capped values."""
        answer: EventsAccepted = await self._call(
            "POST", "/v1/events", None, [_body(e) for e in events]
        )
        return answer

    async def sensors(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = await self._call("GET", "/v1/sensors")
        return answer

    async def request_review(self, block_id: str, reason: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self._call(
            "POST", f"/v1/blocks/{block_id}/review", None, {"reason": reason}
        )
        return answer

    async def follow(
        self, after: int = 0, *, wait: str = "10s", limit: int = 100
    ) -> list[dict[str, Any]]:
        """Events after ``after`` (long-polls up to ``wait`` when there are none yet)."""
        answer: list[dict[str, Any]] = await self._call(
            "GET", "/v1/events", {"after": after, "wait": wait, "limit": limit}
        )
        return answer

    async def reviews(self, status: str = "pending", limit: int = 100) -> list[dict[str, Any]]:
        """The human review queue (``pending``, ``decided`` or ``all``)."""
        answer: list[dict[str, Any]] = await self._call(
            "GET", "/v1/reviews", {"status": status, "limit": limit}
        )
        return answer

    async def review(self, review_id: str, *, events: int = 10) -> dict[str, Any]:
        """One review item with its block and the evidence."""
        answer: dict[str, Any] = await self._call(
            "GET", f"/v1/reviews/{review_id}", {"events": events}
        )
        return answer

    async def decide(
        self,
        review_id: str,
        decision: str,
        *,
        decided_by: str,
        comment: str = "",
        content: str | None = None,
    ) -> dict[str, Any]:
        """Confirm, reject or edit (with ``content``) a review item."""
        body = {
            "decision": decision,
            "decided_by": decided_by,
            "comment": comment,
            "content": content,
        }
        answer: dict[str, Any] = await self._call(
            "POST", f"/v1/reviews/{review_id}/decision", None, body
        )
        return answer

    async def review_link(self, reviewer: str) -> str:
        """A one-time sign-in link to the review page."""
        data = await self._call("POST", "/v1/review-links", None, {"reviewer": reviewer})
        return str(data["url"])

    async def health(self) -> HealthAnswer:
        """The 0-100 health score, its status and warnings, and the counts behind it."""
        answer: HealthAnswer = await self._call("GET", "/v1/health")
        return answer

    async def export(self, *, after: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """A page of whole blocks as export objects (``after``: the last id of the previous)."""
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["after"] = after
        answer: list[dict[str, Any]] = await self._call("GET", "/v1/export", params)
        return answer

    async def import_blocks(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Import export objects (idempotent by id) and new blocks."""
        answer: dict[str, int] = await self._call("POST", "/v1/import", None, list(rows))
        return answer

    async def healthz(self) -> Liveness:
        """Liveness and version (``/healthz``)."""
        answer: Liveness = await self._call("GET", "/healthz")
        return answer

    async def forget(
        self,
        ids: Sequence[str] = (),
        *,
        tag: str | None = None,
        query: str | None = None,
        reason: str = "",
        dry_run: bool = False,
        vacuum: bool = False,
    ) -> ForgetAnswer:
        """Erase blocks for good, named by ids (short ids accepted), a tag or the words of
        a query (exactly one); ``dry_run`` only lists them. The answer says what went, from
        where, and what the daemon cannot reach (docs/PRIVACY.md)."""
        op = _Ops.forget(ids, tag=tag, query=query, reason=reason, dry_run=dry_run, vacuum=vacuum)
        answer: ForgetAnswer = await self._call(*op)
        return answer

    async def erasures(self, *, block_id: str | None = None, limit: int = 100) -> list[Tombstone]:
        """The erasure log (tombstones, never content), newest first."""
        answer: list[Tombstone] = await self._call(*_Ops.erasures(block_id, limit))
        return answer

    async def privacy(self) -> dict[str, Any]:
        """The privacy policy in force, who set it, and what it redacted and refused."""
        answer: dict[str, Any] = await self._call("GET", "/v1/privacy")
        return answer

    async def set_privacy(self, policy: dict[str, Any]) -> dict[str, Any]:
        """Replace the privacy policy (whole). The daemon keeps it in its state dir: it
        stays in force across restarts and SIGHUP until :meth:`reset_privacy`."""
        answer: dict[str, Any] = await self._call("PUT", "/v1/privacy", body=policy)
        return answer

    async def reset_privacy(self) -> dict[str, Any]:
        """Forget the policy :meth:`set_privacy` kept: the configuration's applies again."""
        answer: dict[str, Any] = await self._call("DELETE", "/v1/privacy")
        return answer


class Client:
    """A blocking client for the daemon's HTTP API (same methods as :class:`AsyncClient`)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        home: str | Path | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.endpoint = resolve_endpoint(url, token, home)
        transport = httpx.HTTPTransport(uds=self.endpoint.uds) if self.endpoint.uds else None
        self._http = httpx.Client(
            base_url=self.endpoint.url or "http://memwarden.invalid",
            headers={"Authorization": f"Bearer {self.endpoint.token}"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        method: str,
        path: str,
        params: Any = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        if not self.endpoint.url:
            raise _unreachable(self.endpoint, None)
        try:
            response = self._http.request(method, path, params=params, json=body, headers=headers)
        except httpx.TransportError as err:
            raise _unreachable(self.endpoint, err) from err
        _raise_for(response)
        return response.json()

    def add(self, block: NewBlock | Mapping[str, Any], *, dedupe: bool = False) -> Block:
        return _block(self._call(*_Ops.add(block, dedupe=dedupe)))

    def add_with_bind(
        self,
        block: NewBlock | Mapping[str, Any],
        bind: BindMode | None = "auto",
        *,
        dedupe: bool = False,
    ) -> AddedBlock:
        """Store a block and let memwarden bind it (see :meth:`AsyncClient.add_with_bind`)."""
        return _added(self._call(*_Ops.add_with_bind(block, bind, dedupe=dedupe)))

    def list_blocks(self, **filters: Any) -> BlockPage:
        """One page: ``{"blocks": [Block], "next": cursor | None}`` (see AsyncClient)."""
        data = self._call(*_Ops.blocks(filters))
        return {"blocks": [_block(b) for b in data["blocks"]], "next": data.get("next")}

    def get(
        self, block_id: str, *, max_age: str | None = None, fresh: bool = False, wait: str = "2s"
    ) -> Block:
        data = self.read(block_id, max_age=max_age, fresh=fresh, wait=wait)
        data.pop("receipt", None)
        return _block(data)

    def believed_at(self, block_id: str, as_of: str) -> BelievedAt:
        """What was believed about a block at ``as_of`` (ISO 8601)."""
        then: BelievedAt = self._call("GET", f"/v1/blocks/{block_id}", {"as_of": as_of}, None)
        return then

    def read(
        self, block_id: str, *, max_age: str | None = None, fresh: bool = False, wait: str = "2s"
    ) -> dict[str, Any]:
        """A block as JSON with its ``receipt``."""
        answer: dict[str, Any] = self._call(
            *_Ops.get(block_id, max_age=max_age, fresh=fresh, wait=wait)
        )
        return answer

    def update(
        self, block_id: str, patch: Mapping[str, Any], *, if_version: int | None = None
    ) -> Block:
        return _block(self._call(*_Ops.update(block_id, patch), _if_match(if_version)))

    def bind(
        self,
        block_id: str,
        bindings: Sequence[Binding | Mapping[str, Any]],
        *,
        if_version: int | None = None,
    ) -> Block:
        """Replace a stored block's bindings (see AsyncClient)."""
        return _block(self._call(*_Ops.bind(block_id, bindings), _if_match(if_version)))

    def auto_bind(self, block_id: str) -> AddedBlock:
        """Bind a stored block to its best confirming suggestion (see AsyncClient)."""
        return _added(self._call(*_Ops.auto_bind(block_id)))

    def archive(self, block_id: str, reason: str = "archived via client") -> Block:
        return _block(self._call(*_Ops.archive(block_id, reason)))

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        fresh: bool = False,
        session: str | None = None,
        include_refuted: bool = False,
        wait: str = "2s",
        max_age: str | None = None,
        mode: str | None = None,
    ) -> dict[str, Any]:
        answer: dict[str, Any] = self._call(
            *_Ops.search(
                query,
                limit=limit,
                fresh=fresh,
                session=session,
                include_refuted=include_refuted,
                wait=wait,
                max_age=max_age,
                mode=mode,
            )
        )
        return answer

    def reembed(self) -> dict[str, Any]:
        """Queue every block for a new vector: ``{"queued", "embedder"}``."""
        answer: dict[str, Any] = self._call("POST", "/v1/search/reembed", None, None)
        return answer

    def stale(self, limit: int = 100) -> list[Block]:
        return [_block(b) for b in self._call("GET", "/v1/stale", {"limit": limit})]

    def events(self, block_id: str, limit: int = 50) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self._call(
            "GET", f"/v1/blocks/{block_id}/events", {"limit": limit}
        )
        return answer

    def explain(self, block_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("GET", f"/v1/blocks/{block_id}/explain")
        return answer

    def suggest_bindings(self, content: str, *, title: str = "", limit: int = 5) -> SuggestAnswer:
        answer: SuggestAnswer = self._call(*_Ops.suggest(content, title, limit))
        return answer

    def proposals(
        self, *, status: str = "pending", block_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """What the proposal pass proposes for unbound facts (see AsyncClient)."""
        return list(self._call(*_Ops.proposals(status, block_id, limit))["proposals"])

    def decide_proposal(
        self, proposal_id: str, action: Literal["accept", "reject"], *, decided_by: str
    ) -> dict[str, Any]:
        body = {"action": action, "decided_by": decided_by}
        answer: dict[str, Any] = self._call("POST", f"/v1/proposals/{proposal_id}", None, body)
        return answer

    def revalidate(self, block_id: str, *, wait: str = "0s") -> RevalidateAnswer:
        answer: RevalidateAnswer = self._call(
            "POST", f"/v1/blocks/{block_id}/revalidate", {"wait": wait}
        )
        return answer

    def ingest(self, events: Sequence[ValidationEvent | Mapping[str, Any]]) -> EventsAccepted:
        answer: EventsAccepted = self._call("POST", "/v1/events", None, [_body(e) for e in events])
        return answer

    def sensors(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self._call("GET", "/v1/sensors")
        return answer

    def request_review(self, block_id: str, reason: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._call(
            "POST", f"/v1/blocks/{block_id}/review", None, {"reason": reason}
        )
        return answer

    def follow(
        self, after: int = 0, *, wait: str = "10s", limit: int = 100
    ) -> list[dict[str, Any]]:
        """Events after ``after`` (long-polls up to ``wait`` when there are none yet)."""
        answer: list[dict[str, Any]] = self._call(
            "GET", "/v1/events", {"after": after, "wait": wait, "limit": limit}
        )
        return answer

    def reviews(self, status: str = "pending", limit: int = 100) -> list[dict[str, Any]]:
        """The human review queue (``pending``, ``decided`` or ``all``)."""
        answer: list[dict[str, Any]] = self._call(
            "GET", "/v1/reviews", {"status": status, "limit": limit}
        )
        return answer

    def review(self, review_id: str, *, events: int = 10) -> dict[str, Any]:
        """One review item with its block and the evidence."""
        answer: dict[str, Any] = self._call("GET", f"/v1/reviews/{review_id}", {"events": events})
        return answer

    def decide(
        self,
        review_id: str,
        decision: str,
        *,
        decided_by: str,
        comment: str = "",
        content: str | None = None,
    ) -> dict[str, Any]:
        """Confirm, reject or edit (with ``content``) a review item."""
        body = {
            "decision": decision,
            "decided_by": decided_by,
            "comment": comment,
            "content": content,
        }
        answer: dict[str, Any] = self._call("POST", f"/v1/reviews/{review_id}/decision", None, body)
        return answer

    def review_link(self, reviewer: str) -> str:
        """A one-time sign-in link to the review page."""
        data = self._call("POST", "/v1/review-links", None, {"reviewer": reviewer})
        return str(data["url"])

    def health(self) -> HealthAnswer:
        answer: HealthAnswer = self._call("GET", "/v1/health")
        return answer

    def export(self, *, after: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """A page of whole blocks as export objects (``after``: the last id of the previous)."""
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["after"] = after
        answer: list[dict[str, Any]] = self._call("GET", "/v1/export", params)
        return answer

    def import_blocks(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Import export objects (idempotent by id) and new blocks."""
        answer: dict[str, int] = self._call("POST", "/v1/import", None, list(rows))
        return answer

    def healthz(self) -> Liveness:
        """Liveness and version (``/healthz``)."""
        answer: Liveness = self._call("GET", "/healthz")
        return answer

    def forget(
        self,
        ids: Sequence[str] = (),
        *,
        tag: str | None = None,
        query: str | None = None,
        reason: str = "",
        dry_run: bool = False,
        vacuum: bool = False,
    ) -> ForgetAnswer:
        """Erase blocks for good (see :meth:`AsyncClient.forget`)."""
        op = _Ops.forget(ids, tag=tag, query=query, reason=reason, dry_run=dry_run, vacuum=vacuum)
        answer: ForgetAnswer = self._call(*op)
        return answer

    def erasures(self, *, block_id: str | None = None, limit: int = 100) -> list[Tombstone]:
        """The erasure log (tombstones, never content), newest first."""
        answer: list[Tombstone] = self._call(*_Ops.erasures(block_id, limit))
        return answer

    def privacy(self) -> dict[str, Any]:
        """The privacy policy in force, who set it, and what it redacted and refused."""
        answer: dict[str, Any] = self._call("GET", "/v1/privacy")
        return answer

    def set_privacy(self, policy: dict[str, Any]) -> dict[str, Any]:
        """Replace the privacy policy (whole). The daemon keeps it in its state dir: it
        stays in force across restarts and SIGHUP until :meth:`reset_privacy`."""
        answer: dict[str, Any] = self._call("PUT", "/v1/privacy", body=policy)
        return answer

    def reset_privacy(self) -> dict[str, Any]:
        """Forget the policy :meth:`set_privacy` kept: the configuration's applies again."""
        answer: dict[str, Any] = self._call("DELETE", "/v1/privacy")
        return answer
