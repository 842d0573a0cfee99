"""Projects side by side, as users run them: `init`, `run` in the project, the CLI from it.

Each project's daemon gets its own endpoint; the CLI finds the one of the directory it
runs in (or a parent's). A taken port is one line and exit 75; `memwarden tail` ends
normally when the daemon stops, and the daemon logs no traceback.
"""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.projects import Project, user_env
from tests.support import eventually_blocking

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow


@pytest.fixture
def projects(tmp_path: Path) -> Iterator[tuple[Project, Project]]:
    made = []
    for name in ("alpha", "beta"):
        root = tmp_path / name
        (root / "config").mkdir(parents=True)
        (root / "config" / "app.json").write_text(json.dumps({"timeout": 30, "name": name}))
        made.append(Project(root, user_env(tmp_path)))
    yield made[0], made[1]
    for p in made:
        if p.daemon is not None:
            p.stop()


def test_two_projects_each_with_its_own_daemon(projects: tuple[Project, Project]):
    alpha, beta = projects
    for p in (alpha, beta):
        assert p.cli("init").returncode == 0
    url_a, url_b = alpha.start(), beta.start()
    assert url_a != url_b

    status = json.loads(alpha.cli("status", "--json", cwd=alpha.root / "config").stdout)
    assert status["up"] is True
    assert status["url"] == url_a
    assert status["home"] == str(alpha.root / ".memwarden")

    binding = {"sensor": "fs", "path": "config/app.json", "key": "/timeout", "equals": 30}
    added = alpha.cli("add", "alpha's timeout is 30 s", "--bind", json.dumps(binding), "--json")
    assert added.returncode == 0, added.stderr
    block_id = json.loads(added.stdout)["id"]

    assert alpha.daemon is not None
    url, auth = alpha.daemon.url, alpha.daemon.auth

    def fresh() -> bool:  # over HTTP: a CLI start per poll costs seconds on a busy machine
        shown = httpx.get(f"{url}/v1/blocks/{block_id}", headers=auth, timeout=10)
        return shown.status_code == 200 and shown.json()["state"] == "fresh"

    eventually_blocking(fresh, timeout_s=30, what="the fs-bound fact is fresh")
    shown = alpha.cli("get", block_id, "--json")  # and alpha's CLI shows it so
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == "fresh"
    in_beta = beta.cli("search", "timeout", "--json")
    assert in_beta.returncode == 0, in_beta.stderr
    assert json.loads(in_beta.stdout)["results"] == []  # beta's daemon, beta's memory
    assert beta.cli("get", block_id).returncode == 1

    # A third daemon on alpha's port: one line, exit 75 (EX_TEMPFAIL), no traceback.
    gamma_root = alpha.root.parent / "gamma"
    gamma_root.mkdir()
    port = url_a.rsplit(":", 1)[1]
    gamma = Project(gamma_root, {**alpha.env, "MEMWARDEN_API__PORT": port})
    assert gamma.cli("init").returncode == 0
    taken = gamma.cli("run")
    assert taken.returncode == 75, taken.stderr
    lines = taken.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error")]
    logged = [json.loads(line) for line in lines if line.startswith("{")]  # stderr: a pipe
    assert not [e for e in logged if e["level"] in ("error", "critical")]  # said once, above
    expected = (
        f"error: api: 127.0.0.1:{port} is already in use (another memwarden? `memwarden "
        "status` says which; set [api] port = 0 for a free port)"
    )
    assert errors == [expected]
    assert "Traceback" not in taken.stderr
    assert "never retrieved" not in taken.stderr


def test_tail_ends_normally_when_the_daemon_stops(projects: tuple[Project, Project]):
    alpha, _ = projects
    assert alpha.cli("init").returncode == 0
    alpha.start()
    tail = subprocess.Popen(  # from the log's start: the add's event is shown, however late
        [str(alpha.exe), "tail", "--since", "0"],
        cwd=alpha.root,
        env=alpha.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        binding = {"sensor": "fs", "path": "config/app.json", "key": "/timeout", "equals": 30}
        added = alpha.cli("add", "the timeout is 30 s", "--bind", json.dumps(binding))
        assert added.returncode == 0, added.stderr
        assert tail.stdout is not None
        first = tail.stdout.readline()  # tail is in its follow loop: it printed an event
        assert "fs" in first
        assert "confirmed" in first
        assert alpha.stop() == 0
        _, stderr = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate()  # closes its pipes
    assert tail.returncode == 0, stderr
    assert "end of the event stream" in stderr
    log = alpha.log()
    assert "daemon_stopped" in log
    assert "Traceback" not in log
    assert "CancelledError" not in log
    assert "Exception in ASGI application" not in log
