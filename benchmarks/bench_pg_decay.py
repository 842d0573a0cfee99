"""``pg_decay``: the decay pass over a million blocks on PostgreSQL, set-based in chunks.

Setup (not timed): a PostgreSQL server of the benchmark's own, started like the tests'
(``tests/pgserver.py``: ``initdb`` + ``pg_ctl`` in a temporary directory, a free
loopback port, ``fsync = off``, ``synchronous_commit = off``), the store's schema
(``memwarden.memory.pg``'s migrations) and the ``sweep`` data set (1 000 000 valid
blocks, ages spread over 400 days, so a first cycle both rewrites retention and archives
a share) loaded with ``COPY`` into a template database, then ``VACUUM ANALYZE``. Two
databases are made from that template (``CREATE DATABASE ... TEMPLATE``), so both sides
start from the same files.

Store: ``decay_cycle`` (``memwarden.memory.pg._maintenance``) on a ``PgDatabase``:
retention recomputed in 50 000-row chunks, one transaction each (so other writes
interleave), two at once (the default ``maintenance_connections``: the writer's
connection and one of the pass's own), archival with a reason and an audit row.
Baseline: raw asyncpg doing only the retention ``UPDATE`` (the same SQL expression) over
the whole table in one statement, in the other database. Target (issue 22, as
SQLite's): under 10 s on 2 cores; the ratio is store blocks/s over raw blocks/s.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks._harness import Context, Result, benchmark
from benchmarks._pg import pg_server
from benchmarks._sweep import _COLUMNS, NOW, _rows
from memwarden.memory import FakeClock
from memwarden.memory._sqlrules import rule_params
from memwarden.memory.policy import PolicyConfig

TARGET_S = 10.0


def _missing() -> str | None:
    from tests.pgserver import pg_bin  # noqa: PLC0415 - the tests' server helper, if needed

    try:
        import asyncpg  # noqa: F401, PLC0415 - the postgres extra
    except ImportError:
        return "asyncpg is not installed: pip install -e '.[postgres]'"
    if pg_bin() is None:
        return "the PostgreSQL server binaries are not installed: run scripts/system-deps.sh"
    return None


async def _load(ctx: Context, server: Any, n_blocks: int) -> None:
    """The schema and ``n_blocks`` blocks (COPY) in ``decay_template``, vacuumed."""
    import asyncpg  # noqa: PLC0415 - the postgres extra

    from memwarden.memory.pg._migrate import migrate  # noqa: PLC0415 - needs asyncpg

    server.psql('CREATE DATABASE "decay_template"')
    conn = await asyncpg.connect(server.dsn("decay_template"))
    try:
        await migrate(conn)
        ctx.progress(f"COPY {n_blocks:,} blocks into the template")
        t = time.perf_counter()
        await conn.copy_records_to_table(
            "blocks", records=_rows(n_blocks, min(1000, n_blocks // 10)), columns=list(_COLUMNS)
        )
        await conn.execute(
            "SELECT setval(pg_get_serial_sequence('blocks', 'rid'), (SELECT max(rid) FROM blocks))"
        )
        await conn.execute("VACUUM ANALYZE")
        ctx.progress(f"loaded in {time.perf_counter() - t:.0f} s")
    finally:
        await conn.close()


async def _raw(dsn: str, cfg: PolicyConfig) -> float:
    """Seconds for one raw ``UPDATE`` of retention over every live block."""
    import asyncpg  # noqa: PLC0415 - the postgres extra

    from memwarden.memory.pg._sqlrules import arguments, pg_named, retention_sql  # noqa: PLC0415

    params = rule_params(cfg, NOW)
    sql, names = pg_named(
        f"UPDATE blocks SET retention = {retention_sql()} WHERE state <> 'archived'", params
    )
    conn = await asyncpg.connect(dsn)
    try:
        t = time.perf_counter()
        async with conn.transaction():
            await conn.execute(sql, *arguments(names, params))
        return time.perf_counter() - t
    finally:
        await conn.close()


@benchmark("pg_decay", position=41)
async def pg_decay(ctx: Context) -> list[Result]:
    missing = _missing()
    if missing is not None:
        raise RuntimeError(f"pg_decay: {missing}")

    from memwarden.memory.pg import PgDatabase  # noqa: PLC0415 - needs asyncpg
    from memwarden.memory.pg._maintenance import decay_cycle  # noqa: PLC0415

    n_blocks = ctx.n(1_000_000, 10_000)
    cfg = PolicyConfig()
    with pg_server(ctx) as server:
        version = server.psql("SHOW server_version").strip()
        ctx.progress(f"PostgreSQL {version} on port {server.port}")
        await _load(ctx, server, n_blocks)
        for name in ("decay_raw", "decay_store"):
            server.psql(f'CREATE DATABASE "{name}" TEMPLATE "decay_template"')
        server.psql('DROP DATABASE "decay_template"')

        ctx.progress("raw baseline: one UPDATE of retention over every block")
        raw_s = await _raw(server.dsn("decay_raw"), cfg)
        server.psql('DROP DATABASE "decay_raw"')
        ctx.progress(f"raw: {raw_s:.2f} s")

        ctx.progress("store: decay_cycle()")
        async with PgDatabase(server.dsn("decay_store")) as db:
            connections = db.maintenance_connections
            clock = FakeClock(NOW)
            t = time.perf_counter()
            report = await decay_cycle(db, clock, cfg)
            store_s = time.perf_counter() - t
            ctx.progress(f"store: {store_s:.2f} s ({report.archived:,} archived)")
            t = time.perf_counter()
            again = await decay_cycle(db, clock, cfg)  # the same moment: nothing changes
            again_s = time.perf_counter() - t
            clock.advance(3600.0)
            t = time.perf_counter()
            later = await decay_cycle(db, clock, cfg)  # an hour on: every live row decays
            later_s = time.perf_counter() - t
            ctx.progress(f"again: {again_s:.2f} s, an hour later: {later_s:.2f} s")

    value = n_blocks / store_s
    baseline = n_blocks / raw_s
    target_s = max(TARGET_S * ctx.scale, 1.0)  # a scaled-down run is too short to judge
    return [
        Result(
            name="pg_decay",
            value=value,
            unit="blocks/s",
            baseline=baseline,
            ratio=value / baseline,
            target=f"< {TARGET_S:g} s for 1M blocks",
            ok=store_s < target_s,
            extra={
                "postgresql": version,
                "seconds": round(store_s, 3),
                "baseline_seconds": round(raw_s, 3),
                "blocks": n_blocks,
                "archived": report.archived,
                "retention_updated": report.retention_updated,
                "chunks": report.chunks,
                "connections": connections,
                "second_cycle_seconds": round(again_s, 3),
                "second_cycle_updated": again.retention_updated,
                "hour_later_seconds": round(later_s, 3),
                "hour_later_updated": later.retention_updated,
                "hour_later_archived": later.archived,
            },
        )
    ]
