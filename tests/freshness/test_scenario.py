"""The freshness contract, end to end with the real fs, code_test, http and runtime sensors.

A world of config files, a pytest project, an HTTP service and TCP ports; facts bound to
each, and control facts the world never changes. The world changes; ``search(fresh=true)``
must then serve **no** changed fact as verified and **every** control fact as verified.
An unreachable endpoint and a stopped sensor show ``unreachable``; a change and its
restore never flags flapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.daemon import Daemon, load_settings
from tests.support import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

RETRY_OK = "def retry_count() -> int:\n    return 3\n"
RETRY_BROKEN = "def retry_count() -> int:\n    return 2\n"
TEST_RETRY = "from retry import retry_count\n\n\ndef test_retry():\n    assert retry_count() == 3\n"
TEST_OTHER = "def test_other():\n    assert 1 + 1 == 2\n"


class _Service:
    """An HTTP endpoint answering JSON from ``values`` (the test changes them)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {"version": "1.2", "name": "alpha"}
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            body = json.dumps(self.values).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None


async def _port() -> tuple[asyncio.Server, int]:
    async def idle(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(idle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "app.json").write_text(json.dumps({"timeout": 30}))
    (tmp_path / "config" / "team.json").write_text(json.dumps({"owner": "bob"}))
    project = tmp_path / "project"
    project.mkdir()
    (project / "retry.py").write_text(RETRY_OK)
    (project / "test_retry.py").write_text(TEST_RETRY)
    (project / "test_other.py").write_text(TEST_OTHER)
    service, down = _Service(), _Service()
    await service.start()
    await down.start()
    svc_port, svc_number = await _port()
    ctl_port, ctl_number = await _port()
    try:
        yield {
            "root": tmp_path,
            "project": project,
            "service": service,
            "down": down,
            "svc_port": svc_port,
            "ports": (svc_number, ctl_number),
        }
    finally:
        for server in (svc_port, ctl_port):
            server.close()
        await service.stop()
        await down.stop()


@pytest.fixture
async def daemon(world: dict[str, Any], tmp_path: Path) -> AsyncIterator[Daemon]:
    svc, ctl = world["ports"]
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "state",
        log_level="error",
        api={"enabled": False},
        scheduler={"sweep_interval": "1s", "dispatch_interval": "1s"},
        # No re-check floor (here, and the polling sensors' min_interval): the world
        # changes within a second of the first read's checks, and the second read must
        # check again (the floor keeps a fact checked that recently "verified": a
        # documented trade, not this test's subject).
        read_through={"unreachable_grace": "0s", "recheck_floor": "0s"},
        sensors={
            "fs": {"roots": [str(world["root"] / "config")], "debounce_ms": 50},
            "tests": {
                "kind": "code_test",
                "project_root": str(world["project"]),
                "command": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                "source_dirs": ["."],
                "timeout_s": 60,
                "revalidate_timeout": "90s",
            },
            "api": {
                "kind": "http",
                "allowed_hosts": [
                    f"http://127.0.0.1:{world['service'].port}",
                    f"http://127.0.0.1:{world['down'].port}",
                ],
                "interval": "1h",  # polling would see it in an hour: only reads catch it
                "min_interval": "10ms",
            },
            "runtime": {
                "interval": "1h",
                "min_interval": "10ms",
                "checks": {
                    "svc-port": {"type": "tcp_port", "port": svc},
                    "ctl-port": {"type": "tcp_port", "port": ctl},
                },
            },
            "probe": {
                "kind": "runtime",
                "interval": "1h",
                "min_interval": "10ms",
                "checks": {"ctl-port-2": {"type": "tcp_port", "port": ctl}},
            },
        },
    )
    d = Daemon(settings)
    task = asyncio.create_task(d.run(), name="test.daemon")
    ready = asyncio.create_task(d.ready())
    done, _ = await asyncio.wait({task, ready}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    assert ready in done
    yield d
    d.request_stop()
    await asyncio.wait_for(task, timeout=60)


def _facts(world: dict[str, Any]) -> dict[str, dict[str, Any]]:
    url = f"http://127.0.0.1:{world['service'].port}/info"
    down = f"http://127.0.0.1:{world['down'].port}/info"
    return {
        # changed by the scenario
        "fs": {"sensor": "fs", "path": "app.json", "key": "/timeout", "equals": 30},
        "test": {"sensor": "tests", "test": "test_retry.py::test_retry"},
        "http": {"sensor": "api", "url": url, "key": "/version", "equals": "1.2"},
        "runtime": {"sensor": "runtime", "check": "svc-port"},
        # controls: the world never changes them
        "fs_ctl": {"sensor": "fs", "path": "team.json", "key": "/owner", "equals": "bob"},
        "test_ctl": {"sensor": "tests", "test": "test_other.py::test_other"},
        "http_ctl": {"sensor": "api", "url": url, "key": "/name", "equals": "alpha"},
        "runtime_ctl": {"sensor": "runtime", "check": "ctl-port"},
        # unreachable: its endpoint goes away; and one whose sensor is stopped
        "down": {"sensor": "api", "url": down, "key": "/name", "equals": "alpha"},
        "killed": {"sensor": "probe", "check": "ctl-port-2"},
    }


CHANGED = ("fs", "test", "http", "runtime")
CONTROL = ("fs_ctl", "test_ctl", "http_ctl", "runtime_ctl")


async def _verdicts(d: Daemon) -> dict[str, str]:
    answer = await d.search("scenario fact", limit=50, fresh=True, include_refuted=True, wait_s=10)
    return {r["block"]["title"]: r["receipt"]["verdict"] for r in answer["results"]}


async def test_fresh_reads_serve_no_changed_fact_as_verified(daemon, world):
    d = daemon
    ids = {}
    for name, binding in _facts(world).items():
        block = await d.add_block(
            {
                "title": name,
                "content": f"scenario fact {name}",
                "info_type": "semi_static",
                "bindings": [binding],
            }
        )
        ids[name] = block.id
    for block_id in ids.values():
        await d.revalidate(block_id, wait_s=90)
    before = await _verdicts(d)
    assert set(before.values()) == {"verified"}, before

    # The world changes. The test run is slow (not re-run on read): wait for its sensor.
    (world["project"] / "retry.py").write_text(RETRY_BROKEN)

    async def test_fact_fell() -> bool:
        return (await d.store.get(ids["test"])).state.value != "fresh"

    await eventually(test_fact_fell, timeout_s=60, interval_s=0.05)
    (world["root"] / "config" / "app.json").write_text(json.dumps({"timeout": 45}))
    world["service"].values["version"] = "1.3"
    world["svc_port"].close()
    await world["svc_port"].wait_closed()
    await world["down"].stop()

    after = await _verdicts(d)
    served_as_verified = [n for n in CHANGED if after[n] == "verified"]
    assert served_as_verified == [], after
    assert {n: after[n] for n in CONTROL} == dict.fromkeys(CONTROL, "verified"), after

    # The endpoint that went away: its errors count, and after two it is unreachable.
    await d.revalidate(ids["down"], wait_s=10)
    read = await d.read_block(ids["down"])
    assert read["receipt"]["verdict"] == "unreachable", read["receipt"]
    assert d.runners["api"].counters.errors >= 2

    # A sensor that is stopped: its facts are unreachable (grace 0 here), with why.
    d.runners["probe"].stop()
    await eventually(lambda: d.runners["probe"].status == "stopped", timeout_s=10)
    read = await d.read_block(ids["killed"])
    assert read["receipt"]["verdict"] == "unreachable"
    assert "sensor 'probe' is down" in read["receipt"]["why"]

    # Put the config back: one change and its restore is not flapping.
    (world["root"] / "config" / "app.json").write_text(json.dumps({"timeout": 30}))

    async def fs_fact_fresh() -> bool:
        return (await d.store.get(ids["fs"])).state.value == "fresh"

    await eventually(fs_fact_fresh, timeout_s=20, interval_s=0.05)
    for name, block_id in ids.items():
        assert not (await d.store.get(block_id)).flapping, name
