"""The PostgreSQL server a benchmark runs on (``tests/pgserver.py``: ``initdb`` +
``pg_ctl`` in a temporary directory, a free loopback port, never the machine's service).

At full size each benchmark gets a server of its own, so no other benchmark's tables,
autovacuum or cache are in its figures. A smoke run (scale < 1) checks that the
benchmarks run, not their figures: its PostgreSQL benchmarks share one server, started by
the first that asks and stopped when the run ends (an ``initdb`` and a start less each).
Each benchmark makes its own databases on it.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.pgserver import PgServer

    from benchmarks._harness import Context

__all__ = ["cpus_apart", "pg_server"]

_SHARED = "postgresql"


def pg_server(ctx: Context) -> AbstractContextManager[PgServer]:
    """A context manager giving the benchmark's server (see the module docstring); a
    clear error when the server binaries are not installed."""
    from tests.pgserver import PgServer, pg_bin  # noqa: PLC0415 - only PostgreSQL runs need it

    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError(
            f"{ctx.name}: the PostgreSQL server binaries are not installed:"
            " run scripts/system-deps.sh"
        )
    if ctx.scale >= 1:
        return PgServer(bindir)
    server = ctx.shared.get(_SHARED)
    if server is None:
        server = ctx.closing.enter_context(PgServer(bindir))
        ctx.shared[_SHARED] = server
    return nullcontext(server)


@contextmanager
def cpus_apart(server: PgServer) -> Iterator[str]:
    """Run this process and the server on CPUs of their own while the block runs: the
    server (its postmaster, and so every backend it starts from now on) on the last CPU
    this process may use, this process on the others; both as they were after. Yields
    how they were placed, for the record.

    A sub-millisecond round trip depends on where the scheduler puts the two ends: on a
    2-CPU machine a backend that shares the client's CPU answers later than one on the
    other CPU, and which of a benchmark's connections got which changed its ratio from
    run to run by more than the code did (``pg_search_mid``: 1.57-1.95 unpinned, the
    same code; docs/BENCHMARKS.md, "Session 11"). Apart, each side's round trip is the
    same kind, as it is against a server on a host of its own. With one CPU, nothing
    is moved. The server's processes are given every CPU back after."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        yield "not pinned (one CPU)"
        return
    server_cpu, own = [cpus[-1]], cpus[:-1]
    _place(server, server_cpu)
    os.sched_setaffinity(0, own)
    try:
        yield f"client on CPU {own}, server on CPU {server_cpu}"
    finally:
        os.sched_setaffinity(0, cpus)
        _place(server, cpus)  # a smoke run's shared server serves other benchmarks next


def _place(server: PgServer, cpus: list[int]) -> None:
    for process in server.processes():
        with suppress(psutil.Error):  # a backend that ended meanwhile
            process.cpu_affinity(cpus)
