"""``mqtt_ingest``: remote events per second from publish to committed, against raw aiomqtt.

Setup (not timed): our own ``mosquitto`` on a free loopback port, configured as
``docs/MQTT.md`` recommends (``max_inflight_messages 1000``, ``max_queued_messages``
above the burst); 50 000 ValidationEvents as JSON, numbered like an agent's
(``agent`` = ``bench/<run>``, ``seq`` = 1..n), over 1 000 subjects each bound to a block.

The publisher is a separate process (like a remote agent): a paho-mqtt client sending
QoS 1 with 1 000 in flight, recording when it sent each message (CLOCK_MONOTONIC, which
both processes share).

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
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiomqtt

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.daemon import Daemon, load_settings
from memwarden.memory import new_id
from memwarden.plugins import Registry

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
        self.proc = subprocess.Popen([binary, "-c", str(conf)])
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


def _publisher_main(argv: list[str]) -> None:
    """``python -m benchmarks.bench_mqtt PORT PAYLOADS SENT [PER_S]``: publish, then write
    the send times (monotonic ns) as JSON to SENT."""
    import paho.mqtt.client as mqtt  # noqa: PLC0415
    from paho.mqtt.enums import CallbackAPIVersion  # noqa: PLC0415

    port, payload_file, sent_file = int(argv[0]), Path(argv[1]), Path(argv[2])
    per_s = float(argv[3]) if len(argv) > 3 else 0.0
    payloads = payload_file.read_bytes().split(b"\n")
    acked = threading.Semaphore(0)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-pub-{new_id()}")
    client.max_inflight_messages_set(WINDOW)
    client.on_publish = lambda *_: acked.release()
    client.connect("127.0.0.1", port)
    client.loop_start()
    sent: list[int] = []
    started = time.monotonic()
    for i, payload in enumerate(payloads):
        if per_s:
            delay = started + i / per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        sent.append(time.monotonic_ns())
        client.publish(TOPIC, payload, qos=1)
    for _ in payloads:
        acked.acquire(timeout=120)
    client.disconnect()
    client.loop_stop()
    sent_file.write_text(json.dumps(sent))


class _Publisher:
    """The publisher process for one phase."""

    def __init__(self, workdir: Path, port: int, payloads: list[bytes], per_s: float = 0) -> None:
        self.payload_file = workdir / f"payloads-{new_id()}.jsonl"
        self.sent_file = self.payload_file.with_suffix(".sent.json")
        self.payload_file.write_bytes(b"\n".join(payloads))
        self.args = [str(port), str(self.payload_file), str(self.sent_file), str(per_s)]

    async def run(self) -> list[int]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.bench_mqtt", *self.args
        )
        if await proc.wait() != 0:
            raise RuntimeError("the publisher failed")
        return list(json.loads(self.sent_file.read_text()))


async def _raw(workdir: Path, port: int, payloads: list[bytes]) -> float:
    """Raw aiomqtt publish -> receive, messages per second."""
    n = len(payloads)
    got = 0
    done = asyncio.Event()
    last = 0
    async with aiomqtt.Client("127.0.0.1", port, identifier="bench-raw-sub") as sub:
        await sub.subscribe(TOPIC, qos=1)

        async def receive() -> None:
            nonlocal got, last
            async for _ in sub.messages:
                got += 1
                if got >= n:
                    last = time.monotonic_ns()
                    done.set()
                    return

        reader = asyncio.create_task(receive())
        sent = await _Publisher(workdir, port, payloads).run()
        await asyncio.wait_for(done.wait(), timeout=600)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return n / ((last - sent[0]) / 1e9)


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

    async def timed_submit(source: str, payloads: Any, **options: Any) -> Any:
        result = await submit(source, payloads, **options)
        now = time.monotonic_ns()
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
            sent = await _Publisher(ctx.workdir, port, payloads, paced or 0).run()
            deadline = time.monotonic() + 120
            while len(committed) < count and time.monotonic() < deadline:
                await daemon.wait_for_events(0.5)
            elapsed = (max(committed.values(), default=sent[-1]) - sent[0]) / 1e9
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
        writer = daemon.store.db.writer
        out["commits"] = writer.commits if writer is not None else None
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
        raw = await _raw(ctx.workdir, broker.port, _payloads(n, "raw/1"))
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


if __name__ == "__main__":
    _publisher_main(sys.argv[1:])
