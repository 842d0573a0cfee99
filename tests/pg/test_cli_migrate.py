"""``memwarden migrate --to``, run as a user runs it: a copy that says what it did, a
resumed copy, and every refusal as one ``error:`` line with a non-zero exit, no
traceback, no password."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import pytest

from memwarden.memory.pg import SCHEMA_VERSION, copy_to_postgres, migrate
from tests.pg.test_copy import InterruptedCopyError, compare_everything, populate
from tests.projects import user_env

if TYPE_CHECKING:
    from tests.pgserver import PgServer


def memwarden(
    tmp: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from memwarden.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=user_env(tmp, env),
        cwd=tmp,
        check=False,
    )


@pytest.fixture
async def source(tmp_path: Path) -> Path:
    path = tmp_path / "memwarden.db"
    await populate(path, blocks=12)
    return path


async def test_copy_prints_tables_and_json(pg_server: PgServer, source: Path, tmp_path: Path):
    """A copy exits 0, prints every table and that each was verified; --json says the same
    for scripts; the target then equals the source row for row."""
    dsn = pg_server.create_database()
    done = memwarden(tmp_path, "migrate", "--to", dsn, "--db", str(source), "--chunk-rows", "5")
    assert done.returncode == 0, done.stderr
    assert "every table verified" in done.stdout
    assert "blocks" in done.stdout
    assert "Traceback" not in done.stderr
    await compare_everything(source, dsn)
    # The source from MEMWARDEN_DB, as for the other commands' --db.
    again = memwarden(tmp_path, "migrate", "--to", dsn, "--json", env={"MEMWARDEN_DB": str(source)})
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert answer["verified"] is True
    assert answer["copied"] == 0
    assert answer["resumed"] is True
    assert {t["table"] for t in answer["tables"]} >= {"blocks", "events", "effects", "outbox"}


async def test_cli_resumes_an_interrupted_copy(pg_server: PgServer, source: Path, tmp_path: Path):
    """After a copy stopped half way, the command finishes it and says it resumed."""
    dsn = pg_server.create_database()

    def stop(_table: str, chunks: int) -> None:
        if chunks == 2:
            raise InterruptedCopyError

    with pytest.raises(InterruptedCopyError):
        await copy_to_postgres(source, dsn, chunk_rows=4, after_chunk=stop)
    done = memwarden(tmp_path, "migrate", "--to", dsn, "--db", str(source))
    assert done.returncode == 0, done.stderr
    assert "resumed and copied" in " ".join(done.stdout.split())
    await compare_everything(source, dsn)


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error:")
    return lines[0]


# Eight CLI processes (each imports the package and connects): 10-20 s on a quiet 2-core
# machine, up to 54 s measured under load, near the suite's 60 s default.
@pytest.mark.timeout(180)
async def test_bad_targets_fail_in_one_line(pg_server: PgServer, source: Path, tmp_path: Path):
    """Unreachable server, wrong scheme, hostile URL, missing database, unknown role and a
    newer schema: each one line naming the problem, never the password."""
    port = pg_server.port
    cases = {
        "postgresql://u:hunter2@127.0.0.1:1/x": "connection refused",
        "mysql://u:hunter2@127.0.0.1/x": "not a PostgreSQL URL",
        "postgresql://u:hunter2@127.0.0.1/x\r\nSET evil": "control characters",
        f"postgresql://memwarden:hunter2@127.0.0.1:{port}/x';DROP TABLE blocks;--": (
            "no such database"
        ),
        f"postgresql://nobody_at_all:hunter2@127.0.0.1:{port}/postgres": "nobody_at_all",
        "postgresql://u:hunter2@[::1/x": "not a valid PostgreSQL URL",
        "postgresql://" + "a" * 5000: "characters long",
    }
    for url, expected in cases.items():
        line = _one_error_line(memwarden(tmp_path, "migrate", "--to", url, "--db", str(source)))
        assert expected in line, (url, line)
        assert "hunter2" not in line, line

    newer = pg_server.create_database()
    conn = await asyncpg.connect(newer)
    try:
        await migrate(conn)
        await conn.execute(f"UPDATE schema_version SET version = {SCHEMA_VERSION + 1}")
    finally:
        await conn.close()
    line = _one_error_line(memwarden(tmp_path, "migrate", "--to", newer, "--db", str(source)))
    assert f"schema version {SCHEMA_VERSION + 1}, newer than this memwarden" in line


async def test_copy_while_the_store_is_open_and_writing(pg_server: PgServer, tmp_path: Path):
    """The daemon may be running: the copy reads one snapshot (a WAL read transaction) and
    verifies against it; what another connection commits meanwhile is not in the copy."""
    import sqlite3  # noqa: PLC0415

    from memwarden.memory import Store  # noqa: PLC0415

    path = tmp_path / "live.db"
    await populate(path, blocks=8)
    dsn = pg_server.create_database()
    async with Store(path) as store:
        writer = sqlite3.connect(path, isolation_level=None)
        written = []

        def write_meanwhile(_table: str, chunks: int) -> None:
            writer.execute(
                "INSERT INTO meta (key, value) VALUES (?, 'during the copy')", (f"k{chunks}",)
            )
            written.append(chunks)

        try:
            report = await copy_to_postgres(path, dsn, chunk_rows=3, after_chunk=write_meanwhile)
        finally:
            writer.close()
        assert await store.get_meta("k1") == "during the copy"  # committed, in the source
    assert written
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM meta WHERE key LIKE 'k%'") == 0
    finally:
        await conn.close()
    assert report.rows > 0


def _tool(server: PgServer, name: str) -> str:
    """A PostgreSQL client program: beside the server's binaries, else Debian's, else PATH."""
    for candidate in (
        server.bindir / name,
        *sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True),
    ):
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    assert found, f"{name} is not installed (scripts/system-deps.sh installs postgresql)"
    return found


async def test_pg_dump_and_restore_keep_the_store(
    pg_server: PgServer, source: Path, tmp_path: Path
) -> None:
    """The backup docs/DEPLOY.md gives (pg_dump custom format, pg_restore into an empty
    database) brings back every row, the search column and the append-only triggers."""
    dsn = pg_server.create_database()
    await copy_to_postgres(source, dsn)
    dump = tmp_path / "store.dump"
    await asyncio.to_thread(
        subprocess.run,
        [_tool(pg_server, "pg_dump"), "--format=custom", f"--file={dump}", dsn],
        check=True,
        capture_output=True,
        timeout=120,
    )
    restored = pg_server.create_database()
    await asyncio.to_thread(
        subprocess.run,
        [_tool(pg_server, "pg_restore"), "--no-owner", f"--dbname={restored}", str(dump)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    await compare_everything(source, restored)
    conn = await asyncpg.connect(restored)
    try:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM blocks"
                " WHERE search @@ to_tsquery('memwarden_search', 'naive')"
            )
            == 1
        )
        with pytest.raises(asyncpg.RestrictViolationError):
            await conn.execute("DELETE FROM events")
    finally:
        await conn.close()
