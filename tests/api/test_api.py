"""The HTTP API: auth, bad input, limits, and a schemathesis run over every operation."""

from __future__ import annotations

import json
import stat

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from memwarden.daemon._api import create_app
from tests.api.conftest import REMOTE_SENSOR, LiveDaemon

# The published OpenAPI document, built from the app itself (no daemon needed to load it).
schema = schemathesis.openapi.from_dict(create_app(None, token="unused").openapi())  # type: ignore[arg-type]


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_within_its_schema(case, live_daemon):
    """No operation answers 5xx, and every response matches the published schema."""
    # A body over the daemon's size limit is refused with 413 before it is even parsed;
    # that is the point of the limit, so such cases are not schema checks.
    assume(case.body is None or len(json.dumps(case.body, default=str)) < 1_000_000)
    # The daemon is shared by every API and CLI test: a generated tag or word must not
    # erase their blocks. Erasure's own answers are checked by a dry run's (same schema).
    if case.path == "/v1/forget" and isinstance(case.body, dict):
        case.body["dry_run"] = True
    # positive_data_acceptance is left out: a schema-valid block may still break a business
    # rule (a binding to a sensor that is not configured, depends_on a block that does not
    # exist) and is then rightly refused with 422.
    case.call_and_validate(
        base_url=live_daemon.url,
        headers=live_daemon.auth,
        excluded_checks=[positive_data_acceptance],
    )


def _protected_routes(live: LiveDaemon) -> list[tuple[str, str]]:
    spec = httpx.get(f"{live.url}/openapi.json", headers=live.auth, timeout=5).json()
    out = [("GET", "/metrics"), ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc")]
    for path, ops in spec["paths"].items():
        for method in ops:
            if path != "/healthz":
                out.append((method.upper(), path.replace("{block_id}", "x").replace("{id}", "x")))
    return out


@pytest.mark.parametrize("header", [None, "Bearer wrong", "Basic dXNlcjpwYXNz", "Bearer"])
def test_every_protected_route_needs_the_token(live_daemon, header):
    """Without the token, or with a wrong one or scheme, every route but /healthz is 401."""
    headers = {} if header is None else {"Authorization": header}
    for method, path in _protected_routes(live_daemon):
        response = httpx.request(method, live_daemon.url + path, headers=headers, timeout=5)
        assert response.status_code == 401, (method, path, response.status_code)
    assert httpx.get(f"{live_daemon.url}/healthz", timeout=5).status_code == 200


def test_token_file_is_private(live_daemon):
    """The token file is created with mode 0600."""
    mode = stat.S_IMODE((live_daemon.home / "token").stat().st_mode)
    assert mode == 0o600


BAD_BLOCKS = [
    ({"content": "x", "colour": "red"}, ["body", "colour"]),
    ({"content": 12}, ["body", "content"]),
    ({"content": "x", "tags": "a"}, ["body", "tags"]),
    ({"content": "x", "reliability": 1.5}, ["body", "reliability"]),
    ({"content": "x", "volatility": "sometimes"}, ["body", "volatility"]),
    ({"content": "x", "validity_window": "5 minutes"}, ["body", "validity_window"]),
    ({"content": "x", "bindings": [{"path": "a"}]}, ["body", "bindings", "0", "sensor"]),
    ({"content": "x", "bindings": [{"sensor": "nope", "path": "a"}]}, ["bindings", "0", "sensor"]),
    ({"content": ""}, ["body", "content"]),
]


@pytest.mark.parametrize(("body", "loc"), BAD_BLOCKS)
def test_bad_blocks_get_422_naming_the_field_and_nothing_is_stored(live_daemon, body, loc):
    """Unknown fields, wrong types, out-of-range values, bad durations, unknown sensors: 422."""
    before = httpx.get(f"{live_daemon.url}/v1/health", headers=live_daemon.auth).json()
    response = httpx.post(f"{live_daemon.url}/v1/blocks", json=body, headers=live_daemon.auth)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [str(p) for p in detail[0]["loc"]] == loc
    assert detail[0]["msg"]
    after = httpx.get(f"{live_daemon.url}/v1/health", headers=live_daemon.auth).json()
    assert after["counts"]["blocks"] == before["counts"]["blocks"]


def test_oversized_body_is_refused(live_daemon):
    """A body larger than the limit is refused with 413 before it is read."""
    big = {"content": "x" * (2 * 1024 * 1024)}
    response = httpx.post(f"{live_daemon.url}/v1/blocks", json=big, headers=live_daemon.auth)
    assert response.status_code == 413


def test_events_endpoint_reports_what_it_rejected(live_daemon):
    """POST /v1/events commits good events and names each rejected one with the reason."""
    response = httpx.post(
        f"{live_daemon.url}/v1/events",
        headers=live_daemon.auth,
        json=[
            {
                "sensor": REMOTE_SENSOR,
                "subject": "a.txt",
                "outcome": "confirmed",
                "observed_at": "2026-01-01T00:00:00Z",
            },
            {
                "sensor": REMOTE_SENSOR,
                "outcome": "maybe",
                "observed_at": "2026-01-01T00:00:00Z",
                "subject": "a",
            },
        ],
    )
    assert response.status_code == 200
    body = response.json()
    assert body["accepted"] == 1
    assert body["unmatched"] == 1
    assert len(body["rejected"]) == 1
    assert "outcome" in body["rejected"][0]["reason"]


def test_not_json_events_are_a_clear_422(live_daemon):
    """A body that is not JSON is a 422 naming the body, never a traceback."""
    response = httpx.post(
        f"{live_daemon.url}/v1/events", headers=live_daemon.auth, content=b"\xff not json"
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body"]


def test_metrics_are_prometheus_text(live_daemon):
    """/metrics answers the Prometheus text format with our families."""
    response = httpx.get(f"{live_daemon.url}/metrics", headers=live_daemon.auth)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    for family in (
        "memwarden_events_total",
        "memwarden_blocks",
        "memwarden_revalidation_backlog",
        "memwarden_sensor_restarts",
        "memwarden_revalidation_latency_seconds",
        "memwarden_blocks_erased_total",
    ):
        assert family in response.text


def test_a_wrong_method_is_405_naming_every_method_of_the_path(live_daemon):
    """A method the path lacks answers 405 (JSON) with Allow listing the methods of all the
    path's routes, even though each router registers them separately."""
    response = httpx.put(f"{live_daemon.url}/v1/blocks/x", headers=live_daemon.auth, timeout=5)
    assert response.status_code == 405
    assert response.headers["Allow"] == "DELETE, GET, PATCH"
    assert response.json() == {"detail": "Method Not Allowed"}
    events = httpx.delete(f"{live_daemon.url}/v1/events", headers=live_daemon.auth, timeout=5)
    assert events.status_code == 405
    assert events.headers["Allow"] == "GET, POST"
