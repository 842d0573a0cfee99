"""The http sensor reaches only what the config allows, and sends credentials only where
they belong (issue 13, item 6), against a real daemon and recording servers on loopback.

Before: ``allowed_hosts`` ignored scheme and port, the configured ``headers`` (secrets)
went to every allowed host, and ``"interval": "0s"`` was accepted.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from pydantic import ValidationError

from memwarden.memory import Binding, RevalidationRequest
from memwarden.sensors.http import HostRule, HttpConfig, HttpSensor, Target, url_allowed
from tests.security.sensor_daemon import (
    Answer,
    HealthProbe,
    RealDaemon,
    Recorder,
    real_daemon,
    recording_server,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

SECRET = "Bearer secret-for-a-only"


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RealDaemon, Recorder, Recorder]]:
    """Server A (http, its port, gets the credentials) and B (its port, no credentials)."""
    tmp = tmp_path_factory.mktemp("hosts")
    with recording_server() as a, recording_server() as b:
        http = {
            "allowed_hosts": [f"http://127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"],
            "interval": "1h",
            "headers": [
                {"host": f"http://127.0.0.1:{a.port}", "values": {"Authorization": SECRET}}
            ],
        }
        with real_daemon(tmp, http=http) as daemon:
            yield daemon, a, b


def _refused(daemon: RealDaemon, binding: dict[str, Any]) -> dict[str, Any]:
    before = daemon.block_count()
    response = daemon.add(binding)
    assert response.status_code == 422, response.text
    assert daemon.block_count() == before
    [problem] = response.json()["detail"]
    return problem  # type: ignore[no-any-return]


def test_a_scheme_host_or_port_outside_the_list_is_refused_when_added(world, unused_port):
    """https on A's http-only entry, another port on an allowed address, another name for
    it, credentials in the URL: 422 naming the URL, and nothing is fetched anywhere."""
    daemon, a, b = world
    fetched = len(a.seen()) + len(b.seen())
    with HealthProbe(daemon.url) as probe:
        for url, where in [
            (f"https://127.0.0.1:{a.port}/v", "https://127.0.0.1"),
            (f"http://127.0.0.1:{unused_port}/v", f"127.0.0.1:{unused_port}"),
            (f"http://localhost:{a.port}/v", "localhost"),
            ("http://127.0.0.1/v", "127.0.0.1:80"),
        ]:
            problem = _refused(daemon, {"sensor": "http", "url": url})
            assert problem["loc"] == ["bindings", "0"]
            assert "is not in the http sensor's allowed_hosts" in problem["msg"]
            assert where in problem["msg"]
        problem = _refused(daemon, {"sensor": "http", "url": f"http://u:p@127.0.0.1:{a.port}/"})
        assert problem["loc"] == ["bindings", "0", "url"]
        assert "credentials" in problem["msg"]
    assert len(a.seen()) + len(b.seen()) == fetched
    probe.assert_responsive()


def test_a_polling_interval_below_the_floor_is_refused(world):
    """``0s`` is refused by the binding model, ``500ms`` by the sensor's min_interval (1s)."""
    daemon, a, _ = world
    problem = _refused(daemon, {"sensor": "http", "url": a.url("/v"), "interval": "0s"})
    assert problem["loc"] == ["bindings", "0", "interval"]
    assert "too short" in problem["msg"]
    problem = _refused(daemon, {"sensor": "http", "url": a.url("/v"), "interval": "500ms"})
    assert problem["loc"] == ["bindings", "0"]
    assert "interval: 0.5s is below the http sensor's min_interval (1s)" in problem["msg"]


def _check(daemon: RealDaemon, url: str) -> dict[str, Any]:
    response = daemon.add({"sensor": "http", "url": url})
    assert response.status_code == 201, response.text
    block_id = response.json()["id"]
    assert daemon.revalidate(block_id)["answered"]
    return next(e for e in daemon.events(block_id) if e["sensor"] == "http")


def test_credentials_go_only_to_their_host_and_never_follow_a_redirect(world):
    """A gets its Authorization header; B (same address, another port) gets none; a
    redirect from A to B is not followed, so B never sees the request or the secret."""
    daemon, a, b = world
    a.answers["/moved"] = Answer(status=302, headers={"Location": b.url("/landing")})
    assert _check(daemon, a.url("/v"))["outcome"] == "confirmed"
    assert _check(daemon, b.url("/v"))["outcome"] == "confirmed"
    moved = _check(daemon, a.url("/moved"))
    assert moved["outcome"] == "refuted"
    assert "status 302" in moved["message"]
    to_a = [h for path, h in a.seen() if path in ("/v", "/moved")]
    to_b = [(path, h) for path, h in b.seen()]
    assert to_a
    assert all(h.get("authorization") == SECRET for h in to_a)
    assert to_b
    assert all("authorization" not in h for _, h in to_b)
    assert all(path != "/landing" for path, _ in to_b)
    assert all(SECRET not in str(h) for _, h in to_b)


# ---------------------------------------------------------------------- the rules themselves


@pytest.mark.parametrize(
    ("entry", "url", "allowed"),
    [
        ("api.example.com", "http://api.example.com/", True),
        ("api.example.com", "https://api.example.com/", True),
        ("api.example.com", "http://api.example.com:8080/", False),  # bare: default ports only
        ("api.example.com", "http://api.example.com:443/", False),
        ("https://api.local:8443", "https://api.local:8443/x", True),
        ("https://api.local:8443", "http://api.local:8443/x", False),
        ("https://api.local:8443", "https://api.local:8444/x", False),
        ("https://api.local", "https://api.local/", True),
        ("https://api.local", "https://api.local:8443/", False),
        ("localhost:8080", "http://localhost:8080/", True),
        ("localhost:8080", "https://localhost:8080/", True),
        ("localhost:8080", "http://localhost:8081/", False),
        ("localhost", "http://localhost/", True),
        ("localhost", "http://localhost:8080/", False),
        ("localhost:*", "https://localhost:1/", True),
        ("*.example.com", "https://a.example.com/", True),
        ("*.example.com", "https://example.com/", False),
        ("*.example.com", "https://evil-example.com/", False),
        ("[::1]:8080", "http://[::1]:8080/", True),
        ("::1", "http://[::1]/", True),
        ("::1", "http://[::1]:8080/", False),
        ("API.Example.COM.", "http://api.example.com/", True),
        ("127.0.0.1", "http://2130706433/", False),  # another spelling is another host
        ("a.com", "http://a.com\\@evil.com/", False),  # parsed as httpx connects: evil.com
        ("a.com", "http://evil.com#@a.com/", False),
        ("bücher.de", "http://xn--bcher-kva.de/", True),  # IDNA: the name httpx connects to
        ("xn--bcher-kva.de", "http://bücher.de/", True),
        ("*.bücher.de", "https://api.xn--bcher-kva.de/", True),
    ],
)
def test_allowed_hosts_entries_match_scheme_host_and_port(entry, url, allowed):
    assert url_allowed(url, [entry]) is allowed


@pytest.mark.parametrize(
    "entry",
    [
        "ftp://a.com",
        "a.com/path",
        "user@a.com",
        "a.com:0",
        "a.com:65536",
        "a.com:x",
        "*",
        "a.*.com",
    ],
)
def test_an_unusable_allowed_hosts_entry_is_refused_at_start(entry):
    with pytest.raises(ValidationError, match="allowed_hosts"):
        HttpConfig.model_validate({"allowed_hosts": [entry]})
    with pytest.raises(ValueError, match=f"^'{entry.replace('*', '[*]')}'"):
        HostRule.parse(entry)


def test_headers_for_every_host_are_refused_and_per_host_headers_bind():
    """The old ``headers = {...}`` (sent everywhere) is refused with the new shape named."""
    with pytest.raises(ValidationError, match=r"\[\[sensors\.http\.headers\]\] host"):
        HttpConfig.model_validate({"headers": {"Authorization": SECRET}})
    sensor = HttpSensor(
        HttpConfig.model_validate(
            {
                "allowed_hosts": ["*.example.com"],
                "headers": [
                    {"host": "https://api.example.com", "values": {"Authorization": SECRET}},
                    {"host": "*.example.com", "values": {"X-Team": "core"}},
                ],
            }
        )
    )
    assert sensor.headers_for(Target.of("https://api.example.com/v")) == {
        "Authorization": SECRET,
        "X-Team": "core",
    }
    assert sensor.headers_for(Target.of("http://api.example.com/v")) == {"X-Team": "core"}
    assert sensor.headers_for(Target.of("https://api.example.com:8443/v")) == {}
    assert sensor.headers_for(Target.of("https://other.example.com/v")) == {"X-Team": "core"}


def test_intervals_have_a_floor_in_the_config_too():
    with pytest.raises(ValidationError, match="below min_interval"):
        HttpConfig.model_validate({"interval": "500ms"})
    with pytest.raises(ValidationError, match=r"min_interval: at least 0\.01s"):
        HttpConfig.model_validate({"min_interval": "0s", "interval": "1s"})


@pytest.mark.parametrize(
    "selector",
    [
        {"url": "http://127.0.0.1:8080/v", "interval": "0s"},
        {"url": "http://127.0.0.1:9999/v"},
        {"url": "http://127.0.0.1:8080/v", "body_regex": r"(a)\1"},
    ],
)
async def test_a_stored_binding_that_breaks_the_rules_is_refused_when_revalidated(selector):
    """A binding stored before these rules (or before the config narrowed) is answered
    with an `error` naming the rule, and nothing is fetched."""
    sensor = HttpSensor(HttpConfig.model_validate({"allowed_hosts": ["127.0.0.1:8080"]}))
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    class _Ctx:
        def event(self, subject: str, outcome: str, **kwargs: Any) -> dict[str, Any]:
            return {"subject": subject, "outcome": outcome, **kwargs}

    sensor._ctx = _Ctx()  # type: ignore[assignment]
    sensor._client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    now = datetime.now(UTC)
    request = RevalidationRequest(
        block_id="b1",
        sensor="http",
        subject=selector["url"],
        binding=Binding.model_validate({"sensor": "http", **selector}),
        reason="manual",
        created_at=now,
        deadline=now + timedelta(seconds=10),
        attempts=0,
    )
    event: Any = await sensor.revalidate(request, sensor._ctx)
    await sensor._client.aclose()
    assert event["outcome"] == "error"
    assert event["message"].startswith("binding refused: ")
    assert sent == []
