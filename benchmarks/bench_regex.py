"""``regex_check``: an fs regex check on RE2 (what the sensor runs) against stdlib ``re``.

A 13 KiB config-like file (300 ``key = "value"  # comment`` lines and one
``requires-python = ">=3.11"``) and three patterns of the kind bindings carry: one that
matches in the middle, one that matches nothing (the whole file is scanned), one
anchored per line with ``(?m)``. Timed per check, interleaved, after a warm-up:

- **memwarden**: ``UserRegex.search(content)`` on the file's bytes (what the fs sensor
  does: RE2, no decoding);
- **baseline**: ``re.compile(p).search(content.decode("utf-8", "replace"))`` (what it did
  before: Python's backtracking engine on the decoded text).

The figure is the p50 of one round (the three patterns); the target is a ratio of at most
2: linear time must not make the common case much dearer. Also reported: the same on a
1.7 MB file, and the backtracking case ``^(a+)+$`` on ``"a" * n + "!"`` — ``re`` at
n = 22, RE2 at n = 1 000 000.
"""

from __future__ import annotations

import random
import re
import time

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.sensors._regex import compile_user_regex

PATTERNS = (
    r'requires-python\s*=\s*">=3\.1\d"',
    r'version\s*=\s*"2\.\d+"',
    r'(?m)^name = "memwarden"$',
)
RATIO_TARGET = 2.0


def _config_text() -> bytes:
    rng = random.Random(13)
    lines = [f'key_{i} = "{rng.random():.6f}"  # what setting {i} does' for i in range(300)]
    lines.insert(150, 'requires-python = ">=3.11"')
    return "\n".join(lines).encode()


def _rounds(content: bytes, n: int) -> tuple[list[int], list[int]]:
    ours = [compile_user_regex(p) for p in PATTERNS]
    theirs = [re.compile(p) for p in PATTERNS]
    for r2, r1 in zip(ours, theirs, strict=True):  # warm-up, and the same answers
        assert (r2.search(content) is None) == (r1.search(content.decode()) is None)
    ours_ns: list[int] = []
    base_ns: list[int] = []
    for _ in range(n):
        t = time.perf_counter_ns()
        for r2 in ours:
            r2.search(content)
        ours_ns.append(time.perf_counter_ns() - t)
        t = time.perf_counter_ns()
        for r1 in theirs:
            r1.search(content.decode("utf-8", "replace"))
        base_ns.append(time.perf_counter_ns() - t)
    return ours_ns, base_ns


@benchmark("regex_check", position=12)
async def regex_check(ctx: Context) -> list[Result]:
    content = _config_text()
    ctx.progress(f"{len(content):,}-byte file, {len(PATTERNS)} patterns")
    ours_ns, base_ns = _rounds(content, ctx.n(2000, 20))
    ours, base = percentiles_ms(ours_ns), percentiles_ms(base_ns)
    big = content * 128
    ctx.progress(f"{len(big):,}-byte file")
    big_ours, big_base = _rounds(big, ctx.n(20, 2))
    ctx.progress("backtracking: re at n=22, RE2 at n=1 000 000")
    t = time.perf_counter()
    re.search(r"^(a+)+$", "a" * 22 + "!")
    re_backtrack_s = time.perf_counter() - t
    t = time.perf_counter()
    compile_user_regex(r"^(a+)+$").search(b"a" * 1_000_000 + b"!")
    re2_linear_s = time.perf_counter() - t
    ratio = ours["p50"] / base["p50"]
    return [
        Result(
            name="regex_check",
            value=round(ours["p50"] * 1000, 2),
            unit="us p50 per check (3 patterns, 13 KiB file)",
            baseline=round(base["p50"] * 1000, 2),
            ratio=round(ratio, 3),
            target=f"ratio <= {RATIO_TARGET:g} (RE2 vs re)",
            ok=ratio <= RATIO_TARGET,
            extra={
                "p95_us": round(ours["p95"] * 1000, 2),
                "baseline_p95_us": round(base["p95"] * 1000, 2),
                "file_bytes": len(content),
                "big_file_bytes": len(big),
                "big_p50_us": round(percentiles_ms(big_ours)["p50"] * 1000, 1),
                "big_baseline_p50_us": round(percentiles_ms(big_base)["p50"] * 1000, 1),
                "re_backtracking_n22_s": round(re_backtrack_s, 3),
                "re2_same_pattern_n1000000_s": round(re2_linear_s, 4),
            },
        )
    ]
