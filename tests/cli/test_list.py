"""memwarden list (filters, pages), add's default dedupe, and sensors: installed vs running."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from memwarden.cli import app

runner = CliRunner()


def run(*args: str, code: int = 0, **env: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80", **env})
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def test_list_filters_and_pages(tmp_path):
    db = str(tmp_path / "m.db")
    for i in range(5):
        run("add", f"fact number {i}", "-t", "odd" if i % 2 else "even", "--db", db)
    shown = run("list", "--db", db)
    assert shown.count("fact number") == 5
    evens = json.loads(run("list", "--tag", "even", "--db", db, "--json"))
    assert [b["content"] for b in evens["blocks"]] == [
        "fact number 0",
        "fact number 2",
        "fact number 4",
    ]
    assert evens["next"] is None
    page = run("list", "--limit", "2", "--db", db)
    assert "more: memwarden list --after " in page
    cursor = page.split("--after ")[1].split()[0]
    rest = json.loads(run("list", "--limit", "2", "--after", cursor, "--all", "--db", db, "--json"))
    assert [b["content"] for b in rest["blocks"]] == [
        "fact number 2",
        "fact number 3",
        "fact number 4",
    ]
    assert run("list", "--state", "refuted", "--db", db) == "no blocks match\n"
    assert "state" in run("list", "--state", "bogus", "--db", db, code=2)


def test_add_dedupes_by_default(tmp_path):
    db = str(tmp_path / "m.db")
    first = json.loads(run("add", "The cache holds 512 entries", "--db", db, "--json"))
    said = run("add", "the cache   holds 512 ENTRIES", "--db", db)
    assert said.startswith(f"already stored as {first['short_id']} (unverified")
    assert "nothing added" in said
    run("add", "The cache holds 512 entries", "--no-dedupe", "--db", db)
    assert json.loads(run("list", "--db", db, "--json"))["blocks"][1]["content"] == (
        "The cache holds 512 entries"
    )


def test_sensors_says_when_no_daemon_runs(tmp_path):
    out = run("sensors", MEMWARDEN_HOME=str(tmp_path), MEMWARDEN_URL="http://127.0.0.1:9")
    assert "fs" in out
    assert "daemon: not running" in out


def test_sensors_shows_what_the_daemon_runs(live_daemon):
    out = run("sensors", MEMWARDEN_HOME=str(live_daemon.home))
    assert f"daemon at {live_daemon.url}" in out
    rows = json.loads(run("sensors", "--json", MEMWARDEN_HOME=str(live_daemon.home)))
    fs = next(r for r in rows if r["kind"] == "fs")
    assert fs["status"] == "ok"
    assert isinstance(fs["instances"], list)


def test_after_takes_a_short_id_or_a_deleted_blocks_full_id(tmp_path):
    db = str(tmp_path / "m.db")
    blocks = [json.loads(run("add", f"paged fact {i}", "--db", db, "--json")) for i in range(3)]
    rest = json.loads(run("list", "--after", blocks[0]["short_id"], "--db", db, "--json"))
    assert [b["id"] for b in rest["blocks"]] == [blocks[1]["id"], blocks[2]["id"]]
    gone = blocks[0]["id"][:-1] + ("0" if blocks[0]["id"][-1] != "0" else "1")  # no such block
    rest = json.loads(run("list", "--after", gone, "--db", db, "--json"))
    assert len(rest["blocks"]) in (2, 3)  # a cursor, not a lookup: never an error
    assert "after" in run("list", "--after", "ab", "--db", db, code=2)
