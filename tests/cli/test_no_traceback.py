"""No traceback ever reaches a user: every command, with a missing file, a bad file and a
stopped daemon, ends with a clear message and an exit code."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest
import typer
from typer.testing import CliRunner

from memwarden.cli import app
from tests.projects import MEMWARDEN, user_env

if TYPE_CHECKING:
    from pathlib import Path

# What each command is given in each case ("{missing}", "{bad}" and "{dir}" are filled in).
# `add --db` and `import --db` start a new database file where none is: no missing case.
MISSING: dict[str, list[list[str]]] = {
    "run": [["run", "--config", "{missing}"]],
    "config": [["config", "check", "{missing}"]],
    "init": [["init", "{missing}"]],
    "import": [["import", "{missing}"], ["import", "{missing}", "--db", "{dir}/new.db"]],
    "export": [["export", "{dir}/no/such/dir/out.jsonl", "--db", "{missing}"]],
    "backup": [["backup", "{dir}/copy.db", "--db", "{missing}"]],
    "agent": [["agent", "--config", "{missing}"]],
    "get": [["get", "x", "--db", "{missing}"]],
    "search": [["search", "x", "--db", "{missing}"]],
    "reembed": [["reembed", "--db", "{missing}"]],
    "stale": [["stale", "--db", "{missing}"]],
    "list": [["list", "--db", "{missing}"]],
    "events": [["events", "x", "--db", "{missing}"]],
    "explain": [["explain", "x", "--db", "{missing}"]],
    "review": [["review", "list", "--db", "{missing}"]],
    "forget": [["forget", "x", "--yes", "--db", "{missing}"]],
    "migrate": [["migrate", "--to", "postgresql://u:pw@127.0.0.1:1/x", "--db", "{missing}"]],
}
BAD: dict[str, list[list[str]]] = {
    "run": [["run", "--config", "{bad}"]],
    "config": [["config", "check", "{bad}"]],
    "init": [["init", "{bad}"]],
    "import": [["import", "{bad}"], ["import", "{bad}", "--db", "{bad}"], ["import", "{dir}"]],
    "export": [["export", "-", "--db", "{bad}"], ["export", "{dir}"]],
    "backup": [["backup", "{dir}/copy.db", "--db", "{bad}"]],
    "agent": [["agent", "--config", "{bad}"]],
    "add": [["add", "x", "--bind", "{{not json"], ["add", "x", "--db", "{bad}"]],
    "bind": [
        ["bind", "x", "--binding", "{{not json"],
        ["bind", "x"],
        ["bind", "x", "--auto", "--clear"],
    ],
    "get": [["get", "x", "--db", "{bad}"]],
    "search": [["search", "x", "--db", "{bad}"], ["search", "x", "--mode", "sideways"]],
    "reembed": [["reembed", "--db", "{bad}"]],
    "stale": [["stale", "--db", "{bad}"]],
    "list": [["list", "--db", "{bad}"]],
    "events": [["events", "x", "--db", "{bad}"]],
    "explain": [["explain", "x", "--db", "{bad}"]],
    "review": [["review", "list", "--db", "{bad}"]],
    "forget": [["forget", "x", "--yes", "--db", "{bad}"], ["forget", "--query", "*", "--yes"]],
    "migrate": [
        ["migrate", "--to", "postgresql://u:pw@127.0.0.1:1/x", "--db", "{bad}"],
        ["migrate", "--to", "mysql://x", "--db", "{bad}"],
    ],
}
# Against a daemon that is not running (its state dir has a token, no api.json).
STOPPED: dict[str, list[list[str]]] = {
    "status": [["status"]],
    "add": [["add", "x"]],
    "get": [["get", "x"]],
    "search": [["search", "x"]],
    "reembed": [["reembed"]],
    "stale": [["stale"]],
    "list": [["list"]],
    "events": [["events", "x"]],
    "explain": [["explain", "x"]],
    "revalidate": [["revalidate", "x"]],
    "suggest": [["suggest", "x"]],
    "bind": [["bind", "x", "--auto"], ["bind", "x", "--clear"]],
    "health": [["health"]],
    "tail": [["tail"]],
    "export": [["export", "-"]],
    "import": [["import", "{good}"]],
    "review": [
        ["review", "list"],
        ["review", "show", "x"],
        ["review", "confirm", "x", "--by", "me"],
        ["review", "reject", "x", "--by", "me"],
        ["review", "edit", "x", "new text", "--by", "me"],
        ["review", "--open"],
    ],
    "sensors": [["sensors"]],
    "forget": [["forget", "x", "--yes"], ["forget", "--tag", "t", "--dry-run"]],
    "open": [["open"], ["open", "x"]],
}
# Commands that answer without a daemon (what is installed) may succeed when it is stopped.
WORKS_WITHOUT_DAEMON = {"sensors"}
NO_FILES_NO_DAEMON = {
    "demo": "its own workspace and daemon (tests/test_demo.py)",
    "mcp": "a stdio server: run as a process below",
}


def _commands() -> set[str]:
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    names |= {g.name or "" for g in app.registered_groups}
    return names - {""}


def test_every_command_is_covered():
    """A new command must say here what it does with bad input."""
    covered = set(MISSING) | set(BAD) | set(STOPPED) | set(NO_FILES_NO_DAEMON)
    assert _commands() - covered == set()


@pytest.fixture
def case_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "token").write_text("t" * 43 + "\n")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\xffnot toml, not json, not sqlite [[[\n{\n")
    good = tmp_path / "good.jsonl"
    good.write_text('{"content": "a fact"}\n')
    for name in ("MEMWARDEN_URL", "MEMWARDEN_TOKEN", "MEMWARDEN_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMWARDEN_HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    return {
        "missing": str(tmp_path / "missing.file"),
        "bad": str(bad),
        "dir": str(tmp_path),
        "good": str(good),
    }


@pytest.mark.parametrize("table", [MISSING, BAD, STOPPED], ids=["missing", "bad", "stopped"])
def test_no_traceback(table: dict[str, list[list[str]]], case_env: dict[str, str]):
    runner = CliRunner()
    failures = []
    for name, argvs in table.items():
        for template in argvs:
            argv = [a.format(**case_env) for a in template]
            result = runner.invoke(app, argv)
            crashed = result.exception is not None and not isinstance(
                result.exception, (SystemExit, typer.Exit)
            )
            succeeded = result.exit_code == 0 and name not in WORKS_WITHOUT_DAEMON
            if crashed or "Traceback" in result.output or succeeded:
                failures.append((argv, result.exit_code, repr(result.exception), result.output))
            elif not result.output.strip():
                failures.append((argv, result.exit_code, "no message", ""))
    assert failures == []


def test_mcp_against_a_stopped_daemon_has_no_traceback(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "token").write_text("t" * 43 + "\n")
    env = user_env(tmp_path, {"MEMWARDEN_HOME": str(home)})
    result = subprocess.run(
        [str(MEMWARDEN), "mcp"],
        input="not json-rpc\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout
