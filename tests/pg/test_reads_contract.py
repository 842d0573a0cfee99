"""The store's block reads (get, resolve_id, short_ids, list_blocks) as a contract both
backends keep: each test runs on SQLite and on PostgreSQL (one parametrised fixture),
over the same store (the PostgreSQL one copied from the SQLite file), and a last test
holds the two answers equal, block for block."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import NotFoundError, ValidationInputError
from memwarden.memory import Store
from memwarden.memory._clock import FakeClock
from memwarden.memory.pg import PgDatabase, copy_to_postgres
from memwarden.memory.pg._reads import PgReads
from tests.pg.test_copy import populate

if TYPE_CHECKING:
    from pathlib import Path

    from tests.pgserver import PgServer

# The time the contract is read at: after populate()'s events (its clock starts at
# 2026-01-01 and moves 10 s), before any validity window runs out.
NOW = 1_767_225_600.0 + 20
FILTERS: list[dict[str, Any]] = [
    {},
    {"limit": 5},
    {"newest_first": True, "limit": 7},
    {"tag": "t1"},
    {"tag": "ünïcode"},
    {"tag": "no such tag"},
    {"sensor": "fs"},
    {"sensor": "git"},
    {"state": "refuted"},
    {"state": "archived"},
    {"state": "fresh"},
    {"state": "stale"},
    {"state": "unverified"},
    {"tier": "short_term"},
    {"tier": "core"},
    {"volatility": "low"},
    {"volatility": "medium"},
    {"namespaces": ["default"]},
    {"namespaces": ["elsewhere"]},
    {"flapping": False},
]


_POPULATED: dict[str, Path] = {}  # one populated store for the module, made once


@pytest.fixture
async def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One populated SQLite store for the module (read only by the tests)."""
    if "path" not in _POPULATED:
        path = tmp_path_factory.mktemp("contract") / "memwarden.db"
        await populate(path, blocks=25)
        _POPULATED["path"] = path
    return _POPULATED["path"]


@pytest.fixture
async def sqlite_reads(stores: Path):
    async with Store(stores, clock=FakeClock(NOW)) as store:
        yield store


@pytest.fixture
async def pg_reads(stores: Path, pg_server: PgServer):
    dsn = pg_server.create_database()
    await copy_to_postgres(stores, dsn)
    async with Store(stores, clock=FakeClock(NOW)) as store:  # for its policy config
        policy = store.policy
    async with PgDatabase(dsn) as db:
        yield PgReads(db, FakeClock(NOW), policy)


@pytest.fixture(params=["sqlite", "postgresql"])
def reads(request: pytest.FixtureRequest) -> Any:
    """The block reads of one backend: a Store on SQLite, PgReads on PostgreSQL."""
    return request.getfixturevalue(f"{'sqlite' if request.param == 'sqlite' else 'pg'}_reads")


async def test_get_returns_the_block_or_not_found(reads: Any) -> None:
    """A block comes back with its text, tags, bindings, dependencies and short id; an
    unknown id is NotFoundError."""
    blocks = await reads.list_blocks({"limit": 1000})
    root = next(b for b in blocks if b.title.startswith("Café"))
    got = await reads.get(root.id)
    assert got == root
    assert got.tags == ["deploy", "ünïcode"]
    assert [b.subject for b in got.bindings] == ["a.yaml", "0.yaml"]  # in the order added
    assert got.short_id is not None
    assert root.id.replace("-", "").endswith(got.short_id)
    dependent = next(b for b in blocks if b.depends_on)
    assert dependent.depends_on == [root.id]
    with pytest.raises(NotFoundError, match="no block with id"):
        await reads.get("0190a0b0-0000-7000-8000-00000000dead")


async def test_short_ids_resolve_back(reads: Any) -> None:
    """Every block's short id resolves to that block; a short ref too short is refused."""
    blocks = await reads.list_blocks({"limit": 1000})
    shorts = await reads.short_ids([b.id for b in blocks])
    for block in blocks:
        assert await reads.resolve_id(shorts[block.id]) == block.id
        assert await reads.resolve_id(block.id) == block.id
    with pytest.raises(ValidationInputError):
        await reads.resolve_id("abc")
    with pytest.raises(NotFoundError):
        await reads.resolve_id(blocks[0].id, namespaces=["elsewhere"])


async def test_paging_visits_every_block_once(reads: Any) -> None:
    """Pages of 4 with the last id as cursor, oldest or newest first, list each block
    exactly once, in id order."""
    every = [b.id for b in await reads.list_blocks({"limit": 1000})]
    assert every == sorted(every)
    for newest_first in (False, True):
        seen: list[str] = []
        after = None
        while True:
            page = await reads.list_blocks(
                {"limit": 4, "after": after, "newest_first": newest_first}
            )
            if not page:
                break
            seen.extend(b.id for b in page)
            after = page[-1].id
        assert seen == (sorted(every, reverse=True) if newest_first else every)


async def test_filters_select_what_they_say(reads: Any) -> None:
    """A tag, a sensor, a state, a namespace: only matching blocks come back."""
    tagged = await reads.list_blocks({"tag": "t1", "limit": 1000})
    assert tagged
    assert all("t1" in b.tags for b in tagged)
    stale = await reads.list_blocks({"state": "stale", "limit": 1000})
    assert stale  # the refuted ones
    assert all(b.state == "stale" for b in stale)
    archived = await reads.list_blocks({"state": "archived"})
    assert [b.state for b in archived] == ["archived"]
    assert await reads.list_blocks({"namespaces": ["elsewhere"]}) == []
    assert await reads.list_blocks({"sensor": "git"}) == []


async def test_both_backends_answer_alike(sqlite_reads: Store, pg_reads: PgReads) -> None:
    """For every filter, the same blocks in the same order, equal field for field."""
    for flt in FILTERS:
        assert await pg_reads.list_blocks(flt) == await sqlite_reads.list_blocks(flt), flt
    every = await sqlite_reads.list_blocks({"limit": 1000})
    for block in every:
        assert await pg_reads.get(block.id) == await sqlite_reads.get(block.id)
    ids = [b.id for b in every]
    assert await pg_reads.short_ids(ids) == await sqlite_reads.short_ids(ids)


# ------------------------------------------------------------------ keyword search

QUERIES = [
    "fact about",
    "café naive",
    "cafe naïve",
    "config yaml",
    "app7",
    "zzzunknown config",
    "deploy",
    "edited",
    "t2",
    "nothing matches this",
]
HOSTILE = [
    'NEAR("a" "b") * col: AND OR NOT ))',
    "'; DROP TABLE blocks; --",
    'back\\slash it\'s "quoted"',
    "🐘 ünïcode",
    "a & b | !c <-> d:*",
    "",
]


@pytest.fixture
async def pg_search(stores: Path, pg_server: PgServer):
    from memwarden.memory.pg._search import PgSearch  # noqa: PLC0415

    dsn = pg_server.create_database()
    await copy_to_postgres(stores, dsn)
    async with Store(stores, clock=FakeClock(NOW)) as store:
        policy = store.policy
    async with PgDatabase(dsn) as db:
        yield PgSearch(db, FakeClock(NOW), policy)


@pytest.fixture(params=["sqlite", "postgresql"])
def searcher(request: pytest.FixtureRequest) -> Any:
    """Keyword search of one backend: a Store on SQLite, PgSearch on PostgreSQL."""
    return request.getfixturevalue("sqlite_reads" if request.param == "sqlite" else "pg_search")


async def _ids(searcher: Any, query: str, **kw: Any) -> list[str]:
    return [h.id for h in await searcher.search(query, mode="keyword", limit=50, **kw)]


async def test_search_needs_every_word_then_any(searcher: Any) -> None:
    """Every word must match; with none matching them all, any word may; diacritics and
    case do not matter; a word in a path matches (punctuation splits words)."""
    both = await searcher.search("fact about", mode="keyword", limit=50)
    assert both
    assert all("fact" in h.block.content and "about" in h.block.content for h in both)
    assert [h.block.title for h in await searcher.search("cafe NAIVE", mode="keyword")] == [
        "Café «naïve» — 'quoted' \"twice\""
    ]
    assert await _ids(searcher, "app7")  # from "config/app7.yaml"
    fallback = await _ids(searcher, "zzzunknown config")
    assert fallback
    assert set(fallback) == set(await _ids(searcher, "config"))


async def test_search_hides_archived_and_other_namespaces(searcher: Any) -> None:
    """The archived block is not found; another namespace's caller finds nothing."""
    assert await _ids(searcher, "app1") == []  # block 1 is archived
    assert await _ids(searcher, "fact", namespaces=["elsewhere"]) == []
    assert await _ids(searcher, "fact", namespaces=["default"])


async def test_search_ranks_by_score_with_its_factors(searcher: Any) -> None:
    """Hits come best first; each score is relevance x freshness x reliability x
    retention; a stale hit says so in its warnings."""
    hits = await searcher.search("fact", mode="keyword", limit=50)
    assert len(hits) > 10
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:
        assert h.score == pytest.approx(h.relevance * h.freshness * h.reliability * h.retention)
    stale = [h for h in hits if h.stale]
    assert stale
    assert all(any(w.startswith("stale") for w in h.warnings) for h in stale)


async def test_hostile_queries_are_words_not_syntax(searcher: Any) -> None:
    """Query syntax of either engine, SQL and odd characters are words: never an error."""
    for query in HOSTILE:
        await searcher.search(query, mode="keyword")


async def test_search_finds_the_same_blocks_on_both(sqlite_reads: Store, pg_search: Any) -> None:
    """The same blocks match on both backends (ranking may differ between blocks of
    similar text: ts_rank_cd is not BM25, docs/SEARCH.md), the same block ranks first
    for a distinctive query, and a hit's block reads the same."""
    for query in QUERIES:
        sqlite_hits = await _ids(sqlite_reads, query)
        pg_hits = await _ids(pg_search, query)
        assert set(pg_hits) == set(sqlite_hits), query
    for query in ("café", "edited", "deploy"):
        first_sqlite = (await sqlite_reads.search(query, mode="keyword"))[0]
        first_pg = (await pg_search.search(query, mode="keyword"))[0]
        assert first_pg.id == first_sqlite.id
        assert first_pg.block == first_sqlite.block
    # Every hit's block, its bindings (two on the root, in their order) and
    # dependencies included, as the block's own read gives it.
    hits = await pg_search.search("fact café", mode="keyword", limit=50)
    assert len(hits) > 10
    root = next(h for h in hits if h.block.title.startswith("Café"))
    assert [b.subject for b in root.block.bindings] == ["a.yaml", "0.yaml"]
    assert any(h.block.depends_on for h in hits)
    for hit in hits:
        expected = await sqlite_reads.get(hit.id)
        assert hit.block.bindings == expected.bindings, hit.id
        assert hit.block.depends_on == expected.depends_on, hit.id


async def test_event_reads_answer_alike(sqlite_reads: Store, pg_reads: PgReads) -> None:
    """The event log after a seq (with each event's effects), a block's history (with its
    effects and compacted runs) and the blocks bound to a subject: equal on both."""
    everything = await sqlite_reads.events_after(0, limit=1000)
    assert everything
    assert await pg_reads.events_after(0, limit=1000) == everything
    assert await pg_reads.events_after(everything[2]["seq"], limit=5) == (
        await sqlite_reads.events_after(everything[2]["seq"], limit=5)
    )
    blocks = await sqlite_reads.list_blocks({"limit": 1000})
    with_history = 0
    for block in blocks:
        history = await sqlite_reads.events_for(block.id)
        with_history += bool(history)
        assert await pg_reads.events_for(block.id) == history, block.id
        for binding in block.bindings:
            assert await pg_reads.find_by_subject(binding.sensor, binding.subject) == (
                await sqlite_reads.find_by_subject(binding.sensor, binding.subject)
            )
    assert with_history > 10


async def test_keyword_quality_on_the_retrieval_set(tmp_path: Path, pg_server: PgServer) -> None:
    """On the labelled retrieval set (tests/memory/retrieval_set.py), PostgreSQL's
    ts_rank_cd finds the fact for an exact-word query as well as SQLite's BM25 (recall@5
    within 0.02, MRR within 0.05); the figures are in docs/SEARCH.md."""
    from memwarden.memory.pg._search import PgSearch  # noqa: PLC0415
    from tests.memory.retrieval_set import ITEMS  # noqa: PLC0415

    path = tmp_path / "set.db"
    async with Store(path, clock=FakeClock(NOW)) as store:
        ids = await store.add_many([{"content": fact} for fact, _, _ in ITEMS])
        policy = store.policy
    dsn = pg_server.create_database()
    await copy_to_postgres(path, dsn)

    async def scores(search: Any, column: int) -> tuple[float, float]:
        found = rr = 0.0
        for item, expected in zip(ITEMS, ids, strict=True):
            ranked = [h.id for h in await search(item[column], mode="keyword", limit=10)]
            if expected in ranked[:5]:
                found += 1
            if expected in ranked:
                rr += 1 / (ranked.index(expected) + 1)
        return found / len(ITEMS), rr / len(ITEMS)

    async with Store(path, clock=FakeClock(NOW)) as store, PgDatabase(dsn) as db:
        pg = PgSearch(db, FakeClock(NOW), policy)
        figures = {
            (backend, column): await scores(search, column)
            for backend, search in (("sqlite", store.search), ("postgresql", pg.search))
            for column in (1, 2)
        }
    print("retrieval set (recall@5, MRR):", figures)  # noqa: T201 - the figures for the docs
    sqlite_exact, pg_exact = figures["sqlite", 2], figures["postgresql", 2]
    assert pg_exact[0] >= sqlite_exact[0] - 0.02, figures
    assert pg_exact[1] >= sqlite_exact[1] - 0.05, figures


async def test_search_factors_are_the_same_on_both(sqlite_reads: Store, pg_search: Any) -> None:
    """A block's freshness, reliability and retention in a hit are the rules' on both
    backends: SQLite computes them in its statement, PostgreSQL in Python from the row's
    columns (policy.retention_of), so a column read wrongly shows here."""
    compared = stale = 0
    for query in [*QUERIES, "fact", "config"]:
        on_sqlite = {h.id: h for h in await sqlite_reads.search(query, mode="keyword", limit=50)}
        on_pg = {h.id: h for h in await pg_search.search(query, mode="keyword", limit=50)}
        for block_id in on_sqlite.keys() & on_pg.keys():
            s, p = on_sqlite[block_id], on_pg[block_id]
            assert (p.state, p.stale, p.freshness) == (s.state, s.stale, s.freshness), block_id
            assert p.reliability == pytest.approx(s.reliability, abs=1e-12), block_id
            assert p.retention == pytest.approx(s.retention, rel=1e-9), block_id
            assert p.warnings == s.warnings, block_id
            compared += 1
            stale += p.stale
    assert compared > 20
    assert stale  # the stale half-life is in play too
