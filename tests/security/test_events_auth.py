"""Events are authorised by who sends them (issue 13, item 4), through a running daemon.

Each hostile request goes to a real daemon over HTTP (or through a real mosquitto), and
each test asserts the clear refusal, that nothing changed, and that ``/healthz`` kept
answering within 200 ms.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from memwarden.daemon import Daemon, load_settings
from memwarden.errors import ConfigError
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

REMOTE = "edge-files"  # a remote sensor: may report over HTTP and MQTT
MQTT_ONLY = "edge-mqtt"  # a remote sensor that may report over MQTT only
HEALTHZ_BUDGET_S = 0.2


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def now_iso(ahead_s: float = 0.0) -> str:
    return iso(datetime.now(UTC) + timedelta(seconds=ahead_s))


class Api:
    """A daemon's HTTP API, as a client sees it."""

    def __init__(self, daemon: Daemon, client: httpx.AsyncClient) -> None:
        self.daemon = daemon
        self.client = client

    async def healthz_fast(self) -> None:
        """/healthz answers, within the budget: the daemon stayed responsive."""
        began = time.perf_counter()
        response = await self.client.get("/healthz")
        elapsed = time.perf_counter() - began
        assert response.status_code == 200
        assert elapsed < HEALTHZ_BUDGET_S, f"/healthz took {elapsed * 1000:.0f} ms"

    async def add(self, *bindings: dict[str, Any]) -> dict[str, Any]:
        response = await self.client.post(
            "/v1/blocks",
            json={"content": f"a fact bound to {len(bindings)}", "bindings": list(bindings)},
        )
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]

    async def block(self, block_id: str) -> dict[str, Any]:
        response = await self.client.get(f"/v1/blocks/{block_id}")
        assert response.status_code == 200
        return response.json()  # type: ignore[no-any-return]

    async def events_of(self, block_id: str) -> list[dict[str, Any]]:
        response = await self.client.get(f"/v1/blocks/{block_id}/events")
        assert response.status_code == 200
        return response.json()  # type: ignore[no-any-return]

    async def event_count(self) -> int:
        return (await self.daemon.store.counts())["events"]  # type: ignore[no-any-return]

    async def post(self, *events: dict[str, Any]) -> httpx.Response:
        return await self.client.post("/v1/events", json=list(events))


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """A daemon with a local fs sensor, two remote sensors (one capped) and its API."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "home",
        api={"port": 0},
        sensors={
            "fs": {"roots": [str(root)], "debounce_ms": 0},
            REMOTE: {
                "remote": True,
                "kind": "fs",
                "max_reliability": 0.5,
                "max_validity_window": "1h",
            },
            MQTT_ONLY: {"remote": True, "kind": "fs", "report_via": ["mqtt"]},
        },
    )
    daemon = Daemon(settings, registry=Registry.from_classes({"fs": FsSensor}))
    task = asyncio.create_task(daemon.run(), name="test.daemon")
    ready = asyncio.create_task(daemon.ready())
    done, _ = await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    assert ready in done, "daemon did not become ready"
    home = settings.home
    url = json.loads((home / "api.json").read_text())["url"]
    token = (home / "token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
            yield Api(daemon, client)
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, timeout=20)


def _refusal(response: httpx.Response, status: int, field: str, *words: str) -> str:
    """The refusal names the event and the field, says why; returns the message."""
    assert response.status_code == status, response.text
    [detail] = response.json()["detail"]
    assert detail["loc"][-1] == field
    assert detail["loc"][0] == "body"
    for word in words:
        assert word in detail["msg"], detail["msg"]
    assert "Traceback" not in response.text
    return str(detail["msg"])


async def test_forged_review_refutation_is_refused_and_changes_nothing(api):
    """`sensor: review` (a person's decision) cannot be sent as an event: 403, no change."""
    block = await api.add({"sensor": REMOTE, "path": "a.txt"})
    before = await api.block(block["id"])
    count = await api.event_count()
    forged = {
        "sensor": "review",
        "block_id": block["id"],
        "outcome": "refuted",
        "observed_at": now_iso(),
        "message": "rejected by a human (not really)",
    }
    response = await api.post(forged)
    message = _refusal(response, 403, "sensor", "'review'", "remote = true")
    assert "people's decisions" in message
    after = await api.block(block["id"])
    assert after["state"] == before["state"] != "refuted"
    assert after["validation"] == before["validation"]
    assert await api.event_count() == count
    assert api.daemon.gate.refused["not_remote_sensor"] == 1
    await api.healthz_fast()


async def test_a_local_sensor_cannot_be_spoken_for(api):
    """`sensor: fs` runs in this daemon: an outside event as fs is refused, even for a block
    bound to fs, and even when it aims at a block bound only to another sensor."""
    fs_block = await api.add({"sensor": "fs", "path": "a.txt"})
    other = await api.add({"sensor": REMOTE, "path": "a.txt"})
    count = await api.event_count()
    for target in ({"block_id": other["id"]}, {"block_id": fs_block["id"]}, {"subject": "a.txt"}):
        response = await api.post(
            {"sensor": "fs", "outcome": "refuted", "observed_at": now_iso(), **target}
        )
        _refusal(response, 403, "sensor", "'fs'", "runs in this daemon")
    assert (await api.block(fs_block["id"]))["state"] != "refuted"
    assert (await api.block(other["id"]))["state"] != "refuted"
    assert await api.event_count() == count
    await api.healthz_fast()


async def test_a_remote_sensor_reaches_only_blocks_bound_to_it(api):
    """A remote sensor naming the block_id of a block not bound to it: 403 naming block_id;
    by subject it reaches nothing there; on its own block it is applied."""
    foreign = await api.add({"sensor": "fs", "path": "a.txt"})
    own = await api.add({"sensor": REMOTE, "path": "a.txt"})
    count = await api.event_count()
    aimed = {"sensor": REMOTE, "outcome": "refuted", "observed_at": now_iso()}
    response = await api.post({**aimed, "block_id": foreign["id"]})
    _refusal(response, 403, "block_id", foreign["id"], f"no binding for sensor {REMOTE!r}")
    response = await api.post({**aimed, "block_id": "no-such-block"})
    _refusal(response, 403, "block_id", "no binding")
    assert await api.event_count() == count
    assert (await api.block(foreign["id"]))["state"] == foreign["state"]
    # One refused event refuses the whole request: the good one beside it is not stored.
    response = await api.post(
        {**aimed, "block_id": own["id"]}, {**aimed, "block_id": foreign["id"]}
    )
    assert response.status_code == 403
    assert response.json()["detail"][0]["loc"] == ["body", 1, "block_id"]
    assert await api.event_count() == count
    assert (await api.block(own["id"]))["state"] == own["state"]
    # The same sensor on its own block: applied.
    response = await api.post({**aimed, "block_id": own["id"]})
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 1
    assert (await api.block(own["id"]))["state"] in ("stale", "refuted")  # by its reliability
    assert [e["sensor"] for e in await api.events_of(own["id"])] == [REMOTE]
    assert (await api.block(foreign["id"]))["state"] == foreign["state"]
    assert await api.events_of(foreign["id"]) == []
    await api.healthz_fast()


async def test_the_store_refuses_an_unbound_block_id_on_its_own(api):
    """The store's own check (in the transaction that applies the events), without the
    route's pre-check: an event for an unbound block is dead-lettered, never applied."""
    foreign = await api.add({"sensor": "fs", "path": "a.txt"})
    event = {
        "sensor": REMOTE,
        "block_id": foreign["id"],
        "outcome": "refuted",
        "observed_at": now_iso(),
    }
    result = await api.daemon.bus.submit("remote:http", [event], bound_only=True)
    assert result.accepted == 0
    [(_, reason)] = result.rejected
    assert "no binding for sensor" in reason
    assert (await api.block(foreign["id"]))["state"] != "refuted"


async def test_reliability_and_validity_window_are_clamped_to_the_sensor_caps(api):
    """Above the caps (0.5, 1h) the event is stored clamped, the response and the event's
    message say so, and the block's window follows the cap, not the claim."""
    block = await api.add({"sensor": REMOTE, "path": "a.txt"})
    observed = datetime.now(UTC)
    response = await api.post(
        {
            "sensor": REMOTE,
            "block_id": block["id"],
            "outcome": "confirmed",
            "observed_at": iso(observed),
            "reliability": 0.99,
            "validity_window": "365d",
        }
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["accepted"] == 1
    assert body["capped"] == [
        {"event": "0", "field": "reliability", "given": "0.99", "stored": "0.5"},
        {"event": "0", "field": "validity_window", "given": "365d", "stored": "1h"},
    ]
    [stored] = [e for e in await api.events_of(block["id"]) if e["sensor"] == REMOTE]
    assert stored["reliability"] == 0.5
    assert "reliability 0.99 capped to 0.5" in stored["message"]
    assert "validity_window 365d capped to 1h" in stored["message"]
    after = await api.block(block["id"])
    assert after["state"] == "fresh"
    stale_at = datetime.fromisoformat(after["stale_at"])
    assert stale_at <= observed + timedelta(hours=1, seconds=1)
    assert api.daemon.gate.capped[(REMOTE, "reliability")] == 1
    # Within the caps nothing is touched.
    response = await api.post(
        {
            "sensor": REMOTE,
            "block_id": block["id"],
            "outcome": "confirmed",
            "observed_at": now_iso(),
            "reliability": 0.4,
            "validity_window": "30m",
        }
    )
    assert response.json()["capped"] == []
    metrics = (await api.client.get("/metrics")).text
    assert f'memwarden_events_capped_total{{field="reliability",sensor="{REMOTE}"}} 1.0' in metrics
    await api.healthz_fast()


async def test_an_observation_from_the_future_is_refused(api):
    """observed_at beyond the skew (5 s): 422 naming observed_at, nothing stored; within
    the skew it is accepted (clocks are never exactly equal)."""
    block = await api.add({"sensor": REMOTE, "path": "a.txt"})
    count = await api.event_count()
    ahead = {"sensor": REMOTE, "block_id": block["id"], "outcome": "refuted"}
    response = await api.post({**ahead, "observed_at": now_iso(60)})
    _refusal(response, 422, "observed_at", "ahead of the daemon's clock", "at most 5s")
    response = await api.post({**ahead, "observed_at": now_iso(3600 * 24 * 365)})
    _refusal(response, 422, "observed_at")
    assert await api.event_count() == count
    assert (await api.block(block["id"]))["state"] != "refuted"
    response = await api.post({**ahead, "observed_at": now_iso(2)})
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 1
    await api.healthz_fast()


async def test_a_sensor_limited_to_mqtt_cannot_report_over_http(api):
    """report_via = ["mqtt"]: the same event over HTTP is refused with the setting named."""
    block = await api.add({"sensor": MQTT_ONLY, "path": "a.txt"})
    response = await api.post(
        {
            "sensor": MQTT_ONLY,
            "block_id": block["id"],
            "outcome": "refuted",
            "observed_at": now_iso(),
        }
    )
    _refusal(response, 403, "sensor", "does not report over http", "report_via")
    assert (await api.block(block["id"]))["state"] != "refuted"


@pytest.mark.parametrize(
    ("sensors", "problem"),
    [
        ({"review": {"remote": True}}, "cannot be remote"),
        ({"people": {"remote": True, "kind": "review"}}, "cannot be remote"),
        ({"fs": {"max_reliability": 0.5}}, "only for a remote sensor"),
        ({"edge": {"remote": True, "agents": ["no/slash"]}}, "agents"),
        ({"edge": {"remote": True, "report_via": ["smtp"]}}, "report_via"),
    ],
)
def test_what_a_remote_sensor_may_report_is_checked_in_the_config(sensors, problem):
    """The review sensor is never remote; caps are for remote sensors; bad values named."""
    with pytest.raises(ConfigError) as caught:
        load_settings(None, env={}, sensors=sensors)
    assert problem in " ".join(caught.value.problems)
