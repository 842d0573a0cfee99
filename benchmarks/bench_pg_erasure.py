"""``pg_erasure``: what ``memwarden forget`` costs on PostgreSQL (``PgErasure.erase``).

Setup (not timed): the ``erasure`` benchmark's 10 000 blocks of Zipf text (a tenth
edited) built in a SQLite store and copied to a PostgreSQL server of the benchmark's own
(``tests/pgserver.py``) with ``copy_to_postgres``. Timed: erasing one block at a time
(every table, the tombstone; no vacuum), ``ERASURES`` times; the value is the median.
Baseline: a plain ``DELETE FROM blocks`` of one block on a raw asyncpg connection (its
cascades and triggers, a commit). Also reported: one erasure of ``BULK`` blocks in one
call, and one erasure with ``vacuum=True`` (``VACUUM (FULL, ANALYZE)`` of the touched
tables and ``pg_statistic``).
"""

from __future__ import annotations

import random
import statistics
import time

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark
from benchmarks._ingest import T0
from benchmarks._pg import pg_server
from benchmarks.bench_erasure import SEED, _build
from memwarden.memory import FakeClock

ERASURES = 5
BULK = 1000
TARGET_S = 1.0  # the SQLite figure's target at 10 000 blocks


@benchmark("pg_erasure", position=41, results=("pg_erase_10k",))
async def pg_erasure(ctx: Context) -> list[Result]:
    import asyncpg  # noqa: PLC0415 - the postgres extra

    from memwarden.memory.pg import PgDatabase, copy_to_postgres  # noqa: PLC0415
    from memwarden.memory.pg._erasure import PgErasure  # noqa: PLC0415

    n_blocks = ctx.n(10_000, 200)
    bulk = ctx.n(BULK, 20)
    path = ctx.workdir / "pg_erasure.db"
    _sqlite.remove(path)
    clock = FakeClock(T0)
    ctx.progress(f"building {n_blocks:,} blocks")
    ids = await _build(path, n_blocks, clock)
    with pg_server(ctx) as server:
        dsn = server.create_database("bench")
        ctx.progress("copying to PostgreSQL")
        await copy_to_postgres(path, dsn)
        _sqlite.remove(path)
        rng = random.Random(SEED + 3)
        chosen = rng.sample(ids, 2 * ERASURES + bulk + 1)
        raw_ids, erased_ids = chosen[:ERASURES], chosen[ERASURES : 2 * ERASURES]
        bulk_ids, vacuum_id = chosen[2 * ERASURES : -1], chosen[-1]
        conn = await asyncpg.connect(dsn)
        try:
            baseline_samples = []
            for block_id in raw_ids:
                t = time.perf_counter()
                async with conn.transaction():
                    await conn.execute("DELETE FROM blocks WHERE id = $1", block_id)
                baseline_samples.append(time.perf_counter() - t)
        finally:
            await conn.close()
        ctx.progress("erasing")
        samples = []
        async with PgDatabase(dsn) as db:
            erasure = PgErasure(db, clock)
            for block_id in erased_ids:
                t = time.perf_counter()
                await erasure.erase([block_id], actor="bench", reason="benchmark")
                samples.append(time.perf_counter() - t)
            t = time.perf_counter()
            await erasure.erase(bulk_ids, actor="bench")
            bulk_s = time.perf_counter() - t
            t = time.perf_counter()
            await erasure.erase([vacuum_id], actor="bench", vacuum=True)
            vacuum_s = time.perf_counter() - t
    value = statistics.median(samples)
    baseline = statistics.median(baseline_samples)
    return [
        Result(
            name="pg_erase_10k",
            value=value,
            unit="s per erasure",
            baseline=baseline,
            ratio=value / baseline,
            target=f"p50 < {TARGET_S:g} s",
            ok=value < TARGET_S,
            extra={
                "blocks": n_blocks,
                "samples_s": samples,
                "bulk_blocks": bulk,
                "bulk_erase_s": bulk_s,
                "erase_with_vacuum_s": vacuum_s,
            },
        )
    ]
