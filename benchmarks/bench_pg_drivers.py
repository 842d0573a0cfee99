"""``pg_driver_ingest``, ``pg_driver_read``: asyncpg against psycopg 3 on the same schema.

Why asyncpg is the PostgreSQL store's driver (docs/SCALE.md), measured in every run.

Setup (not timed): a PostgreSQL server of the benchmark's own, started like the tests'
(``tests/pgserver.py``: ``initdb`` + ``pg_ctl`` in a temporary directory, a free
loopback port, ``fsync = off`` and ``synchronous_commit = off``: the drivers are
measured, not the disk), one database, and the event log's shape as a table
(``bench_events``: ``event_id`` unique, sensor, subject, outcome, times, reliability,
message, observed as ``jsonb``). Each driver gets a pool of two connections
(``asyncpg.create_pool``; ``psycopg_pool.AsyncConnectionPool`` over
``psycopg.AsyncConnection``) and its own copy of the table.

- **ingest**: 20 000 event rows written in transactions of 256 rows, each one
  ``executemany`` of a parameterised ``INSERT`` (psycopg 3 pipelines it), in four
  rounds whose first driver alternates; rows per second. The figure is asyncpg's, the
  baseline psycopg 3's; ratio = asyncpg / psycopg (target >= 1: the chosen driver is
  not the slower one).
- **read**: 3 000 point reads by ``event_id`` (the unique index), interleaved
  (asyncpg, psycopg, psycopg, asyncpg, ...) after a warm-up; the median in
  microseconds; ratio = asyncpg / psycopg (target <= 1).

psycopg 3 is not a dependency of memwarden: the ``dev`` extra installs it for this
benchmark only. Without it, or without the PostgreSQL server binaries
(``scripts/system-deps.sh``), the benchmark stops and says what is missing.
"""

from __future__ import annotations

import json
import random
import time
from importlib import metadata
from typing import Any

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from benchmarks._pg import pg_server

ROWS = 20_000
BATCH = 256
READS = 3_000
ROUNDS = 4
WARMUP = 100

_TABLE = """
CREATE TABLE {name} (
    seq bigserial PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    sensor text NOT NULL,
    subject text NOT NULL,
    outcome text NOT NULL,
    observed_at double precision NOT NULL,
    received_at double precision NOT NULL,
    reliability double precision,
    validity_window_s double precision,
    block_id text,
    message text NOT NULL DEFAULT '',
    observed jsonb
)
"""
_COLUMNS = (
    "event_id, sensor, subject, outcome, observed_at, received_at, reliability,"
    " validity_window_s, block_id, message, observed"
)


def _rows(n: int) -> list[tuple[Any, ...]]:
    rng = random.Random(22)
    now = 1_767_225_600.0
    return [
        (
            f"{i:08x}-bench-{rng.getrandbits(64):016x}",
            rng.choice(("fs", "code_test", "http", "runtime")),
            f"config/app-{i % 1000}.yaml#/server/port",
            rng.choice(("confirmed", "confirmed", "confirmed", "refuted", "changed")),
            now + i * 0.01,
            now + i * 0.01 + 0.002,
            0.9,
            3600.0,
            None,
            "",
            json.dumps({"value": i % 97, "host": "bench"}),
        )
        for i in range(n)
    ]


def _missing() -> str | None:
    from tests.pgserver import pg_bin  # noqa: PLC0415 - the tests' server helper, if needed

    try:
        import psycopg  # noqa: F401, PLC0415 - only this benchmark uses it
        import psycopg_pool  # noqa: F401, PLC0415
    except ImportError:
        return "psycopg 3 is not installed: pip install -e '.[dev]' (it is in the dev extra)"
    if pg_bin() is None:
        return "the PostgreSQL server binaries are not installed: run scripts/system-deps.sh"
    return None


_INSERT_ASYNCPG = (
    f"INSERT INTO ev_asyncpg ({_COLUMNS}) VALUES ({', '.join(f'${i}' for i in range(1, 12))})"
)
_INSERT_PSYCOPG = f"INSERT INTO ev_psycopg ({_COLUMNS}) VALUES ({', '.join(['%s'] * 11)})"


async def _ingest_asyncpg(pool: Any, rows: list[tuple[Any, ...]]) -> float:
    t = time.perf_counter()
    async with pool.acquire() as conn:
        for start in range(0, len(rows), BATCH):
            async with conn.transaction():
                await conn.executemany(_INSERT_ASYNCPG, rows[start : start + BATCH])
    return time.perf_counter() - t


async def _ingest_psycopg(pool: Any, rows: list[tuple[Any, ...]]) -> float:
    t = time.perf_counter()
    async with pool.connection() as conn:
        for start in range(0, len(rows), BATCH):
            async with conn.transaction(), conn.cursor() as cur:
                await cur.executemany(_INSERT_PSYCOPG, rows[start : start + BATCH])
    return time.perf_counter() - t


async def _reads(apool: Any, ppool: Any, ids: list[str]) -> tuple[list[int], list[int]]:
    """Point reads by ``event_id``, interleaved (a, p, p, a, ...) after a warm-up."""
    a_sql = "SELECT seq, outcome, observed FROM ev_asyncpg WHERE event_id = $1"
    p_sql = "SELECT seq, outcome, observed FROM ev_psycopg WHERE event_id = %s"
    a_ns: list[int] = []
    p_ns: list[int] = []
    async with apool.acquire() as conn, ppool.connection() as pconn:
        await pconn.set_autocommit(True)

        async def a_read(event_id: str) -> int:
            t = time.perf_counter_ns()
            row = await conn.fetchrow(a_sql, event_id)
            assert row is not None
            return time.perf_counter_ns() - t

        async def p_read(event_id: str) -> int:
            t = time.perf_counter_ns()
            cur = await pconn.execute(p_sql, (event_id,))
            assert await cur.fetchone() is not None
            return time.perf_counter_ns() - t

        for event_id in ids[:WARMUP]:
            await a_read(event_id)
            await p_read(event_id)
        for i, event_id in enumerate(ids):
            if i % 2:
                a_ns.append(await a_read(event_id))
                p_ns.append(await p_read(event_id))
            else:
                p_ns.append(await p_read(event_id))
                a_ns.append(await a_read(event_id))
    return a_ns, p_ns


@benchmark("pg_drivers", position=40, results=("pg_driver_ingest", "pg_driver_read"))
async def pg_drivers(ctx: Context) -> list[Result]:
    missing = _missing()
    if missing is not None:
        raise RuntimeError(f"pg_drivers: {missing}")
    import asyncpg  # noqa: PLC0415 - the postgres extra
    import psycopg_pool  # noqa: PLC0415 - the dev extra, for this benchmark only

    n_rows, n_reads = ctx.n(ROWS, 600), ctx.n(READS, 100)
    rows = _rows(n_rows)
    ids = [r[0] for r in random.Random(7).sample(rows, min(n_rows, n_reads))]
    with pg_server(ctx) as server:
        dsn = server.create_database("bench")
        version = server.psql("SHOW server_version").strip()
        ctx.progress(f"PostgreSQL {version} on port {server.port}")
        apool = await asyncpg.create_pool(dsn, min_size=2, max_size=2)
        ppool = psycopg_pool.AsyncConnectionPool(dsn, min_size=2, max_size=2, open=False)
        await ppool.open(wait=True)
        try:
            async with apool.acquire() as conn:
                await conn.execute(_TABLE.format(name="ev_asyncpg"))
                await conn.execute(_TABLE.format(name="ev_psycopg"))
            # In rounds, the first driver alternating: neither always writes into the
            # emptier table or before the other's autovacuum.
            asyncpg_s = psycopg_s = 0.0
            step = -(-n_rows // ROUNDS)
            for r, start in enumerate(range(0, n_rows, step)):
                part = rows[start : start + step]
                if r % 2:
                    psycopg_s += await _ingest_psycopg(ppool, part)
                    asyncpg_s += await _ingest_asyncpg(apool, part)
                else:
                    asyncpg_s += await _ingest_asyncpg(apool, part)
                    psycopg_s += await _ingest_psycopg(ppool, part)
            ctx.progress(f"{n_rows:,} rows: asyncpg {asyncpg_s:.2f} s, psycopg {psycopg_s:.2f} s")
            async with apool.acquire() as conn:
                counts = [
                    await conn.fetchval(f"SELECT count(*) FROM {t}")
                    for t in ("ev_asyncpg", "ev_psycopg")
                ]
            assert counts == [n_rows, n_rows], counts
            a_ns, p_ns = await _reads(apool, ppool, ids)
        finally:
            await apool.close()
            await ppool.close()

    a_rate, p_rate = n_rows / asyncpg_s, n_rows / psycopg_s
    a_read, p_read = percentiles_ms(a_ns), percentiles_ms(p_ns)
    versions = {
        "postgresql": version,
        "asyncpg": metadata.version("asyncpg"),
        "psycopg": metadata.version("psycopg"),
        "psycopg_binary": _version("psycopg-binary"),
    }
    return [
        Result(
            name="pg_driver_ingest",
            value=round(a_rate),
            unit=f"rows/s, asyncpg (baseline: psycopg 3), {n_rows:,} rows, {BATCH} a transaction",
            baseline=round(p_rate),
            ratio=round(a_rate / p_rate, 2),
            target="ratio >= 1",
            ok=a_rate >= p_rate,
            extra=versions,
        ),
        Result(
            name="pg_driver_read",
            value=round(a_read["p50"] * 1000, 1),
            unit=f"us p50 per point read, asyncpg (baseline: psycopg 3), {len(ids):,} reads",
            baseline=round(p_read["p50"] * 1000, 1),
            ratio=round(a_read["p50"] / p_read["p50"], 2),
            target="ratio <= 1",
            ok=a_read["p50"] <= p_read["p50"],
            extra={
                "p95_us": round(a_read["p95"] * 1000, 1),
                "baseline_p95_us": round(p_read["p95"] * 1000, 1),
                **versions,
            },
        ),
    ]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
