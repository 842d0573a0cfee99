"""The token file: made once (0600, whole or not at all), and an unfit one stops the start.

Each unfit file is put in the state dir of ``memwarden run``: it must exit 78 (EX_CONFIG)
naming the file and the problem, with the token file untouched and no database, no
``api.json`` and no listener made. The symlink, directory and owner cases start a real
process (the status reaches the shell); the content and mode cases call the same command
in this process, which costs no interpreter start-up each.
"""

from __future__ import annotations

import os
import stat
import subprocess
from typing import TYPE_CHECKING

import httpx
import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from tests.security.conftest import daemon_env
from tests.support import MEMWARDEN

if TYPE_CHECKING:
    from pathlib import Path

EX_CONFIG = 78
GOOD = "k" * 43


def _prepare(home: Path, content: bytes, mode: int = 0o600) -> Path:
    home.mkdir(mode=0o700)
    path = home / "token"
    path.write_bytes(content)
    path.chmod(mode)
    return path


def _snapshot(path: Path) -> tuple[object, int, int]:
    info = path.lstat()
    if path.is_symlink():
        content: object = path.readlink()
    elif path.is_file():
        content = path.read_bytes()
    else:
        content = None
    return content, stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode)


def _run_process(home: Path) -> tuple[int, str]:
    """``memwarden run`` as a real process: its exit status and output."""
    result = subprocess.run(
        [str(MEMWARDEN), "run"],
        env=daemon_env(home),
        capture_output=True,
        timeout=60,
        check=False,
        cwd=home.parent,
    )
    return result.returncode, (result.stdout + result.stderr).decode()


def _run_in_process(home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """The same ``memwarden run`` command, called in this process: a start refused this
    early costs no interpreter start-up (the real process is run by the other tests)."""
    monkeypatch.chdir(home.parent)  # no ./memwarden.toml of wherever pytest runs
    result = CliRunner().invoke(app, ["run"], env=daemon_env(home))
    assert not isinstance(result.exception, Exception), result.exception  # exited, no crash
    return result.exit_code, result.output


def _refused(home: Path, *expected: str, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    path = home / "token"
    before = _snapshot(path)
    code, output = _run_process(home) if monkeypatch is None else _run_in_process(home, monkeypatch)
    assert code == EX_CONFIG, output
    assert "token file" in output
    for word in expected:
        assert word in output, (word, output)
    assert "Traceback" not in output
    assert _snapshot(path) == before
    assert not (home / "api.json").exists()
    assert not (home / "memwarden.db").exists()


@pytest.mark.parametrize(
    ("content", "mode", "expected"),
    [
        (b"", 0o600, ["is empty"]),
        (b"\n  \n", 0o600, ["is empty"]),
        (b"short-token\n", 0o600, ["11 characters", "at least 32"]),
        (GOOD.encode(), 0o644, ["mode 0644", "0600"]),
        (GOOD.encode(), 0o640, ["mode 0640"]),
        (GOOD.encode(), 0o606, ["mode 0606"]),
        ("é".encode() * 40, 0o600, ["printable ASCII"]),
        (b"k" * 20 + b" " + b"k" * 20, 0o600, ["printable ASCII"]),
        (b"k" * 5000, 0o600, ["larger than"]),
    ],
    ids=["empty", "blank", "short", "0644", "0640", "0606", "non-ascii", "space", "huge"],
)
def test_an_unfit_token_file_stops_the_start_with_exit_78(
    tmp_path, monkeypatch, content, mode, expected
):
    """Empty, blank, short, group/world-accessible, non-ASCII or huge: refused, untouched."""
    home = tmp_path / "home"
    _prepare(home, content, mode)
    _refused(home, *expected, monkeypatch=monkeypatch)


def test_a_symlinked_token_is_refused(tmp_path):
    """A token that is a symlink (to a file anyone could have planted) is refused."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text(GOOD)
    target.chmod(0o600)
    (home / "token").symlink_to(target)
    _refused(home, "symbolic link")
    (home / "token").unlink()
    (home / "token").symlink_to(tmp_path / "missing")  # dangling: not "absent", refused too
    _refused(home, "symbolic link")


def test_a_token_that_is_a_directory_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "token").mkdir(mode=0o700)
    _refused(home, "not a regular file")


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_token_owned_by_another_user_is_refused(tmp_path):
    home = tmp_path / "home"
    path = _prepare(home, GOOD.encode())
    os.chown(path, 4242, -1)
    _refused(home, "uid 4242", "daemon's user")


def test_a_missing_token_is_made_0600_whole_and_works(tmp_path, spawn_daemon, health_watch):
    """First start under umask 000: a 43-character token, 0600, no temp file left; it
    authorises, and an empty bearer does not."""
    home = tmp_path / "home"
    daemon = spawn_daemon(home, umask=0)
    path = home / "token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_uid == os.geteuid()
    assert len(daemon.token) == 43
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []
    with health_watch(daemon.url):
        assert httpx.get(f"{daemon.url}/v1/sensors", headers=daemon.auth).status_code == 200
        assert (
            httpx.get(f"{daemon.url}/v1/sensors", headers={"Authorization": "Bearer"}).status_code
            == 401
        )


def test_an_existing_good_token_is_kept(tmp_path, spawn_daemon):
    """A fit token file is used as it is, never regenerated."""
    home = tmp_path / "home"
    _prepare(home, (GOOD + "\n").encode())
    daemon = spawn_daemon(home)
    assert (home / "token").read_text() == GOOD + "\n"
    assert httpx.get(f"{daemon.url}/v1/sensors", headers=daemon.auth).status_code == 200
