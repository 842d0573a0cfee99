# ruff: noqa: INP001, T201, SLF001 - a script run by path that prints its table and times a search's parts
"""Where a hybrid search's time goes, stage by stage, against a keyword search.

Run ``.venv/bin/python scripts/hybrid_breakdown.py`` (the first run builds the
``search_hybrid`` benchmark's store: 100 000 Zipf blocks and their WordLlama vectors, a
few minutes, kept in ``.bench/hybrid-breakdown.db`` for the next runs; ``--db`` to put it
elsewhere). Then, for each of the benchmark's 500 mid-frequency queries, in turn: a
keyword search, a hybrid search (both through ``Store.search``), and the hybrid search's
stages run one after another as ``Search._fused`` runs them:

- ``keyword candidates``: the BM25 top ``ranking.candidates`` (one statement);
- ``embed query``: WordLlama and the int8 quantisation of one query;
- ``vector pass``: ``VectorIndex.nearest`` (sign-bit shortlist, exact re-scoring);
- ``fusion``: reciprocal rank fusion and the best 50 kept (``carried_candidates``);
- ``ranking statement``: the candidates' JSON and the statement that joins them to their
  blocks and ranks them by relevance x freshness x reliability x retention;
- ``hits``: the result objects and their explanation.

Times are the loop thread's CPU time (``time.thread_time_ns``: the reads run inline, on
that thread), which other processes' load moves far less than the wall time; the wall
time's p50 is printed beside. The figures are in docs/BENCHMARKS.md (helper
``hybrid20``'s section).

``--against OLD/src`` compares instead this tree's search code with another checkout's
(``git worktree add OLD <commit>``, or ``git archive <commit> src | tar -x -C OLD``), in
one process on one store: that tree's ``VectorIndex``, ``Search`` and WordLlama methods
are bound onto the live objects for every other query (the halves swapped each round),
so both run in the same minutes under the same load. It prints each side's loop-thread
CPU p50 / p95 for hybrid and keyword searches, their ratio, and how many queries got the
same hybrid top 10 from both. Only for an old tree whose objects hold the same
attributes (helper ``hybrid20b``'s section of docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import sqlite3
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._search import T0, WARMUP, preload_zipf  # noqa: E402

from memwarden.embedders import load_embedder  # noqa: E402
from memwarden.memory import FakeClock, Store  # noqa: E402
from memwarden.memory import _search as search_mod  # noqa: E402

STAGES = (
    "keyword candidates",
    "embed query",
    "vector pass",
    "fusion",
    "ranking statement",
    "hits",
)


async def build(db: Path, n_blocks: int, n_queries: int) -> None:
    """The benchmark's corpus and queries, and every block's vector."""
    _, mid = await preload_zipf(db, n_blocks, n_queries)
    _queries_file(db).write_text(json.dumps(mid))
    async with Store(db, clock=FakeClock(T0 + 3600.0), embedder=load_embedder("wordllama")) as s:
        vectors = s.vectors
        if vectors is None:
            raise RuntimeError("no vector index")
        while await vectors.drain_once():
            pass
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _queries_file(db: Path) -> Path:
    return db.with_name(db.name + ".queries.json")


async def stages(search: Any, text: str, limit: int) -> dict[str, int]:
    """The hybrid search's stages as ``Search._fused`` runs them: CPU ns each."""
    cfg = search.policy
    vectors = search.vectors
    out: dict[str, int] = {}
    t = time.thread_time_ns()
    keyword, every = await search._keyword_candidates(text, max(cfg.ranking.candidates, limit))
    out["keyword candidates"] = (u := time.thread_time_ns()) - t
    [qvec] = vectors.quantise(vectors.embedder.embed([text]))
    out["embed query"] = (t := time.thread_time_ns()) - u
    nearest = vectors.nearest(qvec, search_mod.vector_k(cfg, limit))
    out["vector pass"] = (u := time.thread_time_ns()) - t
    weight = 1.0 if every else search_mod.ANY_WORD_WEIGHT
    every_cand = search_mod.fused_relevance("hybrid", keyword, nearest, weight)
    relevance = search_mod.carried_candidates(every_cand, limit)
    out["fusion"] = (t := time.thread_time_ns()) - u
    now = search.clock.time()
    params = {
        "cands": json.dumps(relevance),
        "now": now,
        "f_fresh": cfg.ranking.fresh,
        "f_unverified": cfg.ranking.unverified,
        "f_stale": cfg.ranking.stale,
        "f_refuted": cfg.ranking.refuted,
        "core_floor": cfg.decay.core_floor,
        "floor": cfg.decay.floor,
        "stale_factor": cfg.decay.stale_half_life_factor,
        "limit": limit,
    }
    sql = search_mod._search_sql(include_refuted=False, given=True)
    rows = await search._rows(sql, params, budget_factor=search_mod.RANKING_BUDGET_FACTOR)
    out["ranking statement"] = (u := time.thread_time_ns()) - t
    shown = {int(row[7 + search_mod._RID_COLUMN]) for row in rows}
    search._hits(rows, now, search_mod.explained(shown, nearest, keyword, every_cand))
    out["hits"] = time.thread_time_ns() - u
    return out


async def measure(db: Path, rounds: int, limit: int) -> None:
    mid = json.loads(_queries_file(db).read_text())
    texts = [" ".join(words) for words in mid]
    embedder = load_embedder("wordllama")
    async with Store(db, clock=FakeClock(T0 + 7200.0), embedder=embedder) as store:
        search = store._search
        cpu: dict[str, list[int]] = {name: [] for name in ("keyword", "hybrid", *STAGES)}
        wall: dict[str, list[int]] = {"keyword": [], "hybrid": []}
        for r in range(rounds):
            for i, text in enumerate([*texts[:WARMUP], *texts]):
                modes: tuple[search_mod.SearchMode, ...] = ("hybrid", "keyword")
                if (i + r) % 2:
                    modes = ("keyword", "hybrid")
                for mode in modes:
                    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                    await store.search(text, limit=limit, mode=mode)
                    if i >= WARMUP:
                        cpu[mode].append(time.thread_time_ns() - c0)
                        wall[mode].append(time.perf_counter_ns() - t0)
                parts = await stages(search, text, limit)
                if i >= WARMUP:
                    for name, ns in parts.items():
                        cpu[name].append(ns)
        db_stats = store.db
        print(
            f"{len(texts)} queries x {rounds} rounds, limit {limit}; inline reads "
            f"{db_stats.inline_reads}, overruns {db_stats.inline_overruns}"
        )
    keyword_p50 = statistics.median(cpu["keyword"]) / 1e6
    print(f"{'':20s} {'CPU p50 ms':>10s} {'CPU mean':>9s} {'x keyword p50':>13s}")
    for name, samples in cpu.items():
        p50 = statistics.median(samples) / 1e6
        mean = statistics.fmean(samples) / 1e6
        print(f"{name:20s} {p50:10.3f} {mean:9.3f} {p50 / keyword_p50:13.2f}")
    staged = sum(statistics.median(cpu[name]) for name in STAGES) / 1e6
    print(f"{'stages summed':20s} {staged:10.3f}")
    for label, samples in wall.items():
        print(f"wall p50 {label}: {statistics.median(samples) / 1e6:.3f} ms")


# What --against swaps: the methods a hybrid or keyword search runs.
_SWAPPED = {
    "memory/_vectors.py": (
        "VectorIndex",
        (
            "signs",
            "_recentre",
            "_search",
            "_shortlist",
            "_rescore",
            "_best",
            "_scan",
            "nearest",
            "quantise",
            "query",
        ),
    ),
    "embedders/_wordllama.py": ("WordLlamaEmbedder", ("embed", "_mean")),
    "memory/_search.py": ("Search", ("search", "_fused", "_keyword_candidates", "_hits")),
}


def _old_classes(src: Path) -> dict[str, Any]:
    """The classes of ``_SWAPPED`` from another tree's files (imported under other names;
    what they import comes from this tree)."""
    out = {}
    for i, (rel, (name, _)) in enumerate(_SWAPPED.items()):
        spec = importlib.util.spec_from_file_location(f"_against{i}", src / "memwarden" / rel)
        if spec is None or spec.loader is None:
            raise SystemExit(f"cannot load {src / 'memwarden' / rel}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        out[rel] = getattr(module, name)
    return out


async def against(db: Path, old_src: Path, rounds: int, limit: int) -> None:
    """Old (``old_src``) against new (this tree), alternated query by query."""
    import numpy as np  # noqa: PLC0415 - the semantic extra

    old = _old_classes(old_src)
    mid = json.loads(_queries_file(db).read_text())
    texts = [" ".join(words) for words in mid]
    embedder = load_embedder("wordllama")
    plain_table = np.asarray(embedder._table)  # old trees held the np.memmap itself
    mapped_table = plain_table.base if isinstance(plain_table.base, np.memmap) else plain_table
    async with Store(db, clock=FakeClock(T0 + 7200.0), embedder=embedder) as store:
        objects = {
            "memory/_vectors.py": store.vectors,
            "embedders/_wordllama.py": embedder,
            "memory/_search.py": store._search,
        }

        def use(side: str) -> None:
            for rel, (_, methods) in _SWAPPED.items():
                obj = objects[rel]
                cls = old[rel] if side == "old" else type(obj)
                for method in methods:
                    setattr(obj, method, types.MethodType(getattr(cls, method), obj))
            embedder._table = mapped_table if side == "old" else plain_table

        cpu: dict[str, list[int]] = {
            f"{mode} {side}": [] for side in ("old", "new") for mode in ("hybrid", "keyword")
        }
        same = total = 0
        for r in range(rounds):
            for i, text in enumerate([*texts[:WARMUP], *texts]):
                side = ("old", "new")[(i + r) % 2]
                use(side)
                modes = ("hybrid", "keyword") if (i // 2 + r) % 2 == 0 else ("keyword", "hybrid")
                for mode in modes:
                    c0 = time.thread_time_ns()
                    await store.search(text, limit=limit, mode=mode)
                    if i >= WARMUP:
                        cpu[f"{mode} {side}"].append(time.thread_time_ns() - c0)
                if r == 0 and i >= WARMUP:  # the answers, both ways
                    tops = []
                    for other in ("old", "new"):
                        use(other)
                        tops.append([h.id for h in await store.search(text, limit=limit)])
                    same += tops[0] == tops[1]
                    total += 1
        use("new")

    def pct(samples: list[int], q: float) -> float:
        ordered = sorted(samples)
        return ordered[round(q * (len(ordered) - 1))] / 1e6

    print(f"{len(texts)} queries x {rounds} rounds, limit {limit}, old = {old_src}")
    print(f"{'':16s} {'CPU p50 ms':>10s} {'CPU p95 ms':>10s} {'mean':>7s}")
    for name, samples in cpu.items():
        print(
            f"{name:16s} {pct(samples, 0.5):10.3f} {pct(samples, 0.95):10.3f}"
            f" {statistics.fmean(samples) / 1e6:7.3f}"
        )
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        ratio = {
            side: pct(cpu[f"hybrid {side}"], q) / pct(cpu[f"keyword {side}"], q)
            for side in ("old", "new")
        }
        gain = pct(cpu["hybrid new"], q) / pct(cpu["hybrid old"], q)
        print(
            f"{label}: hybrid / keyword old {ratio['old']:.2f}, new {ratio['new']:.2f};"
            f" hybrid new / old {gain:.3f}"
        )
    print(f"same hybrid top {limit}, old and new: {same} of {total} queries")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=ROOT / ".bench" / "hybrid-breakdown.db")
    parser.add_argument("--blocks", type=int, default=100_000, help="when building")
    parser.add_argument("--queries", type=int, default=500, help="when building")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument(
        "--against", type=Path, help="another checkout's src directory: old against new"
    )
    args = parser.parse_args()
    if not args.db.exists() or not _queries_file(args.db).exists():
        args.db.parent.mkdir(parents=True, exist_ok=True)
        print(f"building {args.db} ({args.blocks:,} blocks and their vectors)", file=sys.stderr)
        asyncio.run(build(args.db, args.blocks, args.queries))
    if args.against is not None:
        asyncio.run(against(args.db, args.against, args.rounds, args.limit))
    else:
        asyncio.run(measure(args.db, args.rounds, args.limit))


if __name__ == "__main__":
    main()
