"""Events are authorised by who sends them (issue 13, item 4), through a running daemon.

Each hostile request goes to a real daemon over HTTP (or through a real mosquitto), and
each test asserts the clear refusal, that nothing changed, and that ``/healthz`` kept
answering within 200 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from memwarden.agent import Agent
from memwarden.daemon import Daemon, load_settings
from memwarden.errors import ConfigError
from memwarden.memory import FakeClock
from memwarden.mqtt import GapTracker
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor
from tests.mqtt.conftest import (
    MOSQUITTO_PUB,
    MOSQUITTO_SUB,
    PREFIX,
    event_json,
    wait_accepted,
)
from tests.security._broker import USERS, Certs, SecuredBroker, start_secured_broker
from tests.support import assert_responsive, start_in_loop
from tests.support import eventually as poll_until

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

    async def healthz_fast(self, answers: int = 20) -> None:
        """/healthz answers, within the budget: the daemon stayed responsive. Judged on
        ``answers`` answers (95 % within the budget, none stalled), as the hostile-input
        probes do: one answer alone can wait for a CPU on a loaded machine."""
        latencies_ms: list[float] = []
        for _ in range(answers):
            began = time.perf_counter()
            response = await self.client.get("/healthz")
            latencies_ms.append((time.perf_counter() - began) * 1000.0)
            assert response.status_code == 200
        assert_responsive(latencies_ms, p95_ms=HEALTHZ_BUDGET_S * 1000)

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
    task = await start_in_loop(daemon, timeout_s=20)
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
    [stored] = await api.events_of(block["id"])  # within the skew: stored as observed now
    observed_at = datetime.fromisoformat(stored["observed_at"])
    assert observed_at <= datetime.fromisoformat(stored["received_at"])
    await api.healthz_fast()


async def test_agent_sequence_numbers_cannot_be_sent_over_http(api):
    """`agent`/`seq` would seed the gap detector's high-water mark: 422 over HTTP."""
    block = await api.add({"sensor": REMOTE, "path": "a.txt"})
    count = await api.event_count()
    event = {"sensor": REMOTE, "block_id": block["id"], "outcome": "refuted"}
    response = await api.post({**event, "observed_at": now_iso(), "agent": "edge1/r", "seq": 10**9})
    _refusal(response, 422, "agent", "over MQTT")
    response = await api.post({**event, "observed_at": now_iso(), "seq": 10**9})
    _refusal(response, 422, "seq")
    assert await api.event_count() == count


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


# ---------------------------------------------------------------------- over MQTT


async def mqtt_tool(*args: str, timeout_s: float = 15.0) -> tuple[int, str]:
    """Run a mosquitto client tool: (exit code, stdout + stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode(errors="replace")


class Secured:
    """A daemon behind the documented broker configuration (users, ACL, TLS)."""

    def __init__(self, broker: SecuredBroker, certs: Certs, daemon: Daemon) -> None:
        self.broker = broker
        self.certs = certs
        self.daemon = daemon
        self.synced = 0

    @property
    def bridge(self) -> Any:
        assert self.daemon.mqtt is not None
        return self.daemon.mqtt

    def tls(self) -> list[str]:
        return ["-h", "127.0.0.1", "-p", str(self.broker.port), "--cafile", str(self.certs.ca)]

    async def pub(
        self,
        user: str | None,
        topic: str,
        payload: str | bytes,
        *,
        password: str | None = None,
        retain: bool = False,
    ) -> tuple[int, str]:
        body = payload.decode() if isinstance(payload, bytes) else payload
        who = [] if user is None else ["-u", user, "-P", password or USERS[user]]
        flags = ["-r"] if retain else []
        return await mqtt_tool(
            MOSQUITTO_PUB, *self.tls(), *who, "-q", "1", *flags, "-t", topic, "-m", body
        )

    async def sync(self) -> None:
        """A good event from edge1, waited for: everything published before it was handled."""
        self.synced += 1
        event = event_json("files", "sync.txt", event_id=f"sync-{self.synced}")
        code, out = await self.pub("edge1", f"{PREFIX}/agents/edge1/events/files", event)
        assert code == 0, out
        await wait_accepted(self.daemon, self.synced)

    async def healthz_fast(self) -> None:
        """The daemon's API still answers /healthz within the budget."""
        url = json.loads((self.daemon.settings.home / "api.json").read_text())["url"]
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            await Api(self.daemon, client).healthz_fast()

    async def letters(self) -> list[tuple[str, str]]:
        db = self.daemon.settings.db_path
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT source, reason FROM dead_letters ORDER BY id").fetchall()
        return [(str(s), str(r)) for s, r in rows]


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Secured]:
    """The documented broker (plus one non-agent publisher) and a daemon as `memwarden`."""
    extra_acl = "\n# the tests' non-agent client\nuser plain\ntopic write memwarden/v1/events/#\n"
    broker, certs = await start_secured_broker(tmp_path / "mqtt", extra_acl=extra_acl)
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "daemon",
        api={"port": 0},
        mqtt={
            "url": broker.url,
            "username": "memwarden",
            "password": USERS["memwarden"],
            "ca_file": str(certs.ca),
            "backoff_initial": "20ms",
            "backoff_max": "200ms",
            "max_agents": 2,
        },
        sensors={
            "files": {"kind": "fs", "remote": True, "agents": ["edge1", "edge2", "edge3"]},
            "only1": {"kind": "fs", "remote": True, "agents": ["edge1"]},
            "anyone": {"kind": "fs", "remote": True},  # no agent list: events/anyone too
        },
    )
    daemon = Daemon(settings, registry=Registry.from_classes({}))
    task = asyncio.create_task(daemon.run(), name="test.daemon")
    try:
        await asyncio.wait_for(daemon.ready(), timeout=20)
        assert daemon.mqtt is not None
        await asyncio.wait_for(daemon.mqtt.connected(), timeout=20)
        yield Secured(broker, certs, daemon)
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, timeout=20)
        broker.kill()


async def _bound_block(daemon: Daemon, sensor: str) -> Any:
    return await daemon.add_block(
        {"content": f"bound to {sensor}", "bindings": [{"sensor": sensor, "path": "app.json"}]}
    )


async def test_the_broker_refuses_anonymous_clients_and_wrong_passwords(secured):
    """No user, or a wrong password: the broker refuses the connection; nothing arrives."""
    block = await _bound_block(secured.daemon, "files")
    refute = event_json("files", "app.json", outcome="refuted", event_id="forged-1")
    code, out = await secured.pub(None, f"{PREFIX}/events/files", refute)
    assert code != 0
    assert "not authori" in out.lower()
    code, out = await secured.pub(
        "edge1", f"{PREFIX}/agents/edge1/events/files", refute, password="guess"
    )
    assert code != 0
    assert "not authori" in out.lower()
    await secured.sync()
    assert (await secured.daemon.store.counts())["events"] == 1  # the sync event only
    assert (await secured.daemon.store.get(block.id)).state == block.state
    await secured.healthz_fast()


async def test_an_agent_cannot_publish_under_another_agents_or_the_daemons_topics(secured):
    """The ACL: edge2 writing as edge1, on events/<sensor>, on bindings/ (retained, read by
    every agent) or as edge1's heartbeat is dropped by the broker; nothing reaches the
    daemon and edge1 still sees the daemon's bindings, not edge2's."""
    block = await _bound_block(secured.daemon, "files")
    refute = event_json("files", "app.json", outcome="refuted", agent="edge1/r", seq=1)
    for topic, payload, retain in (
        (f"{PREFIX}/agents/edge1/events/files", refute, False),
        (f"{PREFIX}/events/files", refute, False),
        (f"{PREFIX}/events/anyone", event_json("anyone", "app.json"), False),
        (f"{PREFIX}/agents/edge1/heartbeat", b'{"agent": "edge1/r", "seq": 1000}', False),
        (f"{PREFIX}/bindings/files", b'[{"block_id": "evil", "binding": {}}]', True),
        (f"{PREFIX}/revalidate/files", b"{}", False),
    ):
        code, out = await secured.pub("edge2", topic, payload, retain=retain)
        assert code == 0, out  # MQTT 3.1.1: the broker acknowledges and drops
    await secured.sync()
    assert (await secured.daemon.store.counts())["events"] == 1
    assert (await secured.daemon.store.get(block.id)).state == block.state
    assert secured.bridge.rejected.total() == 0  # refused by the broker, not the bridge
    assert (
        "edge1" not in secured.bridge.gaps.agents or secured.bridge.gaps.agents["edge1"].gaps == 0
    )  # no fake gap from a forged heartbeat
    denied = [line for line in secured.broker.log if "Denied PUBLISH from edge2" in line]
    assert len(denied) == 6, secured.broker.log[-20:]
    code, out = await mqtt_tool(
        MOSQUITTO_SUB, *secured.tls(), "-u", "edge1", "-P", USERS["edge1"],
        "-t", f"{PREFIX}/bindings/files", "-C", "1", "-W", "10",
    )  # fmt: skip
    assert code == 0, out
    assert "evil" not in out
    assert block.id in out  # the daemon's retained bindings
    await secured.healthz_fast()


async def test_a_payload_claiming_another_agent_or_sensor_is_refused_by_the_bridge(secured):
    """On its own topics an agent still cannot claim another agent's identity, report for
    a sensor that does not take it, speak as review, or aim at a block not bound to the
    sensor: each is dead-lettered with the reason; no state changes, no gap is followed."""
    block = await _bound_block(secured.daemon, "files")
    only1 = await _bound_block(secured.daemon, "only1")
    own = f"{PREFIX}/agents/edge2/events"
    hostile = [
        (
            f"{own}/files",
            event_json("files", "app.json", outcome="refuted", agent="edge1/r", seq=9),
        ),
        (
            f"{own}/only1",
            event_json("only1", "app.json", outcome="refuted", agent="edge2/r", seq=1),
        ),
        (f"{own}/review", event_json("review", block_id=block.id, outcome="refuted")),
        (f"{own}/files", event_json("files", block_id=only1.id, outcome="refuted")),
    ]
    for topic, payload in hostile:
        code, out = await secured.pub("edge2", topic, payload)
        assert code == 0, out
    await secured.sync()
    assert dict(secured.bridge.rejected) == {
        "agent_mismatch": 1,
        "agent_not_allowed": 1,
        "not_remote_sensor": 1,
        "block_not_bound": 1,
    }
    reasons = " | ".join(r for _, r in await secured.letters())
    assert "event says agent 'edge1/r' but came on memwarden/v1/agents/edge2/events/files" in (
        reasons
    )
    assert "takes events only from agents ['edge1']" in reasons
    assert f"block {only1.id!r} has no binding for sensor 'files'" in reasons
    assert (await secured.daemon.store.counts())["events"] == 1
    assert (await secured.daemon.store.get(block.id)).state == block.state
    assert (await secured.daemon.store.get(only1.id)).state == only1.state
    assert "edge1" not in secured.bridge.gaps.agents  # the claimed identity is not followed
    await secured.healthz_fast()


async def test_gap_tracking_follows_only_checked_agents_and_is_bounded(secured):
    """max_agents = 2: a third agent evicts the least recently heard (gap figures and
    status); an unchecked `agent` field (refused event, non-agent client) is never followed."""
    for agent_id in ("edge1", "edge2", "edge3"):
        topic = f"{PREFIX}/agents/{agent_id}/status"
        status = json.dumps({"status": "online", "agent": f"{agent_id}/r", "sensors": ["files"]})
        assert (await secured.pub(agent_id, topic, status))[0] == 0
        for seq in (1, 3):  # seq 2 lost: a gap
            payload = event_json("files", "gap.txt", agent=f"{agent_id}/r", seq=seq)
            code, out = await secured.pub(
                agent_id, f"{PREFIX}/agents/{agent_id}/events/files", payload
            )
            assert code == 0, out
    # A client that is not an agent: its `agent` field counts only once the event passed.
    ghost = event_json("nosuch", "gap.txt", agent="ghost/r", seq=5)
    assert (await secured.pub("plain", f"{PREFIX}/events/nosuch", ghost))[0] == 0
    await wait_accepted(secured.daemon, 6)
    gaps = secured.bridge.gaps
    assert list(gaps.agents) == ["edge2", "edge3"]  # edge1, heard least recently, went first
    assert gaps.agents["edge3"].gaps == 1
    assert gaps.evicted >= 1
    assert "ghost" not in gaps.agents
    assert len(secured.bridge.agents) <= 2
    assert "edge1" not in secured.bridge.agents
    # edge2 announces a sensor that does not take it: not shown as that sensor's agent.
    status = json.dumps({"status": "online", "agent": "edge2/r", "sensors": ["only1"]})
    assert (await secured.pub("edge2", f"{PREFIX}/agents/edge2/status", status))[0] == 0
    await secured.sync()
    await poll_until(lambda: secured.bridge.agents["edge2"].sensors == ["only1"], timeout_s=10)
    rows = {row["name"]: row for row in secured.daemon.sensor_status()}
    assert rows["only1"]["status"] == "unavailable"
    assert rows["only1"]["agent"] is None
    await secured.healthz_fast()


async def test_the_daemon_and_a_real_agent_work_through_the_documented_config_over_tls(
    secured, tmp_path
):
    """The agent (user edge1) announces itself, gets its bindings and delivers an event;
    a client that does not speak TLS to the TLS listener gets nowhere."""
    block = await _bound_block(secured.daemon, "files")
    world = tmp_path / "world"
    world.mkdir()
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "agent",
        mqtt={
            "url": secured.broker.url,
            "username": "edge1",
            "password": USERS["edge1"],
            "ca_file": str(secured.certs.ca),
            "backoff_initial": "20ms",
            "backoff_max": "200ms",
        },
        agent={"id": "edge1", "heartbeat_interval": "200ms"},
        sensors={"files": {"kind": "fs", "roots": [str(world)], "debounce_ms": 0}},
    )
    agent = Agent(settings, registry=Registry.from_classes({"fs": FsSensor}))
    task = asyncio.create_task(agent.run(), name="test.agent")
    try:
        await asyncio.wait_for(agent.connected(), timeout=20)
        ctx = agent.runners["files"].ctx
        await poll_until(lambda: [b.block_id for b in ctx.bindings] == [block.id], timeout_s=10)
        await ctx.emit(ctx.event("app.json", "changed", observed=1))
        await wait_accepted(secured.daemon, 1)
        await poll_until(
            lambda: (
                secured.bridge.agents.get("edge1") is not None
                and secured.bridge.agents["edge1"].status == "online"
            ),
            timeout_s=10,
        )
        events = await secured.daemon.store.events_for(block.id, limit=10)
        assert [(e.sensor, e.outcome) for e in events] == [("files", "changed")]
    finally:
        agent.request_stop()
        await asyncio.wait_for(task, timeout=20)
    plain = ["-h", "127.0.0.1", "-p", str(secured.broker.port)]
    code, _ = await mqtt_tool(
        MOSQUITTO_PUB, *plain, "-u", "edge1", "-P", USERS["edge1"], "-t", "x", "-m", "y",
        timeout_s=30,
    )  # fmt: skip
    assert code != 0


def test_the_gap_tracker_forgets_idle_agents():
    """An agent not heard from for the idle timeout is forgotten, runs included."""
    clock = FakeClock(1000.0)
    gaps = GapTracker(max_agents=10, idle_s=60.0, clock=clock.time)
    assert gaps.seen("a/r", 1) is None
    assert gaps.seen("a/r", 3) == (2, 2)
    clock.advance(30)
    gaps.seen("b/r", 1)
    clock.advance(31)  # a: 61 s idle, b: 31 s
    gaps.seen("c/r", 1)
    assert list(gaps.agents) == ["b", "c"]
    assert not gaps.known("a/r")
    assert gaps.evicted == 1
