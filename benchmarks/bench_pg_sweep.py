"""``pg_sweep``: ``due_for_revalidation(limit=1000)`` over a million blocks on PostgreSQL.

The ``sweep`` benchmark's data and target on the PostgreSQL store (``PgRevalidations``).

Setup (not timed): a PostgreSQL server of the benchmark's own, started like the tests'
(``tests/pgserver.py``: ``initdb`` + ``pg_ctl`` in a temporary directory, a free loopback
port, ``fsync = off``), one database migrated by ``PgDatabase``, and the ``sweep``
benchmark's 1 000 000 block rows (``benchmarks/_sweep.py``: exactly 1 000 due, scattered;
70 % fresh/unverified not due yet, 20 % stale and 8 % refuted already expired but not
due, 2 % archived) loaded with ``COPY`` (the row triggers, retention points and the
embedding queue, off while loading: the sweep reads neither), then ``VACUUM ANALYZE``.

Store: ``await PgRevalidations.due_for_revalidation(limit=1000, now=now)`` (a pooled
reader, the statement, the rows made ``DueBlock``\\ s). Baseline: the SQLite benchmark's
own statement (``ORDER BY stale_at``, no tie-break by ``rid``) with ``fetch`` on a raw
asyncpg connection: the store's tie-break, its pool and its result objects are what the
ratio measures (the store's statement on the raw connection is timed too, as
``raw_store_sql_*``: the tie-break's share). Runs interleave (store, raw, the store's
statement raw; the first rotating) so all see the same cache and machine noise. Both
plans are printed and recorded; each must be a range scan of ``blocks_due``.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from benchmarks._pg import pg_server
from benchmarks._sweep import _COLUMNS as COLUMNS  # the sweep benchmark's data, here too
from benchmarks._sweep import _rows as sweep_rows
from memwarden.memory import FakeClock
from memwarden.memory.policy import PolicyConfig

NOW = 1_780_000_000.0
LIMIT = 1000
WARMUP = 5
TARGET_RATIO = 2.0
TARGET_P95_MS = 10.0
RAW_SQL = (
    "SELECT id, stale_at, state, volatility, reliability FROM blocks"
    " WHERE stale_at <= $1 AND state IN ('fresh','unverified') ORDER BY stale_at LIMIT 1000"
)


def _missing() -> str | None:
    from tests.pgserver import pg_bin  # noqa: PLC0415 - the tests' server helper

    try:
        import asyncpg  # noqa: F401, PLC0415 - the postgres extra
    except ImportError:
        return "asyncpg is not installed: pip install -e '.[postgres]'"
    if pg_bin() is None:
        return "the PostgreSQL server binaries are not installed: run scripts/system-deps.sh"
    return None


async def _plan(conn: Any, sql: str, *args: Any) -> str:
    return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))


async def _load(raw: Any, n_blocks: int, n_due: int) -> None:
    """The blocks by COPY, the row triggers off meanwhile; then VACUUM ANALYZE."""
    await raw.execute("ALTER TABLE blocks DISABLE TRIGGER USER")
    await raw.copy_records_to_table(
        "blocks", records=sweep_rows(n_blocks, n_due), columns=list(COLUMNS)
    )
    await raw.execute("ALTER TABLE blocks ENABLE TRIGGER USER")
    await raw.execute("VACUUM ANALYZE blocks")


async def _time(queue: Any, raw: Any, reps: int, n_due: int) -> dict[str, list[int]]:
    """Runs of the store, the raw baseline and the raw store statement, interleaved (the
    first of each round rotating) after a warm-up."""
    from memwarden.memory.pg._revalidation import DUE_SQL  # noqa: PLC0415 - needs asyncpg

    calls = {
        "store": lambda: queue.due_for_revalidation(limit=LIMIT, now=NOW),
        "raw": lambda: raw.fetch(RAW_SQL, NOW),
        "raw_store_sql": lambda: raw.fetch(DUE_SQL, NOW, LIMIT),
    }
    samples: dict[str, list[int]] = {side: [] for side in calls}
    sides = list(calls)
    for i in range(WARMUP + reps):
        for side in sides[i % 3 :] + sides[: i % 3]:
            t0 = time.perf_counter_ns()
            got = await calls[side]()
            dt = time.perf_counter_ns() - t0
            assert len(got) == n_due, (side, len(got), n_due)
            if i >= WARMUP:
                samples[side].append(dt)
    return samples


@benchmark("pg_sweep", position=41)
async def pg_sweep(ctx: Context) -> list[Result]:
    missing = _missing()
    if missing is not None:
        raise RuntimeError(f"pg_sweep: {missing}")
    import asyncpg  # noqa: PLC0415 - the postgres extra

    from memwarden.memory.pg import PgDatabase  # noqa: PLC0415 - needs asyncpg
    from memwarden.memory.pg._revalidation import DUE_SQL, PgRevalidations  # noqa: PLC0415

    n_blocks = ctx.n(1_000_000, 10_000)
    n_due = ctx.n(LIMIT, 10)
    reps = ctx.n(200, 20)
    with pg_server(ctx) as server:
        dsn = server.create_database("bench")
        version = server.psql("SHOW server_version").strip()
        ctx.progress(f"PostgreSQL {version} on port {server.port}")
        async with PgDatabase(dsn) as db:
            raw = await asyncpg.connect(dsn)
            try:
                ctx.progress(f"copying {n_blocks:,} blocks, {n_due:,} due")
                t = time.perf_counter()
                await _load(raw, n_blocks, n_due)
                load_s = time.perf_counter() - t
                size = await raw.fetchval("SELECT pg_total_relation_size('blocks')")
                ctx.progress(f"loaded in {load_s:.1f} s ({size / 2**20:.0f} MiB with indexes)")
                raw_plan = await _plan(raw, RAW_SQL, NOW)
                store_plan = await _plan(raw, DUE_SQL, NOW, LIMIT)
                ctx.progress("raw query plan:\n      " + raw_plan.replace("\n", "\n      "))
                ctx.progress("store query plan:\n      " + store_plan.replace("\n", "\n      "))
                uses_index = all(
                    "blocks_due" in p and "Seq Scan" not in p for p in (raw_plan, store_plan)
                )
                queue = PgRevalidations(db, FakeClock(NOW), PolicyConfig())
                ctx.progress(f"timing {reps} runs each (+{WARMUP} warm-up), interleaved")
                samples = await _time(queue, raw, reps, n_due)
            finally:
                await raw.close()

    s, r = percentiles_ms(samples["store"]), percentiles_ms(samples["raw"])
    same = percentiles_ms(samples["raw_store_sql"])
    ratio = s["p95"] / r["p95"]
    return [
        Result(
            name="pg_sweep",
            value=s["p95"],
            unit="ms p95",
            baseline=r["p95"],
            ratio=ratio,
            target=f"p95 <= {TARGET_RATIO:g}x raw and < {TARGET_P95_MS:g} ms",
            ok=ratio <= TARGET_RATIO and s["p95"] < TARGET_P95_MS and uses_index,
            extra={
                "p50": s["p50"],
                "p99": s["p99"],
                "baseline_p50": r["p50"],
                "baseline_p99": r["p99"],
                # The store's own statement (ties by rid) on the raw connection: what the
                # tie-break costs, apart from the pool and the result objects.
                "raw_store_sql_p50": same["p50"],
                "raw_store_sql_p95": same["p95"],
                "blocks": n_blocks,
                "due": n_due,
                "reps": reps,
                "uses_blocks_due": uses_index,
                "plan": raw_plan,
                "store_plan": store_plan,
                "preload_s": load_s,
                "postgresql": version,
            },
        )
    ]
