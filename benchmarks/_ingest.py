"""``ingest``: validation events applied per second, against raw executemany.

Setup (not timed): 100 000 blocks, each bound to one distinct file subject
(``{"sensor": "fs", "path": "f/<i>.txt"}``), stored through ``Store.add_many``; the file
is then copied so the baseline starts from the very same database. 200 000 events
(observed_at increasing; subjects uniform over the blocks; 90 % confirmed, 5 % changed,
5 % refuted) are built as ``ValidationEvent`` objects.

Store: each chunk of 1 000 events passes the trust boundary first, as events from
outside do (``EventGate.check`` per event over MQTT, with ``fs`` declared a remote
sensor, then ``first_unbound``), then ``apply_events(..., bound_only=True)``; all chunks
submitted at once with ``asyncio.gather`` (many sensors emitting; the writer groups them
into few commits). The gate's own time is reported too (``gate_s``).

Baseline: stdlib ``sqlite3`` in one transaction. It converts the same event objects to
rows and ``executemany``-s the same event, effect and block-update rows. It knows each
subject's block rid from a dict and takes each event's effect (state and reliability
before/after, the block's new evidence columns) from a precomputed list: it does no
routing lookup, no duplicate check and no rules. The precomputation runs the store's
own rules (``policy.apply_event``) outside the timed region, so both databases must end
identical; the benchmark checks that.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import random
import shutil
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark, thread_cpu_s
from memwarden.daemon import SensorSettings
from memwarden.daemon._ingest import EventGate
from memwarden.memory import Binding, FakeClock, NewBlock, Outcome, Store, ValidationEvent, from_ts
from memwarden.memory._codec import EVIDENCE_COLUMNS, evidence_record, evidence_row
from memwarden.memory.policy import PolicyConfig, apply_event

if TYPE_CHECKING:
    from pathlib import Path

    from memwarden.memory import ApplyResult

SEED = 20260101
T0 = 1_767_225_600.0  # 2026-01-01Z: blocks are created here
EVENT_STEP_S = 0.01  # observed_at of event i is T0 + 1 h + i * EVENT_STEP_S
ADD_CHUNK = 5000
APPLY_CHUNK = 1000
OUTCOME_MIX = ((0.90, Outcome.CONFIRMED), (0.95, Outcome.CHANGED), (1.0, Outcome.REFUTED))
TARGET_RATIO = 0.6  # issue 16: at least 0.6x raw
MAX_FUTURE_SKEW = timedelta(seconds=5)  # the MQTT bridge's default


class _Gated:
    """Events through the trust boundary as the daemon builds it (``fs`` declared remote,
    reporting over MQTT), then applied; ``gate_s`` adds up the time spent in the gate."""

    def __init__(self, store: Store, clock: FakeClock) -> None:
        fs = SensorSettings(remote=True, report_via=["mqtt"])
        policy = PolicyConfig()
        self.gate = EventGate(
            remote_sensors=lambda: {"fs": fs},
            local_sensors=lambda: (),
            policy=lambda: policy,
            clock=clock,
        )
        self.store = store
        self.gate_s = 0.0

    async def apply(self, chunk: list[ValidationEvent]) -> ApplyResult:
        t = time.perf_counter()
        gate = self.gate
        checked = [gate.check(e, via="mqtt", max_future_skew=MAX_FUTURE_SKEW)[0] for e in chunk]
        unbound = await gate.first_unbound(self.store, checked)
        self.gate_s += time.perf_counter() - t
        assert unbound is None, unbound
        return await self.store.apply_events(checked, bound_only=True)


_EVENT_INSERT = (
    "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at, received_at,"
    " reliability, validity_window_s, request_id, block_id, message, observed, agent, agent_seq)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_EFFECT_INSERT = (
    "INSERT INTO effects (block_rid, event_seq, state_before, state_after,"
    " reliability_before, reliability_after, detail) VALUES (?, ?, ?, ?, ?, ?, NULL)"
)
_BLOCK_UPDATE = (
    "UPDATE blocks SET state=?, stale_reasons=?, reliability=?, validated_by=?, validated_at=?,"
    " validity_window_s=?, stale_at=?, updated_at=?, reinforcement_count=?,"
    " contradiction_count=?, last_contradiction_at=?, consecutive_refutations=?,"
    " consecutive_errors=?, outcome_history=?, flapping=? WHERE rid=?"
)


def _outcome(x: float) -> Outcome:
    for bound, outcome in OUTCOME_MIX:
        if x < bound:
            return outcome
    return OUTCOME_MIX[-1][1]


async def _preload(path: Path, n_blocks: int, clock: FakeClock) -> None:
    async with Store(path, clock=clock) as store:
        for start in range(0, n_blocks, ADD_CHUNK):
            await store.add_many(
                [
                    NewBlock(
                        title=f"file {i}",
                        content=f"f/{i}.txt holds the settings of component {i}",
                        tags=["config"],
                        bindings=[Binding(sensor="fs", path=f"f/{i}.txt")],
                    )
                    for i in range(start, min(n_blocks, start + ADD_CHUNK))
                ]
            )


def _make_events(n_blocks: int, n_events: int) -> list[ValidationEvent]:
    rng = random.Random(SEED)
    start = T0 + 3600.0
    return [
        ValidationEvent(
            sensor="fs",
            subject=f"f/{rng.randrange(n_blocks)}.txt",
            outcome=_outcome(rng.random()),
            observed_at=from_ts(start + i * EVENT_STEP_S),
        )
        for i in range(n_events)
    ]


def _precompute(
    path: Path, events: list[ValidationEvent], now: float
) -> tuple[dict[str, int], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Run the store's rules over the events (not timed): each event's effect and update."""
    conn = _sqlite.connect(path)
    rid_of = dict(conn.execute("SELECT subject, block_rid FROM bindings WHERE sensor = 'fs'"))
    cols = ", ".join(EVIDENCE_COLUMNS)
    records = {r[0]: evidence_record(r) for r in conn.execute(f"SELECT {cols} FROM blocks")}
    conn.close()
    cfg = PolicyConfig()
    effects: list[tuple[Any, ...]] = []
    updates: list[tuple[Any, ...]] = []
    for ev in events:
        rec = records[rid_of[ev.subject]]
        eff = apply_event(
            rec,
            outcome=ev.outcome.value,
            sensor=ev.sensor,
            observed_at=ev.observed_at.timestamp(),
            now=now,
            cfg=cfg,
            reliability=ev.reliability,
            validity_window_s=None,
        )
        assert eff.ignored is None, eff.ignored
        effects.append(
            (eff.state_before, eff.state_after, eff.reliability_before, eff.reliability_after)
        )
        updates.append(evidence_row(rec))
    return rid_of, effects, updates


def _raw_apply(
    path: Path,
    *,
    events: list[ValidationEvent],
    rid_of: dict[str, int],
    effects: list[tuple[Any, ...]],
    updates: list[tuple[Any, ...]],
    now: float,
) -> dict[str, float]:
    """The baseline; returns the seconds it took in total and per phase."""
    conn = _sqlite.connect(path)
    gc.collect()
    marks = [time.perf_counter()]
    conn.execute("BEGIN IMMEDIATE")
    first = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0] + 1
    event_rows = []
    effect_rows = []
    for seq, (ev, eff) in enumerate(zip(events, effects, strict=True), start=first):
        window = ev.validity_window
        event_rows.append(
            (
                seq,
                ev.event_id,
                ev.sensor,
                ev.subject,
                ev.outcome.value,
                ev.observed_at.timestamp(),
                now,
                ev.reliability,
                None if window is None else window.total_seconds(),
                ev.request_id,
                ev.block_id,
                ev.message,
                None,
                ev.agent,
                ev.seq,
            )
        )
        effect_rows.append((rid_of[ev.subject], seq, *eff))
    marks.append(time.perf_counter())
    conn.executemany(_EVENT_INSERT, event_rows)
    marks.append(time.perf_counter())
    conn.executemany(_EFFECT_INSERT, effect_rows)
    marks.append(time.perf_counter())
    conn.executemany(_BLOCK_UPDATE, updates)
    marks.append(time.perf_counter())
    conn.execute("COMMIT")
    marks.append(time.perf_counter())
    conn.close()
    phases = ("rows", "events", "effects", "updates", "commit")
    out = {f"baseline_{p}_s": b - a for p, a, b in zip(phases, marks[:-1], marks[1:], strict=True)}
    out["baseline_s"] = marks[-1] - marks[0]
    return out


async def _apply_all(
    gated: _Gated, chunks: list[list[ValidationEvent]]
) -> tuple[list[ApplyResult], float, list[float]]:
    """All chunks submitted at once: their results, the seconds until the last was
    applied, and when each was acknowledged (s after the start)."""
    acked: list[float] = []
    t = time.perf_counter()

    async def apply(chunk: list[ValidationEvent]) -> ApplyResult:
        result = await gated.apply(chunk)
        acked.append(time.perf_counter() - t)
        return result

    results = await asyncio.gather(*(apply(c) for c in chunks))
    return results, time.perf_counter() - t, acked


def _ack_latency(acked: list[float]) -> dict[str, float]:
    """When the chunks were acknowledged (all were submitted at once, so this is how long
    each waited): the first, median, p95 and last, in s."""
    if not acked:
        return {}
    acked = sorted(acked)
    return {
        "ack_first_s": acked[0],
        "ack_p50_s": acked[len(acked) // 2],
        "ack_p95_s": acked[min(len(acked) - 1, int(len(acked) * 0.95))],
        "ack_last_s": acked[-1],
    }


def _digest(path: Path) -> str:
    """A hash of what both sides must agree on: block evidence, events and effects."""
    conn = _sqlite.connect(path)
    h = hashlib.sha256()
    for sql in (
        f"SELECT {', '.join(EVIDENCE_COLUMNS)} FROM blocks ORDER BY rid",
        "SELECT seq, event_id, sensor, subject, outcome, observed_at FROM events ORDER BY seq",
        (
            "SELECT block_rid, event_seq, state_before, state_after, reliability_before,"
            " reliability_after FROM effects ORDER BY event_seq, block_rid"
        ),
    ):
        for row in conn.execute(sql):
            h.update(repr(row).encode())
    conn.close()
    return h.hexdigest()


@benchmark("ingest", position=1)
async def ingest(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(100_000, 200)
    n_events = ctx.n(200_000, 400)
    store_path = ctx.workdir / "ingest-store.db"
    raw_path = ctx.workdir / "ingest-raw.db"
    for p in (store_path, raw_path):
        _sqlite.remove(p)

    clock = FakeClock(T0)
    ctx.progress(f"preloading {n_blocks:,} bound blocks through Store.add_many")
    t = time.perf_counter()
    await _preload(store_path, n_blocks, clock)
    preload_s = time.perf_counter() - t
    _sqlite.checkpoint(store_path)
    shutil.copyfile(store_path, raw_path)

    ctx.progress(f"building {n_events:,} ValidationEvents")
    events = _make_events(n_blocks, n_events)
    now = T0 + 3600.0 + n_events * EVENT_STEP_S + 60.0
    clock.set(now)
    ctx.progress("precomputing the baseline's effects with the store's rules")
    rid_of, effects, updates = _precompute(raw_path, events, now)

    ctx.progress(f"store: gate + apply_events x {-(-n_events // APPLY_CHUNK)} chunks, gathered")
    async with Store(store_path, clock=clock) as store:
        gated = _Gated(store, clock)
        chunks = [events[i : i + APPLY_CHUNK] for i in range(0, n_events, APPLY_CHUNK)]
        # For the report only: how many commits the writer made, and how much CPU its
        # SQLite thread used (private, None if the database changes shape).
        writer = store.db.writer
        wconn = getattr(store.db, "_wconn", None)
        sql_tid = getattr(getattr(wconn, "_thread", None), "native_id", None)
        commits_before = getattr(writer, "commits", 0)
        deferred_before = getattr(writer, "deferred_checkpoints", 0)
        sql_cpu_before = thread_cpu_s(sql_tid)
        gc.collect()
        loop_cpu_before = time.thread_time()
        results, store_s, acked = await _apply_all(gated, chunks)
        loop_cpu_s = time.thread_time() - loop_cpu_before
        sql_cpu_after = thread_cpu_s(sql_tid)
        commits = getattr(writer, "commits", 0) - commits_before
        deferred = getattr(writer, "deferred_checkpoints", 0) - deferred_before
    sql_cpu_s = (
        None if sql_cpu_before is None or sql_cpu_after is None else sql_cpu_after - sql_cpu_before
    )
    accepted = sum(r.accepted for r in results)
    unmatched = sum(r.unmatched for r in results)
    revalidations = sum(r.revalidations for r in results)
    assert accepted == n_events, (accepted, n_events)
    assert unmatched == 0, unmatched

    ctx.progress("raw sqlite3: one transaction of executemany")
    raw = _raw_apply(
        raw_path, events=events, rid_of=rid_of, effects=effects, updates=updates, now=now
    )
    raw_s = raw["baseline_s"]

    same = _digest(store_path) == _digest(raw_path)
    ctx.progress(f"end states identical: {same}")
    value = n_events / store_s
    baseline = n_events / raw_s
    ratio = value / baseline
    for p in (store_path, raw_path):
        _sqlite.remove(p)
    return [
        Result(
            name="ingest",
            value=value,
            unit="events/s",
            baseline=baseline,
            ratio=ratio,
            target=f"ratio >= {TARGET_RATIO}",
            ok=ratio >= TARGET_RATIO,
            extra={
                "blocks": n_blocks,
                "events": n_events,
                "chunk": APPLY_CHUNK,
                "store_s": store_s,
                "gate_s": gated.gate_s,
                "store_loop_cpu_s": loop_cpu_s,
                "store_sql_thread_cpu_s": sql_cpu_s,
                **raw,
                "commits": commits,
                "deferred_checkpoints": deferred,
                **_ack_latency(acked),
                "revalidations_queued": revalidations,
                "same_end_state": same,
                "preload_blocks_per_s": n_blocks / preload_s,
            },
        )
    ]
