"""``erasure``: what ``memwarden forget`` costs, and what ``secure_delete`` costs writes.

``erase_10k`` / ``erase_100k``. Setup (not timed): 10 000 (100 000) blocks of Zipf text
(the ``search`` corpus: 20-60 words, a 3-6 word title, 2 tags), stored in chunks; a
tenth of them edited once (history rows, index segments to merge). Timed: erasing one
block at a time with ``Store.erase`` (the delete from every table, the merge of the whole
FTS index, the tombstone, then ``wal_checkpoint(TRUNCATE)``), ``ERASURES`` times; the
value is the median. Baseline: a plain ``DELETE FROM blocks`` of one block on raw sqlite3
(its FTS trigger, a commit), which is what forgetting cost before. Also reported: one
erasure with ``vacuum=True``, the index ``optimize`` alone and a full ``rebuild`` (what
the alternative merge would cost), and the database size.

``secure_delete``: events applied per second with ``PRAGMA secure_delete`` on (the
default) against the same run with it off, on the same data: ratio on / off.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import time
from typing import TYPE_CHECKING

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark
from benchmarks._ingest import APPLY_CHUNK, T0, _make_events, _preload
from benchmarks._search import Corpus
from memwarden.memory import FakeClock, Store

if TYPE_CHECKING:
    from pathlib import Path

    from memwarden.memory import ValidationEvent

SEED = 19190119
ERASURES = 5
ADD_CHUNK = 5000
ERASE_TARGET_S = {"erase_10k": 1.0, "erase_100k": 10.0}
SECURE_DELETE_TARGET = 0.75  # measured 0.80-0.82 (docs/BENCHMARKS.md, issue 19 erasure)


async def _build(path: Path, n_blocks: int, clock: FakeClock) -> list[str]:
    corpus = Corpus(random.Random(SEED))
    ids: list[str] = []
    async with Store(path, clock=clock) as store:
        for start in range(0, n_blocks, ADD_CHUNK):
            chunk = [corpus.block() for _ in range(min(ADD_CHUNK, n_blocks - start))]
            ids += await store.add_many(chunk)
        rng = random.Random(SEED + 1)
        for block_id in rng.sample(ids, max(1, n_blocks // 10)):
            await store.update(block_id, {"content": " ".join(corpus.draw(30))})
    _sqlite.checkpoint(path)
    return ids


def _plain_delete_s(path: Path, rids: list[int]) -> float:
    conn = _sqlite.connect(path)
    try:
        samples = []
        for rid in rids:
            t = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM blocks WHERE rid = ?", (rid,))
            conn.execute("COMMIT")
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)
    finally:
        conn.close()


def _fts_s(path: Path, command: str) -> float:
    conn = _sqlite.connect(path)
    try:
        t = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"INSERT INTO blocks_fts(blocks_fts) VALUES ('{command}')")
        conn.execute("COMMIT")
        return time.perf_counter() - t
    finally:
        conn.close()


async def _erasure_figure(ctx: Context, name: str, n_blocks: int) -> Result:
    path = ctx.workdir / f"{name}.db"
    copy = ctx.workdir / f"{name}.raw.db"
    _sqlite.remove(path)
    _sqlite.remove(copy)
    clock = FakeClock(T0)
    ctx.progress(f"building {n_blocks:,} blocks")
    ids = await _build(path, n_blocks, clock)
    shutil.copyfile(path, copy)
    size_mb = path.stat().st_size / 1e6
    rng = random.Random(SEED + 2)
    chosen = rng.sample(ids, ERASURES + 1)
    conn = _sqlite.connect(copy)
    rids = [
        conn.execute("SELECT rid FROM blocks WHERE id = ?", (i,)).fetchone()[0]
        for i in chosen[:ERASURES]
    ]
    conn.close()
    ctx.progress("plain deletes (baseline)")
    baseline = _plain_delete_s(copy, rids)
    optimize_s = _fts_s(copy, "optimize")
    rebuild_s = _fts_s(copy, "rebuild")
    _sqlite.remove(copy)
    ctx.progress("erasing")
    samples = []
    async with Store(path, clock=clock) as store:
        for block_id in chosen[:ERASURES]:
            t = time.perf_counter()
            report = await store.erase([block_id], actor="bench", reason="benchmark")
            samples.append(time.perf_counter() - t)
            assert report.wal_truncated
        t = time.perf_counter()
        await store.erase([chosen[-1]], actor="bench", vacuum=True)
        vacuum_s = time.perf_counter() - t
    _sqlite.remove(path)
    value = statistics.median(samples)
    target = ERASE_TARGET_S[name]
    return Result(
        name=name,
        value=value,
        unit="s per erasure",
        baseline=baseline,
        ratio=value / baseline,
        target=f"p50 < {target:g} s",
        ok=value < target,
        extra={
            "blocks": n_blocks,
            "db_mb": round(size_mb, 1),
            "samples_s": samples,
            "fts_optimize_s": optimize_s,
            "fts_rebuild_s": rebuild_s,
            "erase_with_vacuum_s": vacuum_s,
        },
    )


async def _events_per_s(
    path: Path, clock: FakeClock, *, secure_delete: bool, events: list[ValidationEvent]
) -> float:
    async with Store(path, clock=clock, secure_delete=secure_delete) as store:
        chunks = [events[i : i + APPLY_CHUNK] for i in range(0, len(events), APPLY_CHUNK)]
        t = time.perf_counter()
        await asyncio.gather(*(store.apply_events(c) for c in chunks))
        # Edits too: each frees the old text (what secure_delete overwrites).
        blocks = await store.list_blocks({"limit": 1000})
        for block in blocks:
            await store.update(block.id, {"content": block.content + " (edited)"})
        return (len(events) + len(blocks)) / (time.perf_counter() - t)


@benchmark("erasure", position=20, results=("erase_10k", "erase_100k", "secure_delete"))
async def erasure(ctx: Context) -> list[Result]:
    results = [
        await _erasure_figure(ctx, "erase_10k", ctx.n(10_000, 200)),
        await _erasure_figure(ctx, "erase_100k", ctx.n(100_000, 500)),
    ]
    n_blocks = ctx.n(10_000, 200)
    n_events = ctx.n(100_000, 2000)
    base = ctx.workdir / "secure.db"
    _sqlite.remove(base)
    clock = FakeClock(T0)
    ctx.progress(f"secure_delete: {n_blocks:,} blocks, {n_events:,} events, on and off")
    await _preload(base, n_blocks, clock)
    _sqlite.checkpoint(base)
    events = _make_events(n_blocks, n_events)
    rates: dict[bool, list[float]] = {True: [], False: []}
    for i, secure in enumerate((True, False, False, True, True, False)):  # interleaved
        path = ctx.workdir / f"secure-{i}.db"
        _sqlite.remove(path)
        shutil.copyfile(base, path)
        run_clock = FakeClock(T0 + 3600.0 + n_events * 0.01 + 60.0)
        rates[secure].append(
            await _events_per_s(path, run_clock, secure_delete=secure, events=events)
        )
        _sqlite.remove(path)
    _sqlite.remove(base)
    on, off = statistics.mean(rates[True]), statistics.mean(rates[False])
    results.append(
        Result(
            name="secure_delete",
            value=on,
            unit="writes/s (secure_delete on)",
            baseline=off,
            ratio=on / off,
            target=f"ratio >= {SECURE_DELETE_TARGET:g}",
            ok=on / off >= SECURE_DELETE_TARGET,
            extra={"blocks": n_blocks, "events": n_events, "on": rates[True], "off": rates[False]},
        )
    )
    return results
