"""An embedder that asks a local Ollama-style HTTP endpoint (``[search.embedders.http]``).

``POST {url}`` with ``{"model": ..., "input": [texts]}`` answered by
``{"embeddings": [[...], ...]}`` (Ollama's ``/api/embed``), or, when the URL ends in
``/api/embeddings`` (Ollama's older route), one ``{"model": ..., "prompt": text}`` per
text answered by ``{"embedding": [...]}``.

The URL must be on ``allowed_hosts`` (loopback by default: the model runs on this
machine; nothing leaves it unless the configuration says so). Redirects are not
followed. The answer is untrusted: at most ``max_answer_bytes`` are read, within
``timeout`` seconds in all, and it must hold one vector per text of exactly ``dim``
finite numbers. Whatever goes wrong raises :class:`EmbedderUnavailableError`: the
blocks stay queued and are embedded once the endpoint answers well (the daemon logs
``embedding_failed`` and keeps running).
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

import httpx

from memwarden.errors import ConfigError, EmbedderUnavailableError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DEFAULT_ALLOWED_HOSTS", "EmbedderUnavailableError", "HttpEmbedder"]

DEFAULT_ALLOWED_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
_MAX_TEXTS = 256


def _host_port(entry: str) -> tuple[str, str]:
    """``host:port``, ``host:*`` or ``[v6]:port`` -> (host, port or "*")."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") or ""
    else:
        host, _, port = text.partition(":")
    if not host or not port or not (port == "*" or port.isdigit()):
        raise ValueError(f"{entry!r} is not host:port or host:* (e.g. 127.0.0.1:11434)")
    return host.rstrip("."), port


def _check_url(url: str, allowed: Sequence[str]) -> httpx.URL:
    opt = "search.embedders.http"
    try:
        parsed = httpx.URL(url)
        rules = [_host_port(e) for e in allowed]
    except (httpx.InvalidURL, ValueError) as err:
        raise ConfigError(f"{opt}: {err}") from err
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{opt}.url: {url!r} is not an http(s) URL")
    host = parsed.host.lower().rstrip(".")
    port = str(parsed.port or (443 if parsed.scheme == "https" else 80))
    if not any(h == host and p in ("*", port) for h, p in rules):
        raise ConfigError(
            f"{opt}.url: {host}:{port} is not in allowed_hosts ({', '.join(allowed)})"
        )
    return parsed


class HttpEmbedder:
    """Vectors from a local embedding server (Ollama's ``/api/embed``)."""

    remote = True  # the store embeds queries in a worker thread, never on the loop

    def __init__(
        self,
        *,
        url: str = "http://127.0.0.1:11434/api/embed",
        model: str = "",
        dim: int = 0,
        allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
        timeout: float = 10.0,
        max_answer_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        opt = "search.embedders.http"
        if not isinstance(model, str) or not 0 < len(model) <= 200:
            raise ConfigError(f"{opt}.model: name the server's embedding model")
        if not isinstance(dim, int) or not 8 <= dim <= 8192:
            raise ConfigError(f"{opt}.dim: the model's dimensions, 8-8192 (got {dim!r})")
        if not isinstance(timeout, int | float) or not 0 < timeout <= 300:
            raise ConfigError(f"{opt}.timeout: seconds, more than 0 and at most 300")
        if not isinstance(max_answer_bytes, int) or not 1024 <= max_answer_bytes <= 1 << 28:
            raise ConfigError(f"{opt}.max_answer_bytes: 1 KiB to 256 MiB")
        self.url = _check_url(url, list(allowed_hosts))
        self.single = self.url.path.rstrip("/").endswith("/api/embeddings")
        self.model = model
        self.dim = dim
        self.model_id = f"http/{model}/{dim}"
        self.timeout = float(timeout)
        self.max_answer_bytes = max_answer_bytes

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        with httpx.Client(timeout=self.timeout, follow_redirects=False, trust_env=False) as c:
            if self.single:
                return [self._vector(self._post(c, {"prompt": t}), "embedding") for t in texts]
            out: list[list[float]] = []
            for start in range(0, len(texts), _MAX_TEXTS):
                part = list(texts[start : start + _MAX_TEXTS])
                body = self._post(c, {"input": part})
                vectors = body.get("embeddings") if isinstance(body, dict) else None
                if not isinstance(vectors, list) or len(vectors) != len(part):
                    raise EmbedderUnavailableError(
                        f"{self.url}: the answer's embeddings are not {len(part)} vectors"
                    )
                out.extend(self._check(v) for v in vectors)
            return out

    def _post(self, client: httpx.Client, payload: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.timeout
        try:
            with client.stream("POST", self.url, json={"model": self.model, **payload}) as r:
                if r.status_code != 200:
                    raise EmbedderUnavailableError(f"{self.url}: HTTP {r.status_code}")
                data = bytearray()
                for chunk in r.iter_raw():
                    data += chunk
                    if len(data) > self.max_answer_bytes:
                        raise EmbedderUnavailableError(
                            f"{self.url}: the answer is longer than"
                            f" max_answer_bytes = {self.max_answer_bytes}"
                        )
                    if time.monotonic() > deadline:
                        raise EmbedderUnavailableError(
                            f"{self.url}: no whole answer within timeout = {self.timeout:g} s"
                        )
        except httpx.HTTPError as err:
            raise EmbedderUnavailableError(f"{self.url}: {type(err).__name__}: {err}") from err
        try:
            return json.loads(data)
        except ValueError as err:
            raise EmbedderUnavailableError(f"{self.url}: the answer is not JSON") from err

    def _vector(self, body: Any, key: str) -> list[float]:
        return self._check(body.get(key) if isinstance(body, dict) else None)

    def _check(self, vector: Any) -> list[float]:
        if not isinstance(vector, list) or len(vector) != self.dim:
            got = len(vector) if isinstance(vector, list) else type(vector).__name__
            raise EmbedderUnavailableError(
                f"{self.url}: a vector of {got} dimensions, not dim = {self.dim}"
            )
        if not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in vector
        ):
            raise EmbedderUnavailableError(f"{self.url}: a vector holds a non-finite number")
        return [float(x) for x in vector]
