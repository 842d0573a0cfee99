"""``retention_history``: what keeping the retention history costs the ingest path.

Each change of a block's decay inputs writes a ``retention_points`` row (a trigger on
``blocks``, schema 13; docs/CONSOLE.md "Retention over time"), and trims the block's rows
past 500. The busiest writer of such changes is ingest: every confirmation moves a
block's validation time.

Two stores on real files, the same 2 000 bound blocks in each, the same events: 200
batches of 100 confirmations (one block per event, a block's turn every 20 batches, the
clock one second on per batch; each block gets 10 points). Both stores apply each batch
in turn (alternating which goes first), timed per ``apply_events``:

- **memwarden**: the store as it is (the triggers write the history);
- **baseline**: the same store with the three ``retention_points`` triggers dropped.

A second pass over a block already at its 500 points measures the trim (one block
confirmed 600 times, one event per batch, both stores).

Figures: the ratio of the two totals (target: at most 1.25, a quarter more), the rows
written and their size on disk (``dbstat`` when SQLite has it).
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from benchmarks._harness import Context, Result, benchmark
from memwarden.memory import FakeClock, Store, ValidationEvent, from_ts

if TYPE_CHECKING:
    from pathlib import Path

TARGET_RATIO = 1.25
BLOCKS = 2000
BATCH = 100


def _events(clock: FakeClock, subjects: list[str], tag: str) -> list[ValidationEvent]:
    return [
        ValidationEvent(
            event_id=f"{tag}-{s}",
            sensor="bench",
            subject=s,
            outcome="confirmed",
            observed_at=from_ts(clock.time()),
        )
        for s in subjects
    ]


async def _fill(store: Store, blocks: int) -> None:
    await store.add_many(
        [
            {"content": f"fact {i}", "bindings": [{"sensor": "bench", "subject": f"s{i}"}]}
            for i in range(blocks)
        ]
    )


def _table_bytes(path: Path) -> int | None:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name = 'retention_points'"
        ).fetchone()
    except sqlite3.OperationalError:  # SQLite built without dbstat
        return None
    finally:
        conn.close()
    return int(row[0]) if row and row[0] is not None else 0


def _rows(path: Path, subject: str | None = None) -> int:
    """The history's rows (of the block bound to ``subject``, if given)."""
    conn = sqlite3.connect(path)
    try:
        if subject is None:
            return int(conn.execute("SELECT count(*) FROM retention_points").fetchone()[0])
        return int(
            conn.execute(
                "SELECT count(*) FROM retention_points WHERE block_rid IN"
                " (SELECT block_rid FROM bindings WHERE subject = ?)",
                (subject,),
            ).fetchone()[0]
        )
    finally:
        conn.close()


@benchmark("retention_history", position=34)
async def retention_history(ctx: Context) -> list[Result]:
    blocks = ctx.n(BLOCKS, 100)
    batches = ctx.n(200, 10)
    per_batch = min(BATCH, blocks)
    clock = FakeClock()
    paths = {"with": ctx.workdir / "history.db", "without": ctx.workdir / "no-history.db"}
    totals = {"with": 0, "without": 0}
    trim = {"with": 0, "without": 0}
    for p in paths.values():
        p.unlink(missing_ok=True)
    async with (
        Store(paths["with"], clock=clock) as ours,
        Store(paths["without"], clock=clock) as bare,
    ):
        stores = {"with": ours, "without": bare}
        for store in stores.values():
            await _fill(store, blocks)

        async def drop(conn: object) -> None:
            for trigger in ("insert", "update", "delete"):
                await conn.execute(f"DROP TRIGGER retention_points_{trigger}")  # type: ignore[attr-defined]

        await bare.db.write(drop)
        ctx.progress(f"{blocks} blocks in each store; {batches} batches of {per_batch}")
        for b in range(batches):
            clock.advance(1.0)
            first = (b * per_batch) % blocks
            subjects = [f"s{(first + i) % blocks}" for i in range(per_batch)]
            order = ("with", "without") if b % 2 == 0 else ("without", "with")
            for name in order:
                t = time.perf_counter_ns()
                await stores[name].apply_events(_events(clock, subjects, f"b{b}"))
                totals[name] += time.perf_counter_ns() - t
        ctx.progress("one block past its 500 points: the trim")
        for i in range(ctx.n(600, 520)):
            clock.advance(1.0)
            for name in ("with", "without") if i % 2 == 0 else ("without", "with"):
                t = time.perf_counter_ns()
                await stores[name].apply_events(_events(clock, ["s0"], f"t{i}"))
                trim[name] += time.perf_counter_ns() - t
    rows, size = _rows(paths["with"]), _table_bytes(paths["with"])
    points_s0 = _rows(paths["with"], "s0")
    ratio = totals["with"] / totals["without"] if totals["without"] else 0.0
    events = batches * per_batch
    return [
        Result(
            name="retention_history",
            value=round(totals["with"] / events / 1000, 2),
            unit=f"us per event applied, {events} confirmations with the history",
            baseline=round(totals["without"] / events / 1000, 2),
            ratio=round(ratio, 3),
            target=f"ratio <= {TARGET_RATIO}",
            ok=ratio <= TARGET_RATIO,
            extra={
                "rows": rows,
                "table_bytes": size,
                "bytes_per_row": round(size / rows, 1) if size and rows else None,
                "trim_ratio": round(trim["with"] / trim["without"], 3) if trim["without"] else 0,
                "points_of_the_busy_block": points_s0,
            },
        )
    ]
