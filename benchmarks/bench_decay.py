"""``decay_cycle``: the decay pass over a million blocks, set-based in chunks.

Setup (not timed): the ``sweep`` data set, 1 000 000 valid blocks raw-inserted with ages
spread over 400 days (so a first cycle both rewrites retention and archives a share).

Store: ``await store.decay_cycle()`` — retention recomputed in 50 000-row chunks, each its
own transaction (so other writes interleave), archival with a reason and an audit row.
Baseline: raw ``sqlite3`` doing only the retention UPDATE over the whole table in one
statement, on a copy of the same file. Target (issue 3): under 10 s on 2 cores.
"""

from __future__ import annotations

import shutil
import time

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark, thread_cpu_s
from benchmarks._sweep import NOW, _preload
from memwarden.memory import FakeClock, Store
from memwarden.memory._sqlrules import retention_sql, rule_params
from memwarden.memory.policy import PolicyConfig

TARGET_S = 10.0


@benchmark("decay_cycle", position=4)
async def decay_cycle(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(1_000_000, 10_000)
    path = ctx.workdir / "decay.db"
    copy = ctx.workdir / "decay-raw.db"
    for p in (path, copy):
        _sqlite.remove(p)
    ctx.progress(f"raw-inserting {n_blocks:,} blocks")
    _preload(ctx, path, n_blocks, n_due=min(1000, n_blocks // 10))
    shutil.copyfile(path, copy)

    ctx.progress("raw baseline: one UPDATE of retention over every block")
    raw = _sqlite.connect(copy)
    params = rule_params(PolicyConfig(), NOW)
    t = time.perf_counter()
    cpu = time.thread_time()
    raw.execute("BEGIN IMMEDIATE")
    raw.execute(
        f"UPDATE blocks SET retention = {retention_sql('blocks')} WHERE state <> 'archived'",
        params,
    )
    raw.execute("COMMIT")
    raw_s = time.perf_counter() - t
    raw_cpu_s = time.thread_time() - cpu
    raw.close()
    _sqlite.remove(copy)

    ctx.progress("store: decay_cycle()")
    async with Store(path, clock=FakeClock(NOW)) as store:
        # The writer connection's thread runs the statements: its CPU time is the
        # figure a loaded machine does not move much (private, None if it changes shape).
        wconn = getattr(store.db, "_wconn", None)
        sql_tid = getattr(getattr(wconn, "_thread", None), "native_id", None)
        cpu_before = thread_cpu_s(sql_tid)
        t = time.perf_counter()
        report = await store.decay_cycle()
        store_s = time.perf_counter() - t
        cpu_after = thread_cpu_s(sql_tid)
        t = time.perf_counter()
        again = await store.decay_cycle()  # the steady state: nothing much changed
        again_s = time.perf_counter() - t
    _sqlite.remove(path)

    value = n_blocks / store_s
    baseline = n_blocks / raw_s
    target_s = max(TARGET_S * ctx.scale, 1.0)  # a scaled-down run is too short to judge
    return [
        Result(
            name="decay_cycle",
            value=value,
            unit="blocks/s",
            baseline=baseline,
            ratio=value / baseline,
            target=f"< {TARGET_S:g} s for 1M blocks",
            ok=store_s < target_s,
            extra={
                "seconds": round(store_s, 3),
                "baseline_seconds": round(raw_s, 3),
                "store_sql_thread_cpu_s": (
                    None
                    if cpu_before is None or cpu_after is None
                    else round(cpu_after - cpu_before, 3)
                ),
                "baseline_cpu_s": round(raw_cpu_s, 3),
                "blocks": n_blocks,
                "archived": report.archived,
                "retention_updated": report.retention_updated,
                "chunks": report.chunks,
                "second_cycle_seconds": round(again_s, 3),
                "second_cycle_archived": again.archived,
            },
        )
    ]
