"""`memwarden status` says which daemon it talks to and whether it is up; --home picks one."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from memwarden.cli import app

if TYPE_CHECKING:
    from pathlib import Path

    from tests.api.conftest import LiveDaemon


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("MEMWARDEN_HOME", "MEMWARDEN_URL", "MEMWARDEN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_status_of_a_running_daemon(runner: CliRunner, live_daemon: LiveDaemon):
    result = runner.invoke(app, ["--home", str(live_daemon.home), "status", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["home"] == str(live_daemon.home)
    assert info["found_by"] == "--home"
    assert info["url"] == live_daemon.url
    assert info["up"] is True
    assert info["version"]
    assert info["search"] == {"embedder": None, "vectors": 0, "embedding_backlog": 0}
    text = runner.invoke(app, ["--home", str(live_daemon.home), "status"])
    assert text.exit_code == 0
    assert f"home     {live_daemon.home}" in text.stdout
    assert "daemon   up" in text.stdout
    assert "search   keyword only (no embedder)" in text.stdout


def test_status_of_a_stopped_daemon_exits_3_and_names_the_state_dir(
    runner: CliRunner, tmp_path: Path
):
    home = tmp_path / ".memwarden"  # found from the current directory
    home.mkdir()
    (home / "token").write_text("x" * 40)
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 3, result.output
    assert f"home     {home}" in result.stdout
    assert "daemon   down: memwarden is not running for" in result.stdout
    assert "Traceback" not in result.output


def test_status_where_no_daemon_ever_ran(runner: CliRunner, tmp_path: Path):
    result = runner.invoke(app, ["status", "--json"])
    assert result.exit_code == 1
    info = json.loads(result.stdout)
    assert info["home"] == str(tmp_path / "xdg" / "memwarden")
    assert info["found_by"] == "the user state dir"
    assert info["up"] is False
    assert "no API token" in info["error"]


def test_home_flag_wins_over_the_environment(
    runner: CliRunner, live_daemon: LiveDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MEMWARDEN_HOME", str(tmp_path / "elsewhere"))
    result = runner.invoke(app, ["--home", str(live_daemon.home), "health", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["score"] >= 0
