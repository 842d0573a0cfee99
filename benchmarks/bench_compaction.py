"""``compaction``: the event-log compaction pass over a week-old flood.

Setup (not timed): 200 blocks bound to distinct file subjects; 100 000 events over them
(90 % confirmed, 5 % changed, 5 % refuted, as in ``ingest``, so runs are broken by state
changes the way real ones are), then the clock moves 8 days on.

Timed: one ``Store.compact_events()`` pass (default settings: 2 000 effects per writer
job). Value: events removed per second; baseline: events applied per second when the
same log was written (how fast the log grows at full speed), so a ratio above 1 means
the pass removes faster than a flood adds. ``max_job_s`` is the longest one job held the
writer (the target: other writes never wait long behind compaction).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark
from benchmarks._ingest import APPLY_CHUNK, EVENT_STEP_S, T0, _make_events, _preload
from memwarden.memory import FakeClock, Store

MAX_JOB_TARGET_S = 0.25


@benchmark("compaction", position=6)
async def compaction(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(200, 20)
    n_events = ctx.n(100_000, 2000)
    path = ctx.workdir / "compaction.db"
    _sqlite.remove(path)
    clock = FakeClock(T0)
    ctx.progress(f"preloading {n_blocks:,} blocks and {n_events:,} events")
    await _preload(path, n_blocks, clock)
    events = _make_events(n_blocks, n_events)
    clock.set(T0 + 3600.0 + n_events * EVENT_STEP_S + 60.0)
    async with Store(path, clock=clock) as store:
        chunks = [events[i : i + APPLY_CHUNK] for i in range(0, n_events, APPLY_CHUNK)]
        t = time.perf_counter()
        await asyncio.gather(*(store.apply_events(c) for c in chunks))
        ingest_s = time.perf_counter() - t
        before = (await store.counts())["events"]
        clock.advance(timedelta(days=8))
        ctx.progress("compacting")
        t = time.perf_counter()
        report = await store.compact_events()
        compact_s = time.perf_counter() - t
        again = await store.compact_events()
    rows = _sqlite.connect(path).execute("SELECT count(*) FROM events").fetchone()[0]
    _sqlite.remove(path)
    removed = report.events_deleted
    value = removed / compact_s
    baseline = n_events / ingest_s
    return [
        Result(
            name="compaction",
            value=value,
            unit="events removed/s",
            baseline=baseline,
            ratio=value / baseline,
            target=f"max writer job < {MAX_JOB_TARGET_S:g} s",
            ok=report.max_job_s < MAX_JOB_TARGET_S,
            extra={
                "blocks": n_blocks,
                "events_before": before,
                "events_after": rows,
                "runs": report.runs,
                "jobs": report.jobs,
                "max_job_s": report.max_job_s,
                "compact_s": compact_s,
                "second_pass_s": again.duration_s,
                "second_pass_deleted": again.events_deleted,
            },
        )
    ]
