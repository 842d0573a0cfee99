"""Vector storage as a contract both backends keep: one store built through the SQLite
Store is copied to PostgreSQL; the SQLite ``VectorIndex`` and :class:`PgVectorIndex`, with
the same deterministic embedder, then run one script (load, drain the queue, query, an
edit, an erasure, a model change, a reload, a text the embedder refuses): every answer,
nearest list and row of ``block_vectors`` and ``embed_queue`` is equal."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.embedders import StubEmbedder
from memwarden.errors import ValidationInputError
from memwarden.memory import Store, ValidationEvent, from_ts
from memwarden.memory._clock import FakeClock
from memwarden.memory._vectors import VectorIndex
from memwarden.memory.pg import PgDatabase, copy_to_postgres
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.pg._erasure import PgErasure
from memwarden.memory.pg._vectors import PgVectorIndex, queue_all
from memwarden.memory.policy import PolicyConfig
from tests.pg.contract import database_copy, every_row

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence

    from tests.pgserver import PgServer

START = 1_767_225_600.0
TABLES = {
    "block_vectors": ["block_rid", "model", "dim", "vector"],
    "embed_queue": ["block_rid", "gen"],
}


class Picky(StubEmbedder):
    """The stub embedder, refusing any text that holds the word ``poison``."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if any("poison" in t for t in texts):
            raise ValueError("refused")
        return super().embed(texts)


@dataclass(frozen=True)
class World:
    base: Path
    database: str
    ids: list[str]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pg_server: PgServer) -> Iterator[World]:
    base = tmp_path_factory.mktemp("vectors")

    async def build() -> list[str]:
        async with Store(base / "m.db", clock=FakeClock(START)) as store:
            ids = await store.add_many(
                [
                    {"content": "The deploy config lives in config/app.yaml", "title": "deploy"},
                    {"content": "Timeouts are set in app.yaml, 30 s"},
                    {"content": "The database listens on port 5432 🐘"},
                    {"content": "poison text the embedder refuses"},
                    {"content": "Another namespace's fact", "namespace": "elsewhere"},
                    *({"content": f"filler fact number {i}"} for i in range(20)),
                ]
            )
            for i in range(3):  # one refuted block: searches hide it
                await store.apply_events(
                    [
                        ValidationEvent(
                            sensor="api",
                            subject="by-hand",
                            outcome="refuted",
                            observed_at=from_ts(START + i),
                            block_id=ids[5],
                        )
                    ]
                )
            assert (await store.get(ids[5])).state == "refuted"
            return ids

    ids = asyncio.run(build())
    dsn = pg_server.create_database("vectors")
    asyncio.run(copy_to_postgres(base / "m.db", dsn))
    name = dsn.rsplit("/", 1)[-1]
    yield World(base, name, ids)
    pg_server.psql(f'DROP DATABASE "{name}" WITH (FORCE)')


@dataclass
class Backend:
    make_index: Callable[[int], VectorIndex]
    update: Callable[[str, dict[str, Any]], Awaitable[Any]]
    erase: Callable[[list[str]], Awaitable[Any]]
    queue_all: Callable[[], Awaitable[int]]
    rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]]


@pytest.fixture
async def sqlite_backend(tmp_path: Path, world: World) -> AsyncIterator[Backend]:
    (tmp_path / "m.db").write_bytes((world.base / "m.db").read_bytes())
    async with Store(tmp_path / "m.db", clock=FakeClock(START + 60)) as store:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with store.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        async def erase(ids: list[str]) -> Any:
            return await store.erase(ids, actor="t")

        async def update(block_id: str, patch: dict[str, Any]) -> Any:
            return await store.update(block_id, patch)

        async def requeue() -> int:
            from memwarden.memory._vectors import queue_all as sqlite_queue_all  # noqa: PLC0415

            return await sqlite_queue_all(store.db)

        def make_index(dim: int) -> VectorIndex:
            index = VectorIndex(store.db, Picky(dim), batch=7)
            store.vectors = index  # erase prunes it, as the daemon's store does
            return index

        yield Backend(make_index, update, erase, requeue, rows)


@pytest.fixture
async def pg_backend(pg_server: PgServer, world: World) -> AsyncIterator[Backend]:
    clock = FakeClock(START + 60)
    with database_copy(pg_server, world.database) as name:
        async with PgDatabase(pg_server.dsn(name)) as db:
            blocks = PgBlocks(db, clock, PolicyConfig())
            erasure = PgErasure(db, clock)

            async def rows(sql: str) -> list[tuple[Any, ...]]:
                async with db.read() as conn:
                    return [tuple(r) for r in await conn.fetch(sql)]

            async def erase(ids: list[str]) -> Any:
                return await erasure.erase(ids, actor="t")

            async def update(block_id: str, patch: dict[str, Any]) -> Any:
                return await blocks.update(block_id, patch)

            def make_index(dim: int) -> VectorIndex:
                index = PgVectorIndex(db, Picky(dim), batch=7)
                erasure.vectors = index
                return index

            yield Backend(make_index, update, erase, lambda: queue_all(db), rows)


async def script(b: Backend, ids: list[str]) -> list[Any]:
    log: list[Any] = []
    index = b.make_index(64)
    log.append(await index.load())
    log.append(await index.pending())
    log.append(await index.pending(namespaces=["elsewhere"]))
    log.append(await index.pending(namespaces=[]))
    while n := await index.drain_once():
        log.append(n)
    log.append((len(index), await index.pending()))
    log.append(await index.count(namespaces=["default"]))
    log.append(await index.count(namespaces=["elsewhere", "nowhere"]))
    for text in ("deploy config", "port 5432", "🐘", "", "poison"):
        log.append(await index.query(text, 5))
    log.append(await every_row(b.rows, TABLES))
    # An edit queues the block again; its new vector replaces the old one.
    await b.update(ids[1], {"content": "Timeouts moved to timeouts.toml"})
    log.append(await index.pending())
    while await index.drain_once():
        pass
    log.append(await index.query("timeouts toml", 3))
    # An erasure takes the vectors with the blocks, and out of memory.
    await b.erase([ids[0], ids[2]])
    log.append((len(index), await index.query("deploy config", 5)))
    # A model change: loading queues the blocks of the other model; reembed all.
    other = b.make_index(32)
    log.append(await other.load())
    log.append(await other.pending())
    while await other.drain_once():
        pass
    log.append(await other.reembed())
    log.append(await b.queue_all())
    log.append(await every_row(b.rows, TABLES))
    # A fresh index loads what was stored and answers alike.
    again = b.make_index(32)
    log.append(await again.load())
    log.append(await again.query("filler fact", 4))
    with pytest.raises(ValueError, match="namespaces"):
        await again.count(namespaces=[f"n{i}" for i in range(65)])
    return log


async def test_vector_answers_and_rows_are_the_same_on_both_backends(
    sqlite_backend: Backend, pg_backend: Backend, world: World
) -> None:
    """Every answer, nearest list and vector row of the script is equal on both."""
    theirs = await script(sqlite_backend, world.ids)
    ours = await script(pg_backend, world.ids)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        assert a == b, f"step {i}"
    assert ours[0] == 0
    assert ours[1] == len(world.ids)  # every block queued by the insert trigger
    assert ours[8] == (len(world.ids) - 1, 0)  # all embedded but the refused text
    assert ours[11][0][0] == 1  # "deploy config": the deploy block (rid 1) first


def _hit(h: Any) -> tuple[Any, ...]:
    """What a vector hit says, rounded where SQL and Python compute the same factors."""
    return (
        h.id,
        h.state,
        round(h.relevance, 6),
        round(h.freshness, 6),
        round(h.reliability, 6),
        round(h.retention, 6),
        round(h.score, 6),
        tuple(h.warnings),
        tuple(sorted(h.parts)),
    )


async def _searches(search: Any, index: VectorIndex) -> list[Any]:
    while await index.drain_once():
        pass
    log: list[Any] = []
    for query in ("deploy config", "port 5432 database", "filler fact", "🐘", "poison", ""):
        for kw in ({}, {"namespaces": ["elsewhere"]}, {"include_refuted": True, "limit": 3}):
            log.append([_hit(h) for h in await search.search(query, mode="vector", **kw)])
    for query in ("filler fact number 0", "number zero", "poison", ""):
        for mode in ("keyword", "vector", "hybrid"):
            for namespaces in (None, ["default"], [], ["elsewhere"]):
                log.append(
                    await search.count_refuted_matches(query, namespaces=namespaces, mode=mode)
                )
    return log


async def test_vector_search_answers_alike_and_hybrid_fuses_both_lists(
    tmp_path: Path, pg_server: PgServer, world: World
) -> None:
    """``mode=vector`` gives the same hits (ids, factors, explanation) on both backends;
    ``mode=hybrid`` on PostgreSQL finds a block by its words or by its vector; without an
    embedder both modes are refused as on SQLite."""
    from memwarden.memory.pg._search import PgSearch  # noqa: PLC0415

    (tmp_path / "m.db").write_bytes((world.base / "m.db").read_bytes())
    clock = FakeClock(START + 60)
    async with Store(tmp_path / "m.db", clock=clock, embedder=Picky(64)) as store:
        assert store.vectors is not None
        theirs = [*await _searches(store, store.vectors), store.default_search_mode]
    with database_copy(pg_server, world.database) as name:
        async with PgDatabase(pg_server.dsn(name)) as db:
            search = PgSearch(db, clock, PolicyConfig())
            with pytest.raises(ValidationInputError, match="needs an embedder"):
                await search.search("x", mode="hybrid")
            search.vectors = PgVectorIndex(db, Picky(64))
            ours = [*await _searches(search, search.vectors), search.default_mode]
            assert ours == theirs
            assert ours[-1] == "hybrid"
            assert max(x for x in ours if isinstance(x, int)) == 1  # the refuted block, found
            hybrid = await search.search("database listens", limit=3)  # the default mode
            assert hybrid[0].block.content.startswith("The database listens")
            assert set(hybrid[0].parts) == {
                "vector_rank",
                "similarity",
                "keyword_rank",
                "bm25",
                "rrf",
            }
            with pytest.raises(ValidationInputError, match="is not one of"):
                await search.search("x", mode="semantic")
