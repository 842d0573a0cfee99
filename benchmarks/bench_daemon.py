"""``startup`` and ``idle_rss``: the daemon as a process, with 100 000 blocks in its store.

Setup (not timed): 100 000 blocks (10 % bound to a sensor) stored through
``Store.add_many`` into a database kept in the work dir and copied fresh for every run.

``startup``: from spawning ``memwarden run --config X`` to ``READY=1`` arriving on a
``NOTIFY_SOCKET`` datagram socket we bound (what systemd waits for): the store opened
and migrated, plugins discovered, the bus, scheduler and HTTP API (port 0) up. Median of
several runs. Baseline: a bare ``python -c pass`` from spawn to exit. Target < 1.5 s.

``idle_rss``: the daemon's resident set (``VmRSS``) once it has been idle for a moment
after READY, beside the RSS of a bare interpreter (``python -c`` blocked on stdin).
File-backed pages (the SQLite mmap) are reported apart from anonymous memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks._harness import Context, Result, benchmark
from memwarden.memory import Store

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["idle_rss", "startup"]

BLOCKS = 100_000
TARGET_STARTUP_S = 1.5
TARGET_RSS_MIB = 256.0  # a ceiling to catch regressions, not a promise
SETTLE_S = 2.0  # idle time after READY before RSS is read
READY_TIMEOUT_S = 60.0
MEMWARDEN = Path(sys.executable).parent / "memwarden"


# ---------------------------------------------------------------------- setup


async def _preloaded(ctx: Context, n_blocks: int) -> Path:
    """A database with ``n_blocks`` blocks, built once per run in the work dir."""
    path = ctx.workdir / f"daemon-{n_blocks}.db"
    if path.exists():
        return path
    ctx.progress(f"storing {n_blocks:,} blocks through Store.add_many")
    started = time.perf_counter()
    async with Store(path) as store:
        for first in range(0, n_blocks, 5000):
            await store.add_many(
                [
                    {
                        "content": f"fact {i}: the service answers within {i % 97} ms",
                        "tags": [f"t{i % 50}"],
                        "bindings": (
                            [{"sensor": "fs", "path": f"conf/file-{i}.yaml"}] if i % 10 == 0 else []
                        ),
                    }
                    for i in range(first, min(first + 5000, n_blocks))
                ],
                actor="bench",
            )
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ctx.progress(
        f"stored {n_blocks:,} blocks in {time.perf_counter() - started:.1f}s "
        f"({path.stat().st_size / 2**20:.0f} MiB)"
    )
    return path


@contextlib.contextmanager
def _daemon_home(db: Path) -> Iterator[tuple[Path, Path]]:
    """A fresh home with a copy of ``db`` and a config file; removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="mw-bench-"))
    try:
        shutil.copy(db, home / "memwarden.db")
        config = home / "memwarden.toml"
        config.write_text(
            f'home = "{home}"\nlog_level = "warning"\nlog_format = "json"\n'
            '[api]\nhost = "127.0.0.1"\nport = 0\n'
        )
        yield home, config
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def _notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """A bound AF_UNIX datagram socket for NOTIFY_SOCKET (a short path: 107-byte limit)."""
    tmp = tempfile.mkdtemp(prefix="mw-n-")
    path = os.path.join(tmp, "notify")  # noqa: PTH118 - a str for the environment
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(path)
        yield sock, path
    finally:
        sock.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_ready(sock: socket.socket, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
            raise RuntimeError(f"memwarden run never said READY=1 (exit {proc.poll()}): {err}")
        sock.settimeout(min(remaining, 1.0))
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        if b"READY=1" in data.split(b"\n"):
            return


def _spawn(config: Path, notify: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMWARDEN_", "NOTIFY_"))}
    env["NOTIFY_SOCKET"] = notify
    return subprocess.Popen(
        [str(MEMWARDEN), "run", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
    return proc.returncode


def _status_kib(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile ... of a process, in KiB (Linux)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            out[key] = int(value.split()[0])
    return out


def _bare_interpreter_start_s(reps: int) -> float:
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _bare_interpreter_rss_kib() -> dict[str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; print(flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # it is up
        return _status_kib(proc.pid)
    finally:
        proc.communicate()


# ---------------------------------------------------------------------- benchmarks


@benchmark("startup", position=20)
async def startup(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(BLOCKS, 1_000)
    reps = ctx.n(7, 1)
    # At full size a first run warms the page cache and is not counted; a smoke run
    # (scale < 1) checks that it runs, once.
    warm = 1 if ctx.scale >= 1 else 0
    db = await _preloaded(ctx, n_blocks)
    samples = []
    for i in range(reps + warm):
        with _daemon_home(db) as (_, config), _notify_socket() as (sock, notify):
            t0 = time.perf_counter()
            proc = _spawn(config, notify)
            try:
                _wait_ready(sock, proc)
                elapsed = time.perf_counter() - t0
            finally:
                code = _stop(proc)
            if code != 0:
                raise RuntimeError(f"memwarden run exited {code} after SIGTERM")
        if i >= warm:
            samples.append(elapsed)
            ctx.progress(f"run {i + 1 - warm}/{reps}: READY after {elapsed:.3f}s")
    value = statistics.median(samples)
    baseline = _bare_interpreter_start_s(reps)
    return [
        Result(
            name="startup",
            value=value,
            unit="s to READY=1",
            baseline=baseline,
            ratio=value / baseline,
            target=f"< {TARGET_STARTUP_S:g} s with {BLOCKS:,} blocks",
            ok=value < TARGET_STARTUP_S,
            extra={
                "blocks": n_blocks,
                "runs": reps,
                "min_s": min(samples),
                "max_s": max(samples),
                "baseline_is": "python -c pass, spawn to exit",
            },
        )
    ]


@benchmark("idle_rss", position=21)
async def idle_rss(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(BLOCKS, 1_000)
    db = await _preloaded(ctx, n_blocks)
    with _daemon_home(db) as (_, config), _notify_socket() as (sock, notify):
        proc = _spawn(config, notify)
        try:
            _wait_ready(sock, proc)
            at_ready = _status_kib(proc.pid)
            # Let the first sweep and heartbeat finish: idle, not busy (a smoke run only
            # checks that it runs).
            await asyncio.sleep(SETTLE_S if ctx.scale >= 1 else 0.2)
            idle = _status_kib(proc.pid)
        finally:
            _stop(proc)
    bare = _bare_interpreter_rss_kib()
    value = idle["VmRSS"] / 1024
    baseline = bare["VmRSS"] / 1024
    ctx.progress(
        f"RSS {value:.1f} MiB (anon {idle.get('RssAnon', 0) / 1024:.1f}, "
        f"file {idle.get('RssFile', 0) / 1024:.1f}); bare python {baseline:.1f} MiB"
    )
    return [
        Result(
            name="idle_rss",
            value=value,
            unit="MiB RSS",
            baseline=baseline,
            ratio=value / baseline,
            target=f"< {TARGET_RSS_MIB:g} MiB with {BLOCKS:,} blocks",
            ok=value < TARGET_RSS_MIB,
            extra={
                "blocks": n_blocks,
                "rss_at_ready_mib": at_ready["VmRSS"] / 1024,
                "anon_mib": idle.get("RssAnon", 0) / 1024,
                "file_mib": idle.get("RssFile", 0) / 1024,
                "peak_mib": idle.get("VmHWM", 0) / 1024,
                "baseline_anon_mib": bare.get("RssAnon", 0) / 1024,
                "settle_s": SETTLE_S,
            },
        )
    ]
