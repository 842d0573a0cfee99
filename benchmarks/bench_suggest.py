"""``suggest``: matching a fact against the fs value index at 10 000 files (issue 18).

10 000 generated config files (JSON and YAML, about 50 000 values: services with an
HTTP timeout and port, a version, a DB pool and host; every other file has
``logging.level: debug``, the most ambiguous value there is) are indexed the way the fs
sensor indexes its roots. Then facts of the kind agents write are matched, interleaved,
after a warm-up:

- **memwarden**: :func:`memwarden.sensors._suggest.candidates` — what the fs sensor's
  ``binding_candidates`` runs: the text's words and values turned into lookup keys, only
  the entries sharing one scored (no dry runs: those read one file each, timed apart);
- **baseline**: the plainest scan that could answer — every entry, a dict lookup of its
  key's last word and of its value in the text's word set.

The figure is the p95 per fact; the target is the issue's: under 50 ms without dry runs.
Also reported: the index's build time and its memory (the process's RSS growth while it
is built, and tracemalloc's count of the index's allocations in a second, smaller build
scaled up — tracemalloc slows a build several times over).
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
import tracemalloc
from typing import TYPE_CHECKING

import psutil

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.sensors._suggest import candidates, match_keys
from memwarden.sensors._textmatch import words_of
from memwarden.sensors._valueindex import ValueIndex

if TYPE_CHECKING:
    from pathlib import Path

TEXTS = (
    "The API timeout is 30 s",
    "svc77 runs version 1.27.0",
    "The db pool size is 12",
    "The log level is debug",  # in every other file: the most ambiguous
    "Port 8123 serves http",
    "db4242.internal is the database host for svc4242",
    "Replicas: 4",
    "The team meets every Monday",  # matches nothing
)
TARGET_MS = 50.0


def _generate(root: Path, files: int) -> None:
    rng = random.Random(1)
    for i in range(files):
        folder = root / f"svc{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        if i % 2:
            doc = {
                "http": {"timeout": rng.randint(1, 120), "port": 8000 + i},
                "name": f"svc{i}",
                "version": f"1.{i % 50}.{i % 7}",
                "db": {"pool_size": rng.randint(1, 50), "host": f"db{i}.internal"},
            }
            (folder / f"c{i}.json").write_text(json.dumps(doc))
        else:
            (folder / f"c{i}.yaml").write_text(
                f"http:\n  timeout: {rng.randint(1, 120)}\n  port: {8000 + i}\n"
                f"logging:\n  level: debug\nreplicas: {i % 9}\n"
            )


def _baseline(text: str, index: ValueIndex) -> int:
    """Every entry looked at: its key's last word and its value against the text's words."""
    words = set(words_of(text))
    tokens = {t.strip(".,;:!?").lower() for t in text.split()}
    hits = 0
    for entry in index.entries():
        last = entry.pointer.rsplit("/", 1)[-1].lower()
        if last in words or str(entry.value).lower() in tokens:
            hits += 1
    return hits


async def _build(root: Path) -> ValueIndex:
    index = ValueIndex((str(root),), keys_of=match_keys)
    await index.rebuild()
    return index


@benchmark("suggest", position=31)
async def suggest(ctx: Context) -> list[Result]:
    files = ctx.n(10_000, 200)
    root = ctx.workdir / "suggest"
    ctx.progress(f"generating {files:,} config files")
    await asyncio.to_thread(_generate, root, files)
    gc.collect()
    rss_before = psutil.Process().memory_info().rss
    t = time.perf_counter()
    index = await _build(root)
    build_s = time.perf_counter() - t
    gc.collect()
    rss_mb = (psutil.Process().memory_info().rss - rss_before) / 1e6
    stats = index.stats()
    ctx.progress(
        f"indexed {stats['files']:,} files, {stats['entries']:,} values in {build_s:.1f} s"
    )

    sample = max(1, files // 10)
    small = ctx.workdir / "suggest-small"
    await asyncio.to_thread(_generate, small, sample)
    tracemalloc.start()
    small_index = await _build(small)
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    traced_mb = traced / 1e6 * (stats["entries"] / max(1, small_index.entry_count))
    del small_index

    for text in TEXTS:  # warm-up (caches of stems and key words), and both answer
        candidates(text, index)
        _baseline(text, index)
    ours_ns: list[int] = []
    base_ns: list[int] = []
    for _ in range(ctx.n(30, 3)):
        for text in TEXTS:
            t0 = time.perf_counter_ns()
            candidates(text, index, limit=20)
            ours_ns.append(time.perf_counter_ns() - t0)
            t0 = time.perf_counter_ns()
            _baseline(text, index)
            base_ns.append(time.perf_counter_ns() - t0)
    ours, base = percentiles_ms(ours_ns), percentiles_ms(base_ns)
    ratio = ours["p95"] / base["p95"]
    return [
        Result(
            name="suggest",
            value=round(ours["p95"], 2),
            unit=f"ms p95 per fact ({stats['files']:,} files indexed, no dry runs)",
            baseline=round(base["p95"], 2),
            ratio=round(ratio, 3),
            target=f"p95 < {TARGET_MS:g} ms",
            ok=ours["p95"] < TARGET_MS,
            extra={
                "p50_ms": round(ours["p50"], 3),
                "max_ms": round(ours["max"], 2),
                "baseline_p50_ms": round(base["p50"], 2),
                "files": stats["files"],
                "entries": stats["entries"],
                "build_s": round(build_s, 1),
                "index_rss_mb": round(rss_mb, 1),
                "index_tracemalloc_mb": round(traced_mb, 1),
                "facts": len(TEXTS),
            },
        )
    ]
