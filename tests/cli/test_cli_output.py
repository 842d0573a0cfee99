"""What people read: the CLI's human-readable output, on a prepared database file."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.memory import FakeClock, Store, ValidationEvent


@pytest.fixture
def db(tmp_path):
    """A database with one bound block that a sensor first confirmed, then saw change."""
    path = tmp_path / "m.db"

    async def prepare() -> str:
        clock = FakeClock(datetime.now(UTC))
        async with Store(path, clock=clock) as store:
            block = await store.add(
                {
                    "title": "API timeout",
                    "content": "The API timeout is 30 s",
                    "bindings": [{"sensor": "fs", "path": "config/app.yaml"}],
                }
            )
            for outcome in ("confirmed", "changed"):
                clock.advance(1)
                await store.apply_events(
                    [
                        ValidationEvent(
                            sensor="fs",
                            subject="config/app.yaml",
                            outcome=outcome,
                            observed_at=datetime.fromtimestamp(clock.time(), tz=UTC),
                            message=f"the file was {outcome}",
                        )
                    ]
                )
            return block.id

    return str(path), asyncio.run(prepare())


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_get_shows_state_reasons_and_bindings(db):
    """get prints the text, the state with its reasons, the validation and the bindings."""
    path, block_id = db
    shown = run("get", block_id, "--db", path)
    assert "The API timeout is 30 s" in shown
    assert "state stale (source_changed)" in shown
    assert "by fs" in shown
    assert "bound to fs: config/app.yaml" in shown


def test_events_table_shows_what_each_event_did(db):
    """events prints each observation with the state and reliability it moved."""
    path, block_id = db
    shown = " ".join(run("events", block_id, "--db", path).split())  # the table may wrap
    for fragment in ("unverified", "fresh", "stale", "0.90", "0.63", "changed", "confirmed"):
        assert fragment in shown


def test_stale_search_and_explain_tables(db):
    """stale lists the block; search shows its warnings; explain prints its breakdown."""
    path, block_id = db
    assert "API timeout" in run("stale", "--db", path)
    listed = run("search", "timeout", "--db", path)
    assert "stale" in listed
    assert "source_changed" in listed
    explained = run("explain", block_id, "--db", path)
    assert "retention" in explained
    data = json.loads(run("stale", "--db", path, "--json"))
    assert data[0]["stale_reasons"] == ["source_changed"]


def test_export_to_stdout_and_a_bad_import_line(db, tmp_path):
    """export - writes JSONL to stdout; import names the line that is not JSON."""
    path, _ = db
    lines = run("export", "-", "--db", path).splitlines()
    assert json.loads(lines[0])["bindings"][0]["sensor"] == "fs"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "fine"}\nnot json\n')
    result = CliRunner().invoke(app, ["import", str(bad), "--db", path])
    assert result.exit_code == 2
    assert "bad.jsonl:2: not JSON" in result.output


def test_sensors_table_lists_the_built_in_kinds():
    """sensors prints a table of the installed kinds with their distribution."""
    shown = run("sensors")
    for kind in ("fs", "code_test", "runtime", "http", "review"):
        assert kind in shown
    assert "memwarden" in shown
