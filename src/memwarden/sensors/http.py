"""The HTTP API sensor: does the endpoint still answer what the block says?

A binding names a URL and what to expect of its answer::

    {"sensor": "http", "url": "http://127.0.0.1:8080/version",
     "status": [200], "key": "/version", "equals": "1.2", "max_latency_ms": 500}

(``key`` is a JSON pointer, with ``equals`` or ``matches`` (a regex); ``body_regex``;
``header`` with ``name`` and ``value`` or ``regex``; ``interval``). Its host must be in
the sensor's ``allowed_hosts`` — refused when the block is added, and never fetched
otherwise — and nothing in a binding can widen what the config allows.

One pooled ``httpx.AsyncClient`` per sensor (opened in ``setup``, closed in
``teardown``); TLS verified unless the config says ``verify = false``; a whole-answer
deadline of ``timeout_s``; at most ``max_bytes`` read (streamed, abandoned past it:
``error``); redirects are not followed (a 3xx is a status like any other). ETag and
Last-Modified are remembered per URL, so an unchanged answer costs a 304 and is judged
again from what was read before. A transport failure (refused, reset, TLS, timeout) is
an ``error``, never a refutation; so is a 5xx unless ``server_error = "refute"``.
Confirmations carry reliability 0.95.

It runs on :class:`memwarden.plugins.PollingSensor`: each binding is checked every
``interval`` (its own, never below ``min_interval``, else the sensor's), after errors
with backoff up to ``backoff_max``; an answer is emitted when the outcome or what was
observed (the latency aside) changed, plus a confirmation every ``confirm_every``.
Events are addressed to the bound block (``block_id``): two blocks may expect different
things of one URL. A binding that breaks today's rules (stored before them, or before
the config narrowed ``allowed_hosts``) is answered with ``error`` and never fetched.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    field_validator,
    model_validator,
)
from typing_extensions import override

from memwarden import __version__
from memwarden.jsonpointer import check_pointer, json_equal, resolve_pointer
from memwarden.memory import Duration, Outcome, format_duration
from memwarden.plugins import (
    HARD_MIN_INTERVAL,
    BaseBinding,
    BindingCandidate,
    Observation,
    PollingBinding,
    PollingConfig,
    PollingSensor,
)
from memwarden.sensors._observed import bounded
from memwarden.sensors._regex import RegexTimeoutError, compile_user_regex, regex_field
from memwarden.sensors._suggest import candidates, match_keys
from memwarden.sensors._textmatch import negated
from memwarden.sensors._valueindex import ValueIndex

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from memwarden.plugins import BoundSubject, SensorContext

__all__ = [
    "HARD_MIN_INTERVAL",
    "HeaderExpectation",
    "HostHeaders",
    "HostRule",
    "HttpBinding",
    "HttpConfig",
    "HttpSensor",
    "Target",
    "url_allowed",
]

ANY_PORT: Final = 0
DEFAULT_ALLOWED_HOSTS: Final = ("127.0.0.1:*", "localhost:*", "[::1]:*")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_INLINE_BODY_BYTES: Final = 64 * 1024  # larger bodies are judged in a worker thread
#: The polling base's deadline for one check is ``timeout_s`` plus this: the fetch's own
#: deadline answers first with the precise message; judging a body may take a little more.
_TIMEOUT_GRACE: Final = timedelta(seconds=5)
_NOT_COMPARED: Final = frozenset({"latency_ms", "not_modified"})


class HeaderExpectation(BaseModel):
    """A response header, equal to ``value`` or matching ``regex`` (or just present)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    value: str | None = None
    regex: str | None = None

    _check_regex = field_validator("regex")(regex_field)

    @model_validator(mode="after")
    def _one(self) -> HeaderExpectation:
        if self.value is not None and self.regex is not None:
            raise ValueError("set value or regex, not both")
        return self


class HttpBinding(PollingBinding):
    """What a block expects of one URL."""

    url: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    status: Annotated[list[Annotated[int, Field(ge=100, le=599)]], Field(min_length=1)] = Field(
        default_factory=lambda: [200]
    )
    key: str | None = Field(
        default=None, max_length=4096, description="A JSON pointer (RFC 6901): /a/b/0."
    )
    equals: JsonValue = None
    matches: str | None = None
    body_regex: str | None = None
    header: HeaderExpectation | None = None
    max_latency_ms: Annotated[float, Field(gt=0)] | None = None

    _check_regexes = field_validator("matches", "body_regex")(regex_field)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        try:
            url = httpx.URL(value)
        except (httpx.InvalidURL, TypeError, ValueError):
            raise ValueError(f"{value!r} is not a valid URL") from None
        if url.scheme not in _DEFAULT_PORTS or not url.host:
            raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
        if url.userinfo:
            raise ValueError(
                f"{value!r} carries credentials: the config's per-host headers hold those"
            )
        return value

    @field_validator("interval")
    @classmethod
    def _positive_interval(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < HARD_MIN_INTERVAL:
            raise ValueError(
                f"{format_duration(value)} is too short: polling needs at least "
                f"{format_duration(HARD_MIN_INTERVAL)} (the sensor's min_interval may ask more)"
            )
        return value

    @field_validator("key")
    @classmethod
    def _pointer(cls, value: str | None) -> str | None:
        return None if value is None else check_pointer(value)

    @model_validator(mode="after")
    def _key_expectations(self) -> HttpBinding:
        has_equals = "equals" in self.model_fields_set
        if (has_equals or self.matches is not None) and self.key is None:
            raise ValueError("equals and matches need a key (a JSON pointer)")
        if has_equals and self.matches is not None:
            raise ValueError("set equals or matches, not both")
        return self

    @property
    def host(self) -> str:
        return Target.of(self.url).host

    @property
    def target(self) -> Target:
        return Target.of(self.url)

    @property
    def has_regex(self) -> bool:
        header_regex = self.header is not None and self.header.regex is not None
        return header_regex or self.body_regex is not None or self.matches is not None


class HostHeaders(BaseModel):
    """``[[sensors.http.headers]]``: headers sent only to URLs that ``host`` allows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: Annotated[str, StringConstraints(min_length=1, max_length=300)] = Field(
        description="An allowed_hosts-style entry: [scheme://]host[:port]."
    )
    values: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=256)],
        Annotated[str, StringConstraints(max_length=8192)],
    ] = Field(min_length=1)

    @field_validator("host")
    @classmethod
    def _valid_host(cls, value: str) -> str:
        HostRule.parse(value)
        return value


class HttpConfig(PollingConfig):
    """``[sensors.http]``: what the sensor may reach and how it asks (``min_interval``,
    ``jitter``, ``confirm_every`` and the other polling keys are the polling base's)."""

    allowed_hosts: list[Annotated[str, StringConstraints(min_length=1, max_length=300)]] = Field(
        default_factory=lambda: list(DEFAULT_ALLOWED_HOSTS),
        description=(
            "What a binding's URL may reach: [scheme://]host[:port]. No port: the scheme's "
            "default port (80, 443); port * : any. Host exact, or *.example.com (subdomains)."
        ),
    )
    interval: Duration = Field(default=timedelta(minutes=5), description="Between checks.")
    timeout_s: Annotated[float, Field(gt=0.0, le=600.0)] = 10.0

    deadline_key: ClassVar[str | None] = "timeout_s"
    max_bytes: Annotated[int, Field(ge=1, le=1024 * 1024 * 1024)] = 1024 * 1024
    verify: bool = True
    ca_file: Path | None = Field(default=None, description="Trust this CA bundle instead.")
    server_error: Literal["error", "refute"] = "error"
    backoff_max: Duration = Field(
        default=timedelta(minutes=30), description="Longest wait after repeated failures."
    )
    max_connections: Annotated[int, Field(ge=1, le=1000)] = 10
    headers: list[HostHeaders] = Field(
        default_factory=list,
        description="Headers (credentials) per host: sent only to URLs their host entry allows.",
    )
    reliability: Annotated[float, Field(ge=0.0, le=1.0)] = 0.95

    @field_validator("allowed_hosts")
    @classmethod
    def _valid_hosts(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            HostRule.parse(entry)
        return entries

    @field_validator("headers", mode="before")
    @classmethod
    def _headers_per_host(cls, value: Any) -> Any:
        if isinstance(value, dict):
            raise ValueError(  # noqa: TRY004 - pydantic reports ValueError, not TypeError
                "headers are bound to the host they are for: write "
                '[[sensors.http.headers]] host = "https://api.example.com" and '
                'values = { Authorization = "Bearer ..." } (one table per host)'
            )
        return value


def _norm_host(host: str) -> str:
    """Lower case, no brackets, no trailing dot; a non-ASCII name in its IDNA (xn--) form,
    as httpx connects to it (``*.`` kept in front of a wildcard)."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host.isascii():
        return host
    wild, name = ("*.", host[2:]) if host.startswith("*.") else ("", host)
    try:
        return wild + httpx.URL(f"http://{name}/").raw_host.decode("ascii").lower()
    except (httpx.InvalidURL, UnicodeError, ValueError):
        raise ValueError(f"{host!r} is not a host name") from None


@dataclass(frozen=True, slots=True)
class Target:
    """Where a URL goes: scheme, host and port (the scheme's default filled in)."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str | httpx.URL) -> Target:
        """Parsed with httpx's own parser: what is checked is what is connected to."""
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
        scheme = parsed.scheme.lower()
        port = parsed.port if parsed.port is not None else _DEFAULT_PORTS.get(scheme, -1)
        return cls(scheme, _norm_host(parsed.raw_host.decode("ascii")), port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class HostRule:
    """One ``allowed_hosts`` (or ``headers.host``) entry: ``[scheme://]host[:port]``.

    No scheme: http or https. No port: the scheme's default port (80 for http, 443 for
    https), never any other. Port ``*``: any port. Host: exact (case-insensitive, a
    trailing dot ignored), or ``*.example.com`` for its subdomains (not itself).
    IPv6 in brackets (``[::1]:8080``); a bare ``::1`` is a host without a port.
    """

    text: str
    scheme: str | None
    host: str
    port: int | None  # None: the default port of the scheme; ANY_PORT: any

    @classmethod
    def parse(cls, entry: str) -> HostRule:
        text = entry.strip()
        rest = text
        scheme: str | None = None
        if "://" in rest:
            scheme, _, rest = rest.partition("://")
            scheme = scheme.lower()
            if scheme not in _DEFAULT_PORTS:
                raise ValueError(f"{entry!r}: the scheme must be http or https")
            rest = rest.removesuffix("/")
        if not rest or any(c in rest for c in "/@?# \t"):
            raise ValueError(f"{entry!r} is not [scheme://]host[:port] (no path, no user)")
        port_text: str | None = None
        if rest.startswith("["):
            host, bracket, after = rest[1:].partition("]")
            if not bracket or (after and not after.startswith(":")):
                raise ValueError(f"{entry!r}: an IPv6 host is written [::1] or [::1]:8080")
            port_text = after[1:] if after else None
        elif rest.count(":") == 1:
            host, _, port_text = rest.partition(":")
        else:
            host = rest  # a name, an IPv4 address, or a bare IPv6 address (no port)
        host = _norm_host(host)
        if not host or "*" in host.removeprefix("*."):
            raise ValueError(f"{entry!r}: the host is a name, an address or *.example.com")
        port: int | None = None
        if port_text == "*":
            port = ANY_PORT
        elif port_text is not None:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"{entry!r}: the port is 1-65535 or *")
            port = int(port_text)
        return cls(text, scheme, host, port)

    def allows(self, target: Target) -> bool:
        if self.scheme is not None and target.scheme != self.scheme:
            return False
        if self.port is None:
            if target.port != _DEFAULT_PORTS.get(target.scheme):
                return False
        elif self.port not in (ANY_PORT, target.port):
            return False
        if self.host.startswith("*."):
            return target.host.endswith(self.host[1:])
        return target.host == self.host


def url_allowed(url: str | httpx.URL | Target, allowed: Sequence[str | HostRule]) -> bool:
    """Whether ``url``'s scheme, host and port are allowed by one of the entries."""
    try:
        target = url if isinstance(url, Target) else Target.of(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return False
    rules = (r if isinstance(r, HostRule) else HostRule.parse(r) for r in allowed)
    return any(rule.allows(target) for rule in rules)


_URL_IN_TEXT = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
_STATUS_IN_TEXT = re.compile(
    r"\b(?:status(?: code)?|returns|answers|responds(?: with)?|replies(?: with)?|code|http)"
    r"\s*(?:is\s+|of\s+|with\s+|an?\s+)?([1-5]\d\d)\b",
    re.IGNORECASE,
)
_AVAILABILITY = re.compile(
    r"\b(up|down|online|offline|reachable|unreachable|available|alive|healthy|responds?|"
    r"answers?|returns?|serves?|status|ok)\b",
    re.IGNORECASE,
)
_MAX_URLS = 3
_URL_NAMED = 0.1  # a value in the answer of a URL the text names is surer than in any file


def _allowed_urls(text: str, allows: Callable[[Target], bool]) -> list[str]:
    """The http(s) URLs in a text whose host the config allows, in order, once each."""
    out: list[str] = []
    for m in _URL_IN_TEXT.finditer(text):
        url = m.group(0).rstrip(".,;:!?)]}")
        try:
            HttpBinding.model_validate({"url": url})
            target = Target.of(url)
        except (ValueError, httpx.InvalidURL):
            continue
        if allows(target) and url not in out:
            out.append(url)
    return out


def _status_in(text: str) -> int | None:
    """A status code the text says an endpoint answers ("returns 404"), or None."""
    m = _STATUS_IN_TEXT.search(_URL_IN_TEXT.sub(" ", text))
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class _Answer:
    """What a URL answered (a 304 hands back the remembered one)."""

    status: int
    headers: httpx.Headers
    body: bytes
    encoding: str
    latency_ms: float
    not_modified: bool = False


class _FetchError(Exception):
    """No answer to judge (refused, reset, TLS, too large, too slow): an ``error``."""


@dataclass(frozen=True, slots=True)
class _Remembered:
    answer: _Answer
    etag: str | None
    last_modified: str | None


class HttpSensor(PollingSensor[HttpConfig, HttpBinding]):
    """Checks what HTTP endpoints answer against the blocks bound to them."""

    quick_check: ClassVar[bool] = True  # answers in milliseconds: read-through may wait

    kind: ClassVar[str] = "http"
    Config: ClassVar[type[HttpConfig]] = HttpConfig
    Binding: ClassVar[type[HttpBinding]] = HttpBinding

    def __init__(self, config: HttpConfig) -> None:
        super().__init__(config)
        self._allowed = tuple(HostRule.parse(e) for e in config.allowed_hosts)
        self._headers = tuple((HostRule.parse(h.host), h.values) for h in config.headers)
        self._client: httpx.AsyncClient | None = None
        self._remembered: dict[str, _Remembered] = {}
        self.fetches = 0
        self.not_modified = 0

    def validate_binding(self, selector: BaseBinding) -> None:
        """Refuse a URL the config does not allow, or an interval below ``min_interval``."""
        if not isinstance(selector, HttpBinding):
            selector = HttpBinding.model_validate(selector.model_dump())
        target = selector.target
        if not self.allows(target):
            allowed = ", ".join(self.config.allowed_hosts) or "none"
            raise ValueError(
                f"url: {target} (scheme, host, port) is not in the http sensor's "
                f"allowed_hosts ({allowed})"
            )
        if selector.interval is not None and selector.interval < self.config.min_interval:
            raise ValueError(
                f"interval: {format_duration(selector.interval)} is below the http "
                f"sensor's min_interval ({format_duration(self.config.min_interval)})"
            )

    def allows(self, target: Target) -> bool:
        """Whether the config lets a binding reach ``target``."""
        return any(rule.allows(target) for rule in self._allowed)

    def headers_for(self, target: Target) -> dict[str, str]:
        """The configured headers bound to ``target`` (none for any other host)."""
        out: dict[str, str] = {}
        for rule, values in self._headers:
            if rule.allows(target):
                out.update(values)
        return out

    # ------------------------------------------------------------------ suggestions

    async def binding_candidates(self, text: str, *, limit: int) -> list[BindingCandidate]:
        """URLs in the text on allowed hosts (never another: nothing else is fetched).

        Each gives a status binding (``status`` as the text says it, else 200); when the
        text does not say the endpoint is down, the answer is fetched once and its JSON
        values are matched like a file's (:mod:`._suggest`), giving ``key``/``equals``
        bindings — a value the answer contradicts comes back as a contradiction."""
        down = negated(text, "http")
        status = _status_in(text)
        out: list[BindingCandidate] = []
        for url in _allowed_urls(text, self.allows)[:_MAX_URLS]:
            values = [] if down or status else await self._value_candidates(url, text, limit)
            said = f"status {status}" if status else "status 200 (the text names no status)"
            why = f"the text names {url}, on an allowed host; {said}"
            if down:
                why += "; the text says it is down"
            selector: dict[str, Any] = {"url": url}
            if status:
                selector["status"] = [status]
            # A status binding checks only that the endpoint answers: sure when the text
            # speaks of that (up, answers 200), not when it says something of the content.
            about_status = bool(status) or down or _AVAILABILITY.search(text) is not None
            confidence = 0.85 if about_status and not values else 0.6
            out.append(
                BindingCandidate(
                    selector,
                    confidence,
                    why,
                    agrees=None,
                    negated=down,
                    found="the endpoint answers",
                )
            )
            out.extend(values)
        out.sort(key=lambda c: -c.order)
        return out[:limit]

    async def _value_candidates(self, url: str, text: str, limit: int) -> list[BindingCandidate]:
        try:
            answer = await self._fetch(httpx.URL(url), Target.of(url))
        except _FetchError:
            return []
        if answer.status != 200:
            return []
        index = ValueIndex((), keys_of=match_keys)
        if await asyncio.to_thread(index.add_document, url, answer.body, "json") is not None:
            return []
        return [
            BindingCandidate(
                {"url": url, "key": c.entry.pointer, "equals": c.equals},
                round(min(1.0, c.confidence + _URL_NAMED), 3),
                f"the text names {url}, whose answer has {c.entry.pointer}; {c.why}",
                rank=c.rank + _URL_NAMED,
                agrees=c.agrees,
                secret=c.entry.secret,
                found="the endpoint answers",
            )
            for c in candidates(text, index, limit=limit)
        ]

    # ------------------------------------------------------------------ lifecycle

    def describe(self) -> dict[str, Any]:
        """What a binding may reach (the allowed hosts) and examples to adapt."""
        first = self.config.allowed_hosts[0] if self.config.allowed_hosts else "localhost:*"
        scheme, _, hostport = first.rpartition("://")
        host = hostport.replace(":*", ":8000").replace("*.", "api.")
        base = f"{scheme or 'http'}://{host}"
        return {
            "summary": "An HTTP answer: status, a value at a JSON pointer, a regex over the "
            "body, a header, latency. Only the allowed hosts can be reached.",
            "binds": {"allowed_hosts": list(self.config.allowed_hosts)},
            "keys": {
                "url": "an http(s) URL on an allowed host",
                "status / key (+ equals or matches) / body_regex / header / max_latency_ms": (
                    "what the answer must show (default: status 200)"
                ),
            },
            "examples": [
                {"url": f"{base}/health", "status": [200]},
                {"url": f"{base}/version", "key": "/version", "equals": "1.2.0"},
            ],
        }

    @override
    async def on_setup(self, ctx: SensorContext[HttpBinding]) -> None:
        verify: ssl.SSLContext | bool = self.config.verify
        if self.config.verify and self.config.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(self.config.ca_file))
        self._client = httpx.AsyncClient(
            verify=verify,
            timeout=httpx.Timeout(self.config.timeout_s),
            limits=httpx.Limits(
                max_connections=self.config.max_connections,
                max_keepalive_connections=self.config.max_connections,
            ),
            follow_redirects=False,
            trust_env=False,  # no proxy or CA from the environment: the config decides
            headers={"User-Agent": f"memwarden/{__version__}"},  # credentials: per request
        )

    async def on_teardown(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # ------------------------------------------------------------------ one check

    @override
    def timeout_of(self, bound: BoundSubject[HttpBinding]) -> timedelta:
        return timedelta(seconds=self.config.timeout_s) + _TIMEOUT_GRACE

    async def check(self, bound: BoundSubject[HttpBinding]) -> Observation:
        return await self.observe(bound.selector)

    async def observe(self, selector: HttpBinding) -> Observation:
        """Fetch the URL and judge the answer; a binding today's rules refuse is an
        ``error`` and is never fetched."""
        try:
            self.validate_binding(selector)
            url = httpx.URL(selector.url)
            target = Target.of(url)
        except (httpx.InvalidURL, TypeError, ValueError) as err:
            return Observation.error(f"binding refused: {err}"[:1000])
        try:
            answer = await self._fetch(url, target)
        except _FetchError as err:
            return Observation.error(str(err))
        if len(answer.body) > _INLINE_BODY_BYTES or selector.has_regex:
            # Decoding, JSON parsing and matching a large body, or any regex (which may
            # wait for the regex helper process): off the event loop.
            outcome, message, observed = await asyncio.to_thread(self._judge, selector, answer)
        else:
            outcome, message, observed = self._judge(selector, answer)
        return Observation(
            outcome,
            message,
            observed=observed,
            reliability=self.config.reliability if outcome == Outcome.CONFIRMED else None,
            # What changed is the answer: not how long it took, nor whether it was a 304.
            compare={k: v for k, v in observed.items() if k not in _NOT_COMPARED},
        )

    async def _fetch(self, url: httpx.URL, target: Target) -> _Answer:
        client = self._client
        if client is None:
            raise _FetchError("the http sensor is not set up")
        remembered = self._remembered.get(str(url))
        headers = self.headers_for(target)
        if remembered is not None:
            if remembered.etag:
                headers["If-None-Match"] = remembered.etag
            if remembered.last_modified:
                headers["If-Modified-Since"] = remembered.last_modified
        cap = self.config.max_bytes
        began = time.perf_counter()
        self.fetches += 1
        try:
            async with (
                asyncio.timeout(self.config.timeout_s),
                client.stream("GET", url, headers=headers) as response,
            ):
                if response.status_code == 304 and remembered is not None:
                    self.not_modified += 1
                    latency_ms = (time.perf_counter() - began) * 1000.0
                    return _Answer(
                        remembered.answer.status,
                        remembered.answer.headers,
                        remembered.answer.body,
                        remembered.answer.encoding,
                        latency_ms,
                        not_modified=True,
                    )
                length = response.headers.get("content-length", "")
                if length.isdigit() and int(length) > cap:
                    raise _FetchError(f"response larger than {cap} bytes")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > cap:
                        raise _FetchError(f"response larger than {cap} bytes")
                encoding = response.encoding or "utf-8"
        except TimeoutError:
            raise _FetchError(f"no complete answer within {self.config.timeout_s:g}s") from None
        except httpx.HTTPError as err:
            raise _FetchError(
                f"request failed: {type(err).__name__}: {err or 'no detail'}"
            ) from None
        latency_ms = (time.perf_counter() - began) * 1000.0
        answer = _Answer(response.status_code, response.headers, bytes(body), encoding, latency_ms)
        etag = response.headers.get("etag")
        last_modified = response.headers.get("last-modified")
        if response.status_code == 200 and (etag or last_modified):
            self._remembered[str(url)] = _Remembered(answer, etag, last_modified)
        else:
            self._remembered.pop(str(url), None)
        return answer

    def _judge(self, selector: HttpBinding, answer: _Answer) -> tuple[Outcome, str, dict[str, Any]]:
        """The outcome, a message and the observed value: the first expectation unmet wins."""
        observed: dict[str, Any] = {
            "status": answer.status,
            "latency_ms": round(answer.latency_ms, 1),
        }
        if answer.not_modified:
            observed["not_modified"] = True
        if answer.status not in selector.status:
            message = f"status {answer.status}, expected {_codes(selector.status)}"
            if answer.status >= 500 and self.config.server_error == "error":
                return Outcome.ERROR, f"server error: {message}", observed
            return Outcome.REFUTED, message, observed
        if selector.max_latency_ms is not None and answer.latency_ms > selector.max_latency_ms:
            message = f"answered in {answer.latency_ms:.0f} ms, over {selector.max_latency_ms:g} ms"
            return Outcome.REFUTED, message, observed
        try:
            verdict = _judge_content(selector, answer, observed)
        except RegexTimeoutError as err:
            return Outcome.ERROR, str(err), observed
        if verdict is not None:
            return Outcome.REFUTED, verdict, observed
        shown = (
            f"; {selector.key} = {_short(observed['value'])}" if selector.key is not None else ""
        )
        return Outcome.CONFIRMED, f"status {answer.status}{shown}", observed


def _codes(codes: list[int]) -> str:
    return " or ".join(str(c) for c in codes)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _judge_content(selector: HttpBinding, answer: _Answer, observed: dict[str, Any]) -> str | None:
    """Why the headers or the body fail the binding, or None."""
    if selector.header is not None:
        verdict = _judge_header(selector.header, answer.headers, observed)
        if verdict is not None:
            return verdict
    text = answer.body.decode(answer.encoding, "replace")
    if selector.body_regex is not None and not compile_user_regex(selector.body_regex).matches(
        text
    ):
        return f"body does not match {selector.body_regex!r}"
    if selector.key is not None:
        return _judge_key(selector, selector.key, text, observed)
    return None


def _judge_header(
    expect: HeaderExpectation, headers: httpx.Headers, observed: dict[str, Any]
) -> str | None:
    value = headers.get(expect.name)
    observed["header"] = None if value is None else bounded(value)
    if value is None:
        return f"no {expect.name} header"
    if expect.value is not None and value != expect.value:
        return f"header {expect.name} is {_short(value)}, expected {_short(expect.value)}"
    if expect.regex is not None and not compile_user_regex(expect.regex).matches(value):
        return f"header {expect.name} {_short(value)} does not match {expect.regex!r}"
    return None


def _judge_key(selector: HttpBinding, key: str, text: str, observed: dict[str, Any]) -> str | None:
    """Why the body's value at ``key`` (the selector's) fails the binding, or None."""
    try:
        doc = json.loads(text)
    except ValueError:
        return "body is not JSON"
    try:
        value = resolve_pointer(doc, key)
    except LookupError:
        return f"no {key} in the body"
    observed["value"] = bounded(value)
    if "equals" in selector.model_fields_set and not json_equal(value, selector.equals):
        return f"{key} is {_short(value)}, expected {_short(selector.equals)}"
    if selector.matches is not None:
        subject = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if not compile_user_regex(selector.matches).matches(subject):
            return f"{key} is {_short(value)}, which does not match {selector.matches!r}"
    return None
