"""The labelled set: facts written the way agents write them, each with its correct
binding (or none, or the binding that contradicts it), run through
POST /v1/suggest-bindings on a real daemon with all four suggesting sensors — fs over a
34-file monorepo, code_test over a small pytest project, runtime with configured
checks, http against a local endpoint.

It measures the top suggestion's precision and recall, auto-bind's precision (the top
suggestion at or above ``auto_min_confidence``, over every fact) with Wilson 95 % lower
bounds, and the share of contradictions found; it asserts the issue's targets on the
lower bounds (auto-bind >= 0.9, top-1 recall >= 0.7). docs/SUGGESTIONS.md has the
figures (``pytest tests/suggest/test_labelled.py -s`` prints them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import sys
import time
from asyncio.subprocess import PIPE
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from tests.suggest.conftest import start_api, write_workspace
from tests.suggest.labelled_facts import CONTRADICTED, HELD_OUT, SUPPORTED, Target
from tests.suggest.labelled_workspace import API_PROJECT, FILES, ROUTES

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

AUTO_MIN_CONFIDENCE = 0.85  # the daemon's default [suggest] auto_min_confidence


def wilson_lower(successes: int, n: int, z: float = 1.96) -> float:
    """The lower end of the Wilson score interval (95 %) for a proportion."""
    if n == 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - margin) / (1 + z * z / n)


def test_wilson_lower_bound_matches_known_values():
    assert round(wilson_lower(9, 10), 3) == 0.596
    assert round(wilson_lower(0, 10), 3) == 0.0
    assert wilson_lower(0, 0) == 0.0


# ---------------------------------------------------------------------- the world


@dataclass
class Endpoint:
    """A tiny HTTP/1.1 server answering ROUTES (JSON) on 127.0.0.1."""

    routes: dict[str, tuple[int, object]]
    url: str = ""
    port: int = 0
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode("latin-1")
                status, body = self.routes.get(path, (404, {"error": "not found"}))
                data = json.dumps(body).encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[tuple[Any, Endpoint]]:
    """The workspace, the endpoint, a running "billing-worker" process, and the daemon."""
    ws = tmp_path / "ws"
    write_workspace(ws / "services" / "api", API_PROJECT)
    write_workspace(ws, {"exports/latest.csv": "sku,qty\n", "backups/last-backup.stamp": ""})
    three_days_ago = time.time() - 3 * 86400
    os.utime(ws / "backups" / "last-backup.stamp", (three_days_ago, three_days_ago))
    endpoint = Endpoint(ROUTES)
    await endpoint.start()
    # A process whose command line names it; it waits on its stdin until the test ends.
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; sys.stdin.read()", "billing-worker", stdin=PIPE
    )
    checks = {
        "billing-worker": {"type": "process", "cmdline": "billing-worker"},
        "search-indexer": {"type": "process", "name": "opensearch-indexer"},
        "api-port": {"type": "tcp_port", "port": endpoint.port},
        "metrics-exporter": {"type": "tcp_port", "port": _closed_port()},
        "nightly-export": {
            "type": "file_age",
            "path": str(ws / "exports/latest.csv"),
            "max_age": "1h",
        },
        "backup-marker": {
            "type": "file_age",
            "path": str(ws / "backups/last-backup.stamp"),
            "max_age": "1d",
        },
        "root-disk": {"type": "disk_free", "path": "/", "min_free_percent": 0.01},
        "host-memory": {"type": "memory", "max_used_percent": 100},
        "host-load": {"type": "load", "max_load1": 10_000},
    }
    sensors = {
        "tests": {
            "kind": "code_test",
            "project_root": str(ws / "services" / "api"),
            "batch_window_ms": 50,
        },
        "runtime": {"checks": checks},
        "http": {"allowed_hosts": [f"127.0.0.1:{endpoint.port}"], "min_interval": "1s"},
    }
    try:
        # A slow answer (a busy machine, a test run) is not a wrong one: a long deadline.
        async with start_api(tmp_path, FILES, sensors=sensors, timeout_s=120) as api:
            yield api, endpoint
    finally:
        assert worker.stdin is not None
        worker.stdin.close()
        await asyncio.wait_for(worker.wait(), timeout=30)
        await endpoint.stop()


# ---------------------------------------------------------------------- scoring


def _found(binding: dict[str, Any], base: str) -> Target:
    """What a suggested binding checks, in the labels' terms."""
    sensor = binding["sensor"]
    if sensor == "tests":
        return ("test", str(binding.get("test") or binding.get("prefix")))
    if sensor == "runtime":
        return ("check", str(binding["check"]))
    if sensor == "http":
        key = binding.get("key")
        return ("http", str(binding["url"]).removeprefix(base), str(key) if key else "")
    if "key" in binding:
        return ("fs", str(binding["path"]), str(binding["key"]))
    regex = str(binding["regex"])  # INI and .env: the key's name is in the anchored regex
    name = regex.split(r"(?:export\s+)?", 1)[1].split(r"\s*", 1)[0].replace("\\", "")
    return ("fs", str(binding["path"]), f"?/{name}")


def _same(found: Target, want: Target) -> bool:
    if found[0] != want[0] or found[1] != want[1]:
        return False
    if want[0] == "http":
        return found[2] == (want[2] or "")
    if want[0] == "fs" and found[2].startswith("?/"):  # a regex names the key, no section
        return want[2].rsplit("/", 1)[-1] == found[2][2:]
    return found[2:] == want[2:]


@pytest.mark.slow
async def test_labelled_set_meets_the_precision_and_recall_targets(tmp_path: Path):
    async with world(tmp_path) as (api, endpoint):

        def fill(text: str) -> str:
            return text.replace("{base}", endpoint.url).replace("{port}", str(endpoint.port))

        gate = asyncio.Semaphore(8)  # facts in parallel: a round of test dry runs is one run

        async def ask(text: str) -> dict[str, Any]:
            async with gate:
                answer: dict[str, Any] = await api.post(
                    "/v1/suggest-bindings", {"content": fill(text), "limit": 3}
                )
                return answer

        supported = await asyncio.gather(*(ask(f) for f, _ in SUPPORTED))
        contradicted = await asyncio.gather(*(ask(f) for f, _ in CONTRADICTED))
        held_out = await asyncio.gather(*(ask(f) for f, _ in HELD_OUT))

    base = endpoint.url
    rows = []  # (fact, label, top target or None, top confidence)
    for (fact, want), answer in zip(SUPPORTED, supported, strict=True):
        top = answer["suggestions"][0] if answer["suggestions"] else None
        assert top is None or top["check"]["outcome"] == "confirmed"
        rows.append((fact, want, _found(top["binding"], base) if top else None, top))
    positives = [r for r in rows if r[1] is not None]
    offered = [r for r in rows if r[2] is not None]
    correct = [r for r in positives if r[2] is not None and _same(r[2], r[1])]
    auto = [r for r in offered if r[3]["confidence"] >= AUTO_MIN_CONFIDENCE]
    auto_correct = [r for r in auto if r[1] is not None and _same(r[2], r[1])]
    # A contradicted fact bound to anything is a wrong auto-bind too.
    auto_wrong_on_contradicted = [
        (fact, a["suggestions"][0]["binding"])
        for (fact, _), a in zip(CONTRADICTED, contradicted, strict=True)
        if a["suggestions"] and a["suggestions"][0]["confidence"] >= AUTO_MIN_CONFIDENCE
    ]
    auto_n = len(auto) + len(auto_wrong_on_contradicted)
    found_contradictions = [
        fact
        for (fact, want), a in zip(CONTRADICTED, contradicted, strict=True)
        if any(_same(_found(c["binding"], base), want) for c in a["contradicts"])
    ]
    false_alarms = [
        (fact, [c["binding"] for c in a["contradicts"]])
        for (fact, _), a in zip(SUPPORTED, supported, strict=True)
        if a["contradicts"]
    ]
    by_sensor: dict[str, list[int]] = {}
    for r in positives:
        counts = by_sensor.setdefault(r[1][0], [0, 0])
        counts[1] += 1
        counts[0] += r in correct
    figures = {
        "facts": len(SUPPORTED) + len(CONTRADICTED),
        "with_binding": len(positives),
        "without": len(rows) - len(positives),
        "contradicted": len(CONTRADICTED),
        "top1_precision": f"{len(correct)}/{len(offered)}",
        "top1_precision_lb": round(wilson_lower(len(correct), len(offered)), 3),
        "top1_recall": f"{len(correct)}/{len(positives)}",
        "top1_recall_lb": round(wilson_lower(len(correct), len(positives)), 3),
        "recall_by_kind": {k: f"{c}/{n}" for k, (c, n) in sorted(by_sensor.items())},
        "auto_precision": f"{len(auto_correct)}/{auto_n}",
        "auto_precision_lb": round(wilson_lower(len(auto_correct), auto_n), 3),
        "auto_recall": f"{len(auto_correct)}/{len(positives)}",
        "contradictions_found": f"{len(found_contradictions)}/{len(CONTRADICTED)}",
        "contradictions_on_supported_facts": len(false_alarms),
    }
    print("labelled set:", json.dumps(figures))  # noqa: T201 - the figures the docs report
    misses = [
        (fact, want, got, top and top["confidence"])
        for fact, want, got, top in rows
        if (want is None) != (got is None) or (want and got and not _same(got, want))
    ]
    print("misses:", *misses, sep="\n  ")  # noqa: T201 - what to look at when a target fails
    print("contradictions missed:", [f for f, _ in CONTRADICTED if f not in found_contradictions])  # noqa: T201
    print("contradictions on supported facts:", *false_alarms, sep="\n  ")  # noqa: T201
    print("auto-bound contradicted facts:", auto_wrong_on_contradicted)  # noqa: T201
    held = _held_out_figures(held_out, base)
    print("held out:", json.dumps(held))  # noqa: T201 - reported beside the tuned figures
    wrong_auto = [r for r in auto if r not in auto_correct]
    assert wilson_lower(len(auto_correct), auto_n) >= 0.9, (wrong_auto, auto_wrong_on_contradicted)
    assert wilson_lower(len(correct), len(positives)) >= 0.7, misses
    assert len(found_contradictions) >= len(CONTRADICTED) // 2, found_contradictions
    # Too few facts for the targets' bounds: a floor that a matcher overfitted to the set
    # above would miss.
    assert held["auto_wrong"] <= 1, held
    assert held["top1_recall_raw"] >= 0.6, held


def _held_out_figures(answers: list[dict[str, Any]], base: str) -> dict[str, Any]:
    tops = [
        (want, a["suggestions"][0] if a["suggestions"] else None)
        for (_, want), a in zip(HELD_OUT, answers, strict=True)
    ]
    positives = [(w, t) for w, t in tops if w is not None]
    right = [(w, t) for w, t in positives if t and _same(_found(t["binding"], base), w)]
    auto = [(w, t) for w, t in tops if t and t["confidence"] >= AUTO_MIN_CONFIDENCE]
    auto_right = [(w, t) for w, t in auto if w and _same(_found(t["binding"], base), w)]
    misses = [
        (fact, want, t and _found(t["binding"], base))
        for (fact, _), (want, t) in zip(HELD_OUT, tops, strict=True)
        if (want is None) != (t is None)
        or (want and t and not _same(_found(t["binding"], base), want))
    ]
    return {
        "facts": len(HELD_OUT),
        "top1_recall": f"{len(right)}/{len(positives)}",
        "top1_recall_raw": round(len(right) / len(positives), 3),
        "top1_recall_lb": round(wilson_lower(len(right), len(positives)), 3),
        "auto_precision": f"{len(auto_right)}/{len(auto)}",
        "auto_precision_lb": round(wilson_lower(len(auto_right), len(auto)), 3),
        "auto_wrong": len(auto) - len(auto_right),
        "misses": misses,
    }
