"""``memwarden mcp``: an MCP server over stdio for agents, talking to the running daemon.

Every answer says not only what memory holds but how sure it is and how fresh: state,
reliability, the age of the last validation, and warnings. ``memory_search`` with
``fresh=true`` (and always for high/ephemeral facts) checks stale facts before answering.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar
from urllib.parse import unquote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams
from pydantic import Field

from memwarden import __version__
from memwarden.client import AsyncClient, Endpoint
from memwarden.errors import MemwardenError, NotFoundError, ValidationInputError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

SESSION_CONTEXT = "memwarden://session/{session}/context"
_SESSION_PREFIX, _SESSION_SUFFIX = "memwarden://session/", "/context"

__all__ = ["build_server", "context_line", "render_context"]

INSTRUCTIONS = """\
memwarden is a memory whose facts are checked against the world by sensors (files,
tests, processes, HTTP APIs, human reviewers). Search it before relying on what you
think you know; every result carries its state (fresh, stale, unverified, refuted),
its reliability (0-1) and how long ago it was validated. Treat stale or low-reliability
(< 0.7) facts as hints to verify, not truths. Store durable facts with memory_add and
bind them to a sensor when one can check them (e.g. a config file path), or pass
bind="auto" and memwarden finds the binding itself (memory_suggest_bindings shows the
candidates without storing anything)."""


def _ago(iso: str | None, now: datetime) -> str:
    if not iso:
        return "never validated"
    seconds = (now - datetime.fromisoformat(iso)).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"validated {seconds / size:.0f}{unit} ago"
    return f"validated {max(0, seconds):.0f}s ago"


def context_line(result: dict[str, Any], now: datetime | None = None) -> str:
    """One compact line: ``[semantic · fs · validated 2h ago · r=0.95] content``."""
    at = now or datetime.now(UTC)
    block = result.get("block", result)
    validation = block["validation"]
    sensor = validation.get("validated_by") or (
        block["bindings"][0]["sensor"] if block.get("bindings") else "unbound"
    )
    reliability = validation["reliability"]
    tags = [
        block["category"],
        sensor,
        _ago(validation.get("validated_at"), at),
        f"r={reliability:.2f}",
    ]
    state = block["state"]
    receipt = result.get("receipt")
    if receipt:  # the verdict of this read: what the agent should make of the fact
        verdict = receipt["verdict"]
        why = {
            "stale": ", ".join(block.get("stale_reasons") or []),
            "checking": "re-check pending",
            "unreachable": receipt.get("why") or "",
        }.get(verdict, "")
        tags.insert(0, verdict.upper() + (f" ({why})" if why else ""))
        if receipt.get("checked_now"):
            tags.insert(1, "checked now")
    elif state != "fresh":
        reasons = ", ".join(block.get("stale_reasons") or [])
        tags.insert(0, state.upper() + (f" ({reasons})" if reasons else ""))
    if reliability < 0.7:
        tags.append("LOW RELIABILITY")
    text = (block.get("title") + ": " if block.get("title") else "") + block["content"]
    return f"[{' · '.join(tags)}] {' '.join(text.split())[:500]}"


def render_context(answer: dict[str, Any], now: datetime | None = None) -> str:
    lines = [context_line(r, now) for r in answer.get("results", [])]
    return "\n".join(lines) if lines else "(no relevant memory)"


T = TypeVar("T")


async def _with_endpoint(client: AsyncClient, answer: Awaitable[T]) -> tuple[T, Endpoint]:
    """An answer and where it came from (for the console URLs of its blocks)."""
    return await answer, client.endpoint


def _compact(result: dict[str, Any], now: datetime, endpoint: Endpoint) -> dict[str, Any]:
    block = result["block"]
    v = block["validation"]
    return {
        "id": block["id"],
        "console_url": endpoint.console_url(block["id"]),
        "short_id": block.get("short_id"),
        "title": block["title"],
        "content": block["content"],
        "state": block["state"],
        "stale": result.get("stale", block["state"] == "stale"),
        "reliability": v["reliability"],
        "validated": _ago(v.get("validated_at"), now),
        "validated_by": v.get("validated_by"),
        "info_type": block["info_type"],
        "volatility": block["volatility"],
        "warnings": result.get("warnings", []),
        "score": result.get("score"),
        "rank": result.get("rank"),
        "receipt": result.get("receipt"),
        "line": context_line(result, now),
    }


ADD_DESCRIPTION = """\
Store a fact. Say how it behaves: info_type static (principles, decisions), semi_static
(configuration), dynamic (code status, runtime state) or ephemeral (seconds-to-minutes
state). Bind it to a sensor that can check it, so memwarden keeps it true: call
memory_sensors first to see which sensors run, what each may name and ready-made examples.
A binding is {"sensor": <a running sensor's name>, ...its keys}, e.g.
  {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
  {"sensor": "fs", "path": "README.md", "regex": "timeout = [0-9]+"}
  {"sensor": "tests", "test": "tests/test_api.py::test_timeout"}
  {"sensor": "runtime", "check": "db-port"}
  {"sensor": "http", "url": "http://localhost:8000/health", "status": [200]}
  {"sensor": "review"}  (a person confirms it)
With several daemons on one memory, "nodes": ["ci-7"] says whose sensor checks it (node
names in order of preference, or ["*"]: any node; default: the node you talk to).
Sensor names are the ones configured (memory_sensors lists them). Or let memwarden find
the binding: bind="auto" binds the best binding whose check confirms the fact now (the
answer's bind says what was chosen and why, or why nothing was); bind="suggest" stores it
unbound and answers the candidates. The same fact stored twice comes back as the existing
one (duplicate_of) unless dedupe is false."""


SUGGEST_DESCRIPTION = """\
Find the binding that could check a fact, without storing anything: memwarden matches the
text (numbers with units, versions, quoted strings, key-like words, file names) to the
values its sensors see (config and manifest files) and checks each candidate once now.
suggestions: bindings whose check confirms the fact, best first, each with confidence
(0-1) and why; pass one as memory_add's bindings. contradicts: what the text says that the
world refutes (the fact is already wrong: "the file says 45")."""


BIND_DESCRIPTION = """\
Bind a fact you stored earlier so a sensor checks it. auto=true: memwarden finds the binding
itself (the best one whose check confirms the fact now, if confident enough) and says what it
chose and why, or why none. Or give bindings (they replace the fact's own; [] removes them;
memory_sensors shows what each sensor can check). The fact is unverified until its sensor
checks the new binding."""


def _suggestion(s: Mapping[str, Any]) -> dict[str, Any]:
    check = s["check"]
    return {
        "binding": s["binding"],
        "confidence": s["confidence"],
        "why": s["why"],
        "check": check["outcome"],
        "observed": check.get("observed"),
    }


def _bind_summary(bind: Mapping[str, Any]) -> dict[str, Any]:
    """What memory_add's bind did, for an agent: the binding chosen (or none) and why."""
    chosen = bind.get("chosen")
    return {
        "mode": bind["mode"],
        "chosen": chosen["binding"] if chosen else None,
        "confidence": chosen["confidence"] if chosen else None,
        "why": bind["why"],
        "suggestions": [_suggestion(s) for s in bind.get("suggestions", [])],
        "contradicts": [_suggestion(s) for s in bind.get("contradicts", [])],
    }


async def _bind(
    call: Callable[[Callable[[AsyncClient], Any]], Awaitable[Any]],
    block_id: str,
    *,
    auto: bool,
    bindings: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """memory_bind: auto-bind a stored fact, or replace its bindings."""
    if auto == (bindings is not None):
        raise ToolError("give auto=true or bindings (a list, [] to unbind), one of them")
    found = None
    if auto:
        added = await call(lambda c: c.auto_bind(block_id))
        block, found = added["block"], added["bind"]
    else:
        given = bindings or []
        block = await call(lambda c: c.bind(block_id, given))
    answer: dict[str, Any] = {
        "id": block.id,
        "short_id": block.short_id,
        "state": block.state.value,
        "bindings": [b.model_dump(mode="json") for b in block.bindings],
    }
    if found is not None:
        answer["bind"] = _bind_summary(found)
    return answer


def actionable(err: MemwardenError) -> str:
    """The error as an agent can act on it: what went wrong and which tool helps."""
    text = str(err)
    if isinstance(err, NotFoundError):
        return f"{text}. Use memory_search to find facts and their ids (short ids work too)."
    if isinstance(err, ValidationInputError) and any(
        f.startswith("bindings") for f, _ in err.errors
    ):
        return (
            f"{text}. Use memory_sensors to see the running sensors, what each can check and "
            "example bindings."
        )
    return text


def build_server(client_factory: Callable[[], AsyncClient] = AsyncClient) -> MCPServer[Any]:
    """The MCP server; ``client_factory`` makes the daemon client (tests pass their own)."""
    bus = InMemorySubscriptionBus()  # subscriptions/listen clients (2026-07-28 protocol)
    server: MCPServer[Any] = MCPServer(
        name="memwarden", version=__version__, instructions=INSTRUCTIONS, subscriptions=bus
    )
    _serve_session_context(server, client_factory, bus)

    async def call(fn: Callable[[AsyncClient], Any]) -> Any:
        try:
            async with client_factory() as client:
                return await fn(client)
        except MemwardenError as err:  # isError=true, with what to do about it
            raise ToolError(actionable(err)) from None

    _binding_and_erasure_tools(server, call)

    @server.tool(
        description=(
            "Search memory. Returns the most relevant facts, ranked (rank 0-1) by relevance x "
            "freshness x reliability, each with a receipt: verdict (verified, checking, "
            "unverified, stale, unreachable, refuted), who verified it, when, and the "
            "observation. Set fresh=true to have every fact a sensor can check quickly "
            "checked now before the answer (up to a few seconds), or max_age_seconds to "
            "re-check only facts validated longer ago than that."
        )
    )
    async def memory_search(
        query: Annotated[str, Field(description="Words to look for (plain text).")],
        limit: Annotated[int, Field(ge=1, le=50, description="How many results.")] = 5,
        fresh: Annotated[bool, Field(description="Check quick facts now (max_age 0).")] = False,
        session: Annotated[str | None, Field(description="Your conversation id.")] = None,
        max_age_seconds: Annotated[
            float | None, Field(ge=0, description="Re-check facts validated longer ago.")
        ] = None,
        mode: Annotated[
            Literal["keyword", "vector", "hybrid"] | None,
            Field(
                description="keyword (exact words), vector (by meaning) or hybrid (both); "
                "default: hybrid when the daemon has an embedder, else keyword."
            ),
        ] = None,
    ) -> dict[str, Any]:
        max_age = f"{max_age_seconds}s" if max_age_seconds is not None else None
        answer, endpoint = await call(
            lambda c: _with_endpoint(
                c,
                c.search(
                    query, limit=limit, fresh=fresh, session=session, max_age=max_age, mode=mode
                ),
            )
        )
        now = datetime.now(UTC)
        return {
            "results": [_compact(r, now, endpoint) for r in answer["results"]],
            "checked": answer.get("checked", []),
            "timed_out": answer.get("timed_out", []),
            "observations": answer.get("observations", {}),
            "hidden_refuted": answer.get("hidden_refuted", 0),
            "mode": answer.get("mode"),
        }

    @server.tool(description=ADD_DESCRIPTION)
    async def memory_add(
        content: Annotated[str, Field(description="The fact, one self-contained statement.")],
        title: Annotated[str, Field(description="A short title.")] = "",
        info_type: Annotated[
            Literal["static", "semi_static", "dynamic", "ephemeral"],
            Field(description="How the knowledge behaves; sets how fast it expires."),
        ] = "semi_static",
        tags: Annotated[list[str], Field(description="Topic tags.")] = [],  # noqa: B006 - read-only default for the schema
        bindings: Annotated[
            list[dict[str, Any]], Field(description="Sensor bindings that can check this fact.")
        ] = [],  # noqa: B006 - read-only default for the schema
        source: Annotated[str, Field(description="Who says so: agent or user.")] = "agent",
        dedupe: Annotated[
            bool,
            Field(
                description="When a live fact already says this (casefolded, whitespace "
                "collapsed), return it (duplicate_of) instead of storing it twice."
            ),
        ] = True,
        bind: Annotated[
            Literal["auto", "suggest", "none"] | None,
            Field(
                description="Let memwarden find the binding: auto binds the best binding "
                "whose check confirms the fact now (if confident enough); suggest stores it "
                "unbound and answers the candidates; none looks for nothing. Omitted: the "
                "daemon's [suggest] bind. Ignored when you give bindings."
            ),
        ] = None,
    ) -> dict[str, Any]:
        payload = {
            "content": content,
            "title": title,
            "info_type": info_type,
            "tags": tags,
            "bindings": bindings,
            "source": source,
        }
        added = await call(lambda c: c.add_with_bind(payload, bind, dedupe=dedupe))
        block = added["block"]
        answer: dict[str, Any] = {
            "id": block.id,
            "short_id": block.short_id,
            "state": block.state.value,
            "reliability": block.validation.reliability,
            "bindings": [b.model_dump(mode="json") for b in block.bindings],
            **({"duplicate_of": block.duplicate_of} if block.duplicate_of else {}),
        }
        if added["bind"] is not None:
            answer["bind"] = _bind_summary(added["bind"])
        return answer

    @server.tool(
        description=(
            "The sensors running now and what each can check: for each, what a binding may "
            "name (fs roots, test files, runtime checks, allowed HTTP hosts), its binding "
            "keys, and example bindings to copy into memory_add. Call it before binding."
        )
    )
    async def memory_sensors() -> dict[str, Any]:
        rows: list[dict[str, Any]] = await call(lambda c: c.sensors())
        keep = ("name", "kind", "summary", "binds", "keys", "binding_keys", "examples")
        running = [
            {k: row[k] for k in keep if k in row}
            for row in rows
            if row.get("status") == "running" and "examples" in row
        ]
        remote = [
            {"name": row["name"], "kind": row.get("kind"), "status": row.get("status")}
            for row in rows
            if row.get("status") == "running" and "examples" not in row
        ]
        down = [
            {"name": row["name"], "status": row.get("status"), "error": row.get("error", "")}
            for row in rows
            if row.get("status") != "running"
        ]
        return {"running": running, "remote": remote, "not_running": down}

    @server.tool(
        description=(
            "Read one fact by id, with its validation, bindings and receipt (verdict). "
            "fresh=true checks it now when its sensor answers quickly; max_age_seconds "
            "only when it was validated longer ago."
        )
    )
    async def memory_get(
        id: Annotated[str, Field(description="The fact's id.")],  # noqa: A002 - the name agents expect
        fresh: Annotated[bool, Field(description="Check it now if quick (max_age 0).")] = False,
        max_age_seconds: Annotated[
            float | None, Field(ge=0, description="Re-check if validated longer ago.")
        ] = None,
        session: Annotated[
            str | None, Field(description="Your conversation id: told if it later falls.")
        ] = None,
        as_of: Annotated[
            str | None,
            Field(description="ISO 8601 time: what memory believed about it then instead."),
        ] = None,
    ) -> dict[str, Any]:
        if as_of is not None:
            then, where = await call(lambda c: _with_endpoint(c, c.believed_at(id, as_of)))
            believed: dict[str, Any] = dict(then)
            believed["console_url"] = where.console_url(believed["block_id"])
            return believed
        max_age = f"{max_age_seconds}s" if max_age_seconds is not None else None
        got, endpoint = await call(
            lambda c: _with_endpoint(c, c.read(id, max_age=max_age, fresh=fresh, session=session))
        )
        data: dict[str, Any] = dict(got)
        data["line"] = context_line({"block": data, "receipt": data.get("receipt")})
        data["console_url"] = endpoint.console_url(data["id"])
        return data

    @server.tool(
        description=(
            "Explain a fact: why it is in its state, its reliability history, retention, rank "
            "factors, promotion scores, and the sensor events that decided them."
        )
    )
    async def memory_explain(
        id: Annotated[str, Field(description="The fact's id.")],  # noqa: A002 - the name agents expect
    ) -> dict[str, Any]:
        return await call(lambda c: c.explain(id))  # type: ignore[no-any-return]

    @server.tool(
        description=(
            "Ask the fact's sensors to check it now. With wait_seconds > 0 the answer comes back "
            "after the check (or says it timed out)."
        )
    )
    async def memory_revalidate(
        id: Annotated[str, Field(description="The fact's id.")],  # noqa: A002 - the name agents expect
        wait_seconds: Annotated[float, Field(ge=0, le=60)] = 5.0,
    ) -> dict[str, Any]:
        data = await call(lambda c: c.revalidate(id, wait=f"{wait_seconds}s"))
        return {
            "answered": len(data["answered"]) > 0 or not data["requested"],
            "timed_out": data["timed_out"],
            "requested": data["requested"],
            "fact": context_line(data["block"]),
        }

    @server.tool(
        description=(
            "Ask a human to confirm a fact no sensor can check (a decision, a preference). "
            "The fact goes to the review queue with your reason."
        )
    )
    async def memory_review(
        id: Annotated[str, Field(description="The fact's id.")],  # noqa: A002 - the name agents expect
        reason: Annotated[str, Field(description="Why a person should look at it.")],
    ) -> dict[str, Any]:
        return await call(lambda c: c.request_review(id, reason))  # type: ignore[no-any-return]

    @server.tool(
        description="Memory health: a 0-100 score and warnings (stale share, failing "
        "sensors), and coverage: the share of live facts a running sensor can check."
    )
    async def memory_health() -> dict[str, Any]:
        data: dict[str, Any] = await call(lambda c: c.health())
        keep = ("score", "status", "warnings", "counts", "coverage")
        return {k: data[k] for k in keep if k in data}

    @server.resource(
        "memwarden://context/{query}",
        name="context",
        description="The most relevant facts for a query, one line each, marked when stale.",
        mime_type="text/plain",
    )
    async def context(query: str) -> str:
        text = unquote(query)
        try:
            answer = await call(lambda c: c.search(text, limit=10))
        except ToolError as err:  # a resource has no error flag: say it in the text
            return f"(memwarden unavailable: {err})"
        return render_context(answer)

    return server


def _binding_and_erasure_tools(
    server: MCPServer[Any], call: Callable[[Callable[[AsyncClient], Any]], Awaitable[Any]]
) -> None:
    """The tools that change what checks a fact or erase it: ``memory_bind``,
    ``memory_suggest_bindings`` (a dry run), ``memory_forget``."""

    @server.tool(description=BIND_DESCRIPTION)
    async def memory_bind(
        id: Annotated[str, Field(description="The fact's id (a short id works too).")],  # noqa: A002 - the tool's argument name
        auto: Annotated[
            bool, Field(description="Let memwarden find the binding (ignore bindings).")
        ] = False,
        bindings: Annotated[
            list[dict[str, Any]] | None,
            Field(description="The fact's bindings from now on ([] removes them)."),
        ] = None,
    ) -> dict[str, Any]:
        return await _bind(call, id, auto=auto, bindings=bindings)

    @server.tool(description=SUGGEST_DESCRIPTION)
    async def memory_suggest_bindings(
        content: Annotated[str, Field(description="The fact, as you would store it.")],
        title: Annotated[str, Field(description="Its short title, if any.")] = "",
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many.")] = 5,
    ) -> dict[str, Any]:
        found = await call(lambda c: c.suggest_bindings(content, title=title, limit=limit))
        return {
            "suggestions": [_suggestion(s) for s in found["suggestions"]],
            "contradicts": [_suggestion(s) for s in found["contradicts"]],
        }

    @server.tool(
        description=(
            "Erase facts for good (the user asked to forget something, or it holds personal "
            "data that must go): their text, history, bindings, sensor observations, reviews "
            "and search index entries are removed; only a tombstone (id, when, why) stays. "
            "Irreversible. Name them by ids, or by a tag or the words of a query (then call "
            "with dry_run=true first and check the list). The answer lists what memory "
            "cannot reach (backups, logs, the MQTT broker)."
        )
    )
    async def memory_forget(
        ids: Annotated[
            list[str], Field(description="The facts' ids (or short ids).", max_length=1000)
        ] = [],  # noqa: B006 - read-only default for the schema
        tag: Annotated[str | None, Field(description="Every fact with this tag.")] = None,
        query: Annotated[
            str | None, Field(description="Every fact holding all these words.")
        ] = None,
        reason: Annotated[
            str, Field(description="Why (kept as given: do not repeat the content).")
        ] = "",
        dry_run: Annotated[bool, Field(description="Only list what would be erased.")] = False,
    ) -> dict[str, Any]:
        answer = await call(
            lambda c: c.forget(ids, tag=tag, query=query, reason=reason, dry_run=dry_run)
        )
        keep = ("dry_run", "blocks", "erased", "removed", "unreachable")
        return {k: answer[k] for k in keep if k in answer}


def _serve_session_context(
    server: MCPServer[Any], client_factory: Callable[[], AsyncClient], bus: Any
) -> None:
    """The session context resource, and subscriptions to it."""
    watch = _SessionWatchers(client_factory, bus)
    # resources/subscribe (the 2025 protocols, what stdio clients negotiate): MCPServer
    # has no public hook for it, so the handler goes on its low-level server.
    low = server._lowlevel_server  # noqa: SLF001 - no public way to serve resources/subscribe
    low.add_request_handler("resources/subscribe", SubscribeRequestParams, watch.subscribe)
    low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, watch.unsubscribe)

    @server.resource(
        SESSION_CONTEXT,
        name="session_context",
        description=(
            "What changed in the facts this session read: one line each, with its verdict. "
            "Subscribe to it: a notifications/resources/updated arrives when a fact the "
            "session read (memory_search or memory_get with this session) is refuted or "
            "goes stale."
        ),
        mime_type="text/plain",
    )
    async def session_context(session: str) -> str:
        name = unquote(session)
        lines = []
        try:
            async with client_factory() as client:
                notices = await client.session_events(name, after=0, wait="0s", limit=1000)
                for block_id in dict.fromkeys(n["block_id"] for n in reversed(notices)):
                    try:
                        data = await client.read(block_id)
                    except MemwardenError:  # deleted since: nothing to show for it
                        continue
                    lines.append(context_line({"block": data, "receipt": data.get("receipt")}))
        except MemwardenError as err:
            return f"(memwarden unavailable: {err})"
        return "\n".join(lines) if lines else "(nothing this session read has changed)"


class _SessionWatchers:
    """Per subscribed session resource, a long-poll of the daemon's session notices that
    turns each one into ``notifications/resources/updated`` for its subscribers."""

    def __init__(self, client_factory: Callable[[], AsyncClient], bus: Any) -> None:
        self._client_factory = client_factory
        self._bus = bus
        self._subscribers: dict[str, set[ServerSession]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        uri = str(params.uri)
        self._subscribers.setdefault(uri, set()).add(ctx.session)
        session = _session_of(uri)
        if session is not None and uri not in self._tasks:
            self._tasks[uri] = asyncio.create_task(self._follow(uri, session))
        return EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        uri = str(params.uri)
        self._subscribers.get(uri, set()).discard(ctx.session)
        if not self._subscribers.get(uri):
            self._subscribers.pop(uri, None)
            task = self._tasks.pop(uri, None)
            if task is not None:
                task.cancel()
        return EmptyResult()

    async def _follow(self, uri: str, session: str) -> None:
        after = 0
        async with self._client_factory() as client:
            while uri in self._subscribers:
                try:
                    notices = await client.session_events(session, after=after, wait="25s")
                except MemwardenError:  # the daemon restarting: try again shortly
                    await asyncio.sleep(1.0)
                    continue
                if not notices:
                    continue
                after = max(n["seq"] for n in notices)
                await self._bus.publish(ResourceUpdated(uri=uri))
                for subscriber in list(self._subscribers.get(uri, ())):
                    try:
                        await subscriber.send_resource_updated(uri)
                    except Exception:  # noqa: BLE001 - a client gone away: forget it
                        self._subscribers.get(uri, set()).discard(subscriber)


def _session_of(uri: str) -> str | None:
    if uri.startswith(_SESSION_PREFIX) and uri.endswith(_SESSION_SUFFIX):
        name = unquote(uri[len(_SESSION_PREFIX) : -len(_SESSION_SUFFIX)])
        return name or None
    return None


def run_stdio(home: str | None = None, url: str | None = None) -> None:
    """Serve MCP over stdio until the client goes away (logs go to stderr, quietly).

    The daemon is found like the CLI finds it (``home``, ``MEMWARDEN_HOME``, ``./.memwarden``
    here or in a parent, the user state dir), or at ``url`` when given.
    """
    for name in ("httpx", "httpcore", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)
    build_server(lambda: AsyncClient(url, home=home)).run("stdio")
