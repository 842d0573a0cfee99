"""``mqtt_ingest``: remote events per second from publish to committed, against raw aiomqtt.

Setup (not timed): our own ``mosquitto`` on a free loopback port, configured as
``docs/MQTT.md`` recommends (``max_inflight_messages 1000``, ``max_queued_messages``
above the burst); 50 000 ValidationEvents as JSON, numbered like an agent's
(``agent`` = ``bench/<run>``, ``seq`` = 1..n), over 1 000 subjects each bound to a block.

Baseline: a raw aiomqtt subscriber (QoS 1, acknowledged on receipt) receiving the same
payloads from the same publisher through the same broker, in the same run: messages
per second from the first publish to the last message received.

Store: a daemon in this process with a remote sensor and its MQTT bridge (ack after
commit); the same publisher; events per second from the first publish until the last
event is committed. The figure also reports the p95 latency from publish to commit,
in the burst and at a paced 1 000 events/s, the events lost (sent but not stored;
target 0) and the gaps the daemon detected (the broker dropping messages would show
here). Target: ratio >= 0.6.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiomqtt

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.daemon import Daemon, load_settings
from memwarden.memory import new_id
from memwarden.plugins import Registry

if TYPE_CHECKING:
    from pathlib import Path

TARGET_RATIO = 0.6
WINDOW = 1000  # QoS 1 publishes in flight from the publisher
SUBJECTS = 1000
TOPIC = "memwarden/v1/events/remote"
PACED_PER_S = 1000.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Broker:
    def __init__(self, directory: Path, queued: int) -> None:
        self.port = _free_port()
        directory.mkdir(parents=True, exist_ok=True)
        conf = directory / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
            f"persistence true\npersistence_location {directory}/\n"
            f"max_inflight_messages 1000\nmax_queued_messages {queued}\n"
            "log_dest none\n" + ("user root\n" if _is_root() else "")
        )
        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        self.proc = subprocess.Popen([binary, "-c", str(conf)])  # noqa: S603
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("mosquitto did not start") from None
                time.sleep(0.01)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def _is_root() -> bool:
    import os  # noqa: PLC0415

    return os.geteuid() == 0


def _payloads(n: int, agent: str) -> list[bytes]:
    now = datetime.now(UTC).isoformat()
    return [
        json.dumps(
            {
                "event_id": f"{agent}:{seq}",
                "sensor": "remote",
                "subject": f"s{seq % SUBJECTS}",
                "outcome": "confirmed" if seq % 10 else "changed",
                "observed_at": now,
                "agent": agent,
                "seq": seq,
            }
        ).encode()
        for seq in range(1, n + 1)
    ]


async def _publish(
    port: int, payloads: list[bytes], sent_ns: list[int], *, paced: float | None = None
) -> None:
    """QoS 1 publishes, ``WINDOW`` in flight (or one every 1/paced s), PUBACK awaited."""
    window = asyncio.Semaphore(WINDOW)
    async with (
        aiomqtt.Client("127.0.0.1", port, identifier=f"bench-pub-{new_id()}") as client,
        asyncio.TaskGroup() as tg,
    ):
        client.pending_calls_threshold = WINDOW + 16

        async def one(payload: bytes) -> None:
            try:
                await client.publish(TOPIC, payload, qos=1, timeout=60)
            finally:
                window.release()

        started = time.perf_counter()
        for i, payload in enumerate(payloads):
            if paced:
                delay = started + i / paced - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            await window.acquire()
            sent_ns.append(time.perf_counter_ns())
            tg.create_task(one(payload))


async def _raw(port: int, payloads: list[bytes]) -> float:
    """Raw aiomqtt publish -> receive, messages per second."""
    n = len(payloads)
    got = 0
    done = asyncio.Event()
    async with aiomqtt.Client("127.0.0.1", port, identifier="bench-raw-sub") as sub:
        await sub.subscribe(TOPIC, qos=1)

        async def receive() -> None:
            nonlocal got
            async for _ in sub.messages:
                got += 1
                if got >= n:
                    done.set()
                    return

        reader = asyncio.create_task(receive())
        sent: list[int] = []
        t0 = time.perf_counter()
        await _publish(port, payloads, sent)
        await asyncio.wait_for(done.wait(), timeout=600)
        elapsed = time.perf_counter() - t0
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return n / elapsed


async def _daemon(ctx: Context, port: int, n: int) -> dict[str, Any]:
    settings = load_settings(
        None,
        env={},
        home=ctx.workdir / "mqtt-daemon",
        api={"enabled": False},
        mqtt={"url": f"mqtt://127.0.0.1:{port}", "client_id": "bench-daemon"},
        sensors={"remote": {"remote": True}},
    )
    daemon = Daemon(settings, registry=Registry.from_classes({}))
    task = asyncio.create_task(daemon.run())
    await daemon.ready()
    bridge = daemon.mqtt
    assert bridge is not None
    await bridge.connected()
    await daemon.store.add_many(
        [
            {"content": f"subject {i}", "bindings": [{"sensor": "remote", "subject": f"s{i}"}]}
            for i in range(SUBJECTS)
        ]
    )
    committed: dict[int, int] = {}
    submit = daemon.bus.submit

    async def timed_submit(source: str, payloads: Any) -> Any:
        result = await submit(source, payloads)
        now = time.perf_counter_ns()
        for ev in payloads:
            committed.setdefault(ev.seq, now)
        return result

    daemon.bus.submit = timed_submit  # type: ignore[method-assign]
    out: dict[str, Any] = {}
    try:
        for phase, count, paced in (("burst", n, None), ("paced", min(n, 2000), PACED_PER_S)):
            agent = f"bench/{new_id()}"
            payloads = _payloads(count, agent)
            committed.clear()
            sent: list[int] = []
            t0 = time.perf_counter()
            await _publish(port, payloads, sent, paced=paced)
            deadline = time.perf_counter() + 120
            while len(committed) < count and time.perf_counter() < deadline:
                await daemon.wait_for_events(0.5)
            elapsed = time.perf_counter() - t0
            lat = [committed[i + 1] - sent[i] for i in range(count) if i + 1 in committed]
            with contextlib.closing(sqlite3.connect(settings.db_path)) as conn:
                rows = conn.execute(
                    "SELECT count(DISTINCT agent_seq) FROM events WHERE agent = ?", (agent,)
                ).fetchone()[0]
            out[phase] = {
                "per_s": count / elapsed,
                "latency": percentiles_ms(lat) if lat else {"p95": float("nan")},
                "lost": count - rows,
            }
            ctx.progress(f"{phase}: {count / elapsed:,.0f} events/s, lost {count - rows}")
        health = await bridge.health()
        out["gaps"] = health["gaps_total"]
        out["commits"] = daemon.store._writer.commits if daemon.store._writer else None  # noqa: SLF001
    finally:
        daemon.request_stop()
        await task
    return out


@benchmark("mqtt_ingest", position=30)
async def mqtt_ingest(ctx: Context) -> list[Result]:
    n = ctx.n(50_000, minimum=2000)
    broker = _Broker(ctx.workdir / "mqtt-broker", queued=4 * n)
    try:
        ctx.progress(f"raw aiomqtt: {n} messages")
        raw = await _raw(broker.port, _payloads(n, "raw/1"))
        ctx.progress(f"raw aiomqtt: {raw:,.0f} messages/s")
        ours = await _daemon(ctx, broker.port, n)
    finally:
        broker.close()
    value = ours["burst"]["per_s"]
    ratio = value / raw
    lost = ours["burst"]["lost"] + ours["paced"]["lost"]
    return [
        Result(
            name="mqtt_ingest",
            value=value,
            unit="events/s",
            baseline=raw,
            ratio=ratio,
            target=f"ratio >= {TARGET_RATIO}, 0 lost",
            ok=ratio >= TARGET_RATIO and lost == 0,
            extra={
                "events": n,
                "p95_ms_paced": ours["paced"]["latency"]["p95"],
                "p50_ms_paced": ours["paced"]["latency"].get("p50"),
                "p95_ms_burst": ours["burst"]["latency"]["p95"],
                "lost": lost,
                "gaps_detected": ours["gaps"],
                "commits": ours["commits"],
                "paced_per_s": PACED_PER_S,
            },
        )
    ]
