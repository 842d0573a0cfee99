"""The PostgreSQL server a benchmark runs on (``tests/pgserver.py``: ``initdb`` +
``pg_ctl`` in a temporary directory, a free loopback port, never the machine's service).

At full size each benchmark gets a server of its own, so no other benchmark's tables,
autovacuum or cache are in its figures. A smoke run (scale < 1) checks that the
benchmarks run, not their figures: its PostgreSQL benchmarks share one server, started by
the first that asks and stopped when the run ends (an ``initdb`` and a start less each).
Each benchmark makes its own databases on it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.pgserver import PgServer

    from benchmarks._harness import Context

__all__ = ["pg_server"]

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
