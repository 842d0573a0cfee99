"""Event ingestion (``apply_events``) as a contract both backends keep: the same blocks,
the same events with the same clock and ids, on SQLite (the Store's ``EventLog``) and on
PostgreSQL (``PgEventLog``): the same results and the same rows (events, effects, blocks,
revalidation requests, reviews, dead letters); an event id is applied once, whether it
comes again later, twice in one call or in two concurrent calls."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError

from memwarden.errors import VersionConflictError
from memwarden.memory import Store
from memwarden.memory import _blocks as sqlite_blocks
from memwarden.memory import _dependencies as sqlite_dependencies
from memwarden.memory import _eventbatch as sqlite_eventbatch
from memwarden.memory._clock import FakeClock, from_ts
from memwarden.memory._codec import BLOCK_COLUMNS
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory._model import ValidationEvent
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg import _blocks as pg_blocks
from memwarden.memory.pg._apply import PgEventLog, pg_sql
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.policy import PolicyConfig
from tests.pg.contract import dump_tables, sequential_ids

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

    from tests.pgserver import PgServer

START = 1_767_225_600.0
TABLES = {
    "blocks": (", ".join(BLOCK_COLUMNS), "rid"),
    "events": (
        (
            "seq, event_id, sensor, subject, outcome, observed_at, received_at, reliability,"
            " validity_window_s, request_id, block_id, message, observed, agent, agent_seq"
        ),
        "seq",
    ),
    "effects": (
        (
            "block_rid, event_seq, state_before, state_after, reliability_before,"
            " reliability_after, detail"
        ),
        "1, 2",
    ),
    "revalidations": (
        (
            "id, block_id, sensor, subject, reason, status, created_at, send_at, deadline_s,"
            " attempts, finished_at, outcome"
        ),
        "id",
    ),
    "reviews": ("id, block_id, reason, status, created_at", "id"),
    "dead_letters": ("received_at, source, reason, payload", "id"),
    "retention_points": ("block_rid, at, state, stale_at", "1, 2"),
}


class Backend:
    def __init__(
        self,
        blocks: Any,
        events: Any,
        clock: FakeClock,
        rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
    ) -> None:
        self.blocks = blocks
        self.events = events
        self.clock = clock
        self.rows = rows

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await dump_tables(self.rows, TABLES)


def _same_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids handed out alike from here on (blocks, requests, reviews)."""
    new_id = sequential_ids()
    # PostgreSQL's event log hands out its ids through the SQLite module's shared steps.
    for module in (sqlite_blocks, sqlite_eventbatch, sqlite_dependencies, pg_blocks):
        monkeypatch.setattr(module, "new_id", new_id)


@pytest.fixture
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    async with Store(tmp_path / "m.db", clock=clock) as store:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with store.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        yield Backend(store._blocks, store._events, clock, rows)


@pytest.fixture
async def pg_backend(pg_server: PgServer) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    cfg = PolicyConfig()  # the Store's default
    async with PgDatabase(pg_server.create_database()) as db:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with db.read() as conn:
                return [tuple(r) for r in await conn.fetch(sql)]

        yield Backend(
            PgBlocks(db, clock, cfg), PgEventLog(db, clock, cfg, CompactionConfig()), clock, rows
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


async def script(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Blocks with bindings and a dependency, then batches of events: confirmations,
    refutations (a dependent goes stale), a change (a request), its answer, duplicates,
    an event from the future, one naming an unbound block, hostile text."""
    _same_ids(monkeypatch)
    log: list[Any] = []
    c = b.clock
    root, other, third = await b.blocks.add_many(
        [
            {"content": "root fact", "bindings": [{"sensor": "fs", "subject": "a.yaml"}]},
            {
                "content": "other fact",
                "bindings": [
                    {"sensor": "fs", "subject": "b.yaml"},
                    {"sensor": "git", "subject": "repo"},
                ],
            },
            {"content": "third", "bindings": [{"sensor": "fs", "subject": "ü 🐘.yaml"}]},
        ]
    )
    (dependent,) = await b.blocks.add_many(
        [
            {
                "content": "rests on root",
                "depends_on": [root],
                "bindings": [{"sensor": "http", "subject": "https://x/"}],
            }
        ]
    )
    c.advance(10)

    async def apply(events: list[ValidationEvent], **kw: Any) -> None:
        result = await b.events.apply_events(events, **kw)
        result.answered.sort()
        log.append(result)
        c.advance(5)

    await apply(
        [
            _ev(c, "e1", "a.yaml", "confirmed"),
            _ev(c, "e2", "b.yaml", "confirmed", reliability=0.5, message="ok «ü» \u2028"),
            _ev(c, "e3", "ü 🐘.yaml", "changed", observed={"k": "\u0000 in json"}),
            _ev(c, "e4", "nobody.yaml", "confirmed"),
        ]
    )
    await apply(
        [
            _ev(c, "e5", "ü 🐘.yaml", "confirmed"),  # answers e3's request
            _ev(c, "e1", "a.yaml", "refuted"),  # a duplicate id: stored once, not applied
            _ev(c, "e6", "a.yaml", "refuted", validity_window=60),
            _ev(c, "e6", "a.yaml", "confirmed"),  # twice in one call
            _ev(c, "e7", "x", "confirmed", block_id=other, sensor="git", agent="a1", seq=3),
            _ev(c, "e8", "x", "confirmed", block_id=third, sensor="git"),  # not bound: git
            _ev(c, "e9", "b.yaml", "confirmed", ago=-3600),  # from the future
            _ev(c, "'; DROP TABLE events; --", "b.yaml", "error", message="boom"),
        ],
        bound_only=True,
    )
    await apply([_ev(c, "e10", "b.yaml", "refuted"), _ev(c, "e11", "b.yaml", "refuted")])
    await apply([])
    await apply([_ev(c, "e1", "a.yaml", "confirmed")])  # only a duplicate
    log.append([dependent])
    return log


async def test_apply_events_answers_as_specified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch's result on one backend: accepted, duplicates, unmatched, rejections,
    state changes (a dependent pulled stale), requests answered."""
    log = await script(backend, monkeypatch)
    first, second, third, empty, again = log[:5]
    assert (first.accepted, first.unmatched, first.revalidations) == (4, 1, 1)
    assert second.duplicates == 2
    assert {r[0] for r in second.rejected} == {"e8", "e9"}
    assert len(second.answered) == 1  # e3's request, answered by e5
    (dependent,) = log[5]
    assert any(c.block_id == dependent and c.after == "stale" for c in second.changes)
    assert third.accepted == 2
    assert empty.accepted == 0
    assert (again.accepted, again.duplicates) == (0, 1)
    rows = await backend.dump()
    assert len(rows["events"]) == 4 + 4 + 2
    assert [r[1] for r in rows["dead_letters"]] == ["events", "events"]


async def _assert_alike(
    sqlite_log: list[Any], pg_log: list[Any], sqlite_backend: Backend, pg_backend: Backend
) -> dict[str, list[tuple[Any, ...]]]:
    """Equal results, and equal rows table by table; SQLite's rows."""
    for i, (s, p) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert p == s, i
    sqlite_rows, pg_rows = await sqlite_backend.dump(), await pg_backend.dump()
    for table in TABLES:
        assert pg_rows[table] == sqlite_rows[table], table
    return sqlite_rows


async def test_both_backends_apply_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same script: equal results and equal rows, table by table."""
    sqlite_log = await script(sqlite_backend, monkeypatch)
    pg_log = await script(pg_backend, monkeypatch)
    sqlite_rows = await _assert_alike(sqlite_log, pg_log, sqlite_backend, pg_backend)
    assert sqlite_rows["revalidations"]
    assert sqlite_rows["effects"]


async def test_concurrent_calls_apply_an_event_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five calls at once with the same three event ids: three events stored, each
    applied to its block once (one effect each); the others count as duplicates."""
    _same_ids(monkeypatch)
    await backend.blocks.add_many(
        [{"content": f"f{i}", "bindings": [{"sensor": "fs", "subject": f"{i}"}]} for i in range(3)]
    )
    backend.clock.advance(10)
    events = [_ev(backend.clock, f"c{i}", f"{i}", "confirmed") for i in range(3)]
    results = await asyncio.gather(*(backend.events.apply_events(events) for _ in range(5)))
    assert sum(r.accepted for r in results) == 3
    assert sum(r.duplicates for r in results) == 12
    rows = await backend.dump()
    assert [r[1] for r in rows["events"]] == ["c0", "c1", "c2"]
    assert len(rows["effects"]) == 3


def test_hostile_event_ids_are_refused_alike() -> None:
    """A NUL in an event id, a request id or an agent is refused by the model, before
    either backend (PostgreSQL text cannot hold it)."""
    for field in ("event_id", "request_id", "agent"):
        with pytest.raises(ValidationError, match="NUL"):
            ValidationEvent.model_validate(
                {
                    "sensor": "fs",
                    "subject": "a",
                    "outcome": "confirmed",
                    "observed_at": "2026-01-01T00:00:00Z",
                    field: "a\x00b",
                }
            )


def test_pg_sql_translates_the_statements() -> None:
    """``?`` become ``$n`` in order; INSERT OR IGNORE becomes ON CONFLICT DO NOTHING."""
    assert pg_sql("UPDATE t SET a = ?, b = min(stability, ?) WHERE c = ?") == (
        "UPDATE t SET a = $1, b = least(stability, $2) WHERE c = $3"
    )
    assert pg_sql("INSERT OR IGNORE INTO t (a) VALUES (?)") == (
        "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING"
    )


async def test_a_job_run_again_dead_letters_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingestion batched with a write that fails is run again alone (both writers):
    its rejected event is dead-lettered and reported once, not once per run."""
    _same_ids(monkeypatch)
    (target,) = await backend.blocks.add_many(
        [{"content": "t", "bindings": [{"sensor": "fs", "subject": "t"}]}]
    )
    backend.clock.advance(10)
    unbound = _ev(backend.clock, "u1", "x", "confirmed", block_id=target, sensor="git")
    result, failed = await asyncio.gather(  # the ingestion first: it runs, then again
        backend.events.apply_events([unbound], bound_only=True),
        backend.blocks.update(target, {"content": "v"}, expected_version=9),
        return_exceptions=True,
    )
    assert isinstance(failed, VersionConflictError)
    assert [r[0] for r in result.rejected] == ["u1"]
    rows = await backend.dump()
    assert len(rows["dead_letters"]) == 1


def _writer_commits(b: Backend) -> int:
    writer = b.events.db.writer
    assert writer is not None
    return int(writer.commits)


async def _in_one_transaction(b: Backend, *calls: list[ValidationEvent]) -> list[Any]:
    """The calls gathered, checked to have shared one writer transaction."""
    before = _writer_commits(b)
    results = await asyncio.gather(*(b.events.apply_events(c) for c in calls))
    assert _writer_commits(b) - before == 1
    return list(results)


_PG_ROW_WRITES = """
CREATE TABLE row_writes (rid bigint NOT NULL);
CREATE FUNCTION row_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO row_writes VALUES (NEW.rid); RETURN NULL; END $$;
CREATE TRIGGER row_writes AFTER UPDATE ON blocks FOR EACH ROW EXECUTE FUNCTION row_write();
"""


async def _log_row_writes(b: Backend) -> None:
    """A table of the test's own, filled by a trigger at every write of a block's row."""

    async def job(conn: Any) -> None:
        if isinstance(b.events, PgEventLog):
            await conn.execute(_PG_ROW_WRITES)
            return
        await conn.execute("CREATE TABLE row_writes (rid INTEGER NOT NULL)")
        await conn.execute(
            "CREATE TRIGGER row_writes AFTER UPDATE ON blocks"
            " BEGIN INSERT INTO row_writes VALUES (new.rid); END"
        )

    await b.events.db.write(job)


async def _flood(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Twenty calls over four blocks in one transaction: each block's evidence is
    written once, at the end (memory._eventbatch's note), on either backend."""
    _same_ids(monkeypatch)
    await b.blocks.add_many(
        [{"content": f"f{i}", "bindings": [{"sensor": "fs", "subject": f"s{i}"}]} for i in range(4)]
    )
    await _log_row_writes(b)
    b.clock.advance(100)
    outcomes = ("confirmed", "changed", "confirmed", "refuted", "error")
    calls = [
        [
            _ev(
                b.clock,
                f"f{j}-{k}",
                f"s{(j + k) % 4}",
                outcomes[(j * 3 + k) % 5],
                ago=60 - j - k / 10,
            )
            for k in range(3)
        ]
        for j in range(20)
    ]
    return await _in_one_transaction(b, *calls)


async def test_calls_in_one_transaction_apply_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flood of calls grouped in one transaction: equal results and equal rows on both
    backends, and each block's row written once."""
    sqlite_results = await _flood(sqlite_backend, monkeypatch)
    pg_results = await _flood(pg_backend, monkeypatch)
    await _assert_alike(sqlite_results, pg_results, sqlite_backend, pg_backend)
    for b in (sqlite_backend, pg_backend):
        writes = await b.rows("SELECT rid, count(*) FROM row_writes GROUP BY rid ORDER BY rid")
        assert [tuple(w) for w in writes] == [(rid, 1) for rid in (1, 2, 3, 4)]


async def test_a_dependent_changed_earlier_in_the_transaction_falls(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call confirms a dependent, the next in the same transaction refutes its root
    for the third time: the dependent's row ends stale (dependency) with the
    confirmation in it, on either backend."""
    _same_ids(monkeypatch)
    (root,) = await backend.blocks.add_many(
        [{"content": "root", "bindings": [{"sensor": "fs", "subject": "a"}]}]
    )
    (leaf,) = await backend.blocks.add_many(
        [{"content": "leaf", "depends_on": [root], "bindings": [{"sensor": "fs", "subject": "b"}]}]
    )
    c = backend.clock
    for i in range(2):
        c.advance(10)
        await backend.events.apply_events([_ev(c, f"r{i}", "a", "refuted")])
    c.advance(10)
    confirm, refute = await _in_one_transaction(
        backend, [_ev(c, "ok", "b", "confirmed", ago=3)], [_ev(c, "r2", "a", "refuted")]
    )
    assert [(x.block_id, x.after) for x in confirm.changes] == [(leaf, "fresh")]
    assert (leaf, "fresh", "stale") in [(x.block_id, x.before, x.after) for x in refute.changes]
    [(state, reasons, validated_at, reinforced)] = await backend.rows(
        "SELECT state, stale_reasons, validated_at, reinforcement_count FROM blocks"
        f" WHERE id = '{leaf}'"
    )
    assert (state, reasons, reinforced) == ("stale", "dependency", 1)
    assert validated_at == c.time() - 3


async def test_a_demotion_in_a_transaction_never_splits_the_row(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A core block's error (one call) and third refutation (the next, same
    transaction): the demotion writes the row after its pending evidence, so every
    retention point as long_term says refuted, on either backend."""
    _same_ids(monkeypatch)
    (core,) = await backend.blocks.add_many(
        [{"content": "core", "tier": "core", "bindings": [{"sensor": "fs", "subject": "k"}]}]
    )
    c = backend.clock
    for i in range(2):
        c.advance(10)
        await backend.events.apply_events([_ev(c, f"r{i}", "k", "refuted")])
    c.advance(10)
    await _in_one_transaction(
        backend, [_ev(c, "err", "k", "error", ago=3)], [_ev(c, "r2", "k", "refuted")]
    )
    [(tier, state)] = await backend.rows(f"SELECT tier, state FROM blocks WHERE id = '{core}'")
    assert (tier, state) == ("long_term", "refuted")
    points = await backend.rows(
        "SELECT p.state FROM retention_points p JOIN blocks k ON k.rid = p.block_rid"
        f" WHERE k.id = '{core}' AND p.tier = 'long_term'"
    )
    assert points
    assert {p[0] for p in points} == {"refuted"}
