"""Auth before bodies, bounded bodies: a real daemon answers from the headers alone.

Each hostile request goes over a bare socket so that the test controls how much of the
body is ever sent: a refusal that arrives while most of the body is still unsent proves
the daemon did not need (or wait for) it.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.security.conftest import chunk, raw_connection, read_response

FOUR_MIB = 4 * 1024 * 1024
FIRST_CHUNK = 64 * 1024
LIMIT = 1024 * 1024  # [api] max_body_bytes, the default


def _chunked_head(path: str, *headers: bytes) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1".encode(),
        b"Host: 127.0.0.1",
        b"Content-Type: application/json",
        b"Transfer-Encoding: chunked",
        *headers,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        b"Authorization: Bearer ",
        b"Authorization: Bearer",
        b"Authorization: Bearer \t ",
        b"Authorization: Basic dXNlcjpwYXNz",
        b"Authorization: Bearer wrong-token-of-a-plausible-length-000000",
        b"Authorization: Bearer \xff\xfe\xc3\xa9",
    ],
    ids=["none", "bearer-space", "bearer", "bearer-blank", "basic", "wrong", "non-ascii"],
)
def test_a_chunked_4mib_body_without_the_token_is_refused_before_it_is_read(
    live, health_watch, authorization
):
    """401 arrives after the headers and one 64 KiB chunk of a 4 MiB body; nothing stored."""
    before = live.counts()
    headers = () if authorization is None else (authorization,)
    with health_watch(live.url), raw_connection(live.port) as sock:
        sock.sendall(_chunked_head("/v1/blocks", *headers))
        sock.sendall(chunk(b'{"content": "' + b"x" * (FIRST_CHUNK - 13)))
        response = read_response(sock)  # the other 4 MiB - 64 KiB are never sent
    assert response.status == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "token" in json.loads(response.body)["detail"]
    assert live.counts() == before


@pytest.mark.parametrize(
    ("path", "opening"), [("/v1/blocks", b'{"content": "'), ("/v1/events", b'[{"message": "')]
)
def test_a_chunked_body_over_the_limit_with_the_token_is_refused_413(
    live, health_watch, path, opening
):
    """With the token, a chunked body is counted as it streams: 413 once past the limit,
    while the rest of the 4 MiB is still unsent; nothing stored. (/v1/events reads its
    body itself rather than through a model: the same limit holds.)"""
    before = live.counts()
    head = _chunked_head(path, f"Authorization: Bearer {live.token}".encode())
    with health_watch(live.url), raw_connection(live.port) as sock:
        sock.sendall(head)
        sock.sendall(chunk(opening))
        sent = 0
        while sent <= LIMIT:
            sock.sendall(chunk(b"x" * FIRST_CHUNK))
            sent += FIRST_CHUNK
        response = read_response(sock)
    assert sent < FOUR_MIB
    assert response.status == 413
    detail = json.loads(response.body)["detail"]
    assert detail[0]["loc"] == ["body"]
    assert str(LIMIT) in detail[0]["msg"]
    assert live.counts() == before


def test_a_declared_length_over_the_limit_is_refused_before_any_body(live, health_watch):
    """Content-Length over the limit (or not a number): 413 with no body sent at all."""
    before = live.counts()
    for length in (str(FOUR_MIB), "12abc", "-1"):
        with health_watch(live.url), raw_connection(live.port) as sock:
            sock.sendall(
                b"POST /v1/blocks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: Bearer {live.token}\r\nContent-Length: {length}\r\n\r\n".encode()
            )
            response = read_response(sock)
        # h11/httptools refuse a malformed length themselves (400); ours is 413
        assert response.status in {400, 413}, (length, response)
        if length == str(FOUR_MIB):
            assert response.status == 413
    assert live.counts() == before


def test_a_review_form_without_a_session_is_refused_before_it_is_read(live, health_watch):
    """POST /review/<id> with no session cookie: 401 after the headers and one chunk."""
    before = live.counts()
    with health_watch(live.url), raw_connection(live.port) as sock:
        sock.sendall(
            b"POST /review/r-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"action=confirm&comment=" + b"x" * 60000)
        )
        response = read_response(sock)
    assert response.status == 401
    assert b"memwarden review --open" in response.body
    assert live.counts() == before


def test_chunked_bodies_within_the_limit_still_work(live):
    """A well-formed chunked body with the token is read and the block is stored."""
    before = live.counts()
    body = json.dumps({"content": "Chunked bodies are counted, not refused"}).encode()
    with raw_connection(live.port) as sock:
        sock.sendall(_chunked_head("/v1/blocks", f"Authorization: Bearer {live.token}".encode()))
        sock.sendall(chunk(body[:10]) + chunk(body[10:]) + b"0\r\n\r\n")
        response = read_response(sock)
    assert response.status == 201, response
    assert live.counts()["blocks"] == before["blocks"] + 1


def test_docs_and_schema_need_the_token(live):
    """/docs, /redoc and /openapi.json answer 401 without the token, 200 with it."""
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(live.url + path, timeout=5).status_code == 401, path
        assert httpx.get(live.url + path, headers=live.auth, timeout=5).status_code == 200, path


def test_docs_can_be_turned_off(tmp_path, spawn_daemon):
    """With [api] docs = false the docs and the schema are gone, even with the token."""
    daemon = spawn_daemon(tmp_path / "home", MEMWARDEN_API__DOCS="false")
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(daemon.url + path, headers=daemon.auth, timeout=5).status_code == 404
        assert httpx.get(daemon.url + path, timeout=5).status_code == 401
    assert httpx.get(f"{daemon.url}/v1/sensors", headers=daemon.auth, timeout=5).status_code == 200
