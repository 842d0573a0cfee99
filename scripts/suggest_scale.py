# ruff: noqa: INP001, T201, S311 - a script run by path that prints figures from seeded data
"""Binding suggestions at scale: build the value index over N generated config files and
time the matcher (docs/SUGGESTIONS.md, "At scale"). Not part of `make bench` yet.

    .venv/bin/python scripts/suggest_scale.py [--files 10000] [--memory]

``--memory`` measures the index's Python allocations with tracemalloc (slows the build).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from memwarden.sensors._suggest import candidates, match_keys
from memwarden.sensors._valueindex import ValueIndex

TEXTS = (
    "The API timeout is 30 s",
    "svc77 runs version 1.27.0",
    "db pool size is 12",
    "the log level is debug",  # in every other file: the most ambiguous
    "port 8123 serves http",
)


def generate(root: Path, files: int) -> None:
    rng = random.Random(1)
    for i in range(files):
        folder = root / f"svc{i // 100}"
        folder.mkdir(exist_ok=True)
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


async def main(files: int, *, memory: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), files)
        if memory:
            tracemalloc.start()
        index = ValueIndex((tmp,), keys_of=match_keys)
        started = time.perf_counter()
        await index.rebuild()
        build_s = time.perf_counter() - started
        if memory:
            current, _ = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"index memory (tracemalloc): {current / 1e6:.1f} MB")
        print(f"build: {build_s:.1f} s, {index.stats()}")
        times = []
        for _ in range(20):
            for text in TEXTS:
                started = time.perf_counter()
                candidates(text, index)
                times.append(time.perf_counter() - started)
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        print(
            f"candidates over {len(times)} calls: p50 {statistics.median(times) * 1000:.1f} ms,"
            f" p95 {p95 * 1000:.1f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.files, memory=args.memory))
