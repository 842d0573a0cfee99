"""``sweep``: latency of ``due_for_revalidation(limit=1000)`` over a million blocks.

Setup (not timed): 1 000 000 valid block rows raw-inserted (one ``executemany``, the
FTS triggers on) into the store's schema; exactly 1 000 are due (fresh or unverified
with ``stale_at <= now``), scattered over the table. The rest: 70 % fresh/unverified
with ``stale_at`` in the future, 20 % stale and 8 % refuted with ``stale_at`` in the past
(expired but not due: the partial index must leave them out), 2 % archived.

Store: ``await store.due_for_revalidation(limit=1000, now=now)``. Baseline: the same
SELECT with ``fetchall`` on a stdlib connection. Runs interleave (store, raw, raw,
store, ...) so both see the same cache and machine noise.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.memory import FakeClock, Store, new_id

if TYPE_CHECKING:
    from collections.abc import Iterator

SEED = 7
NOW = 1_780_000_000.0
DAY = 86_400.0
LIMIT = 1000
WARMUP = 5
TARGET_RATIO = 2.0
TARGET_P95_MS = 10.0

RAW_SQL = (
    "SELECT id, stale_at, state, volatility, reliability FROM blocks"
    " WHERE stale_at <= ? AND state IN ('fresh','unverified') ORDER BY stale_at LIMIT 1000"
)
_VOLATILITY = ("low", "medium", "high", "ephemeral")
_INFO_TYPE = {"low": "static", "medium": "semi_static", "high": "dynamic", "ephemeral": "ephemeral"}
_WINDOW = {"low": 180 * DAY, "medium": 7 * DAY, "high": 6 * 3600.0, "ephemeral": 300.0}
_HALF_LIFE = {"low": 365 * DAY, "medium": 30 * DAY, "high": 7 * DAY, "ephemeral": DAY}
# Every NOT NULL column without a default, and the ones this data sets; the rest of the
# columns (counters, history, signals, ...) take the schema's defaults.
_COLUMNS = (
    "rid",
    "id",
    "content",
    "source",
    "category",
    "info_type",
    "volatility",
    "tier",
    "state",
    "stale_reasons",
    "reliability",
    "importance",
    "validated_by",
    "validated_at",
    "validity_window_s",
    "stale_at",
    "half_life_s",
    "created_at",
    "updated_at",
    "archived_at",
    "archive_reason",
)
_INSERT = f"INSERT INTO blocks ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"


def _state(rng: random.Random, rid: int, *, due: bool, window: float) -> tuple[str, float]:
    """A state and stale_at; due blocks are the only fresh/unverified ones past NOW."""
    x = rng.random()
    if due:
        return ("fresh" if rid % 2 else "unverified"), NOW - rng.uniform(1.0, 30 * DAY)
    if x < 0.70:
        return ("fresh" if x < 0.5 else "unverified"), NOW + rng.uniform(1.0, window)
    state = "stale" if x < 0.90 else "refuted" if x < 0.98 else "archived"
    return state, NOW - rng.uniform(1.0, 30 * DAY)


def _rows(n_blocks: int, n_due: int) -> Iterator[tuple[Any, ...]]:
    """Valid ``blocks`` rows (``_COLUMNS``); exactly ``n_due`` of them due at NOW."""
    rng = random.Random(SEED)
    due = set(rng.sample(range(1, n_blocks + 1), n_due))
    created0 = NOW - 400 * DAY
    for rid in range(1, n_blocks + 1):
        vol = _VOLATILITY[rid % 4]
        window = _WINDOW[vol]
        state, stale_at = _state(rng, rid, due=rid in due, window=window)
        validated = state != "unverified"
        archived = state == "archived"
        yield (
            rid,
            new_id(),
            f"note {rid}",
            "agent",
            "semantic",
            _INFO_TYPE[vol],
            vol,
            "short_term",
            state,
            "expired" if state == "stale" else "",
            0.2 if state == "refuted" else 0.9,
            0.5,
            "fs" if validated else None,
            stale_at - window if validated else None,
            window,
            stale_at,
            _HALF_LIFE[vol],
            created0 + rid * 30.0,
            created0 + rid * 30.0,
            NOW - DAY if archived else None,
            "superseded" if archived else None,
        )


def _preload(ctx: Context, path: Any, n_blocks: int, n_due: int) -> None:
    conn = _sqlite.connect(path)
    _sqlite.create_schema(conn)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(_INSERT, _rows(n_blocks, n_due))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    ctx.progress(f"preloaded {n_blocks:,} blocks ({path.stat().st_size / 2**20:.0f} MiB)")


@benchmark("sweep", position=2)
async def sweep(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(1_000_000, 10_000)
    n_due = ctx.n(LIMIT, 10)
    reps = ctx.n(200, 20)
    path = ctx.workdir / "sweep.db"
    _sqlite.remove(path)
    ctx.progress(f"raw-inserting {n_blocks:,} blocks, {n_due:,} due")
    t = time.perf_counter()
    _preload(ctx, path, n_blocks, n_due)
    preload_s = time.perf_counter() - t

    raw = _sqlite.connect(path)
    plan = _sqlite.query_plan(raw, RAW_SQL, (NOW,))
    ctx.progress("raw query plan:\n      " + plan.replace("\n", "\n      "))
    uses_index = "blocks_due" in plan

    store_samples: list[int] = []
    raw_samples: list[int] = []
    async with Store(path, clock=FakeClock(NOW)) as store:
        # The statement the store ran, and its plan.
        statements = await _sqlite.traced_reads(
            store, lambda: store.due_for_revalidation(limit=LIMIT, now=NOW)
        )
        store_sql = next((s for s in statements if "FROM blocks" in s), "")
        store_plan = _sqlite.query_plan(raw, store_sql, ()) if store_sql else "?"
        if store_plan != plan:
            ctx.progress("store query plan:\n      " + store_plan.replace("\n", "\n      "))

        ctx.progress(f"timing {reps} runs each (+{WARMUP} warm-up), interleaved")
        for i in range(WARMUP + reps):
            for side in ("store", "raw") if i % 2 == 0 else ("raw", "store"):
                if side == "store":
                    t0 = time.perf_counter_ns()
                    got = await store.due_for_revalidation(limit=LIMIT, now=NOW)
                    dt = time.perf_counter_ns() - t0
                    samples = store_samples
                else:
                    t0 = time.perf_counter_ns()
                    got = raw.execute(RAW_SQL, (NOW,)).fetchall()
                    dt = time.perf_counter_ns() - t0
                    samples = raw_samples
                assert len(got) == n_due, (side, len(got), n_due)
                if i >= WARMUP:
                    samples.append(dt)
    raw.close()
    _sqlite.remove(path)

    s, r = percentiles_ms(store_samples), percentiles_ms(raw_samples)
    ratio = s["p95"] / r["p95"]
    return [
        Result(
            name="sweep",
            value=s["p95"],
            unit="ms p95",
            baseline=r["p95"],
            ratio=ratio,
            target=f"p95 <= {TARGET_RATIO:g}x raw and < {TARGET_P95_MS:g} ms",
            ok=ratio <= TARGET_RATIO and s["p95"] < TARGET_P95_MS,
            extra={
                "p50": s["p50"],
                "p99": s["p99"],
                "baseline_p50": r["p50"],
                "baseline_p99": r["p99"],
                "blocks": n_blocks,
                "due": n_due,
                "reps": reps,
                "uses_blocks_due": uses_index,
                "plan": plan,
                "store_plan": store_plan,
                "preload_s": preload_s,
            },
        )
    ]
