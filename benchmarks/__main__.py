"""``python -m benchmarks [names...] [--quick] [--scale X] [--out DIR] [--strict]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import structlog

# Importing the modules registers their benchmarks, in this order.
from benchmarks import _ingest, _search, _sweep  # noqa: F401
from benchmarks._harness import (
    BENCHMARKS,
    machine_info,
    print_table,
    run_benchmarks,
    write_results,
)

QUICK_SCALE = 0.01
SCALE_ENV = "MEMWARDEN_BENCH_SCALE"


def _scale(args: argparse.Namespace) -> float:
    """Explicit --scale, then --quick, then the environment, then full size."""
    if args.scale is not None:
        return float(args.scale)
    if args.quick:
        return QUICK_SCALE
    env = os.environ.get(SCALE_ENV)
    if env:
        try:
            return float(env)
        except ValueError:
            sys.exit(f"{SCALE_ENV}: {env!r} is not a number (use e.g. 0.01 or 1)")
    return 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark the memwarden store against raw SQLite.",
    )
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    parser.add_argument("--quick", action="store_true", help=f"sizes x {QUICK_SCALE} (smoke test)")
    parser.add_argument("--scale", type=float, help=f"size factor (default: ${SCALE_ENV} or 1)")
    parser.add_argument("--out", type=Path, default=Path(".bench"), help="where results.json goes")
    parser.add_argument("--workdir", type=Path, help="where the scratch databases go (default: a temp dir)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)

    if args.list:
        print("\n".join(BENCHMARKS))
        return 0
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)} (choose from {', '.join(BENCHMARKS)})")
    names = list(dict.fromkeys(args.names)) or list(BENCHMARKS)
    scale = _scale(args)
    if not 0 < scale <= 10:
        parser.error(f"--scale: {scale} is not between 0 (exclusive) and 10")

    # The store logs its lifecycle; only warnings belong in a benchmark run.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    machine = machine_info(scale=scale)
    print(
        f"memwarden benchmarks: {', '.join(names)} at scale {scale:g} on {machine['nproc']} CPU(s)"
        f" ({machine['cpu_model']}), Python {machine['python']}, SQLite {machine['sqlite']}",
        file=sys.stderr,
        flush=True,
    )
    started = time.perf_counter()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        results = run_benchmarks(names, scale=scale, workdir=args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="memwarden-bench-") as tmp:
            results = run_benchmarks(names, scale=scale, workdir=Path(tmp))
    machine["wall_s"] = round(time.perf_counter() - started, 1)
    print()
    print_table(results)
    path = write_results(results, args.out, machine)
    print(f"wrote {path} and {args.out / 'machine.json'} ({machine['wall_s']} s)")
    if args.strict and not all(r.ok for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
