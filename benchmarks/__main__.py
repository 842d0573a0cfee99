"""``python -m benchmarks [names...] [--quick | --scale X] [--out DIR] [--strict]``."""

from __future__ import annotations

import argparse
import compileall
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import structlog

import memwarden

# Importing the modules registers their benchmarks.
from benchmarks import (  # noqa: F401 - importing registers the benchmarks
    _ingest,
    _search,
    _sweep,
    bench_compaction,
    bench_console,
    bench_daemon,
    bench_decay,
    bench_durability,
    bench_erasure,
    bench_ids,
    bench_mqtt,
    bench_pg_decay,
    bench_pg_drivers,
    bench_pg_erasure,
    bench_pg_ingest,
    bench_pg_search,
    bench_pg_sweep,
    bench_read_through,
    bench_redact,
    bench_regex,
    bench_retention,
    bench_search_hybrid,
    bench_sensors,
    bench_suggest,
)
from benchmarks._harness import (
    BENCHMARKS,
    RESULT_NAMES,
    cpu_reference_s,
    machine_info,
    print_table,
    run_benchmarks,
    write_results,
)

QUICK_SCALE = 0.01
SCALE_ENV = "MEMWARDEN_BENCH_SCALE"
DEFAULT_OUT = Path(".bench")


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


def _selected(parser: argparse.ArgumentParser, names: list[str]) -> list[str]:
    """Benchmarks to run, from benchmark or result names (``search_mid`` runs ``search``)."""
    by_result = {r: bench for bench, results in RESULT_NAMES.items() for r in results}
    wanted = set()
    for name in names:
        bench = name if name in BENCHMARKS else by_result.get(name)
        if bench is None:
            choices = ", ".join([*BENCHMARKS, *(r for r in by_result if r not in BENCHMARKS)])
            parser.error(f"unknown benchmark {name!r} (choose from {choices})")
        wanted.add(bench)
    return [b for b in BENCHMARKS if b in wanted] if wanted else list(BENCHMARKS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark the memwarden store against raw SQLite doing the same work.",
    )
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all; see --list)")
    parser.add_argument(
        "--quick", action="store_true", help=f"sizes x {QUICK_SCALE:g}: a smoke run of seconds"
    )
    parser.add_argument("--scale", type=float, help=f"size factor (default: ${SCALE_ENV} or 1)")
    parser.add_argument(
        "--out",
        type=Path,
        help=f"where results.json and machine.json go (default: {DEFAULT_OUT}, or"
        f" {DEFAULT_OUT}/scale-X when not at full size)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="where the scratch databases go (default: a temp dir)"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)

    if args.list:
        for bench in BENCHMARKS:
            results = RESULT_NAMES[bench]
            print(bench if results == (bench,) else f"{bench}: {', '.join(results)}")
        return 0
    names = _selected(parser, args.names)
    scale = _scale(args)
    if not 0 < scale <= 10:
        parser.error(f"--scale: {scale:g} is not in (0, 10]")
    # Scaled-down figures never overwrite full-size ones unless asked to.
    out = args.out or (DEFAULT_OUT if scale == 1 else DEFAULT_OUT / f"scale-{scale:g}")

    # The store logs its lifecycle; only warnings belong in a benchmark run.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    machine = machine_info(scale=scale)
    print(
        f"memwarden benchmarks: {', '.join(names)} at scale {scale:g} on {machine['nproc']}"
        f" CPU(s) ({machine['cpu_model']}), Python {machine['python']},"
        f" SQLite {machine['sqlite']}; reference CPU work"
        f" {machine['cpu_reference_s']['start'] * 1000:.1f} ms",
        file=sys.stderr,
        flush=True,
    )
    # The daemon-start benchmarks spawn `memwarden run`. Where PYTHONDONTWRITEBYTECODE is
    # set, no process writes .pyc files, so each start would compile the package from
    # source: a cost no installation pays (pip compiles a wheel's modules when it installs
    # it, and without the variable the first start writes them). Compile them first.
    compileall.compile_dir(Path(memwarden.__file__).parent, quiet=1)
    started = time.perf_counter()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        results = run_benchmarks(names, scale=scale, workdir=args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="memwarden-bench-") as tmp:
            results = run_benchmarks(names, scale=scale, workdir=Path(tmp))
    machine["wall_s"] = round(time.perf_counter() - started, 1)
    machine["cpu_reference_s"]["end"] = cpu_reference_s()
    print(file=sys.stderr)
    print_table(results)
    path = write_results(results, out, machine)
    print(f"wrote {path} and {out / 'machine.json'} in {machine['wall_s']} s")
    if args.strict and not all(r.ok for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
