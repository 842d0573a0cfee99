"""``search_common`` / ``search_mid``: ``Store.search`` latency against raw FTS5 BM25.

Setup (not timed): a vocabulary of 20 000 synthetic words drawn with Zipf weights
(rank^-1.1). 100 000 blocks through ``Store.add_many``: titles of 3-6 words, contents of
20-60 words, two tags from the 1 000 commonest words; no bindings. Fixed seed.

Queries: 500 per set, 2-3 words each.
- common: words from the 50 commonest ranks (thousands of matches per query; BM25 must
  score every match).
- mid: words of ranks 500-3000 taken from one randomly chosen block, so each query
  matches at least that block (independent mid-frequency words would almost never
  co-occur, and a no-hit query measures nothing but overhead).

Store: ``await store.search(" ".join(words), limit=10)``. Baseline: the BM25 top 10 from
``blocks_fts`` with the same quoted-terms MATCH string on a stdlib connection to the same
file. Runs interleave so both see the same cache and machine noise, each side running a
query first in turn.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import TYPE_CHECKING, Any

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.memory import FakeClock, NewBlock, Store

if TYPE_CHECKING:
    from pathlib import Path

SEED = 424242
T0 = 1_767_225_600.0
VOCABULARY = 20_000
ZIPF_S = 1.1
COMMON_RANKS = (1, 50)
MID_RANKS = (500, 3000)
ADD_CHUNK = 5000
WARMUP = 10
TARGET_RATIO = 1.5

RAW_SQL = (
    "SELECT rowid, bm25(blocks_fts, 2.0, 1.0, 1.5) FROM blocks_fts WHERE blocks_fts MATCH ?"
    " ORDER BY bm25(blocks_fts, 2.0, 1.0, 1.5) LIMIT 10"
)
_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_ONSETS += ("br", "ch", "dr", "gl", "kr", "pl", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CODAS = ("", "", "n", "r", "s", "l", "m", "x", "th", "nd")


def vocabulary(rng: random.Random, size: int) -> list[str]:
    """``size`` distinct pronounceable lowercase words, index 0 the commonest."""
    syllables = [o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS]
    words: dict[str, None] = {}
    while len(words) < size:
        n = rng.choice((1, 2, 2, 3))
        word = "".join(rng.choice(syllables) for _ in range(n))
        if word not in ("and", "or", "not", "near"):
            words.setdefault(word, None)
    return list(words)


class Corpus:
    """Zipf-distributed text over a fixed vocabulary."""

    def __init__(self, rng: random.Random, size: int = VOCABULARY, s: float = ZIPF_S) -> None:
        self.rng = rng
        self.words = vocabulary(rng, size)
        self.rank = {w: i + 1 for i, w in enumerate(self.words)}
        self.cum = list(itertools.accumulate(1.0 / k**s for k in range(1, size + 1)))

    def draw(self, k: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum, k=k)

    def block(self) -> NewBlock:
        rng = self.rng
        return NewBlock(
            title=" ".join(self.draw(rng.randint(3, 6))),
            content=" ".join(self.draw(rng.randint(20, 60))),
            tags=rng.sample(self.words[:1000], 2),
        )


def _queries(corpus: Corpus, texts: list[str], n: int) -> tuple[list[list[str]], list[list[str]]]:
    rng = corpus.rng
    lo, hi = COMMON_RANKS
    common = [rng.sample(corpus.words[lo - 1 : hi], rng.randint(2, 3)) for _ in range(n)]
    mid: list[list[str]] = []
    lo, hi = MID_RANKS
    while len(mid) < n:
        words = {w for w in rng.choice(texts).split() if lo <= corpus.rank.get(w, 0) <= hi}
        if len(words) >= 2:
            mid.append(rng.sample(sorted(words), min(len(words), rng.randint(2, 3))))
    return common, mid


async def preload_zipf(
    path: Path, n_blocks: int, n_queries: int
) -> tuple[list[str], list[list[str]]]:
    """The Zipf corpus stored in ``path`` through ``Store.add_many`` (clock at ``T0``);
    returns each block's text (title, newline, content) and ``n_queries`` mid-frequency
    queries drawn after it (``search_hybrid`` and
    ``scripts/hybrid_breakdown.py`` share this corpus)."""
    corpus = Corpus(random.Random(SEED))
    texts: list[str] = []
    async with Store(path, clock=FakeClock(T0)) as store:
        for start in range(0, n_blocks, ADD_CHUNK):
            blocks = [corpus.block() for _ in range(min(ADD_CHUNK, n_blocks - start))]
            texts.extend(f"{b.title}\n{b.content}" for b in blocks)
            await store.add_many(blocks)
    return texts, _queries(corpus, texts, n_queries)[1]


def _match(words: list[str]) -> str:
    return " ".join(f'"{w}"' for w in words)


def _parametrized(statement: str, match: str) -> str | None:
    """The store's expanded ranking statement with its MATCH literal back as ``?``."""
    literal = "MATCH '" + match.replace("'", "''") + "'"
    if statement.count(literal) != 1:
        return None
    return statement.replace(literal, "MATCH ?")


async def _time_set(
    store: Store, raw: Any, diag: Any, queries: list[list[str]], store_sql: str | None
) -> tuple[dict[str, list[int]], float]:
    """Per side, the latency samples; and the store's hits per query.

    Whichever side runs a query first pays for bringing its pages into the CPU's caches
    (15-20 us of a 160 us baseline here); the sides take turns at running first (the
    order rotates by one each query), so each side runs first once in ``len(sides)``.
    ``diag`` runs the store's statement (``store_sql``) on a connection of its own, so
    it leaves nothing in the baseline's page cache."""
    samples: dict[str, list[int]] = {"store": [], "raw": [], "store_sql": []}
    sides = ["store", "raw"] + (["store_sql"] if store_sql else [])
    hits = 0
    for i, words in enumerate([*queries[:WARMUP], *queries]):
        text, match = " ".join(words), _match(words)
        turn = i % len(sides)
        for side in sides[turn:] + sides[:turn]:
            t0 = time.perf_counter_ns()
            if side == "store":
                got: list[Any] = await store.search(text, limit=10)
            elif side == "raw":
                got = raw.execute(RAW_SQL, (match,)).fetchall()
            else:
                got = diag.execute(store_sql, (match,)).fetchall()
            dt = time.perf_counter_ns() - t0
            if i >= WARMUP:
                samples[side].append(dt)
                hits += len(got) if side == "store" else 0
    return samples, hits / len(queries)


def _avg_matches(raw: Any, queries: list[list[str]]) -> float:
    count = "SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH ?"
    return sum(raw.execute(count, (_match(w),)).fetchone()[0] for w in queries) / len(queries)


@benchmark("search", position=3, results=("search_common", "search_mid"))
async def search(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(100_000, 1000)
    n_queries = ctx.n(500, 10)
    path = ctx.workdir / "search.db"
    _sqlite.remove(path)
    corpus = Corpus(random.Random(SEED))
    ctx.progress(f"preloading {n_blocks:,} Zipf blocks through Store.add_many")
    texts: list[str] = []
    t = time.perf_counter()
    async with Store(path, clock=FakeClock(T0)) as store:
        for start in range(0, n_blocks, ADD_CHUNK):
            blocks = [corpus.block() for _ in range(min(ADD_CHUNK, n_blocks - start))]
            texts.extend(f"{b.title} {b.content}" for b in blocks)
            await store.add_many(blocks)
    preload_s = time.perf_counter() - t
    common, mid = _queries(corpus, texts, n_queries)

    results = []
    raw = _sqlite.connect(path)
    raw.execute("PRAGMA query_only = ON")
    diag = _sqlite.connect(path)  # the store's statement, timed apart from the baseline
    diag.execute("PRAGMA query_only = ON")
    async with Store(path, clock=FakeClock(T0 + 3600.0)) as store:
        for name, queries in (("search_common", common), ("search_mid", mid)):
            # The ranking statement the store runs, its plan, and the same statement run
            # raw: what SQLite itself costs the store, apart from the Python around it.
            first = queries[0]
            statements = await _sqlite.traced_reads(
                store, lambda q=first: store.search(" ".join(q), limit=10)
            )
            ranked = next((st for st in statements if st.lstrip().startswith("WITH")), "")
            store_sql = _parametrized(ranked, _match(first)) if ranked else None
            store_plan = _sqlite.query_plan(raw, ranked, ()) if ranked else "?"
            plan = _sqlite.query_plan(raw, RAW_SQL, (_match(first),))
            ctx.progress(f"{name}: {len(queries)} queries each (+{WARMUP} warm-up), interleaved")
            db = store.db
            inline_before = (db.inline_reads, db.inline_overruns, db.inline_retries)
            samples, hits = await _time_set(store, raw, diag, queries, store_sql)
            s, r = percentiles_ms(samples["store"]), percentiles_ms(samples["raw"])
            sql = percentiles_ms(samples["store_sql"]) if samples["store_sql"] else None
            ratio = s["p95"] / r["p95"]
            results.append(
                Result(
                    name=name,
                    value=s["p95"],
                    unit="ms p95",
                    baseline=r["p95"],
                    ratio=ratio,
                    target=f"p95 <= {TARGET_RATIO:g}x raw",
                    ok=ratio <= TARGET_RATIO,
                    extra={
                        "p50": s["p50"],
                        "p99": s["p99"],
                        "baseline_p50": r["p50"],
                        "baseline_p99": r["p99"],
                        "store_sql_p50": sql["p50"] if sql else None,
                        "store_sql_p95": sql["p95"] if sql else None,
                        # searches answered on the loop, those past the inline budget
                        # (run again on a reader), and those stopped by the wall-time cap
                        # alone (tried once more on the loop), warm-up included
                        "inline_reads": db.inline_reads - inline_before[0],
                        "inline_overruns": db.inline_overruns - inline_before[1],
                        "inline_retries": db.inline_retries - inline_before[2],
                        "queries": len(queries),
                        "blocks": n_blocks,
                        "avg_matches": _avg_matches(raw, queries),
                        "avg_hits": hits,
                        "plan": plan,
                        "store_plan": store_plan,
                        "preload_s": preload_s,
                    },
                )
            )
    raw.close()
    diag.close()
    _sqlite.remove(path)
    return results
