"""Two embedding nodes on one database: two ``Store("postgresql://…")`` with an embedder
each drain one queue of 300 blocks at once. Each block is embedded exactly once across
both (the claims: ``FOR UPDATE SKIP LOCKED`` and ``embed_claims``), both indexes learn
every vector (the catch-up from ``vector_stamps``) and answer ``mode=vector`` alike; a
node that dies mid-batch leaves its claimed rows to the other once its claim expired
(the claims aged in the database: its clock moved on, no sleep); schema 4 with data
migrates to 5."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from typing import TYPE_CHECKING

import asyncpg
import pytest

from memwarden.embedders import StubEmbedder
from memwarden.memory import Store
from memwarden.memory._clock import FakeClock
from memwarden.memory.pg import SCHEMA_VERSION, migrate, schema_version
from memwarden.memory.pg._vectors import PgVectorIndex
from tests.support import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from tests.pgserver import PgServer

START = 1_767_225_600.0
BLOCKS = 300
DIM = 64
QUERIES = ["fact number 7", "deploy config", "database port", "timeout seconds", "zz"]
ASKED = {*QUERIES, "kubernetes manifests"}  # searches embed their query: not counted


@contextlib.asynccontextmanager
async def _connect(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


class Counting(StubEmbedder):
    """The stub embedder, counting each text it was given (thread-safe)."""

    def __init__(self, dim: int = DIM) -> None:
        super().__init__(dim)
        self.texts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            self.texts.update(t for t in texts if t not in ASKED)
        return super().embed(texts)


class Meeting(Counting):
    """Counting, and its first batch waits (at most 10 s) until the other node's embedder
    has taken a batch too: while one holds its claimed batch the other must find work,
    so both work however the scheduler runs the two drains."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.other: Meeting | None = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        first = not self.entered.is_set()
        self.entered.set()
        if first and self.other is not None and not self.other.entered.wait(10):
            raise AssertionError("the other node never took a batch")
        return super().embed(texts)


class Stuck(Counting):
    """Takes its batch and never answers until released: a node dying mid-batch."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.update(texts)
        self.entered.set()
        self.release.wait(30)
        raise RuntimeError("dead node")


def _index(store: Store) -> PgVectorIndex:
    assert isinstance(store.vectors, PgVectorIndex)
    return store.vectors


async def _drain(index: PgVectorIndex) -> int:
    taken = 0
    while n := await index.drain_once():
        taken += n
    return taken


async def _fill(dsn: str) -> list[str]:
    async with Store(dsn, clock=FakeClock(START)) as store:  # no embedder: only queued
        return await store.add_many(
            [
                {"content": "The deploy config lives in config/app.yaml", "title": "deploy"},
                {"content": "Timeouts are set in app.yaml, 30 seconds"},
                {"content": "The database listens on port 5432"},
                *({"content": f"filler fact number {i} about topic {i % 17}"} for i in range(297)),
            ]
        )


async def _answers(store: Store) -> list[list[tuple[str, float]]]:
    out = []
    for q in QUERIES:
        hits = await store.search(q, mode="vector", limit=10, record=False)
        out.append([(h.id, round(h.score, 6)) for h in hits])
    return out


async def test_two_nodes_embed_each_block_once_and_answer_alike(pg_server: PgServer) -> None:
    dsn = pg_server.create_database()
    await _fill(dsn)
    ea, eb = Meeting(), Meeting()
    ea.other, eb.other = eb, ea
    async with (
        Store(dsn, clock=FakeClock(START + 60), embedder=ea, embed_batch=16) as a,
        Store(dsn, clock=FakeClock(START + 60), embedder=eb, embed_batch=16) as b,
    ):
        ia, ib = _index(a), _index(b)
        assert len(ia) == len(ib) == 0
        taken = await asyncio.gather(_drain(ia), _drain(ib))
        assert sum(taken) == BLOCKS
        both = ea.texts + eb.texts
        assert len(both) == BLOCKS
        assert set(both.values()) == {1}, "a block embedded twice"
        assert ea.texts, "one node did all the work: no concurrency tested"
        assert eb.texts, "one node did all the work: no concurrency tested"
        assert ia.embedded + ib.embedded == BLOCKS
        # Each learns the other's vectors at its next tick (the queue is empty).
        assert await ia.drain_once() == 0
        assert await ib.drain_once() == 0
        assert len(ia) == len(ib) == BLOCKS
        assert ia.caught_up >= ib.embedded
        assert ib.caught_up >= ia.embedded
        answers = await _answers(a)
        assert answers == await _answers(b)
        assert all(answers[:4])
        # An edit on one node: embedded by whichever claims it, learnt by the other.
        [first] = [h.id for h in await a.search("deploy config", mode="vector", limit=1)]
        await a.update(first, {"content": "Kubernetes manifests moved to deploy/k8s"})
        await asyncio.gather(_drain(ib), _drain(ia))
        await ia.drain_once()
        await ib.drain_once()
        assert sum((ea.texts + eb.texts).values()) == BLOCKS + 1
        assert await _answers(a) == await _answers(b)
        hits_a = await a.search("kubernetes manifests", mode="vector", limit=1)
        assert [h.id for h in hits_a] == [first]
        async with _connect(dsn) as conn:
            assert await conn.fetchval("SELECT count(*) FROM embed_claims") == 0
            assert await conn.fetchval("SELECT count(*) FROM vector_stamps") == BLOCKS


async def test_a_node_dying_mid_batch_leaves_its_rows_once_the_claim_expired(
    pg_server: PgServer,
) -> None:
    dsn = pg_server.create_database()
    await _fill(dsn)
    stuck, eb = Stuck(), Counting()
    async with (
        Store(
            dsn, clock=FakeClock(START + 60), embedder=stuck, embed_batch=100, embed_claim_s=600
        ) as a,
        Store(dsn, clock=FakeClock(START + 60), embedder=eb, embed_batch=100) as b,
    ):
        ia, ib = _index(a), _index(b)
        assert (ia.claim_s, ib.claim_s) == (600, 120)  # [search] embed_claim, and its default
        dying = asyncio.create_task(ia.drain_once())
        await eventually(stuck.entered.is_set)
        dying.cancel()  # the node dies with its 100 rows claimed
        with pytest.raises(asyncio.CancelledError):
            await dying
        stuck.release.set()
        # The other node takes everything but the dead node's claimed rows.
        assert await _drain(ib) == BLOCKS - 100
        assert await ib.pending() == 100
        assert await ib.drain_once() == 0, "took rows whose claim holds"
        async with _connect(dsn) as conn:
            held = await conn.fetchval(
                "SELECT count(*) FROM embed_claims WHERE claimed_by = $1 AND until > now()",
                ia.claimer,
            )
            assert held == 100
            lasts = await conn.fetchval(  # the claim holds `embed_claim_s`, not the default
                "SELECT min(extract(epoch FROM until - now())) FROM embed_claims"
            )
            assert 500 < lasts <= 600
            # The database's clock moves past the claim (aged by the claim's length).
            await conn.execute(
                "UPDATE embed_claims SET until = until - make_interval(secs => $1)",
                ia.claim_s + 1,
            )
        assert await _drain(ib) == 100
        assert await ib.pending() == 0
        assert len(ib) == BLOCKS
        assert set(eb.texts.values()) == {1}
        assert len(eb.texts) == BLOCKS
        assert set(stuck.texts) <= set(eb.texts)
        assert len(stuck.texts) == 100


async def test_a_failed_round_gives_its_claims_back_at_once(pg_server: PgServer) -> None:
    dsn = pg_server.create_database()
    await _fill(dsn)

    class Down(Counting):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            from memwarden.errors import EmbedderUnavailableError  # noqa: PLC0415

            raise EmbedderUnavailableError("server down")

    async with (
        Store(dsn, clock=FakeClock(START + 60), embedder=Down(), embed_batch=50) as a,
        Store(dsn, clock=FakeClock(START + 60), embedder=Counting(), embed_batch=50) as b,
    ):
        with pytest.raises(Exception, match="server down"):
            await _index(a).drain_once()
        assert await _drain(_index(b)) == BLOCKS  # nothing held back by a's failure


async def test_schema_4_with_data_migrates_to_5(pg_server: PgServer) -> None:
    """A database at version 4 holding blocks, vectors and a queue (made here by taking
    migration 5's objects, and those of the later ones, out of a filled one) migrates to
    the latest and serves two nodes."""
    dsn = pg_server.create_database()
    await _fill(dsn)
    async with Store(dsn, clock=FakeClock(START), embedder=Counting(), embed_batch=200) as s:
        assert await _index(s).drain_once() == 200  # 200 vectors stored, 100 queued
    async with _connect(dsn) as conn:
        await conn.execute(
            "DROP TABLE embed_claims, vector_stamps, block_falls;"
            " DROP FUNCTION memwarden_vector_stamp() CASCADE;"
            # and migration 8's (node-scoped bindings)
            " ALTER TABLE bindings DROP COLUMN nodes, DROP COLUMN served_by;"
            " ALTER TABLE revalidations DROP COLUMN node;"
            " UPDATE schema_version SET version = 4"
        )
        assert await schema_version(conn) == 4
        assert await migrate(conn) == 4
        assert await schema_version(conn) == SCHEMA_VERSION
        assert await conn.fetchval("SELECT count(*) FROM vector_stamps") == 0
        assert await conn.fetchval("SELECT count(*) FROM embed_queue") == BLOCKS - 200
    ea, eb = Counting(), Counting()
    async with (
        Store(dsn, clock=FakeClock(START), embedder=ea, embed_batch=10) as a,
        Store(dsn, clock=FakeClock(START), embedder=eb, embed_batch=10) as b,
    ):
        ia, ib = _index(a), _index(b)
        assert len(ia) == len(ib) == 200  # vectors stored before 5 have no stamp: loaded
        await asyncio.gather(_drain(ia), _drain(ib))
        assert set((ea.texts + eb.texts).values()) == {1}
        assert len(ea.texts + eb.texts) == BLOCKS - 200
        await ia.drain_once()
        await ib.drain_once()
        assert len(ia) == len(ib) == BLOCKS
        assert await _answers(a) == await _answers(b)
