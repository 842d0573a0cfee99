"""``--db postgresql://…``: the CLI's offline commands work on a PostgreSQL store as on a
file (the same ``Store``), export, import and forget included; a bad ``--db`` URL exits
2 without showing its password."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from memwarden.cli import app

if TYPE_CHECKING:
    from pathlib import Path

    from tests.pgserver import PgServer


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("MEMWARDEN_DB", "MEMWARDEN_URL", "MEMWARDEN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # no ./memwarden.toml: the defaults' privacy policy
    return CliRunner()


def test_add_list_search_get_on_postgresql(runner: CliRunner, pg_server: PgServer) -> None:
    dsn = pg_server.create_database()
    added = runner.invoke(app, ["add", "The cache lives on redis-7", "--db", dsn, "--json"])
    assert added.exit_code == 0, added.output
    block_id = json.loads(added.stdout)["id"]
    listed = runner.invoke(app, ["list", "--db", dsn, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [b["id"] for b in json.loads(listed.stdout)["blocks"]] == [block_id]
    found = runner.invoke(app, ["search", "redis", "--db", dsn, "--json"])
    assert found.exit_code == 0, found.output
    assert [r["block"]["id"] for r in json.loads(found.stdout)["results"]] == [block_id]
    got = runner.invoke(app, ["get", block_id, "--db", dsn, "--json"])
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout)["content"] == "The cache lives on redis-7"


def test_export_import_and_forget_on_postgresql(
    runner: CliRunner, pg_server: PgServer, tmp_path: Path
) -> None:
    """``export`` from one PostgreSQL store, ``import`` into another (whole blocks, same
    ids), ``forget`` there: the block is gone, a tombstone stays, and the answer lists
    what PostgreSQL keeps out of an erasure's reach."""
    source, target = pg_server.create_database(), pg_server.create_database()
    added = runner.invoke(app, ["add", "The queue is rabbitmq-3", "--db", source, "--json"])
    assert added.exit_code == 0, added.output
    block_id = json.loads(added.stdout)["id"]
    dump = tmp_path / "out.jsonl"
    exported = runner.invoke(app, ["export", str(dump), "--db", source])
    assert exported.exit_code == 0, exported.output
    [row] = [json.loads(line) for line in dump.read_text().splitlines()]
    assert row["block"]["id"] == block_id
    imported = runner.invoke(app, ["import", str(dump), "--db", target])
    assert imported.exit_code == 0, imported.output
    assert "imported 1 block(s), 0 already here" in imported.output
    again = runner.invoke(app, ["import", str(dump), "--db", target])
    assert "imported 0 block(s), 1 already here" in again.output
    got = runner.invoke(app, ["get", block_id, "--db", target, "--json"])
    assert json.loads(got.stdout)["content"] == "The queue is rabbitmq-3"

    forgot = runner.invoke(app, ["forget", block_id, "--yes", "--db", target, "--json"])
    assert forgot.exit_code == 0, forgot.output
    answer = json.loads(forgot.stdout)
    assert answer["erased"] == [block_id]
    assert any("VACUUM FULL" in u for u in answer["unreachable"])
    assert not any("SQLite" in u for u in answer["unreachable"])
    gone = runner.invoke(app, ["get", block_id, "--db", target])
    assert gone.exit_code != 0
    assert "Traceback" not in gone.output
    kept = runner.invoke(app, ["get", block_id, "--db", source, "--json"])
    assert kept.exit_code == 0, kept.output  # the source keeps its copy


def test_a_bad_db_url_exits_2_without_the_password(runner: CliRunner) -> None:
    result = runner.invoke(app, ["list", "--db", "mysql://root:hunter2@db/x"])
    assert result.exit_code == 2
    assert "--db" in result.output
    assert "hunter2" not in result.output


def test_an_unreachable_server_is_one_line_without_the_password(runner: CliRunner) -> None:
    result = runner.invoke(app, ["list", "--db", "postgresql://u:hunter2@127.0.0.1:1/db"])
    assert result.exit_code == 1
    assert "cannot connect to PostgreSQL" in result.output
    assert "hunter2" not in result.output


def test_backup_refuses_a_postgresql_store(runner: CliRunner, tmp_path: Path) -> None:
    """`backup` copies SQLite files: with ``[store] url`` on PostgreSQL it says to use
    pg_dump, never copying some stale file from the state dir."""
    (tmp_path / "memwarden.toml").write_text(
        '[store]\nurl = "postgresql://mw:hunter2@db.example/memory"\n'
    )
    result = runner.invoke(app, ["backup", str(tmp_path / "copy.db")])
    assert result.exit_code == 1
    assert "pg_dump" in result.output
    assert "hunter2" not in result.output
    assert not (tmp_path / "copy.db").exists()
