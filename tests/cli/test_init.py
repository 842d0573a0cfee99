"""`memwarden init` writes a working, commented config; `config check` finds every problem."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tomllib
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.cli._init import is_git_work_tree, render_config
from memwarden.daemon import load_settings
from memwarden.sensors.git import GitBinding, GitSensor

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("MEMWARDEN_HOME", "MEMWARDEN_URL", "MEMWARDEN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def _pytest_project(root: Path) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "tests" / "test_pkg.py").write_text("def test_ok():\n    pass\n")
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").write_text("")
    return root


def test_init_writes_a_config_for_a_pytest_project(runner: CliRunner, tmp_path: Path):
    project = _pytest_project(tmp_path / "proj")
    result = runner.invoke(app, ["init", str(project)])
    assert result.exit_code == 0, result.output
    assert "sensors fs, tests (code_test), http, review" in result.stdout
    assert "git" not in tomllib.loads((project / "memwarden.toml").read_text())["sensors"]
    text = (project / "memwarden.toml").read_text()
    assert text.startswith("# memwarden.toml for proj")
    data = tomllib.loads(text)
    assert data["home"] == ".memwarden"
    assert data["api"] == {"host": "127.0.0.1", "port": 0}
    fs = data["sensors"]["fs"]
    assert fs["roots"] == ["."]
    for name in (".git", ".venv", "node_modules", "__pycache__", ".memwarden"):
        assert name in fs["ignore"]
    tests = data["sensors"]["tests"]
    assert tests["kind"] == "code_test"
    assert tests["command"] == [".venv/bin/python", "-m", "pytest"]
    assert tests["source_dirs"] == ["src", "tests"]
    assert "127.0.0.1:*" in data["sensors"]["http"]["allowed_hosts"]
    assert "review" in data["sensors"]
    # and it is a valid configuration, sensors included
    check = runner.invoke(app, ["config", "check", str(project / "memwarden.toml")])
    assert check.exit_code == 0, check.output
    assert "ok (4 sensor(s))" in check.stdout


def _git_init(directory: Path) -> None:
    subprocess.run(
        ["git", "init", "-q", "-b", "main", str(directory)],
        env={"PATH": os.environ["PATH"], "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"},
        check=True,
        capture_output=True,
    )


def test_init_enables_git_in_a_git_work_tree(runner: CliRunner, tmp_path: Path):
    """In a git work tree init adds [sensors.git] rooted at the project; the config is
    valid, and the example binding in its comment is accepted by the running sensor."""
    project = _pytest_project(tmp_path / "proj")
    _git_init(project)
    result = runner.invoke(app, ["init", str(project)])
    assert result.exit_code == 0, result.output
    assert "sensors fs, tests (code_test), git, http, review" in result.stdout
    text = (project / "memwarden.toml").read_text()
    assert tomllib.loads(text)["sensors"]["git"] == {"roots": ["."]}
    assert '{"sensor": "git", "repo": ".", "branch": "main"}' in text
    check = runner.invoke(app, ["config", "check", str(project / "memwarden.toml")])
    assert check.exit_code == 0, check.output
    assert "ok (5 sensor(s))" in check.stdout
    with contextlib.chdir(project):  # relative roots are relative to the file, as in `run`
        settings = load_settings(project / "memwarden.toml")
        config = GitSensor.Config.model_validate(settings.sensors["git"].options)
    sensor = GitSensor(config)
    assert config.roots == [project.resolve()]
    sensor.validate_binding(GitBinding.model_validate({"repo": ".", "branch": "main"}))


def test_a_linked_work_tree_counts_and_a_plain_directory_does_not(tmp_path: Path):
    """``.git`` as a ``gitdir:`` file (git worktree add, submodules) is a work tree; a
    stray ``.git`` file saying something else is not."""
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / ".git").write_text("gitdir: /elsewhere/.git/worktrees/linked\n")
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / ".git").write_text("not a pointer")
    assert is_git_work_tree(tmp_path / "linked")
    assert not is_git_work_tree(tmp_path / "stray")
    assert not is_git_work_tree(tmp_path)
    assert "[sensors.git]" not in render_config(tmp_path / "stray")


def test_init_without_tests_and_with_an_explicit_python(runner: CliRunner, tmp_path: Path):
    result = runner.invoke(app, ["init"])  # the current directory
    assert result.exit_code == 0, result.output
    data = tomllib.loads((tmp_path / "memwarden.toml").read_text())
    assert sorted(data["sensors"]) == ["fs", "http", "review"]
    (tmp_path / "memwarden.toml").unlink()
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = checks\n")
    (tmp_path / "checks").mkdir()
    result = runner.invoke(app, ["init", "--python", "/opt/py/bin/python"])
    assert result.exit_code == 0, result.output
    tests = tomllib.loads((tmp_path / "memwarden.toml").read_text())["sensors"]["tests"]
    assert tests["command"][0] == "/opt/py/bin/python"
    assert tests["source_dirs"] == ["checks"]


def test_init_never_overwrites(runner: CliRunner, tmp_path: Path):
    (tmp_path / "memwarden.toml").write_text("# mine\n")
    result = runner.invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 1
    assert "exists; not overwriting" in result.output
    assert (tmp_path / "memwarden.toml").read_text() == "# mine\n"
    missing = runner.invoke(app, ["init", str(tmp_path / "nope")])
    assert missing.exit_code == 1
    assert "not a directory" in missing.output
    assert "Traceback" not in missing.output


def test_config_check_without_argument_checks_the_file_run_uses(runner: CliRunner, tmp_path: Path):
    none = runner.invoke(app, ["config", "check"])
    assert none.exit_code == 1
    assert "no memwarden.toml here" in none.output
    assert runner.invoke(app, ["init"]).exit_code == 0
    result = runner.invoke(app, ["config", "check"])
    assert result.exit_code == 0, result.output
    assert "memwarden.toml: ok (3 sensor(s))" in result.stdout


def test_config_check_reports_every_problem_in_one_pass(runner: CliRunner, tmp_path: Path):
    """Top-level problems and each sensor's own problems together, not in two rounds."""
    (tmp_path / "memwarden.toml").write_text(
        'log_level = "loud"\n'
        "[api]\nport = 99999\n"
        "[sensors.fs]\nroots = []\n"
        '[sensors.http]\ninterval = "soon"\n'
        '[sensors.odd]\nkind = "no-such-plugin"\n'
        '[sensors.bad]\nstartup = "sometimes"\n'
    )
    result = runner.invoke(app, ["config", "check"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("log_level:") for line in lines), lines
    assert any(line.startswith("api.port:") for line in lines), lines
    assert any(line.startswith("sensors.bad.startup:") for line in lines), lines
    assert any(line.startswith("sensors.fs.roots:") for line in lines), lines
    assert any(line.startswith("sensors.http.interval:") for line in lines), lines
    assert any(line.startswith("sensors.odd.kind:") for line in lines), lines


def test_run_uses_the_config_in_the_current_directory(runner: CliRunner, tmp_path: Path):
    """`run` finds ./memwarden.toml; a broken one is reported in full, exit 78."""
    (tmp_path / "memwarden.toml").write_text('log_level = "loud"\n[sensors.fs]\nroots = []\n')
    result = runner.invoke(app, ["run"])
    assert result.exit_code == 78
    assert "log_level:" in result.output
    assert "sensors.fs.roots:" in result.output
    assert "Traceback" not in result.output


def test_the_repository_config_is_what_init_writes_for_the_checkout(tmp_path: Path):
    """The committed memwarden.toml is `memwarden init --python .venv/bin/python` of the
    checkout: the README's examples bind to real files of this repository."""
    from pathlib import Path  # noqa: PLC0415 - the module only imports it for typing

    root = Path(__file__).resolve().parents[2]
    committed = (root / "memwarden.toml").read_text()
    assert committed == render_config(root, python=".venv/bin/python"), (
        "memwarden.toml is stale: rm memwarden.toml && memwarden init --python .venv/bin/python"
    )
    settings = load_settings(root / "memwarden.toml")
    assert sorted(settings.sensors) == ["fs", "git", "http", "review", "tests"]


def test_backup_finds_the_database_of_the_project_it_runs_in(runner: CliRunner, tmp_path: Path):
    assert runner.invoke(app, ["init"]).exit_code == 0
    db = tmp_path / ".memwarden" / "memwarden.db"
    assert runner.invoke(app, ["add", "a fact of this project", "--db", str(db)]).exit_code == 0
    copy = tmp_path / "copy.db"
    result = runner.invoke(app, ["backup", str(copy)])
    assert result.exit_code == 0, result.output
    assert f"backed up {db}" in result.stdout.replace("\n", "")
    assert copy.is_file()
