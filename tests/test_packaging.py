"""Installable like a tool: `python -m build` gives a wheel and an sdist, and the wheel,
installed into a fresh venv, runs `memwarden init`, `memwarden run` and `memwarden mcp`.

The fresh venv gets the wheel (pip install --no-deps) and nothing else of this checkout;
its dependencies come from the dev venv through a .pth file in its site-packages, so the
test needs no network and takes seconds. Paths listed in a .pth file are added without
reading the .pth files inside them: the dev venv's editable install of memwarden is not
picked up, and the test checks that `memwarden` is imported from the fresh venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support import start_memwarden

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("venv") / "fresh"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120
    )
    site = next((where / "lib").glob("python3*/site-packages"))
    (site / "dev-venv-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(dist.glob("memwarden-*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(where / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return where


def _env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MEMWARDEN_", "PYTHON", "COV_", "COVERAGE"))
    }
    env["XDG_STATE_HOME"] = str(tmp / "xdg")
    return env


def test_build_gives_a_wheel_and_an_sdist(dist: Path):
    assert len(list(dist.glob("memwarden-*-py3-none-any.whl"))) == 1
    assert len(list(dist.glob("memwarden-*.tar.gz"))) == 1


def test_the_installed_wheel_is_what_runs(venv: Path, tmp_path: Path):
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import memwarden; print(memwarden.__file__)"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv))


def test_init_run_and_mcp_from_the_wheel(venv: Path, tmp_path: Path):
    exe = str(venv / "bin" / "memwarden")
    env = _env(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.json").write_text('{"owner": "ops"}')
    init = subprocess.run(
        [exe, "init"], cwd=project, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert init.returncode == 0, init.stderr
    assert (project / "memwarden.toml").is_file()

    daemon = start_memwarden(
        project / ".memwarden",
        env=env,
        cwd=project,
        log_path=tmp_path / "daemon.log",
        timeout_s=60,
        exe=Path(exe),
    )
    try:
        status = subprocess.run(
            [exe, "status", "--json"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["up"] is True

        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "packaging-test", "version": "0"},
            },
        }
        mcp = subprocess.run(
            [exe, "mcp"],
            cwd=project,
            env=env,
            input=json.dumps(initialize) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        answer = json.loads(mcp.stdout.splitlines()[0])
        assert answer["id"] == 1
        assert answer["result"]["serverInfo"]["name"] == "memwarden"
        assert "Traceback" not in mcp.stderr
    finally:
        assert daemon.stop(timeout_s=30) == 0
