"""Erasure as a contract both backends keep: one store with a block's words in every table
that can hold them is built through the SQLite Store and copied to PostgreSQL
(``copy_to_postgres``), so both start from the same rows; the same script of erasures
(hostile inputs among them) and retention passes then runs on the SQLite Store and on
:class:`PgErasure` with the same clock: each answer or error, and every row of every
table after each step, are equal. After the erasures, the erased words are in no
text, JSON, bytea or tsvector value of the PostgreSQL database."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import MemwardenError, NotFoundError, ValidationInputError
from memwarden.memory import RetentionConfig, Store, ValidationEvent, from_ts
from memwarden.memory._clock import FakeClock
from memwarden.memory._erasure import MAX_ERASE
from memwarden.memory._proposals import NewProposal
from memwarden.memory._scorelog import ScoreLog
from memwarden.memory.pg import PgDatabase, copy_to_postgres
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.pg._erasure import PgErasure
from memwarden.memory.policy import PolicyConfig
from tests.pg.contract import database_copy, every_row, pg_holding, pg_tables

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from tests.pgserver import PgServer

START = 1_767_225_600.0  # 2026-01-01Z
DAY = timedelta(days=1).total_seconds()
# One marker word per block: where it is found, that block's words are.
ALPHA, BETA, GAMMA, OTHER = "zebracorn", "quokkafish", "narwhalia", "okapirus"
UNKNOWN = "0190a0b0-0000-7000-8000-00000000dead"


async def _world(path: Path, clock: FakeClock) -> dict[str, str]:
    """A store in which ALPHA's block has its words in every table a block's words can
    reach; BETA's shares an event with it; GAMMA's is archived; OTHER's is in another
    namespace. Its ids by name."""
    async with Store(path, clock=clock, score_log=path.parent / "score.jsonl") as store:
        alpha = await store.add(
            {
                "title": f"{ALPHA.title()} title",
                "content": f"The {ALPHA} secret lives in config/{ALPHA}.yaml",
                "tags": ["secret", f"{ALPHA}tag"],
                "bindings": [
                    {"sensor": "fs", "path": f"{ALPHA}.yaml", "equals": f"{ALPHA}-value"},
                    {"sensor": "fs", "path": "shared.yaml"},
                ],
            }
        )
        beta = await store.add(
            {
                "content": f"{BETA} also reads shared.yaml",
                "tags": ["secret"],
                "bindings": [{"sensor": "fs", "path": "shared.yaml"}],
            }
        )
        gamma = await store.add({"content": f"an old {GAMMA} fact", "tags": ["old"]})
        other = await store.add(
            {"content": f"{OTHER} elsewhere, also secret", "namespace": "elsewhere"}
        )
        dependent = await store.add({"content": "rests on alpha", "depends_on": [alpha.id]})
        clock.advance(60)
        at = from_ts(clock.time() - 1)
        await store.apply_events(  # reaches no block
            [
                ValidationEvent(
                    sensor="fs", subject="nobody.yaml", outcome="confirmed", observed_at=at
                )
            ]
        )
        await store.apply_events(
            [
                ValidationEvent(
                    sensor="fs",
                    subject=f"{ALPHA}.yaml",
                    outcome="confirmed",
                    observed_at=at,
                    observed=f"{ALPHA}-value",
                    message=f"{ALPHA} seen",
                ),
                ValidationEvent(
                    sensor="fs",
                    subject="shared.yaml",
                    outcome="confirmed",
                    observed_at=at,
                    observed=f"{ALPHA} and {BETA} shared",
                ),
                ValidationEvent(
                    sensor="api",
                    subject="direct",
                    outcome="refuted",
                    observed_at=at,
                    block_id=alpha.id,
                    message=f"{ALPHA} refuted by hand",
                ),
            ]
        )
        clock.advance(60)
        await store.update(alpha.id, {"content": f"The {ALPHA} secret moved to vault"})
        await store.request_review(alpha.id, reason=f"is {ALPHA} right?")
        await store.record_access([alpha.id, beta.id], session="s1")
        await store.mark_stale([alpha.id])
        await store.dead_letter(
            source="http", reason="bad", payload=f'{{"block_id": "{alpha.id}", "x": "{ALPHA}"}}'
        )
        await store.outbox_put(
            [(f"memwarden/blocks/{alpha.id}", f"{ALPHA} {alpha.id}".encode(), 1, True)],
            max_rows=100,
        )
        await store.add_proposals(
            [
                NewProposal(beta.id, "depends_on", {"depends_on": alpha.id}, 0.5, "why"),
                NewProposal(alpha.id, "depends_on", {"depends_on": beta.id}, 0.5, "why"),
            ]
        )
        await store.archive(gamma.id, reason=f"{GAMMA} obsolete")
        clock.advance(60)
        score_log = store.score_log
        assert score_log is not None
        for block_id in (alpha.id, beta.id, other.id):
            score_log.write(
                {"at": from_ts(clock.time()).isoformat(), "block_id": block_id, "score": 0.5}
            )
    return {
        "alpha": alpha.id,
        "beta": beta.id,
        "gamma": gamma.id,
        "other": other.id,
        "dependent": dependent.id,
    }


class Backend:
    """One backend's erasure methods and raw rows, behind one interface."""

    def __init__(
        self,
        api: Any,
        clock: FakeClock,
        rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
        tables: dict[str, list[str]],
    ) -> None:
        self.api = api
        self.clock = clock
        self.rows = rows
        self.tables = tables

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await every_row(self.rows, self.tables)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pg_server: PgServer) -> Iterator[World]:
    """The store, built once: its SQLite file and score log, the PostgreSQL database it
    was copied to (each test takes a copy of either), and its ids."""
    base = tmp_path_factory.mktemp("world")
    ids = asyncio.run(_world(base / "m.db", FakeClock(START)))
    dsn = pg_server.create_database("world")
    asyncio.run(copy_to_postgres(base / "m.db", dsn))

    async def tables() -> dict[str, list[str]]:
        async with PgDatabase(dsn) as db, db.read() as conn:
            return await pg_tables(conn)

    name = dsn.rsplit("/", 1)[-1]
    yield World(base, name, ids, asyncio.run(tables()))
    pg_server.psql(f'DROP DATABASE "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class World:
    base: Path
    database: str
    ids: dict[str, str]
    tables: dict[str, list[str]]


@pytest.fixture
async def sqlite_backend(tmp_path: Path, world: World) -> AsyncIterator[Backend]:
    shutil.copy(world.base / "m.db", tmp_path / "m.db")
    shutil.copy(world.base / "score.jsonl", tmp_path / "score.jsonl")
    clock = FakeClock(START + 180)
    async with Store(tmp_path / "m.db", clock=clock, score_log=tmp_path / "score.jsonl") as store:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with store.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        yield Backend(store, clock, rows, world.tables)


@pytest.fixture
async def pg_backend(pg_server: PgServer, world: World, tmp_path: Path) -> AsyncIterator[Backend]:
    shutil.copy(world.base / "score.jsonl", tmp_path / "pg-score.jsonl")
    clock = FakeClock(START + 180)
    score_log = ScoreLog(tmp_path / "pg-score.jsonl")
    try:
        with database_copy(pg_server, world.database) as name:
            async with PgDatabase(pg_server.dsn(name)) as db:

                async def rows(sql: str) -> list[tuple[Any, ...]]:
                    async with db.read() as conn:
                        return [tuple(r) for r in await conn.fetch(sql)]

                erasure = PgErasure(db, clock, score_log=score_log)
                yield Backend(erasure, clock, rows, world.tables)
    finally:
        score_log.close()


async def _outcome(call: Awaitable[Any]) -> Any:
    """A call's answer, or its error as (type, message, field errors)."""
    try:
        return await call
    except MemwardenError as err:
        fields = err.errors if isinstance(err, ValidationInputError) else None
        return (type(err).__name__, str(err), fields)
    except ValueError as err:
        return ("ValueError", str(err), None)


def _report(value: Any) -> Any:
    """An erasure's or retention's report without what only one backend can say (the
    SQLite file's checkpoint, how long it took)."""
    if hasattr(value, "as_dict"):
        answer = value.as_dict()
        for key in ("fts", "vacuumed", "wal_truncated", "wal_checkpoint", "duration_s"):
            answer.pop(key, None)
        return answer
    return value


async def script(b: Backend, ids: dict[str, str]) -> list[Any]:
    """Dry runs, hostile erasures, real ones, the log; the answers and the rows after
    each step, in order."""
    api, log = b.api, []
    alpha, beta, gamma, other = ids["alpha"], ids["beta"], ids["gamma"], ids["other"]

    async def step(call: Awaitable[Any]) -> Any:
        result = _report(await _outcome(call))
        log.append(result)
        b.clock.advance(7)
        return result

    async def rows() -> None:
        log.append(await b.dump())

    # Choosing: by ids, tag, words; namespaces; hostile selections.
    await step(api.erasure_targets(ids=[alpha, gamma]))
    await step(api.erasure_targets(ids=[alpha, UNKNOWN]))
    await step(api.erasure_targets(ids=[alpha, "a\x00b"]))
    await step(api.erasure_targets(ids=[alpha, "\ud800"]))
    await step(api.erasure_targets(ids=[alpha, other], namespaces=["default"]))
    await step(api.erasure_targets(ids=[f"{UNKNOWN[:-4]}{i:04x}" for i in range(5000)]))
    await step(api.erasure_targets(tag="secret"))
    await step(api.erasure_targets(tag="secret", namespaces=["default"]))
    await step(api.erasure_targets(tag="secret", namespaces=[]))
    await step(api.erasure_targets(tag="se\x00cret"))
    await step(api.erasure_targets(tag="secret", namespaces=[f"n{i}" for i in range(65)]))
    await step(api.erasure_targets(query=ALPHA))
    await step(api.erasure_targets(query=f"{ALPHA.upper()} SECRET"))
    await step(api.erasure_targets(query=GAMMA))  # archived: not in the index
    await step(api.erasure_targets(query="secret", namespaces=["elsewhere"]))
    await step(api.erasure_targets(query="config/zebracorn.yaml"))
    await step(api.erasure_targets(query='"; DROP TABLE blocks; -- NEAR(*)'))
    await step(api.erasure_targets(query="!!! ..."))
    await step(api.erasure_targets(ids=[alpha], tag="secret"))
    await step(api.erasure_targets())
    await step(api.visible_ids([alpha, other, UNKNOWN, "a\x00b", alpha], ["default"]))
    await step(api.visible_ids([alpha, other], ["elsewhere"]))
    # Erasures that must change nothing.
    await step(api.erase([alpha, UNKNOWN], actor="human", reason="x"))
    await step(api.erase([alpha, "a\x00b"], actor="human", reason="x"))
    await step(api.erase([], actor="human"))
    await step(api.erase([f"{UNKNOWN[:-4]}{i:04x}" for i in range(MAX_ERASE + 1)], actor="h"))
    await step(api.erase([alpha], actor="human", reason="nul \x00 reason"))
    await step(api.erase([alpha], actor="hu\x00man"))
    await rows()
    # Alpha alone: the event it shares with beta is blanked, not deleted.
    await step(api.erase([alpha, alpha], actor="human", reason="gdpr «request» 🐘"))
    await rows()
    await step(api.erase([alpha], actor="human"))  # already gone
    await step(api.erasure_targets(ids=[alpha]))
    # Beta and gamma together: the shared event goes now.
    await step(api.erase([beta, gamma], actor="cli", reason="r" * 600))
    await rows()
    await step(api.erasures())
    await step(api.erasures(block_id=alpha))
    await step(api.erasures(block_id="a\x00b"))
    await step(api.erasures(limit=1))
    return log


async def test_erasure_answers_and_rows_are_the_same_on_both_backends(
    sqlite_backend: Backend, pg_backend: Backend, world: World
) -> None:
    """Every answer, error and row of the erasure script is equal on SQLite and PostgreSQL."""
    ids = world.ids
    assert await sqlite_backend.dump() == await pg_backend.dump()  # the same start
    theirs = await script(sqlite_backend, ids)
    ours = await script(pg_backend, ids)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        assert a == b, f"step {i}"


async def test_erased_words_are_in_no_value_of_the_postgresql_database(
    pg_backend: Backend, world: World
) -> None:
    """After erasing alpha, beta and gamma, no text, JSON, bytea or tsvector value holds
    their words (before it, alpha's are in every table that can hold a block's words)."""
    ids = world.ids
    api: PgErasure = pg_backend.api
    async with api.db.read() as conn:
        before = await pg_holding(conn, ALPHA)
    assert {
        "blocks.title",
        "blocks.content",
        "blocks.tags",
        "blocks.search",
        "block_history.content",
        "bindings.subject",
        "bindings.selector",
        "events.subject",
        "events.observed",
        "events.message",
        "reviews.reason",
        "dead_letters.payload",
        "outbox.payload",
        "audit.detail",
    } <= set(before)
    report = await api.erase([ids["alpha"], ids["beta"], ids["gamma"]], actor="human", vacuum=True)
    assert report.vacuumed
    assert report.wal_truncated is None  # no WAL file of the store's own
    assert report.score_log_lines > 0
    async with api.db.read() as conn:
        for word in (ALPHA, BETA, GAMMA):
            assert await pg_holding(conn, word) == [], word
        assert await pg_holding(conn, OTHER) == ["blocks.content", "blocks.search"]
        # The subject names the file, not the block: "events.subject" held "zebracorn.yaml"
        # only through alpha's event, which went with it.
        assert await conn.fetchval("SELECT count(*) FROM erasures") == 3


async def test_retention_purges_archives_and_trims_alike(
    sqlite_backend: Backend, pg_backend: Backend
) -> None:
    """A retention pass (archive old blocks, purge archived ones, drop old events,
    score lines) answers and leaves the same rows on both backends."""
    cfg = RetentionConfig.model_validate(
        {
            "rules": [
                {"tag": "old", "archived_max_age": "1h"},
                {"tag": "secret", "max_age": "10d", "events_max_age": "1d"},
            ],
            "events_max_age": "30d",
            "score_log_max_age": "1d",
        }
    )
    answers = []
    for b in (sqlite_backend, pg_backend):
        b.clock.advance(2 * 3600)
        run = [_report(await b.api.enforce_retention(cfg))]
        b.clock.advance(11 * DAY)
        run.append(_report(await b.api.enforce_retention(cfg)))
        b.clock.advance(40 * DAY)
        run.append(_report(await b.api.enforce_retention(cfg)))
        run.append(_report(await b.api.enforce_retention(cfg)))  # nothing left to do
        run.append(await b.dump())
        answers.append(run)
    assert answers[0] == answers[1]
    first, second, third, last, _ = answers[1]
    assert first["purged"] == 1  # gamma, archived before the pass
    assert second["archived"] == 2  # alpha and beta, tagged secret, 10 days old
    assert (second["effects_deleted"], second["events_deleted"]) == (3, 2)
    assert second["score_log_lines"] == 3
    assert third["events_deleted"] == 1  # the one that reached no block
    assert last == dict.fromkeys(last, 0)


async def test_an_unknown_id_changes_nothing_and_a_full_erasure_takes_every_block(
    pg_backend: Backend, world: World
) -> None:
    """An erasure naming one unknown id among MAX_ERASE real ones leaves every row as it
    was; the same erasure without it takes all of them in one transaction, and no query
    finds their words afterwards (no VACUUM asked)."""
    api: PgErasure = pg_backend.api
    blocks = PgBlocks(api.db, pg_backend.clock, PolicyConfig())
    ids = await blocks.add_many(
        [{"content": f"bulk {ALPHA} {i}", "tags": ["bulk"]} for i in range(MAX_ERASE - 1)]
    )
    ids.append(world.ids["alpha"])
    before = await pg_backend.dump()
    with pytest.raises(NotFoundError):
        await api.erase([*ids[:-1], UNKNOWN], actor="human")
    assert await pg_backend.dump() == before
    assert len(await api.erasure_targets(query=ALPHA)) == MAX_ERASE
    report = await api.erase(ids, actor="human")
    assert report.removed["blocks"] == MAX_ERASE
    assert not report.vacuumed
    async with api.db.read() as conn:
        assert await conn.fetchval("SELECT count(*) FROM erasures") == MAX_ERASE
        assert await pg_holding(conn, ALPHA) == []


async def test_erase_with_vacuum_leaves_the_words_in_no_data_file(
    pg_backend: Backend, pg_server: PgServer, world: World
) -> None:
    """Dead tuples keep an erased block's bytes in the table's files (a query cannot see
    them, a copy of the files can); ``erase(vacuum=True)`` rewrites the touched tables,
    after which no file of the database (heap, TOAST, indexes, statistics) holds them."""
    api: PgErasure = pg_backend.api
    # Mixed pages: live rows stay beside the erased ones (a plain VACUUM would leave the
    # erased bytes in their free space).
    bulk = await PgBlocks(api.db, pg_backend.clock, PolicyConfig()).add_many(
        [{"content": f"{ALPHA} {i}" if i % 2 else f"kept {i}"} for i in range(200)]
    )
    async with api.db.read() as conn:
        await conn.execute("ANALYZE")
        await conn.execute("CHECKPOINT")
        directory = (
            pg_server.data
            / "base"
            / str(
                await conn.fetchval(
                    "SELECT oid FROM pg_database WHERE datname = current_database()"
                )
            )
        )

    def files_holding(word: str) -> list[str]:
        return sorted(
            f.name for f in directory.iterdir() if f.is_file() and word.encode() in f.read_bytes()
        )

    assert files_holding(ALPHA)  # the scan sees what is there
    await api.erase([*bulk[1::2], world.ids["alpha"]], actor="human")
    async with api.db.read() as conn:
        await conn.execute("CHECKPOINT")
    assert files_holding(ALPHA)  # dead tuples: still in the files
    report = await api.erase([world.ids["beta"]], actor="human", vacuum=True)
    assert report.vacuumed
    async with api.db.read() as conn:
        await conn.execute("CHECKPOINT")
    assert files_holding(ALPHA) == []
    assert files_holding(BETA) == []
    assert files_holding(OTHER)  # a block not erased is still there
