"""``pg_search_common`` / ``pg_search_mid``: ``Store.search`` on PostgreSQL against the raw
full-text query with ``ts_rank_cd``.

The ``search`` benchmark's data, queries and target on the PostgreSQL store
(``memory/pg/_search.py``, ``PgSearch``).

Setup (not timed): a PostgreSQL server of the benchmark's own, started like the tests'
(``tests/pgserver.py``: ``initdb`` + ``pg_ctl`` in a temporary directory, a free loopback
port, ``fsync = off``), one database migrated by ``Store("postgresql://…")``, and the
``search`` benchmark's 100 000 Zipf blocks (``benchmarks/_search.py``: the same seed, the
same generator, so the same texts and the same 500 common and 500 mid queries). The first
block goes through ``Store.add_many``; its row is the template of the others, which are
loaded with ``COPY`` (their own ``id``, title, content, tags and ``content_key``; every
other column as the store wrote the first; the generated ``search`` column computed as
rows arrive; the row triggers off meanwhile: they feed the embedding queue and the
retention points, which a keyword search reads neither of), then ``VACUUM ANALYZE``.

Store: ``await store.search(" ".join(words), limit=10)`` (a pooled reader; one
statement: the query's lexemes made a tsquery, the ``ranking.candidates`` best matches
by ``ts_rank_cd`` with their bindings and dependencies; the re-ranking by freshness x
reliability x retention in Python, the ``SearchHit``\\ s). Baseline: the top 10 by
``ts_rank_cd`` (the store's weights and normalisation) of ``plainto_tsquery`` over the
same words, ``search @@ q AND state <> 'archived'`` (the GIN index's predicate), with
``fetch`` on a raw asyncpg connection: the
equivalent of the SQLite benchmark's raw BM25 top 10. The store's own candidate statement
on the raw connection is timed too (``store_sql_*``: what PostgreSQL costs the store, apart
from the pool and the Python around it). Runs interleave (the first
of each round rotating) so all see the same cache and machine noise. Both plans are
printed and recorded; each must use the GIN index ``blocks_search``.
"""

from __future__ import annotations

import random
import time
from typing import Any

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from benchmarks._pg import cpus_apart, pg_server
from benchmarks._search import ADD_CHUNK, SEED, T0, Corpus, _queries
from memwarden.memory import FakeClock, Store, new_id
from memwarden.memory._codec import _dumps, content_key

WARMUP = 10
TARGET_RATIO = 1.5
LIMIT = 10
# Filled in from memwarden.memory.pg._search (needs asyncpg) by _raw_sql().
_RAW = (
    "SELECT rid, ts_rank_cd('{weights}', search, q, 32) AS relevance"
    " FROM blocks, plainto_tsquery('{config}', $1) AS q"
    " WHERE search @@ q AND state <> 'archived' ORDER BY relevance DESC LIMIT 10"
)
# Columns the COPY sets per block (the others come from the template row).
_OWN = ("id", "title", "content", "tags", "content_key")


def _missing() -> str | None:
    from tests.pgserver import pg_bin  # noqa: PLC0415 - the tests' server helper

    try:
        import asyncpg  # noqa: F401, PLC0415 - the postgres extra
    except ImportError:
        return "asyncpg is not installed: pip install -e '.[postgres]'"
    if pg_bin() is None:
        return "the PostgreSQL server binaries are not installed: run scripts/system-deps.sh"
    return None


def _raw_sql() -> str:
    from memwarden.memory.pg._search import CONFIG, RANK_WEIGHTS  # noqa: PLC0415

    return _RAW.format(weights=RANK_WEIGHTS, config=CONFIG)


async def _plan(conn: Any, sql: str, *args: Any) -> str:
    return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))


async def _load(raw: Any, blocks: list[Any]) -> None:
    """``blocks[1:]`` by COPY after the template (the store's row of ``blocks[0]``)."""
    names = await raw.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'blocks'"
        " AND is_generated = 'NEVER' AND column_name <> 'rid' ORDER BY ordinal_position"
    )
    columns = [r[0] for r in names]
    template = dict(await raw.fetchrow(f"SELECT {', '.join(columns)} FROM blocks"))
    at = {name: columns.index(name) for name in _OWN}
    base = [template[c] for c in columns]

    def rows() -> Any:
        for block in blocks[1:]:
            row = list(base)
            row[at["id"]] = new_id()
            row[at["title"]] = block.title
            row[at["content"]] = block.content
            row[at["tags"]] = _dumps(list(dict.fromkeys(block.tags)))
            row[at["content_key"]] = content_key(block.content)
            yield tuple(row)

    await raw.execute("ALTER TABLE blocks DISABLE TRIGGER USER")
    await raw.copy_records_to_table("blocks", records=rows(), columns=columns)
    await raw.execute("ALTER TABLE blocks ENABLE TRIGGER USER")
    await raw.execute("VACUUM ANALYZE blocks")


async def _time_set(
    store: Store, raw: Any, queries: list[list[str]], *, sql: tuple[str, str], cands: int
) -> tuple[dict[str, list[int]], float]:
    """Per side, the latency samples; and the store's hits per query."""
    raw_sql, store_sql = sql
    samples: dict[str, list[int]] = {"store": [], "raw": [], "store_sql": []}
    sides = list(samples)
    hits = 0
    states = ["fresh", "unverified", "stale"]
    for i, words in enumerate([*queries[:WARMUP], *queries]):
        text = " ".join(words)
        for side in sides[i % 3 :] + sides[: i % 3]:
            t0 = time.perf_counter_ns()
            if side == "store":
                got: list[Any] = await store.search(text, limit=LIMIT)
            elif side == "raw":
                got = await raw.fetch(raw_sql, text)
            else:
                got = await raw.fetch(store_sql, text, states, cands)
            dt = time.perf_counter_ns() - t0
            if i >= WARMUP:
                samples[side].append(dt)
                hits += len(got) if side == "store" else 0
    return samples, hits / len(queries)


def _store_sql() -> str:
    """The store's candidate statement (``PgSearch.search``'s first, every word, without
    namespaces): the text the store runs, not a copy of it."""
    from memwarden.memory.pg._search import _EVERY_WORD, _candidates_sql  # noqa: PLC0415

    return _candidates_sql(_EVERY_WORD, "")


async def _avg_matches(raw: Any, queries: list[list[str]]) -> float:
    count = (
        "SELECT count(*) FROM blocks WHERE search @@ plainto_tsquery('memwarden_search', $1)"
        " AND state <> 'archived'"
    )
    total = 0
    for words in queries:
        total += await raw.fetchval(count, " ".join(words))
    return total / len(queries)


async def _measure(
    ctx: Context,
    name: str,
    store: Store,
    raw: Any,
    queries: list[list[str]],
    *,
    cands: int,
    extra: dict[str, Any],
) -> Result:
    """One query set: both plans, then the interleaved runs."""
    raw_sql, store_sql = _raw_sql(), _store_sql()
    first = " ".join(queries[0])
    states = ["fresh", "unverified", "stale"]
    plan = await _plan(raw, raw_sql, first)
    store_plan = await _plan(raw, store_sql, first, states, cands)
    ctx.progress(f"{name} raw plan:\n      " + plan.replace("\n", "\n      "))
    ctx.progress(f"{name} store plan:\n      " + store_plan.replace("\n", "\n      "))
    uses_gin = all("blocks_search" in p for p in (plan, store_plan))
    ctx.progress(f"{name}: {len(queries)} queries each (+{WARMUP} warm-up), interleaved")
    samples, hits = await _time_set(store, raw, queries, sql=(raw_sql, store_sql), cands=cands)
    s, r = percentiles_ms(samples["store"]), percentiles_ms(samples["raw"])
    sql = percentiles_ms(samples["store_sql"])
    ratio = s["p95"] / r["p95"]
    return Result(
        name=name,
        value=s["p95"],
        unit="ms p95",
        baseline=r["p95"],
        ratio=ratio,
        target=f"p95 <= {TARGET_RATIO:g}x raw",
        ok=ratio <= TARGET_RATIO and uses_gin,
        extra={
            "p50": s["p50"],
            "p99": s["p99"],
            "baseline_p50": r["p50"],
            "baseline_p99": r["p99"],
            # the store's candidate statement on the raw connection
            "store_sql_p50": sql["p50"],
            "store_sql_p95": sql["p95"],
            "queries": len(queries),
            "candidates": cands,
            "avg_matches": await _avg_matches(raw, queries),
            "avg_hits": hits,
            "uses_blocks_search": uses_gin,
            "plan": plan,
            "store_plan": store_plan,
            **extra,
        },
    )


@benchmark("pg_search", position=42, results=("pg_search_common", "pg_search_mid"))
async def pg_search(ctx: Context) -> list[Result]:
    missing = _missing()
    if missing is not None:
        raise RuntimeError(f"pg_search: {missing}")
    import asyncpg  # noqa: PLC0415 - the postgres extra

    n_blocks = ctx.n(100_000, 1000)
    n_queries = ctx.n(500, 10)
    corpus = Corpus(random.Random(SEED))
    # The search benchmark's blocks and queries: the same generator calls in the same order.
    blocks: list[Any] = []
    texts: list[str] = []
    for start in range(0, n_blocks, ADD_CHUNK):
        chunk = [corpus.block() for _ in range(min(ADD_CHUNK, n_blocks - start))]
        texts.extend(f"{b.title} {b.content}" for b in chunk)
        blocks.extend(chunk)
    common, mid = _queries(corpus, texts, n_queries)

    results = []
    with pg_server(ctx) as server:
        dsn = server.create_database("bench")
        version = server.psql("SHOW server_version").strip()
        ctx.progress(f"PostgreSQL {version} on port {server.port}")
        async with Store(dsn, clock=FakeClock(T0)) as store:
            await store.add_many(blocks[:1])
        raw = await asyncpg.connect(dsn)
        try:
            ctx.progress(f"copying {n_blocks:,} Zipf blocks")
            t = time.perf_counter()
            await _load(raw, blocks)
            preload_s = time.perf_counter() - t
            size = await raw.fetchval("SELECT pg_total_relation_size('blocks')")
            ctx.progress(f"loaded in {preload_s:.1f} s ({size / 2**20:.0f} MiB with indexes)")
            extra = {"blocks": n_blocks, "preload_s": preload_s, "postgresql": version}
            async with Store(dsn, clock=FakeClock(T0 + 3600.0)) as store:
                assert store.pg_db is not None
                cands = max(store.policy.ranking.candidates, LIMIT)
                with cpus_apart(server) as placed:
                    ctx.progress(placed)
                    extra["cpus"] = placed
                    for name, queries in (("pg_search_common", common), ("pg_search_mid", mid)):
                        results.append(
                            await _measure(ctx, name, store, raw, queries, cands=cands, extra=extra)
                        )
        finally:
            await raw.close()
    return results
