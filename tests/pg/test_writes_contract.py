"""The store's block writes (add, add_many, update, archive, restore, delete) as a
contract both backends keep: the same script of writes, with the same ids and the same
clock, runs on SQLite (the Store's ``Blocks``) and on PostgreSQL (``PgBlocks``); each
call's answer or error and the rows it leaves (blocks, history, bindings, dependencies,
retention points, embedding queue, audit) are equal on both."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import MemwardenError, ValidationInputError, VersionConflictError
from memwarden.memory import Store
from memwarden.memory import _blocks as sqlite_blocks
from memwarden.memory._clock import FakeClock
from memwarden.memory._codec import BLOCK_COLUMNS
from memwarden.memory._model import MAX_CONTENT_CHARS
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg import _blocks as pg_blocks
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.pg._reads import PgReads
from memwarden.memory.policy import PolicyConfig
from tests.pg.contract import dump_tables, sequential_ids

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

    from tests.pgserver import PgServer

START = 1_767_225_600.0  # 2026-01-01Z

# Each table as both backends list it: the columns, ordered by a key.
TABLES = {
    "blocks": (", ".join((*BLOCK_COLUMNS, "content_key")), "rid"),
    "block_history": ("block_id, version, title, content, tags, replaced_at, replaced_by", "1, 2"),
    # Without the row's id: SQLite hands out max(id) + 1 again once the highest row went
    # (a binding replaced), PostgreSQL's identity never; nothing outside the table sees it.
    "bindings": ("block_rid, sensor, subject, selector, created_at", "id"),
    "dependencies": ("depends_on, block_rid", "1, 2"),
    "retention_points": (
        "block_rid, at, importance, touched_at, half_life_s, tier, state, stale_at",
        "1, 2",
    ),
    "embed_queue": ("block_rid, gen", "1"),
    # Without the id: a PostgreSQL identity spends its numbers in a rolled-back write too.
    "audit": ("at, actor, action, block_id, detail", "id"),
    "sessions": ("block_id, session_id", "1, 2"),
}
# A block's rid by its rank: PostgreSQL's identity spends rids in a rolled-back add too
# (several writers take them from the sequence at once), SQLite hands out max + 1.
RIDS = {
    "rid": {
        "blocks": "rid",
        "bindings": "block_rid",
        "dependencies": "block_rid",
        "retention_points": "block_rid",
        "embed_queue": "block_rid",
    }
}


class Backend:
    """One backend's writes, reads and raw rows, behind one interface."""

    def __init__(
        self,
        writes: Any,
        reads: Any,
        clock: FakeClock,
        rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
    ) -> None:
        self.writes = writes
        self.reads = reads
        self.clock = clock
        self.rows = rows

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await dump_tables(self.rows, TABLES, RIDS)


@pytest.fixture
async def sqlite_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Backend]:
    monkeypatch.setattr(sqlite_blocks, "new_id", sequential_ids())
    clock = FakeClock(START)
    async with Store(tmp_path / "m.db", clock=clock) as store:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with store.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        yield Backend(store._blocks, store, clock, rows)


@pytest.fixture
async def pg_backend(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Backend]:
    monkeypatch.setattr(pg_blocks, "new_id", sequential_ids())
    clock = FakeClock(START)
    cfg = PolicyConfig()  # the Store's default
    async with PgDatabase(pg_server.create_database()) as db:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with db.read() as conn:
                return [tuple(r) for r in await conn.fetch(sql)]

        yield Backend(PgBlocks(db, clock, cfg), PgReads(db, clock, cfg), clock, rows)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """The block writes of one backend."""
    value: Backend = request.getfixturevalue(
        f"{'sqlite' if request.param == 'sqlite' else 'pg'}_backend"
    )
    return value


async def _outcome(call: Awaitable[Any]) -> Any:
    """A call's answer, or its error as (type, message, field errors)."""
    try:
        return await call
    except MemwardenError as err:
        fields = err.errors if isinstance(err, ValidationInputError) else None
        return (type(err).__name__, str(err), fields)


async def script(b: Backend) -> list[Any]:
    """Every kind of block write, with hostile inputs among them; the answers in order."""
    w, log = b.writes, []

    async def step(call: Awaitable[Any]) -> Any:
        result = await _outcome(call)
        log.append(result)
        b.clock.advance(7)
        return result

    first = await step(
        w.add_many(
            [
                {
                    "title": "Café «naïve» 🐘",
                    "content": "The deploy config lives in config/a.yaml",
                    "tags": ["deploy", "ünïcode", "deploy"],
                    "bindings": [{"sensor": "fs", "subject": "a.yaml", "selector": {"k": [1, 2]}}],
                    "volatility": "high",
                },
                {"content": '\'; DROP TABLE blocks; -- \\ back\\slash "q"', "tags": ["t'1"]},
                {"content": "Another fact", "namespace": "elsewhere", "info_type": "dynamic"},
            ]
        )
    )
    a, bb, other = first
    await step(w.add_many([{"content": "rests on a", "depends_on": [a]}]))
    await step(w.add_many([{"content": "rests on another namespace", "depends_on": [other]}]))
    await step(w.add_many([{"content": "rests on nothing", "depends_on": ["no-such"]}]))
    dup: set[str] = set()
    await step(
        w.add_many(
            [
                {"content": "  THE deploy config   lives in CONFIG/A.YAML "},
                {"content": "x y"},
                {"content": "X  Y"},
            ],
            dedupe=True,
            duplicates=dup,
        )
    )
    log.append(sorted(dup))
    await step(w.add_many([{"content": "x\x00y"}, {"content": "ok", "title": "\ud800"}]))
    huge = " ".join(f"wörd{i}" for i in range(MAX_CONTENT_CHARS // 12))[: MAX_CONTENT_CHARS - 2]
    await step(w.add_many([{"content": huge + " 🐘", "title": "t" * 500}]))
    await step(w.add_many([{"content": "c" * (MAX_CONTENT_CHARS + 1)}]))
    # Edits: a new text, new bindings, a stale version, no new version, a volatility.
    await step(w.update(a, {"content": "The deploy config moved to b.yaml"}, expected_version=1))
    await step(
        w.update(
            a,
            {
                "bindings": [
                    {"sensor": "fs", "subject": "b.yaml"},
                    {"sensor": "git", "subject": "r"},
                ]
            },
            expected_version=2,
            actor="human",
        )
    )
    await step(w.update(a, {"title": "stale edit"}, expected_version=2))
    await step(w.update(a, {"importance": 0.9, "signals": {"s": 1}}))
    await step(w.update(a, {"volatility": "low", "tags": ["z", "a", "z"]}))
    await step(w.update(a, {"bindings": [{"sensor": "git", "subject": "r"}]}))
    await step(w.update(a, {"bindings": [{"sensor": "git", "subject": "r"}]}))  # the same
    await step(w.update(a, {"title": None}))
    await step(w.update(a, {"content": "nul \x00 inside"}))
    await step(w.update("0190a0b0-0000-7000-8000-00000000dead", {"title": "x"}))
    # Archive, archive again, restore, restore again, delete.
    await step(w.archive(bb, reason="obsolete «now» 🐘"))
    await step(w.archive(bb, reason="again"))
    await step(w.archive(a, reason="nul \x00 reason"))
    await step(w.restore(bb))
    await step(w.restore(bb))
    await step(w.delete(other, reason="gone", actor="human"))
    await step(w.delete(other))
    await step(w.archive(other, reason="x"))
    await step(w.add_many([{"content": "after a delete"}]))  # a fresh rid, never other's
    blocks = await b.reads.list_blocks({"limit": 1000})
    log.append([await b.reads.get(x.id) for x in blocks])
    return log


async def test_each_write_answers_as_specified(backend: Backend) -> None:
    """The script's answers on one backend: ids in order, a dedupe's existing id, the
    errors where the input or the version is wrong, history for new versions only."""
    log = await script(backend)
    assert isinstance(log[0], list), log[0]
    a, bb, other = log[0]
    assert isinstance(log[1], list), log[1]
    assert log[2][0] == "ValidationInputError"  # another namespace's block is "no block"
    assert log[3][2] == [("depends_on.0", "no block 'no-such'")]
    assert log[4][0] == a  # the normalised content of a live block
    assert log[4][2] == log[4][1]  # and of an earlier one of the same call
    assert log[5] == sorted({a, log[4][1]})
    assert {f for f, _ in log[6][2]} == {"0.content", "1.title"}
    assert isinstance(log[7], list)  # huge, within the limits
    assert log[8][0] == "ValidationInputError"
    assert log[9] is None
    assert log[10] is None
    assert log[11][0] == "VersionConflictError"
    assert log[17][0] == "ValidationInputError"  # NUL in content
    assert log[18][0] == "NotFoundError"
    assert log[21][0] == "ValidationInputError"  # NUL in a reason
    assert log[25][0] == "NotFoundError"  # deleted
    rows = await backend.dump()
    assert [r[:2] for r in rows["block_history"]] == [(a, 1.0), (a, 2.0), (a, 3.0), (a, 4.0)]
    got = {blk.id: blk for blk in log[-1]}
    assert got[a].version == 5
    assert [(g.sensor, g.subject) for g in got[a].bindings] == [("git", "r")]
    assert got[a].tags == ["z", "a"]
    assert got[bb].state == "unverified"
    assert other not in got
    # The deleted block's points went with it: every point is a stored block's.
    stored = {r[BLOCK_COLUMNS.index("rid")] for r in rows["blocks"]}
    assert {r[0] for r in rows["retention_points"]} <= stored


async def test_both_backends_write_alike(sqlite_backend: Backend, pg_backend: Backend) -> None:
    """The same script leaves the same answers and the same rows on both backends."""
    sqlite_log = await script(sqlite_backend)
    pg_log = await script(pg_backend)
    for i, (s, p) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert p == s, i
    sqlite_rows, pg_rows = await sqlite_backend.dump(), await pg_backend.dump()
    for table in TABLES:
        assert pg_rows[table] == sqlite_rows[table], table
    assert sqlite_rows["block_history"]
    assert sqlite_rows["retention_points"]


async def test_concurrent_updates_with_one_version_one_wins(backend: Backend) -> None:
    """Ten edits of one version at once: exactly one applies, nine are version conflicts,
    and the block is at version 2 with one history row."""
    (block_id,) = await backend.writes.add_many([{"content": "contended"}])
    outcomes = await asyncio.gather(
        *(
            backend.writes.update(block_id, {"content": f"edit {i}"}, expected_version=1)
            for i in range(10)
        ),
        return_exceptions=True,
    )
    assert sum(o is None for o in outcomes) == 1
    assert sum(isinstance(o, VersionConflictError) for o in outcomes) == 9
    block = await backend.reads.get(block_id)
    assert block.version == 2
    winner = outcomes.index(None)
    assert block.content == f"edit {winner}"
    rows = await backend.dump()
    assert [r[:2] for r in rows["block_history"]] == [(block_id, 1.0)]


async def test_concurrent_dedupe_adds_store_one_block(backend: Backend) -> None:
    """Five adds of one fact at once (with dedupe), batched with an edit that fails (on
    PostgreSQL the batch is rolled back and each job run again alone): one block, every
    answer its id, one audit row for it."""
    (target,) = await backend.writes.add_many([{"content": "target"}])
    outcomes = await asyncio.gather(
        backend.writes.update(target, {"content": "v"}, expected_version=7),
        *(backend.writes.add_many([{"content": "One  FACT"}], dedupe=True) for _ in range(5)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], VersionConflictError)
    answers = {ids[0] for ids in outcomes[1:]}  # type: ignore[index]
    assert len(answers) == 1
    rows = await backend.dump()
    assert [r[0] for r in rows["blocks"]] == [target, *answers]
    assert [r[3] for r in rows["audit"]] == [target, *answers]
