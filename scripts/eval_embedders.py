# ruff: noqa: INP001, T201 - a script run by path that prints its table
"""Compare the embedders that need no download: quality, load time, memory, speed.

Run ``.venv/bin/python scripts/eval_embedders.py`` (about a minute). For each
configuration (WordLlama at 256, 128 and 64 dimensions, the hashing stub):

- recall@5 and MRR per mode on the labelled set of ``tests/memory/retrieval_set.py``
  (108 facts; a paraphrase and an exact-word query each), as
  ``tests/memory/test_search_quality.py`` measures them;
- in a fresh interpreter with numpy already imported: seconds to load the embedder,
  and the RSS it adds (anonymous and file-backed), before and after embedding;
- vectors per second on 5 000 texts of the benchmarks' Zipf corpus in batches of 256,
  and the p50 of embedding one query.

The figures are in docs/SEARCH.md ("Choosing a model").
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._search import SEED, Corpus  # noqa: E402 - after the path
from tests.memory.retrieval_set import ITEMS  # noqa: E402 - after the path

from memwarden.embedders import load_embedder  # noqa: E402 - after the path
from memwarden.memory import FakeClock, Store  # noqa: E402 - after the path

CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("wordllama 256-d", "wordllama", {}),
    ("wordllama 128-d", "wordllama", {"dim": 128}),
    ("wordllama 64-d", "wordllama", {"dim": 64}),
    ("stub 64-d", "stub", {}),
]
MODES = ("keyword", "vector", "hybrid")

_PROBE = """
import json, sys, time
def rss():
    out = {}
    for line in open("/proc/self/status"):
        if line.startswith(("RssAnon", "RssFile")):
            key, value = line.split(":")
            out[key] = int(value.split()[0]) / 1024
    return out
import numpy
before = rss()
from memwarden.embedders import load_embedder
t = time.perf_counter()
emb = load_embedder(sys.argv[1], json.loads(sys.argv[2]) or None)
load_s = time.perf_counter() - t
loaded = rss()
texts = json.loads(sys.stdin.read())
t = time.perf_counter()
for start in range(0, len(texts), 256):
    emb.embed(texts[start : start + 256])
rate = len(texts) / (time.perf_counter() - t)
single = []
for text in texts[:300]:
    t = time.perf_counter_ns()
    emb.embed([text[:80]])
    single.append(time.perf_counter_ns() - t)
single.sort()
used = rss()
print(json.dumps({
    "load_s": load_s,
    "anon_mib": loaded["RssAnon"] - before["RssAnon"],
    "file_mib": loaded["RssFile"] - before["RssFile"],
    "anon_used_mib": used["RssAnon"] - before["RssAnon"],
    "file_used_mib": used["RssFile"] - before["RssFile"],
    "per_s": rate,
    "query_us": single[len(single) // 2] / 1000,
}))
"""


async def _quality(name: str, options: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """(recall@5, MRR) per mode and query kind on the labelled set."""
    embedder = load_embedder(name, options or None)
    out: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with Store(Path(tmp) / "q.db", clock=FakeClock(), embedder=embedder) as store:
            ids = await store.add_many([{"content": fact} for fact, _, _ in ITEMS])
            vectors = store.vectors
            if vectors is None:
                raise RuntimeError(f"{name}: the store holds no vectors")
            while await vectors.drain_once():
                pass
            for column, kind in ((1, "paraphrase"), (2, "exact")):
                for mode in MODES:
                    found, rr = 0, 0.0
                    for want, item in zip(ids, ITEMS, strict=True):
                        hits = [h.id for h in await store.search(item[column], mode=mode)]
                        found += want in hits[:5]
                        rr += 1.0 / (hits.index(want) + 1) if want in hits else 0.0
                    out[f"{kind}/{mode}"] = (found / len(ITEMS), rr / len(ITEMS))
    return out


def _probe(name: str, options: dict[str, Any], texts: list[str]) -> dict[str, float]:
    runs = []
    for _ in range(3):
        done = subprocess.run(  # noqa: S603 - this interpreter, our own probe
            [sys.executable, "-c", _PROBE, name, json.dumps(options)],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    corpus = Corpus(random.Random(SEED))  # noqa: S311 - a reproducible corpus
    texts = []
    for _ in range(5000):
        block = corpus.block()
        texts.append(f"{block.title}\n{block.content}")
    print(
        "| model | paraphrases: vector / hybrid recall@5 (MRR) | exact words: hybrid |"
        " load | RSS added loaded (after use) | vectors/s | one query |"
    )
    print("|---|---|---|---:|---|---:|---:|")
    for label, name, options in CONFIGS:
        q = asyncio.run(_quality(name, options))
        p = _probe(name, options, texts)
        vec, hyb, exact = q["paraphrase/vector"], q["paraphrase/hybrid"], q["exact/hybrid"]
        print(
            f"| {label} | {vec[0]:.3f} ({vec[1]:.3f}) / {hyb[0]:.3f} ({hyb[1]:.3f})"
            f" | {exact[0]:.3f} | {p['load_s']:.3f} s"
            f" | anon {p['anon_mib']:.1f} + file {p['file_mib']:.1f} MiB"
            f" (anon {p['anon_used_mib']:.1f} + file {p['file_used_mib']:.1f})"
            f" | {p['per_s']:,.0f} | {p['query_us']:.0f} us |"
        )
    kw_p, kw_e = q["paraphrase/keyword"], q["exact/keyword"]
    print(f"\nkeyword alone: paraphrases {kw_p[0]:.3f} ({kw_p[1]:.3f}), exact {kw_e[0]:.3f}")
    print(f"at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
