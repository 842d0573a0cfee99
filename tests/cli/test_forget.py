"""``memwarden forget``: lists first, confirms (or --yes), erases exactly what it listed;
hostile or empty selections are clear errors that change nothing."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from memwarden.cli import app

if TYPE_CHECKING:
    from pathlib import Path

    from tests.api.conftest import LiveDaemon


@pytest.fixture
def cli(live_daemon: LiveDaemon, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMWARDEN_HOME", str(live_daemon.home))
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    runner = CliRunner()

    def run(*args: str, code: int = 0, stdin: str | None = None) -> Any:
        result = runner.invoke(app, list(args), input=stdin)
        assert result.exit_code == code, result.output
        assert "Traceback" not in result.output
        return result

    return run


def _add(cli: Any, text: str, *tags: str) -> str:
    args = ["add", text, "--no-dedupe", "--json"]
    for t in tags:
        args += ["--tag", t]
    return str(json.loads(cli(*args).stdout)["id"])


def _gone(cli: Any, block_id: str) -> bool:
    return "no block with id" in cli("get", block_id, code=1).output


def test_dry_run_lists_and_changes_nothing_then_yes_erases(cli):
    """--dry-run lists the tagged blocks and keeps them; --yes erases exactly those."""
    tag = f"t{uuid.uuid4().hex[:8]}"
    a = _add(cli, "forget me alpha", tag)
    b = _add(cli, "forget me beta", tag)
    keep = _add(cli, "keep me gamma")
    listed = json.loads(cli("forget", "--tag", tag, "--dry-run", "--json").stdout)
    assert sorted(x["id"] for x in listed["blocks"]) == sorted([a, b])
    assert listed["erased"] == []
    cli("get", a)
    done = json.loads(cli("forget", "--tag", tag, "--yes", "--json", "--reason", "gdpr").stdout)
    assert sorted(done["erased"]) == sorted([a, b])
    assert done["removed"]["blocks"] == 2
    assert _gone(cli, a)
    assert _gone(cli, b)
    cli("get", keep)


def test_without_a_terminal_it_asks_for_yes(cli):
    """No --yes and no terminal: refused (exit 2), nothing erased."""
    block = _add(cli, "not without yes")
    result = cli("forget", block, code=2)
    assert "--yes" in result.output
    cli("get", block)


def test_a_no_at_the_prompt_keeps_everything(cli, monkeypatch):
    """Answering no keeps the block; yes erases it and prints what is out of reach."""
    block = _add(cli, "ask me first")
    monkeypatch.setattr("memwarden.cli._forget._interactive", lambda: True)
    result = cli("forget", block, stdin="n\n", code=1)
    assert "nothing erased" in result.output
    cli("get", block)
    result = cli("forget", block, stdin="y\n")
    assert "erased 1 block(s)" in result.output
    assert "backups" in result.output
    assert _gone(cli, block)


@pytest.mark.parametrize(
    ("args", "needle", "code"),
    [
        (["forget", "--yes", "--", "0190d2d8-0000-7000-8000-00000000dead"], "no block", 1),
        (["forget", "--yes", "--", "../../v1/blocks"], "no block with id '../../v1/blocks'", 1),
        (["forget", "--yes", "--", "--db=/etc/passwd"], "no block with id '--db=/etc/passwd'", 1),
        (["forget", "--yes"], "exactly one", 2),
        (["forget", "--yes", "--tag", "x", "--query", "y"], "exactly one", 2),
        (["forget", "--yes", "--query", '*"() :'], "query", 2),
    ],
)
def test_hostile_or_empty_selections_are_clear_errors(cli, args, needle, code):
    """Unknown ids, path-like or option-like ids, no or two selectors, a wordless query:
    one clear line, a non-zero exit, and the unrelated block still there."""
    keep = _add(cli, "a bystander fact")
    result = cli(*args, code=code)
    assert needle in result.output
    cli("get", keep)


def test_query_with_fts_syntax_is_matched_as_words(cli):
    """A query full of FTS operators is words: it finds the block holding them, no error."""
    word = f"w{uuid.uuid4().hex[:10]}"
    block = _add(cli, f"the {word} and NEAR thing")
    listed = json.loads(
        cli("forget", "--query", f'"{word}" AND NEAR(', "--dry-run", "--json").stdout
    )
    assert [x["id"] for x in listed["blocks"]] == [block]


def test_offline_on_a_database_file(tmp_path: Path):
    """--db erases in the file directly, and drops the score log's lines beside it."""
    runner = CliRunner()
    db = tmp_path / "memwarden.db"
    added = runner.invoke(app, ["add", "offline secret", "--db", str(db), "--json"])
    block_id = json.loads(added.stdout)["id"]
    (tmp_path / "scores.jsonl").write_text(
        json.dumps({"block_id": block_id}) + "\n" + json.dumps({"block_id": "other"}) + "\n"
    )
    result = runner.invoke(app, ["forget", block_id, "--db", str(db), "--yes", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["erased"] == [block_id]
    assert answer["score_log_lines"] == 1
    assert b"offline secret" not in db.read_bytes()
    assert block_id not in (tmp_path / "scores.jsonl").read_text()
