"""``durability``: what ``[store] synchronous = "full"`` costs against ``"normal"``.

Setup (not timed): 20 000 blocks bound to distinct file subjects (as in ``ingest``),
copied so each mode starts from the very same database.

- ``durability_gathered``: 50 000 events in chunks of 1 000, all submitted at once (many
  sensors at a time; the writer groups them into few commits, so few fsyncs).
- ``durability_acked``: 1 000 single events, each awaited before the next (one remote
  agent waiting for every acknowledgement: one commit, and under ``full`` one fsync of
  the WAL, per event). The figure is events/s; the commit latency percentiles are in
  ``extra``.

Value: events/s under ``full``; baseline: the same under ``normal``; ratio full/normal.
The targets only catch a collapse; the numbers depend on the disk (a VM's virtual disk
may acknowledge a flush from the host's cache).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from typing import TYPE_CHECKING, Any, Literal

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from benchmarks._ingest import APPLY_CHUNK, T0, _make_events, _preload
from memwarden.memory import FakeClock, Store

if TYPE_CHECKING:
    from pathlib import Path

    from memwarden.memory import ValidationEvent

Mode = Literal["normal", "full"]
GATHERED_TARGET = 0.5
ACKED_TARGET = 0.05


async def _gathered(path: Path, mode: Mode, events: list[ValidationEvent], now: float) -> float:
    async with Store(path, clock=FakeClock(now), synchronous=mode) as store:
        chunks = [events[i : i + APPLY_CHUNK] for i in range(0, len(events), APPLY_CHUNK)]
        t = time.perf_counter()
        await asyncio.gather(*(store.apply_events(c) for c in chunks))
        return time.perf_counter() - t


async def _acked(
    path: Path, mode: Mode, events: list[ValidationEvent], now: float
) -> tuple[float, list[int]]:
    samples: list[int] = []
    async with Store(path, clock=FakeClock(now), synchronous=mode) as store:
        t = time.perf_counter()
        for ev in events:
            began = time.perf_counter_ns()
            await store.apply_events([ev])
            samples.append(time.perf_counter_ns() - began)
        return time.perf_counter() - t, samples


@benchmark("durability", position=5, results=("durability_gathered", "durability_acked"))
async def durability(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(20_000, 200)
    n_gathered = ctx.n(50_000, 2000)
    n_acked = ctx.n(1000, 100)
    seed = ctx.workdir / "durability-seed.db"
    _sqlite.remove(seed)
    ctx.progress(f"preloading {n_blocks:,} bound blocks")
    await _preload(seed, n_blocks, FakeClock(T0))
    _sqlite.checkpoint(seed)
    events = _make_events(n_blocks, n_gathered + n_acked)
    gathered, acked = events[:n_gathered], events[n_gathered:]
    now = T0 + 3600.0 + len(events) * 0.01 + 60.0

    gathered_s: dict[str, float] = {}
    acked_s: dict[str, float] = {}
    latency: dict[str, dict[str, float]] = {}
    for mode in ("normal", "full", "normal", "full"):  # twice each, interleaved; best kept
        path = ctx.workdir / f"durability-{mode}.db"
        _sqlite.remove(path)
        shutil.copyfile(seed, path)
        ctx.progress(f"{mode}: {n_gathered:,} events gathered, then {n_acked:,} one by one")
        g = await _gathered(path, mode, gathered, now)
        a, samples = await _acked(path, mode, acked, now)
        if g < gathered_s.get(mode, float("inf")):
            gathered_s[mode] = g
        if a < acked_s.get(mode, float("inf")):
            acked_s[mode] = a
            latency[mode] = percentiles_ms(samples)
        _sqlite.remove(path)
    _sqlite.remove(seed)

    def result(name: str, n: int, secs: dict[str, float], target: float, **extra: Any) -> Result:
        full, normal = n / secs["full"], n / secs["normal"]
        return Result(
            name=name,
            value=full,
            unit="events/s",
            baseline=normal,
            ratio=full / normal,
            target=f"ratio >= {target} (baseline: synchronous=normal)",
            ok=full / normal >= target,
            extra={"blocks": n_blocks, "events": n, **extra},
        )

    return [
        result("durability_gathered", n_gathered, gathered_s, GATHERED_TARGET, chunk=APPLY_CHUNK),
        result(
            "durability_acked",
            n_acked,
            acked_s,
            ACKED_TARGET,
            commit_ms_full=latency["full"],
            commit_ms_normal=latency["normal"],
        ),
    ]
