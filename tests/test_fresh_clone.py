"""Acceptance: a fresh clone, `make run`, and the README's tour as written.

The test clones this repository (its committed HEAD) into a temporary directory, starts
`make run` there and runs the lines of the README block marked ``<!-- tour: ... -->`` one
by one in one bash session (so ``id=$(...)`` carries over), each of which must exit 0.
The fs-bound fact the tour adds must be ``fresh`` within 2 s, and the id the CLI printed
for it must be accepted by ``memwarden get``.

`make run` reuses the venv this suite runs in (``VENV=<it> SKIP_INSTALL=1``, documented in
the Makefile) instead of installing a new one: the clone's own code runs from it through
``PYTHONPATH=<clone>/src``, which wins over the venv's editable install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support import api_url, eventually_blocking

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent
TOUR = re.compile(r"<!-- tour:[^>]*-->\s*```sh\n(.*?)```", re.DOTALL)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (ROOT / ".git").exists() or shutil.which("make") is None,
        reason="needs a git checkout and make",
    ),
]


def tour_commands(readme: str) -> list[str]:
    """The tour block's commands: continuation lines joined, comment-only lines dropped."""
    found = TOUR.search(readme)
    assert found, "README.md has no <!-- tour --> block"
    commands: list[str] = []
    pending = ""
    for line in found.group(1).splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    assert not pending, "the tour block ends inside a continued line"
    return commands


def test_the_tour_is_extracted_as_commands():
    commands = tour_commands((ROOT / "README.md").read_text())
    assert commands[0].startswith("memwarden status")
    assert any(c.startswith("id=$(memwarden add ") and "pyproject.toml" in c for c in commands)


class Shell:
    """One bash session; ``run`` returns a command's exit status and output."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, command: str) -> tuple[int, str]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        marker = f"__done_{uuid.uuid4().hex}__"
        self.proc.stdin.write(f"{command}\necho {marker} $?\n")
        self.proc.stdin.flush()
        lines = []
        for line in self.proc.stdout:  # bounded by the test's timeout
            if line.startswith(marker):
                return int(line.split()[1]), "".join(lines)
            lines.append(line)
        pytest.fail(f"bash ended during {command!r}: {''.join(lines)}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    target = tmp_path / "memwarden"
    subprocess.run(
        ["git", "clone", "--quiet", str(ROOT), str(target)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return target


@pytest.fixture
def make_run(clone: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MEMWARDEN_", "COV_", "COVERAGE"))
    }
    env["PYTHONPATH"] = str(clone / "src")
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    log = (tmp_path / "make-run.log").open("wb")
    proc = subprocess.Popen(
        ["make", "run", f"VENV={VENV}", "SKIP_INSTALL=1"],
        cwd=clone,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: make and the daemon stop together
    )
    try:
        eventually_blocking(
            lambda: api_url(clone / ".memwarden"),
            timeout_s=90,
            what=f"make run listening (log {tmp_path / 'make-run.log'})",
            process=proc,
        )
        yield env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _fresh_within(clone: Path, block_id: str, deadline: float) -> None:
    """Wait until the block is fresh, failing at ``deadline`` (polled over HTTP: a CLI
    start costs more than the 2 s this measures)."""
    home = clone / ".memwarden"
    auth = {"Authorization": f"Bearer {(home / 'token').read_text().strip()}"}
    with httpx.Client(base_url=api_url(home), headers=auth, timeout=2) as client:

        def state() -> str:
            return str(client.get(f"/v1/blocks/{block_id}").raise_for_status().json()["state"])

        eventually_blocking(
            lambda: state() == "fresh",
            timeout_s=max(0.0, deadline - time.monotonic()),
            what=f"{block_id} fresh within 2 s of the add",
        )


@pytest.mark.timeout(300)
def test_fresh_clone_make_run_and_the_readme_tour(clone: Path, make_run: dict[str, str]):
    commands = tour_commands((clone / "README.md").read_text())
    shell = Shell(clone, make_run)
    try:
        for command in commands:
            code, output = shell.run(command)
            assert code == 0, f"{command!r} exited {code}:\n{output}"
            if command.startswith("id=$(memwarden add "):
                added_at = time.monotonic()
                _, shown = shell.run('echo "$id"')
                short = shown.strip()
                assert short
                _fresh_within(clone, short, added_at + 2.0)
                code, got = shell.run(f"memwarden get {short} --json")
                assert code == 0, got  # the id the CLI showed is accepted
                assert json.loads(got)["state"] == "fresh"
    finally:
        shell.close()
