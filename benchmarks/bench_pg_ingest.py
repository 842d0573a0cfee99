"""``pg_ingest``, ``pg_ingest_two_nodes``: event ingestion on PostgreSQL, against raw
asyncpg, and two nodes ingesting at once against one.

Setup (not timed): a PostgreSQL server of the benchmark's own, started like the tests'
(``tests/pgserver.py``: ``initdb`` + ``pg_ctl`` in a temporary directory, a free
loopback port, ``fsync = off``, ``synchronous_commit = off``), three databases migrated
to the store's schema, each with the same 5 000 blocks bound to one file subject each
(``PgBlocks.add_many``), and 40 000 events (observed_at increasing; subjects uniform
over the blocks; 90 % confirmed, 5 % changed, 5 % refuted).

The three runs below take the events in four rounds (a quarter each), the first of them
rotating from round to round; each figure adds up its rounds.

- **pg_ingest**: one node (a ``PgDatabase``: pool, writer with group commit) applies
  the events through ``PgEventLog.apply_events`` in chunks of 1 000, all submitted at
  once (many sensors emitting: the writer groups them). Baseline: raw asyncpg on the
  same schema, in the other database, one transaction per chunk of 1 000: it
  ``executemany``-s the same event, effect and block-update rows, knowing each
  subject's block rid from a dict and each event's effect from a list precomputed (not
  timed) with the store's own rules (``policy.apply_event``); no routing lookup, no
  duplicate check, no locks, no rules. Both databases must end with the same blocks'
  evidence; the benchmark checks that. Events per second; ratio = store / raw.
- **pg_ingest_two_nodes**: two ``PgDatabase`` instances (two pools, two writers: two
  nodes) on the third database, each given every other chunk, all at once; events per
  second over the wall time of both, against the one node of ``pg_ingest``; ratio = two
  / one. Both write the same blocks, so they wait on each other's row locks: the figure
  says what a second node costs or gains, not how PostgreSQL scales on more cores (here
  the server and both nodes share the machine's two). Then both deliver every event
  again at once (a spool redelivered after a failover): all duplicates, the time in
  ``extra``.

Without the PostgreSQL server binaries (``scripts/system-deps.sh``) the benchmark stops
and says so.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from typing import TYPE_CHECKING, Any

from benchmarks._harness import Context, Result, benchmark
from benchmarks._pg import pg_server
from memwarden.memory import Binding, FakeClock, NewBlock, Outcome, ValidationEvent, from_ts
from memwarden.memory._codec import EVIDENCE_COLUMNS, evidence_record, evidence_row
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._sql import EVIDENCE_UPDATE
from memwarden.memory.policy import PolicyConfig, apply_event

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from memwarden.memory.pg import PgDatabase

SEED = 20261124
T0 = 1_767_225_600.0
EVENT_STEP_S = 0.01
BLOCKS = 5_000
EVENTS = 40_000
CHUNK = 1_000
ROUNDS = 4
OUTCOME_MIX = ((0.90, Outcome.CONFIRMED), (0.95, Outcome.CHANGED), (1.0, Outcome.REFUTED))
TARGET_RATIO = 0.6  # issue 22: the same ratio as SQLite's ingest (issue 16)
TARGET_TWO_NODES = 0.7  # a second node must not collapse ingestion

_EVENT_INSERT = (
    "INSERT INTO events (seq, event_id, sensor, subject, outcome, observed_at, received_at,"
    " reliability, message) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
)
_EFFECT_INSERT = (
    "INSERT INTO effects (block_rid, event_seq, state_before, state_after,"
    " reliability_before, reliability_after) VALUES ($1, $2, $3, $4, $5, $6)"
)
_STATE = (
    "SELECT content, state, stale_reasons, reliability, validated_at, stale_at,"
    " reinforcement_count, consecutive_refutations FROM blocks ORDER BY content"
)


def _outcome(x: float) -> Outcome:
    for bound, outcome in OUTCOME_MIX:
        if x < bound:
            return outcome
    return OUTCOME_MIX[-1][1]


def _events(n_blocks: int, n_events: int) -> list[ValidationEvent]:
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


async def _preload(db: PgDatabase, n_blocks: int, clock: FakeClock) -> None:
    from memwarden.memory.pg._blocks import PgBlocks  # noqa: PLC0415 - the postgres extra

    blocks = PgBlocks(db, clock, PolicyConfig())
    for start in range(0, n_blocks, 1000):
        await blocks.add_many(
            [
                NewBlock(
                    title=f"file {i}",
                    content=f"f/{i}.txt holds the settings of component {i}",
                    tags=["config"],
                    bindings=[Binding(sensor="fs", path=f"f/{i}.txt")],
                )
                for i in range(start, min(n_blocks, start + 1000))
            ]
        )


async def _store_ingest(logs: list[Any], chunks: list[list[ValidationEvent]]) -> float:
    """Every chunk submitted at once, node ``i % len(logs)`` taking chunk ``i``."""
    gc.collect()
    t = time.perf_counter()
    results = await asyncio.gather(
        *(logs[i % len(logs)].apply_events(c) for i, c in enumerate(chunks))
    )
    elapsed = time.perf_counter() - t
    assert sum(r.accepted for r in results) + sum(r.duplicates for r in results) == sum(
        len(c) for c in chunks
    )
    return elapsed


_RawChunk = tuple[list[Any], list[Any], list[Any]]


async def _raw_prepare(
    db: PgDatabase, events: list[ValidationEvent], now: float, cfg: PolicyConfig
) -> list[_RawChunk]:
    """The baseline's rows per chunk (not timed): the store's rules run over the events."""
    async with db.read() as conn:
        rid_of = {
            r[0]: r[1]
            for r in await conn.fetch("SELECT subject, block_rid FROM bindings WHERE sensor = 'fs'")
        }
        cols = ", ".join(EVIDENCE_COLUMNS)
        records = {
            r[0]: evidence_record(tuple(r)) for r in await conn.fetch(f"SELECT {cols} FROM blocks")
        }
    chunks: list[_RawChunk] = []
    seq = 0
    for start in range(0, len(events), CHUNK):
        event_rows, effect_rows, updates = [], [], {}
        for ev in events[start : start + CHUNK]:
            seq += 1
            rid = rid_of[ev.subject]
            rec = records[rid]
            observed_at = ev.observed_at.timestamp()
            eff = apply_event(
                rec,
                outcome=ev.outcome.value,
                sensor=ev.sensor,
                observed_at=observed_at,
                now=now,
                cfg=cfg,
                reliability=ev.reliability,
                validity_window_s=None,
            )
            assert eff.ignored is None, eff.ignored
            event = (ev.event_id, ev.sensor, ev.subject, ev.outcome.value, observed_at)
            event_rows.append((seq, *event, now, ev.reliability, ev.message))
            before_after = (eff.state_before, eff.state_after)
            effect_rows.append(
                (rid, seq, *before_after, eff.reliability_before, eff.reliability_after)
            )
            updates[rid] = evidence_row(rec)
        chunks.append((event_rows, effect_rows, sorted(updates.values(), key=lambda r: r[-1])))
    return chunks


async def _raw_ingest(db: PgDatabase, chunks: list[_RawChunk]) -> float:
    """The baseline on ``db``'s pool: one transaction per chunk."""
    update_sql = _pg_sql(EVIDENCE_UPDATE)
    gc.collect()
    t = time.perf_counter()
    async with db.read() as conn:
        for event_rows, effect_rows, updates in chunks:
            async with conn.transaction():
                await conn.executemany(_EVENT_INSERT, event_rows)
                await conn.executemany(_EFFECT_INSERT, effect_rows)
                await conn.executemany(update_sql, updates)
    return time.perf_counter() - t


def _pg_sql(sql: str) -> str:
    from memwarden.memory.pg._apply import pg_sql  # noqa: PLC0415 - the postgres extra

    return pg_sql(sql)


async def _state(db: PgDatabase) -> list[tuple[Any, ...]]:
    async with db.read() as conn:
        return [tuple(r) for r in await conn.fetch(_STATE)]


async def _counts(db: PgDatabase) -> tuple[int, int]:
    async with db.read() as conn:
        events = await conn.fetchval("SELECT count(*) FROM events")
        effects = await conn.fetchval("SELECT count(*) FROM effects")
    return int(events), int(effects)


@benchmark("pg_ingest", position=41, results=("pg_ingest", "pg_ingest_two_nodes"))
async def pg_ingest(ctx: Context) -> list[Result]:
    from memwarden.memory.pg import PgDatabase  # noqa: PLC0415 - the postgres extra
    from memwarden.memory.pg._apply import PgEventLog  # noqa: PLC0415

    n_blocks, n_events = ctx.n(BLOCKS, 200), ctx.n(EVENTS, 2_000)
    cfg = PolicyConfig()
    events = _events(n_blocks, n_events)
    chunks = [events[i : i + CHUNK] for i in range(0, n_events, CHUNK)]
    clock = FakeClock(T0 + 3600.0 + n_events * EVENT_STEP_S + 60.0)
    now = clock.time()
    with pg_server(ctx) as server:
        version = server.psql("SHOW server_version").strip()
        ctx.progress(f"PostgreSQL {version} on port {server.port}")
        dsns = [server.create_database(name) for name in ("store", "raw", "nodes")]
        async with (
            PgDatabase(dsns[0]) as one,
            PgDatabase(dsns[1]) as raw,
            PgDatabase(dsns[2]) as node_a,
            PgDatabase(dsns[2]) as node_b,
        ):
            for db in (one, raw, node_a):
                await _preload(db, n_blocks, FakeClock(T0))
            ctx.progress(f"{n_blocks:,} blocks in each of three databases")

            def log(db: PgDatabase) -> PgEventLog:
                return PgEventLog(db, clock, cfg, CompactionConfig())

            raw_chunks = await _raw_prepare(raw, events, now, cfg)
            nodes = [log(node_a), log(node_b)]
            # In rounds, the first of the three rotating: none always runs on the quieter
            # machine (it is shared) or before the others' autovacuum.
            runs: dict[str, Callable[[int, int], Awaitable[float]]] = {
                "store": lambda a, b: _store_ingest([log(one)], chunks[a:b]),
                "raw": lambda a, b: _raw_ingest(raw, raw_chunks[a:b]),
                "two": lambda a, b: _store_ingest(nodes, chunks[a:b]),
            }
            spent = dict.fromkeys(runs, 0.0)
            step = -(-len(chunks) // ROUNDS)
            for r, a in enumerate(range(0, len(chunks), step)):
                names = list(runs)[r % 3 :] + list(runs)[: r % 3]
                for name in names:
                    spent[name] += await runs[name](a, a + step)
                ctx.progress(
                    f"round {r + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in spent.items())
                )
            store_s, raw_s, two_s = spent["store"], spent["raw"], spent["two"]
            same = await _state(one) == await _state(raw)
            assert same, "the store and the baseline ended with different blocks"
            assert await _counts(one) == await _counts(raw) == (n_events, n_events)
            assert await _counts(node_a) == (n_events, n_events)
            again_s = await _store_ingest(nodes, chunks + chunks)  # every event twice more
            ctx.progress(f"redelivered twice by both: {again_s:.2f} s, all duplicates")
            assert await _counts(node_b) == (n_events, n_events)
            writers = [db.writer for db in (one, node_a, node_b)]
            commits = [w.commits if w is not None else 0 for w in writers]
            conflicts = [w.conflicts if w is not None else 0 for w in writers]

    store_rate, raw_rate = n_events / store_s, n_events / raw_s
    two_rate = n_events / two_s
    extra = {"postgresql": version, "blocks": n_blocks, "chunk": CHUNK}
    return [
        Result(
            name="pg_ingest",
            value=round(store_rate),
            unit=f"events/s, PgEventLog.apply_events (baseline: raw asyncpg), {n_events:,} events",
            baseline=round(raw_rate),
            ratio=round(store_rate / raw_rate, 2),
            target=f"ratio >= {TARGET_RATIO}",
            ok=store_rate / raw_rate >= TARGET_RATIO,
            extra={**extra, "store_s": round(store_s, 3), "baseline_s": round(raw_s, 3)},
        ),
        Result(
            name="pg_ingest_two_nodes",
            value=round(two_rate),
            unit="events/s, two nodes at once (baseline: one node), every other chunk each",
            baseline=round(store_rate),
            ratio=round(two_rate / store_rate, 2),
            target=f"ratio >= {TARGET_TWO_NODES}",
            ok=two_rate / store_rate >= TARGET_TWO_NODES,
            extra={
                **extra,
                "two_nodes_s": round(two_s, 3),
                "redelivery_s": round(again_s, 3),
                "redelivered_events": 2 * n_events,
                "commits_one_a_b": commits,
                "conflicts_retried_one_a_b": conflicts,
            },
        ),
    ]
