"""``short_id_lookup``: resolving a short id against looking a full id up, at 100k blocks.

100 000 blocks are added in bursts of 5 000 (their ids share the timestamp digits, as an
import's do). Then, interleaved, per lookup:

- **memwarden**: ``Store.resolve_id(short)`` — the short id as the CLI shows it (the
  id's last hex digits), found by a range scan of the ``id_key`` index;
- **baseline**: ``SELECT id FROM blocks WHERE id = ?`` with the full id on a raw sqlite3
  connection (the unique index on ``id``: the least a lookup can cost).

The figure is the p50 of ``resolve_id``; the target is 1 ms (an id typed by a person or
an agent is resolved once per command). Also reported: the cost of working the short
ids out for a page of results (``short_ids`` per block), the longest short id among all,
and how many blocks needed more than 8 digits.
"""

from __future__ import annotations

import random
import sqlite3
import time

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.memory import Store

TARGET_MS = 1.0


@benchmark("short_id_lookup", position=14)
async def short_id_lookup(ctx: Context) -> list[Result]:
    total = ctx.n(100_000, 1000)
    burst = min(5000, total)
    path = ctx.workdir / "ids.db"
    async with Store(path) as store:
        ids: list[str] = []
        for start in range(0, total, burst):
            ids += await store.add_many(
                [{"content": f"fact {i}"} for i in range(start, min(total, start + burst))]
            )
        ctx.progress(f"{len(ids):,} blocks")
        t = time.perf_counter_ns()
        shorts = await store.short_ids(ids)
        per_block_us = (time.perf_counter_ns() - t) / len(ids) / 1000
        sample = random.Random(7).sample(ids, min(len(ids), ctx.n(3000, 50)))
        raw = sqlite3.connect(path)
        ours_ns: list[int] = []
        base_ns: list[int] = []
        for block_id in sample:
            t = time.perf_counter_ns()
            found = await store.resolve_id(shorts[block_id])
            ours_ns.append(time.perf_counter_ns() - t)
            assert found == block_id
            t = time.perf_counter_ns()
            raw.execute("SELECT id FROM blocks WHERE id = ?", (block_id,)).fetchone()
            base_ns.append(time.perf_counter_ns() - t)
        raw.close()
    lengths = [len(s) for s in shorts.values()]
    ours, base = percentiles_ms(ours_ns), percentiles_ms(base_ns)
    return [
        Result(
            name="short_id_lookup",
            value=round(ours["p50"] * 1000, 1),
            unit=f"us p50 per resolve_id, {len(ids):,} blocks",
            baseline=round(base["p50"] * 1000, 1),
            ratio=round(ours["p50"] / base["p50"], 2) if base["p50"] else 0.0,
            target=f"p50 <= {TARGET_MS:g} ms",
            ok=ours["p50"] <= TARGET_MS,
            extra={
                "p95_us": round(ours["p95"] * 1000, 1),
                "short_ids_us_per_block": round(per_block_us, 1),
                "longest_short_id": max(lengths),
                "blocks_over_8_digits": sum(1 for n in lengths if n > 8),
                "distinct": len(set(shorts.values())) == len(ids),
            },
        )
    ]
