"""The HTTP sensor against a real HTTP server on loopback whose answers the test changes."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError
from tests.support import eventually

from memwarden.errors import ValidationInputError
from memwarden.memory import SystemClock
from memwarden.plugins.testing import SensorHarness
from memwarden.sensors.http import HttpBinding, HttpSensor, url_allowed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from memwarden.memory import ValidationEvent


# ---------------------------------------------------------------------- a real server


@dataclass
class Server:
    """A small HTTP/1.1 server (keep-alive) whose next answers the test sets."""

    status: int = 200
    body: bytes = b'{"version": "1.2", "ok": true}'
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    etag: str | None = None
    chunked_bytes: int = 0  # > 0: answer with this many bytes, chunked, no Content-Length
    declared_length: int | None = None  # announce this Content-Length instead
    hang: bool = False
    delay_s: float = 0.0
    requests: list[dict[str, str]] = field(default_factory=list)
    connections: int = 0
    body_bytes_sent: int = 0
    url: str = ""
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_context)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):  # Server.close_clients() is 3.13+
                writer.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        request = {"line": lines[0]}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                request[name.strip().lower()] = value.strip()
        self.requests.append(request)
        if self.hang:
            await asyncio.Event().wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)  # the server is slow on purpose
        if self.etag is not None and request.get("if-none-match") == self.etag:
            writer.write(f"HTTP/1.1 304 Not Modified\r\nETag: {self.etag}\r\n\r\n".encode())
            await writer.drain()
            return True
        headers = dict(self.headers)
        if self.etag is not None:
            headers["ETag"] = self.etag
        if self.chunked_bytes:
            await self._send_chunked(writer, headers)
            return False
        headers["Content-Length"] = str(
            self.declared_length if self.declared_length is not None else len(self.body)
        )
        writer.write(self._head(headers) + self.body)
        await writer.drain()
        self.body_bytes_sent += len(self.body)
        return True

    def _head(self, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {self.status} X"] + [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def _send_chunked(self, writer: asyncio.StreamWriter, headers: dict[str, str]) -> None:
        headers["Transfer-Encoding"] = "chunked"
        writer.write(self._head(headers))
        chunk = b"x" * 65536
        while self.body_bytes_sent < self.chunked_bytes:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()  # blocks once the client stops reading
            self.body_bytes_sent += len(chunk)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    await srv.start()
    yield srv
    await srv.stop()


def harness(tmp_path: Path, *bindings: dict[str, Any], **config: Any) -> SensorHarness:
    return SensorHarness(
        HttpSensor,
        config={"interval": "1h", "jitter": 0, "min_interval": "10ms", **config},
        bindings=list(bindings),
        clock=SystemClock(),
        tmp_path=tmp_path,
    )


async def next_outcome(
    h: SensorHarness, outcome: str, *, timeout_s: float = 10.0
) -> ValidationEvent:
    """Wait (event-driven, bounded) for the next emitted event with ``outcome``."""
    seen = len(h.emitted)
    while True:
        await h.wait_for_events(seen + 1, timeout_s=timeout_s)
        event = h.emitted[seen]
        seen += 1
        if event.outcome == outcome:
            return event


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------- the behaviours


async def test_a_changed_value_refutes_and_its_return_confirms(tmp_path, server):
    """The periodic check confirms 1.2, refutes when the API says 1.3, confirms when back."""
    binding = {"url": f"{server.url}/version", "key": "/version", "equals": "1.2"}
    async with harness(tmp_path, binding, interval="50ms") as h:
        first = await next_outcome(h, "confirmed")
        assert first.reliability == 0.95
        assert first.observed["value"] == "1.2"
        assert first.block_id == h.bindings[0].block_id
        server.body = b'{"version": "1.3"}'
        refuted = await next_outcome(h, "refuted")
        assert refuted.observed["value"] == "1.3"
        assert '/version is "1.3", expected "1.2"' in refuted.message
        server.body = b'{"version": "1.2"}'
        await next_outcome(h, "confirmed")
    assert server.connections == 1, "the pooled client reuses its connection"


async def test_a_server_error_is_an_error_unless_configured_to_refute(tmp_path, server):
    """A 500 is `error` by default (never a refutation) and `refuted` with server_error."""
    server.status = 500
    binding = {"url": f"{server.url}/health"}
    async with harness(tmp_path, binding) as h:
        [event] = await h.revalidate(binding["url"])
    assert event.outcome == "error"
    assert "status 500" in event.message
    async with harness(tmp_path / "b", binding, server_error="refute") as h:
        [event] = await h.revalidate(binding["url"])
    assert event.outcome == "refuted"


async def test_connection_refused_is_an_error_and_backs_off(tmp_path):
    """A transport failure is `error`, never `refuted`, and lengthens the next wait."""
    url = f"http://127.0.0.1:{closed_port()}/"
    async with harness(tmp_path, {"url": url}) as h:
        [event] = await h.revalidate(url)
        assert event.outcome == "error"
        assert "request failed" in event.message
        sensor = h.sensor
    delays = [sensor._delay(timedelta(seconds=10), n) for n in (0, 1, 3, 40)]
    assert 9.0 <= delays[0] <= 11.0
    assert 10.0 <= delays[1] <= 20.0
    assert 40.0 <= delays[2] <= 80.0
    assert delays[3] == sensor.config.backoff_max.total_seconds()  # jitter is 0 here
    assert sensor._delay(timedelta(hours=2), 5) == 7200, "backoff never polls faster"


async def test_a_host_not_allowed_is_refused_at_bind_time(tmp_path, server):
    """A URL whose host is not in allowed_hosts is refused when bound, and never fetched."""
    async with harness(tmp_path, {"url": f"{server.url}/"}) as h:
        with pytest.raises(ValidationInputError, match=r"example\.com:80 .* allowed_hosts"):
            await h.set_bindings([{"url": "http://example.com/version"}])
    async with harness(tmp_path / "b", allowed_hosts=["api.internal"]) as h:
        with pytest.raises(ValidationInputError, match="allowed_hosts"):
            await h.set_bindings([{"url": f"{server.url}/"}])
    assert server.requests == []


async def test_a_50_mb_body_is_capped_and_reading_stops(tmp_path, server):
    """A body past max_bytes is an error, and the sensor stops reading long before 50 MB."""
    server.chunked_bytes = 50 * 1024 * 1024
    binding = {"url": f"{server.url}/big"}
    async with harness(tmp_path, binding, max_bytes=1024 * 1024) as h:
        [event] = await h.revalidate(binding["url"])
    assert event.outcome == "error"
    assert event.message == "response larger than 1048576 bytes"
    assert server.body_bytes_sent < 20 * 1024 * 1024


async def test_a_declared_oversize_body_is_refused_before_reading(tmp_path, server):
    """A Content-Length over max_bytes is an error without reading the body."""
    server.declared_length = 50 * 1024 * 1024
    binding = {"url": f"{server.url}/big"}
    async with harness(tmp_path, binding, max_bytes=1000) as h:
        [event] = await h.revalidate(binding["url"])
    assert event.message == "response larger than 1000 bytes"


async def test_an_etag_makes_the_next_check_a_304_judged_from_the_last_answer(tmp_path, server):
    """With an ETag the second check sends If-None-Match, gets 304 and confirms unread."""
    server.etag = '"v12"'
    binding = {"url": f"{server.url}/version", "key": "/version", "equals": "1.2"}
    async with harness(tmp_path, binding) as h:
        [first] = await h.revalidate(binding["url"])
        sent, not_modified = server.body_bytes_sent, h.sensor.not_modified
        [second] = await h.revalidate(binding["url"])
        assert h.sensor.not_modified == not_modified + 1
    assert first.outcome == second.outcome == "confirmed"
    assert second.observed["not_modified"] is True
    assert second.observed["value"] == "1.2"
    assert server.requests[-1]["if-none-match"] == '"v12"'
    assert server.body_bytes_sent == sent, "the 304 carried no body"


async def test_expectations_on_status_headers_body_and_latency(tmp_path, server):
    """Each expectation confirms when met and refutes, with the reason, when not."""
    server.headers["X-Build"] = "2026.1"
    u = f"{server.url}/v"
    cases = [
        ({"url": u, "status": [200, 204]}, "confirmed", ""),
        ({"url": u, "status": [204]}, "refuted", "status 200, expected 204"),
        ({"url": u, "body_regex": r'"ok":\s*true'}, "confirmed", ""),
        ({"url": u, "body_regex": "nope"}, "refuted", "body does not match"),
        ({"url": u, "header": {"name": "x-build", "value": "2026.1"}}, "confirmed", ""),
        ({"url": u, "header": {"name": "X-Build", "regex": "^2025"}}, "refuted", "X-Build"),
        ({"url": u, "header": {"name": "X-Missing"}}, "refuted", "no X-Missing header"),
        ({"url": u, "key": "/version", "matches": r"^1\.\d$"}, "confirmed", ""),
        ({"url": u, "key": "/ok", "equals": 1}, "refuted", "/ok is true, expected 1"),
        ({"url": u, "key": "/ok", "equals": True}, "confirmed", ""),
        ({"url": u, "key": "/missing"}, "refuted", "no /missing in the body"),
    ]
    got = []
    async with harness(tmp_path) as h:
        for binding, _, _ in cases:
            seen = await h.sensor.observe(HttpBinding.model_validate(binding))
            got.append((str(seen.outcome), seen.message))
    for (binding, outcome, why), (seen, message) in zip(cases, got, strict=True):
        assert seen == outcome, (binding, message)
        assert why in message, (binding, message)


async def test_slow_answers_refute_a_latency_bound_and_time_out_honestly(tmp_path, server):
    """Over max_latency_ms refutes; no answer within timeout_s is an error."""
    server.delay_s = 0.2
    slow = {"url": f"{server.url}/slow", "max_latency_ms": 50}
    async with harness(tmp_path, slow) as h:
        [event] = await h.revalidate(slow["url"])
    assert event.outcome == "refuted"
    assert "over 50 ms" in event.message
    server.hang = True
    async with harness(tmp_path / "b", slow, timeout_s=0.3) as h:
        [event] = await h.revalidate(slow["url"])
    assert event.outcome == "error"
    assert event.message == "no complete answer within 0.3s"


async def test_a_body_that_is_not_json_refutes_a_key(tmp_path, server):
    """A key expectation on a body that is not JSON refutes it."""
    server.body = b"<html>maintenance</html>"
    binding = {"url": f"{server.url}/v", "key": "/version", "equals": "1.2"}
    async with harness(tmp_path, binding) as h:
        [event] = await h.revalidate(binding["url"])
    assert (event.outcome, event.message) == ("refuted", "body is not JSON")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (made with the openssl command)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_tls_is_verified_by_default(tmp_path, certificate):
    """An untrusted certificate is an error; trusting its CA (ca_file) confirms."""
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    srv = Server()
    await srv.start(context)
    try:
        binding = {"url": f"{srv.url}/v"}
        async with harness(tmp_path, binding) as h:
            [untrusted] = await h.revalidate(binding["url"])
        async with harness(tmp_path / "b", binding, ca_file=cert) as h:
            [trusted] = await h.revalidate(binding["url"])
    finally:
        await srv.stop()
    assert untrusted.outcome == "error"
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.message
    assert trusted.outcome == "confirmed"


async def test_the_client_is_closed_at_teardown(tmp_path, server):
    """setup opens one pooled client; teardown closes it (and may run twice)."""
    async with harness(tmp_path, {"url": f"{server.url}/"}) as h:
        client = h.sensor._client
        assert client is not None
        assert not client.is_closed
    assert client.is_closed
    await h.sensor.teardown()


def test_binding_validation_names_the_problem():
    """Bad URLs, pointers, regexes and lone equals are refused with the reason."""
    bad = [
        ({"url": "ftp://127.0.0.1/x"}, "http:// or https://"),
        ({"url": "http://127.0.0.1/", "key": "version"}, "JSON pointer"),
        ({"url": "http://127.0.0.1/", "key": "/a~2"}, "'~' must be followed by 0"),
        ({"url": "http://127.0.0.1/", "equals": 1}, "need a key"),
        ({"url": "http://127.0.0.1/", "body_regex": "("}, "does not compile with RE2"),
        ({"url": "http://127.0.0.1/", "command": "x"}, "Extra inputs"),
    ]
    for data, why in bad:
        with pytest.raises(ValidationError, match=why):
            HttpBinding.model_validate(data)
    assert HttpBinding.model_validate({"url": "http://h/", "key": "/a", "equals": None}).key


def test_host_patterns():
    """*.example.com covers subdomains only; IPv6 hosts are written in brackets."""
    assert url_allowed("https://api.example.com/", ["*.example.com"])
    assert not url_allowed("https://example.com/", ["*.example.com"])
    assert not url_allowed("https://evil-example.com/", ["*.example.com"])
    assert url_allowed("http://[::1]/", ["[::1]"])
    assert url_allowed("http://[::1]:8080/", ["[::1]:*"])
    assert not url_allowed("http://[::1]:8080/", ["::1"])


async def test_a_key_with_a_non_ascii_digit_index_refutes_instead_of_crashing(tmp_path, server):
    """`/list/²`: `str.isdigit` accepts "²" and `int` refuses it; on an array the token is
    no index (RFC 6901: ASCII digits only), so the body has no such value: refuted."""
    server.body = b'{"list": [1, 2, 3]}'
    binding = {"url": f"{server.url}/v", "key": "/list/\u00b2", "equals": 3}
    async with harness(tmp_path, binding) as h:
        [event] = await h.revalidate(binding["url"])
    assert (event.outcome, event.message) == ("refuted", "no /list/\u00b2 in the body")


async def test_a_bad_pointer_in_a_binding_is_refused_naming_the_key(tmp_path, server):
    """A key that is no JSON pointer is a 422 naming ``bindings.0.key``, never a crash."""
    async with harness(tmp_path) as h:
        for key in ("version", "/a~2b", "/a~"):
            with pytest.raises(ValidationInputError, match="JSON pointer") as err:
                await h.set_bindings([{"url": f"{server.url}/v", "key": key}])
            assert err.value.field == "bindings.0.key"


async def test_an_unchanged_answer_is_not_emitted_again(tmp_path, server):
    """Polls that see the same answer (another latency, a 304) emit nothing; a changed
    value is emitted at once."""
    server.etag = '"v12"'
    binding = {"url": f"{server.url}/version", "key": "/version", "equals": "1.2"}
    async with harness(tmp_path, binding, interval="20ms") as h:
        await next_outcome(h, "confirmed")
        await eventually(lambda: h.sensor.poll_counters.unchanged >= 3)
        assert h.sensor.not_modified >= 3
        assert [str(e.outcome) for e in h.emitted] == ["confirmed"]
        server.etag, server.body = '"v13"', b'{"version": "1.3"}'
        await next_outcome(h, "refuted")
