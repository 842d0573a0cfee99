"""The benchmark harness: a registry of named benchmarks, timing helpers, the report.

A benchmark is an ``async def name(ctx: Context) -> list[Result]`` registered with
:func:`benchmark`. It builds its data outside the timed regions, times the store and a
raw-SQLite baseline doing the same work, and returns one :class:`Result` per figure.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

__all__ = [
    "BENCHMARKS",
    "RESULT_NAMES",
    "Context",
    "Result",
    "benchmark",
    "machine_info",
    "percentiles_ms",
    "print_table",
    "run_benchmarks",
    "thread_cpu_s",
    "write_results",
]

BENCHMARKS: dict[str, Callable[[Context], Awaitable[list[Result]]]] = {}
RESULT_NAMES: dict[str, tuple[str, ...]] = {}
_POSITIONS: dict[str, int] = {}


def benchmark(
    name: str, *, position: int, results: tuple[str, ...] | None = None
) -> Callable[[Any], Any]:
    """Register ``fn`` under ``name``; a full run goes by ``position``, smallest first.

    ``results`` names the figures it reports (default: just ``name``); each of those
    names also selects the benchmark on the command line.
    """

    def register(fn: Callable[[Context], Awaitable[list[Result]]]) -> Any:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} is registered twice")
        _POSITIONS[name] = position
        RESULT_NAMES[name] = results or (name,)
        BENCHMARKS[name] = fn
        ordered = sorted(BENCHMARKS.items(), key=lambda item: _POSITIONS[item[0]])
        BENCHMARKS.clear()
        BENCHMARKS.update(ordered)
        return fn

    return register


@dataclass(slots=True)
class Result:
    """One figure: the store's value, the raw baseline's, their ratio and the target."""

    name: str
    value: float
    unit: str
    baseline: float
    ratio: float
    target: str
    ok: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "target": self.target,
            "ok": self.ok,
            **self.extra,
        }


@dataclass(slots=True)
class Context:
    """What a benchmark gets: the size scale, a scratch directory and a progress printer."""

    scale: float
    workdir: Path
    name: str = ""
    started: float = field(default_factory=time.perf_counter)
    # What the benchmarks of one run share (a smoke run's one PostgreSQL server, keyed by
    # what it is) and the stack that closes it when the run ends.
    shared: dict[str, Any] = field(default_factory=dict)
    closing: ExitStack = field(default_factory=ExitStack)

    def n(self, full: int, minimum: int = 1) -> int:
        """``full`` scaled down by the run's scale, never below ``minimum``."""
        return max(minimum, round(full * self.scale))

    def progress(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"  [{elapsed:7.1f}s] {self.name}: {message}", file=sys.stderr, flush=True)


def percentiles_ms(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50/p95/p99/max of nanosecond samples, in milliseconds."""
    ms = sorted(s / 1e6 for s in samples_ns)
    if len(ms) == 1:
        return {"p50": ms[0], "p95": ms[0], "p99": ms[0], "max": ms[0]}
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "max": ms[-1]}


def thread_cpu_s(native_id: int | None) -> float | None:
    """CPU seconds a thread of this process has used so far (Linux; None elsewhere)."""
    if native_id is None:
        return None
    try:
        stat = Path(f"/proc/self/task/{native_id}/schedstat").read_text(encoding="ascii")
    except OSError:
        return None
    return int(stat.split()[0]) / 1e9


def run_benchmarks(names: Sequence[str], *, scale: float, workdir: Path) -> list[Result]:
    """Run the named benchmarks one after the other, each in its own event loop."""
    with ExitStack() as closing:
        return _run_all(names, scale=scale, workdir=workdir, closing=closing)


def _run_all(
    names: Sequence[str], *, scale: float, workdir: Path, closing: ExitStack
) -> list[Result]:
    results: list[Result] = []
    shared: dict[str, Any] = {}
    for name in names:
        ctx = Context(scale=scale, workdir=workdir, name=name, shared=shared, closing=closing)
        ctx.progress(f"start (scale {scale:g})")
        gc.collect()
        out = asyncio.run(BENCHMARKS[name](ctx))
        expected = set(RESULT_NAMES[name])
        if {r.name for r in out} != expected:
            raise RuntimeError(f"{name} reported {[r.name for r in out]}, not {sorted(expected)}")
        measured_at = datetime.now(UTC).isoformat(timespec="seconds")
        for r in out:
            r.extra.setdefault("scale", scale)
            r.extra.setdefault("measured_at", measured_at)
        ctx.progress("done")
        results.extend(out)
    return results


def _fmt(value: float) -> str:
    if value == 0 or abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}"


def print_table(results: Sequence[Result]) -> None:
    """An aligned plain-text table; missed targets say MISSED."""
    header = ("benchmark", "store", "raw sqlite3", "unit", "ratio", "target", "result")
    rows = [
        (
            r.name,
            _fmt(r.value),
            _fmt(r.baseline),
            r.unit,
            f"{r.ratio:.2f}",
            r.target,
            "ok" if r.ok else "MISSED",
        )
        for r in results
    ]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    numeric = {1, 2, 4}

    def line(row: Sequence[str]) -> str:
        cells = [
            str(c).rjust(w) if i in numeric else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
    for r in results:
        extras = {
            k: (round(v, 3) if isinstance(v, float) else v)
            for k, v in r.extra.items()
            if k not in ("scale", "measured_at", "plan", "store_plan")
        }
        print(f"  {r.name}: {json.dumps(extras, separators=(', ', '='))}")
    missed = [r.name for r in results if not r.ok]
    if missed:
        print(f"MISSED: {', '.join(missed)} (see docs/BENCHMARKS.md for the analysis)")
    else:
        print("all targets met")


def _atomic_write(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def write_results(results: Sequence[Result], out_dir: Path, machine: dict[str, Any]) -> Path:
    """Write ``results.json`` (a list; merged by name with what is there) and ``machine.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    merged: dict[str, dict[str, Any]] = {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = []
    if isinstance(old, list):
        for item in old:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                merged[item["name"]] = item
    for r in results:
        merged[r.name] = r.as_dict()
    _atomic_write(path, list(merged.values()))
    _atomic_write(out_dir / "machine.json", machine)
    return path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_reference_s(rounds: int = 5) -> float:
    """Seconds this machine takes for a fixed piece of CPU work (the median of ``rounds``
    runs of ``sum(range(3_000_000))``, about 0.05 s): recorded at the start and the end of
    a run, so absolute figures (decay in s, start in s, page p95s) can be read against the
    machine's speed at the time. A shared VM's moves by a third within an hour."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        sum(range(3_000_000))
        times.append(time.perf_counter() - t)
    return round(sorted(times)[rounds // 2], 4)


def machine_info(*, scale: float) -> dict[str, Any]:
    """Where the figures come from: CPU, Python, SQLite, library versions, load."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "nproc": affinity,
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "aiosqlite": _version("aiosqlite"),
        "pydantic": _version("pydantic"),
        "memwarden": _version("memwarden"),
        "platform": platform.platform(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "cpu_reference_s": {"start": cpu_reference_s()},
        "git_commit": _git("rev-parse", "--short", "HEAD") or None,
        # Uncommitted changes under src/ mean the figures are for a working tree.
        "src_dirty": bool(_git("status", "--porcelain", "--", "src")),
        "scale": scale,
    }
