"""The store's maintenance as a contract both backends keep: one script (blocks, reads,
events, time passing on an injected clock) on SQLite (the ``Store``) and on PostgreSQL
(``PgMaintenance``), with the same ids: the same answers (decay, heuristic,
consolidation and compaction reports, the score log, the time series, retention points
and histogram) and the same rows (blocks' decay fields and tiers, audit, retention
points, the event log after compaction, the series)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.memory import Store
from memwarden.memory import _blocks as sqlite_blocks
from memwarden.memory import _dependencies as sqlite_dependencies
from memwarden.memory import _eventbatch as sqlite_eventbatch
from memwarden.memory._clock import FakeClock, from_ts
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._decayline import MAX_POINTS
from memwarden.memory._model import ValidationEvent
from memwarden.memory._record import BlockRecord
from memwarden.memory._scorelog import ScoreLog
from memwarden.memory._scorelog import read as read_score_log
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg import _blocks as pg_blocks
from memwarden.memory.pg._apply import PgEventLog, pg_sql
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.pg._maintenance import PgMaintenance
from memwarden.memory.pg._sqlrules import pg_named, pg_rule, retention_sql
from memwarden.memory.policy import PolicyConfig, retention
from tests.pg.contract import dump_tables, sequential_ids

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from tests.pgserver import PgServer

START = 1_767_225_600.0
DAY = 86_400.0
TABLES = {
    "blocks": (
        (
            "rid, id, tier, state, importance, half_life_s, retention, recent_access_count,"
            " updated_at, archived_at, archive_reason, validated_at, stale_at"
        ),
        "rid",
    ),
    # By what a row says, not by id: a decay pass audits its ranges on two connections
    # at once (PgDatabase.write_each), so their rows' ids interleave.
    "audit": (
        "at, actor, action, block_id, detail",
        "at, actor, action, coalesce(block_id, ''), detail",  # NULLs first on both
    ),
    "retention_points": (
        "block_rid, at, importance, touched_at, half_life_s, tier, state, stale_at",
        "1, 2",
    ),
    "events": ("seq, event_id, sensor, subject, outcome", "seq"),
    "effects": ("block_rid, event_seq, state_before, state_after", "1, 2"),
    "event_runs": (
        (
            "block_rid, last_seq, first_seq, sensor, outcome, count, first_observed_at,"
            " last_observed_at, compacted_at"
        ),
        "1, 2",
    ),
    "unmatched_counts": (
        "sensor, day, outcome, count, first_received_at, last_received_at",
        "1, 2, 3",
    ),
    "dead_letters": ("received_at, reason", "id"),
    "revalidations": ("id, block_id, status, finished_at", "id"),
    "metric_series": ("metric, key, at, value", "1, 2, 3"),
    "meta": ("key, value", "key"),
}
_TIMING = ("duration_s", "max_job_s")  # the only fields of a report that may differ


@dataclass
class Backend:
    blocks: Any
    events: Any
    maint: Any  # the Store itself on SQLite: the same method names
    clock: FakeClock
    rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]]
    execute: Callable[[str, tuple[Any, ...]], Awaitable[None]]  # one SQLite statement (?)
    score_log: Path

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await dump_tables(self.rows, TABLES)


def _same_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    new_id = sequential_ids()
    for module in (sqlite_blocks, sqlite_eventbatch, sqlite_dependencies, pg_blocks):
        monkeypatch.setattr(module, "new_id", new_id)


@pytest.fixture
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    log_path = tmp_path / "sqlite-scores.jsonl"
    async with Store(tmp_path / "m.db", clock=clock, score_log=log_path) as store:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with store.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        async def execute(sql: str, args: tuple[Any, ...]) -> None:
            async def job(conn: Any) -> None:
                await conn.execute(sql, args)

            await store.db.write(job)

        yield Backend(
            blocks=store._blocks,
            events=store._events,
            maint=store,
            clock=clock,
            rows=rows,
            execute=execute,
            score_log=log_path,
        )


@pytest.fixture
async def pg_backend(pg_server: PgServer, tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    cfg = PolicyConfig()  # the Store's default
    log_path = tmp_path / "pg-scores.jsonl"
    async with PgDatabase(pg_server.create_database()) as db:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with db.read() as conn:
                return [tuple(r) for r in await conn.fetch(sql)]

        async def execute(sql: str, args: tuple[Any, ...]) -> None:
            async def job(conn: Any) -> None:
                await conn.execute(pg_sql(sql), *args)

            await db.write(job)

        with ScoreLog(log_path) as score_log:
            maint = PgMaintenance(db, clock, cfg, CompactionConfig(), score_log=score_log)
            yield Backend(
                blocks=PgBlocks(db, clock, cfg),
                events=PgEventLog(db, clock, cfg, CompactionConfig()),
                maint=maint,
                clock=clock,
                rows=rows,
                execute=execute,
                score_log=log_path,
            )


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    name = "sqlite_backend" if request.param == "sqlite" else "pg_backend"
    value: Backend = request.getfixturevalue(name)
    return value


def _ev(clock: FakeClock, event_id: str, subject: str, outcome: str, **kw: Any) -> ValidationEvent:
    return ValidationEvent(
        event_id=event_id,
        sensor=kw.pop("sensor", "fs"),
        subject=subject,
        outcome=outcome,
        observed_at=from_ts(clock.time() - kw.pop("ago", 1)),
        **kw,
    )


def _report(value: Any) -> Any:
    """A report without its timings (as_dict), or the value as it is."""
    found = value.as_dict() if hasattr(value, "as_dict") else value
    if isinstance(found, dict):
        return {k: v for k, v in found.items() if k not in _TIMING}
    return found


async def _read(b: Backend, block_id: str, n: int, *, session: str | None, at: float) -> None:
    """``n`` reads of a block (the access columns and rows ``record_access`` writes),
    written with one SQLite statement each, as each backend runs it."""
    await b.execute(
        "UPDATE blocks SET access_count = access_count + ?,"
        " recent_access_count = recent_access_count + ?, last_accessed_at = ?,"
        " session_count = session_count + ? WHERE id = ?",
        (n, n, at, 1 if session else 0, block_id),
    )
    for i in range(n):
        await b.execute(
            "INSERT INTO accesses (block_id, session_id, at) VALUES (?, ?, ?)",
            (block_id, session, at - (n - i) * 3600.0),
        )
    if session:
        await b.execute(
            "INSERT INTO sessions (block_id, session_id, first_at, last_at, count)"
            " VALUES (?, ?, ?, ?, ?)",
            (block_id, session, at - n * 3600.0, at, n),
        )


async def script(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Blocks of every volatility, reads, confirmations and refutations, then the passes
    as time goes by: the heuristic cycle, consolidation, decay (archiving, a block
    thousands of half-lives old, an importance of 0, core's floor), the time series, a
    compaction of runs, unmatched events, dead letters and finished requests."""
    _same_ids(monkeypatch)
    c = b.clock
    log: list[Any] = []
    m = b.maint
    ids = await b.blocks.add_many(
        [
            {  # 0: read often, confirmed: a consolidation candidate
                "content": "the API timeout is 30 s",
                "tags": ["api", "config"],
                "volatility": "low",
                "bindings": [{"sensor": "fs", "subject": "app.yaml"}],
            },
            {  # 1: episodic, read: the heuristic cycle extends its half-life
                "content": "we met on tuesday «ü»",
                "category": "episodic",
                "volatility": "medium",
                "importance": 0.3,
            },
            {  # 2: ephemeral: decays at once, thousands of half-lives
                "content": "port 8080 is free",
                "volatility": "ephemeral",
                "importance": 0.9,
            },
            {  # 3: high volatility, refuted later
                "content": "tests pass",
                "volatility": "high",
                "bindings": [{"sensor": "tests", "subject": "t::a"}],
            },
            {"content": "nothing matters", "importance": 0.0},  # 4
            {  # 5: explicit importance signal, read in sessions
                "content": "🐘 prefer PostgreSQL for teams; '; DROP TABLE blocks; --",
                "volatility": "medium",
                "signals": {"explicit_importance": 1.0},
                "bindings": [{"sensor": "fs", "subject": "b.yaml"}],
            },
            {"content": "core fact", "volatility": "low", "importance": 0.01},  # 6
            {"content": "stale guess", "volatility": "medium", "reliability": 0.3},  # 7
        ]
    )
    # A signal of text and a \u0000 escape (SQLite's json_extract ranks text above 0;
    # PostgreSQL's jsonb would refuse the escape): written by hand, as an old import might.
    await b.execute(
        "UPDATE blocks SET signals = ? WHERE id = ?",
        ('{"user_corrections":"yes","note":"\\u0000"}', ids[7]),
    )
    await b.execute("UPDATE blocks SET tier = 'core' WHERE id = ?", (ids[6],))
    c.advance(3600)
    await b.events.apply_events(
        [
            _ev(c, "e1", "app.yaml", "confirmed"),
            _ev(c, "e2", "b.yaml", "confirmed"),
            _ev(c, "e3", "t::a", "confirmed", sensor="tests"),
            _ev(c, "e4", "nobody.yaml", "confirmed"),  # reaches no block
            _ev(c, "e5", "b.yaml", "changed", sensor="git"),  # unbound sensor
        ]
    )
    c.advance(12 * 3600)
    now = c.time()
    await _read(b, ids[0], 12, session="s1", at=now)
    await b.execute(
        "INSERT INTO sessions (block_id, session_id, first_at, last_at, count) VALUES"
        " (?, 's2', ?, ?, 1), (?, 's3', ?, ?, 1)",
        (ids[0], now, now, ids[0], now, now),
    )
    await _read(b, ids[1], 6, session=None, at=now)
    await _read(b, ids[5], 4, session="s1", at=now)
    await _read(b, ids[7], 3, session="s2", at=now)
    log.append(_report(await m.heuristic_cycle(chunk_rows=3)))
    log.append(_report(await m.heuristic_cycle()))  # nothing read since: nothing changes
    log.append(_report(await m.consolidate()))
    log.append(_report(await m.consolidate(limit=1)))
    log.append(_report(await m.consolidate(limit=-1)))  # SQLite's LIMIT -1: no limit
    c.advance(60)
    log.append(_report(await m.decay_cycle(chunk_rows=3)))
    log.append(await m.record_series())

    # A week of the same confirmation (a run to compact), a refutation, a request.
    for day in range(8):
        c.advance(DAY)
        await b.events.apply_events(
            [
                _ev(c, f"run-{day}", "app.yaml", "confirmed", reliability=0.9),
                _ev(c, f"lost-{day}", f"gone-{day}.yaml", "error"),
                _ev(c, f"future-{day}", "app.yaml", "confirmed", ago=-3600),  # dead letter
            ]
        )
        if day == 2:
            await b.events.apply_events(
                [_ev(c, "r1", "t::a", "refuted", sensor="tests"), _ev(c, "ch", "b.yaml", "changed")]
            )
        if day == 3:
            await b.events.apply_events([_ev(c, "ok", "b.yaml", "confirmed")])
        log.append(await m.record_series())
    for metric in ("events", "errors", "outcome", "state"):
        log.append((metric, await m.series(metric, since=START)))
    log.append(_report(await m.decay_cycle()))
    c.advance(30 * DAY)
    log.append(_report(await m.compact_events()))
    log.append(_report(await m.compact_events()))  # again: nothing left to do
    c.advance(200 * DAY)
    log.append(_report(await m.decay_cycle(chunk_rows=2)))
    log.append(_report(await m.decay_cycle()))
    log.append(await m.record_series())
    for metric in ("state", "tier", "backlog", "events", "errors", "outcome", "x' OR '1'='1"):
        log.append((metric, await m.series(metric, since=0.0)))
    for block_id in [*ids, "no-such-id", "'; SELECT 1; --"]:
        log.append(await m.retention_points(block_id))
    log.append(await m.retention_histogram())
    log.append(await m.retention_histogram(bins=3))
    log.append(await m.retention_histogram(bins=1))
    for bad in (0, -1, 1001, True, 2.5, "3"):  # a clear ValueError, never an IndexError
        with pytest.raises(ValueError, match="bins must be an integer from 1 to 1000") as err:
            await m.retention_histogram(bins=bad)
        log.append(str(err.value))
    log.append(read_score_log(b.score_log))
    return log


async def test_maintenance_answers_as_specified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On each backend: the passes do what the rules say (bumps, extensions, a
    promotion with its score logged, archives with reasons, runs compacted)."""
    log = await script(backend, monkeypatch)
    heuristic, idle, consolidated, limited, unlimited, decay = log[:6]
    assert heuristic["blocks"] == 4
    assert heuristic["importance_raised"] == 2  # 12 reads: +0.15, 6 reads: +0.05
    assert heuristic["half_life_extended"] >= 1
    assert heuristic["chunks"] == 3  # 8 blocks in ranges of 3 rids
    assert idle["blocks"] == 0
    assert consolidated["promoted"]  # the block read in three sessions
    assert consolidated["considered"] >= 2
    assert limited["considered"] == 1
    # Every short_term block scored before, less the ones promoted since.
    assert unlimited["considered"] == consolidated["considered"] - len(consolidated["promoted"])
    assert decay["scanned"] == 8
    rows = await backend.dump()
    final = log[-1]
    assert any(line["event"] == "consolidation" and line["promoted"] for line in final)
    compacted = next(r for r in log if isinstance(r, dict) and "runs" in r)
    assert compacted["runs"] >= 1
    assert compacted["effects_deleted"] >= 1
    assert compacted["unmatched_deleted"] >= 1
    assert compacted["dead_letters_deleted"] >= 1
    assert rows["event_runs"]
    archived = {r[1]: r[10] for r in rows["blocks"] if r[3] == "archived"}
    assert archived
    assert all(reason.startswith("retention ") for reason in archived.values())
    assert any(r[2] == "archive" for r in rows["audit"])
    core = next(r for r in rows["blocks"] if r[2] == "core")
    assert core[3] != "archived"
    assert core[6] == pytest.approx(PolicyConfig().decay.core_floor)


async def test_both_backends_maintain_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same script: equal answers (reports, series, points, histograms, score log)
    and equal rows, table by table."""
    sqlite_log = await script(sqlite_backend, monkeypatch)
    pg_log = await script(pg_backend, monkeypatch)
    assert len(pg_log) == len(sqlite_log)
    for i, (s, p) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert p == s, i
    sqlite_rows, pg_rows = await sqlite_backend.dump(), await pg_backend.dump()
    for table in TABLES:
        assert pg_rows[table] == sqlite_rows[table], table
    assert sqlite_rows["event_runs"]
    assert sqlite_rows["metric_series"]


@pytest.mark.parametrize(
    ("age_half_lives", "importance", "tier", "stale"),
    [
        (0.0, 0.5, "short_term", False),
        (-3.0, 0.7, "short_term", False),  # touched in the future: full importance
        (1.0, 0.5, "short_term", False),
        (7.5, 0.5, "short_term", True),
        (2.0, 0.9, "core", False),
        (1021.0, 1.0, "short_term", False),
        (1023.0, 1.0, "short_term", False),  # past PostgreSQL's underflow: the floor
        (5000.0, 0.5, "short_term", True),
        (3.0, 1e-300, "short_term", False),
        (3.0, 0.0, "short_term", False),
    ],
)
async def test_retention_sql_is_the_rule(
    pg_server: PgServer, age_half_lives: float, importance: float, tier: str, stale: bool
) -> None:
    """PostgreSQL's retention expression against ``policy.retention`` itself (an
    independent statement of the rule), far past where its floats would underflow."""
    cfg = PolicyConfig()
    now = START
    half_life = 600.0
    touched = now - age_half_lives * half_life * (0.5 if stale else 1.0)
    rec = BlockRecord(
        id="b",
        title="",
        content="",
        tags=[],
        source="",
        category="semantic",
        info_type="dynamic",
        volatility="high",
        tier=tier,
        state="stale" if stale else "fresh",
        stale_reasons=[],
        reliability=1.0,
        importance=importance,
        validated_by=None,
        validated_at=touched,
        validity_window_s=1.0,
        stale_at=touched + 1.0 if stale else now + DAY,
        half_life_s=half_life,
        created_at=touched,
        updated_at=touched,
    )
    params = {
        "now": now,
        "floor": cfg.decay.floor,
        "core_floor": cfg.decay.core_floor,
        "stale_factor": cfg.decay.stale_half_life_factor,
        "tier": tier,
        "state": rec.state,
        "importance": importance,
        "touched": touched,
        "half_life": half_life,
        "stale_at": rec.stale_at,
    }
    expr = retention_sql("b")
    sql, names = pg_named(
        f"SELECT {expr} FROM (SELECT :tier AS tier, :state AS state, :importance AS importance,"
        " :touched AS created_at, :touched AS validated_at,"
        " NULL::float8 AS last_accessed_at, :half_life AS half_life_s,"
        " :stale_at AS stale_at) b",
        params,
    )
    import asyncpg  # noqa: PLC0415 - the postgres extra

    conn = await asyncpg.connect(pg_server.dsn())
    try:
        got = await conn.fetchval(sql, *[params[n] for n in names])
    finally:
        await conn.close()
    want = retention(rec, now, cfg)
    assert math.isclose(got, want, rel_tol=0, abs_tol=1e-300), (got, want)


@pytest.mark.parametrize(
    "sql",
    ["coalesce(stale_at <= :now, 0) AND max(a, min(b, c))", "x = 1"],
)
def test_pg_rule_translates_or_refuses(sql: str) -> None:
    """``max``/``min`` of values and SQLite's 0/1 comparisons become PostgreSQL's; an
    expression left with a ``, 0)`` it cannot place is refused, not run wrong."""
    out = pg_rule(sql)
    assert "max(" not in out
    assert "min(" not in out
    assert ", 0)" not in out
    with pytest.raises(ValueError, match="cannot translate"):
        pg_rule("coalesce(x, 0)")


async def test_decay_commits_range_by_range(pg_backend: Backend) -> None:
    """Each range of rids is a transaction of its own (other writes can go in between):
    20 blocks in ranges of 6 rids are four transactions, two at once by default (the
    writer's and one more connection); with maintenance_connections = 1 all four are
    the writer's commits."""
    await pg_backend.blocks.add_many([{"content": f"fact {i}"} for i in range(20)])
    pg_backend.clock.advance(400 * DAY)
    db = pg_backend.maint.db
    assert db.maintenance_connections == 2
    report = await pg_backend.maint.decay_cycle(chunk_rows=6)
    assert report.chunks == 4
    assert report.archived == 20
    # The rows each transaction wrote carry its id (xmin): four ranges, four transactions.
    writers = await pg_backend.rows("SELECT count(DISTINCT xmin::text) FROM blocks")
    assert writers == [(4,)]

    await pg_backend.blocks.add_many([{"content": f"later {i}"} for i in range(20)])
    pg_backend.clock.advance(400 * DAY)
    db.maintenance_connections = 1
    before = db.writer.commits
    report = await pg_backend.maint.decay_cycle(chunk_rows=6)
    assert report.archived == 20
    assert db.writer.commits - before == report.chunks


async def test_blocks_leave_room_for_a_second_version(pg_backend: Backend) -> None:
    """Migration 4 keeps half of each page of ``blocks`` free, so the decay pass's new
    row versions go on the same page (HOT: no index touched)."""
    rows = await pg_backend.rows("SELECT reloptions FROM pg_class WHERE relname = 'blocks'")
    assert rows == [(["fillfactor=50"],)]


async def test_decay_keeps_the_retention_history_bound(backend: Backend) -> None:
    """Archiving writes the block's retention point and trims its history to the newest
    MAX_POINTS (on PostgreSQL the pass writes them itself, the row trigger standing
    aside for its transaction only); afterwards a change of an input writes a point as
    before, so the trigger is back."""
    first, second = await backend.blocks.add_many(
        [{"content": "an old note", "importance": 0.2}, {"content": "kept", "tier": "core"}]
    )
    rows = await backend.rows(f"SELECT rid FROM blocks WHERE id = '{first}'")
    rid = int(rows[0][0])
    # A long history already (the points before the block's own first one).
    for i in range(MAX_POINTS):
        await backend.execute(
            "INSERT INTO retention_points VALUES (?, ?, 0.2, ?, 86400.0, 'short_term',"
            " 'unverified', NULL)",
            (rid, START - 10_000.0 + i, START - 10_000.0 + i),
        )
    backend.clock.advance(400 * DAY)
    report = await backend.maint.decay_cycle()
    assert report.archived == 1
    assert [b for b, _ in report.archived_blocks] == [first]
    points = await backend.rows(
        f"SELECT at, state FROM retention_points WHERE block_rid = {rid} ORDER BY at"
    )
    assert len(points) == MAX_POINTS
    assert points[-1] == (backend.clock.time(), "archived")
    assert points[0][0] == START - 10_000.0 + 2  # the two oldest trimmed
    rows = await backend.rows(f"SELECT rid FROM blocks WHERE id = '{second}'")
    await backend.execute(
        "UPDATE blocks SET importance = 0.7, updated_at = ? WHERE rid = ?",
        (backend.clock.time() + 1.0, int(rows[0][0])),
    )
    after = await backend.rows(
        f"SELECT importance FROM retention_points WHERE block_rid = {int(rows[0][0])}"
        " ORDER BY at DESC LIMIT 1"
    )
    assert after == [(0.7,)]
