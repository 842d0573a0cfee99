"""State files are the daemon user's alone, whatever the umask; so is the Unix socket.

Every daemon here runs under umask 000, the worst case: without explicit modes every
file it made would be world-readable and the socket world-writable.
"""

from __future__ import annotations

import grp
import json
import os
import socket
import stat
import subprocess
from typing import TYPE_CHECKING

import httpx

from tests.security.conftest import client_for, daemon_env
from tests.support import MEMWARDEN, eventually_blocking

if TYPE_CHECKING:
    from pathlib import Path

EX_CONFIG = 78


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _loose(home: Path) -> list[str]:
    """Every path under ``home`` that group or others may use, with its mode."""
    found = [] if not _mode(home) & 0o077 else [f"{home} {_mode(home):04o}"]
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            path = home.joinpath(root, name)
            if _mode(path) & 0o077:
                found.append(f"{path} {_mode(path):04o}")
    return found


def test_state_files_are_0600_and_a_loose_state_dir_is_tightened(
    tmp_path, spawn_daemon, health_watch
):
    """umask 000, a 0755 state dir and 0644 score logs from before: once running (a block
    added, checked, the fs state saved) every file is 0600 and the dir 0700, logged."""
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    for old in ("scores.jsonl", "scores.jsonl.1"):
        (home / old).write_text("{}\n")
        (home / old).chmod(0o644)
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("hello\n")
    sensors = {"fs": {"roots": [str(project)], "state_flush_ms": 0}}
    daemon = spawn_daemon(home, umask=0, MEMWARDEN_SENSORS=json.dumps(sensors))
    with health_watch(daemon.url), client_for(daemon.url, headers=daemon.auth) as api:
        block = api.post(
            "/v1/blocks",
            json={"content": "a.txt exists", "bindings": [{"sensor": "fs", "path": "a.txt"}]},
        )
        assert block.status_code == 201, block.text
        checked = api.post(f"/v1/blocks/{block.json()['id']}/revalidate", params={"wait": "5s"})
        assert checked.status_code == 200, checked.text
        state = home / "sensors" / "fs" / "fs-state.json"
        eventually_blocking(state.exists, what="fs-state.json", process=daemon.process)
    expected = [
        "token",
        "api.json",
        "memwarden.db",
        "memwarden.db-wal",
        "memwarden.db-shm",
        "scores.jsonl",
        "scores.jsonl.1",
        "sensors/fs/fs-state.json",
    ]
    for name in expected:
        assert _mode(home / name) == 0o600, (name, f"{_mode(home / name):04o}")
    assert _mode(home) == 0o700
    assert _loose(home) == []
    log = daemon.log()
    assert "state_dir_tightened" in log
    assert "0755" in log

    # A backup of the live database, taken under umask 000 too: 0600.
    backups = tmp_path / "backups"
    backups.mkdir()
    taken = subprocess.run(
        [str(MEMWARDEN), "backup", str(backups / "copy.db")],
        env=daemon_env(home),
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        umask=0,
    )
    assert taken.returncode == 0, taken.stderr.decode()
    assert _mode(backups / "copy.db") == 0o600
    assert [p.name for p in backups.iterdir()] == ["copy.db"]


def test_the_unix_socket_is_0600_from_the_start(tmp_path, spawn_daemon, health_watch):
    """[api] unix_socket under umask 000: a socket file, 0600, that serves the API."""
    sock = tmp_path / "mw.sock"
    daemon = spawn_daemon(tmp_path / "home", umask=0, MEMWARDEN_API__UNIX_SOCKET=str(sock))
    assert daemon.url == f"unix:{sock}"
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    assert _mode(sock) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    with health_watch(daemon.url), client_for(daemon.url) as api:
        assert api.get("/v1/sensors").status_code == 401
        assert api.get("/v1/sensors", headers=daemon.auth).status_code == 200


def test_a_socket_group_makes_it_0660_for_that_group(tmp_path, spawn_daemon):
    """[api] socket_group: the socket is 0660 and belongs to that group."""
    group = grp.getgrgid(os.getegid()).gr_name
    sock = tmp_path / "mw.sock"
    spawn_daemon(
        tmp_path / "home",
        umask=0,
        MEMWARDEN_API__UNIX_SOCKET=str(sock),
        MEMWARDEN_API__SOCKET_GROUP=group,
    )
    assert _mode(sock) == 0o660
    assert sock.lstat().st_gid == os.getegid()


def test_a_stale_socket_is_replaced(tmp_path, spawn_daemon):
    """A socket file left by a crashed daemon is replaced by a fresh 0600 one."""
    sock = tmp_path / "mw.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()
    sock.chmod(0o666)
    daemon = spawn_daemon(tmp_path / "home", MEMWARDEN_API__UNIX_SOCKET=str(sock))
    assert _mode(sock) == 0o600
    with client_for(daemon.url) as api:
        assert api.get("/healthz").status_code == 200


def test_a_file_at_the_socket_path_is_refused_and_left_alone(tmp_path):
    """A regular file where the socket should go: exit 78 naming it; the file is untouched."""
    sock = tmp_path / "mw.sock"
    sock.write_text("precious")
    result = subprocess.run(
        [str(MEMWARDEN), "run"],
        env=daemon_env(tmp_path / "home", MEMWARDEN_API__UNIX_SOCKET=str(sock)),
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == EX_CONFIG, output
    assert "is not a socket" in output
    assert "Traceback" not in output
    assert sock.read_text() == "precious"


def test_an_unknown_socket_group_is_refused(tmp_path):
    """A socket_group that does not exist: exit 78 naming the setting, no socket made."""
    sock = tmp_path / "mw.sock"
    result = subprocess.run(
        [str(MEMWARDEN), "run"],
        env=daemon_env(
            tmp_path / "home",
            MEMWARDEN_API__UNIX_SOCKET=str(sock),
            MEMWARDEN_API__SOCKET_GROUP="no-such-group-mw",
        ),
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == EX_CONFIG, output
    assert "socket_group" in output
    assert not sock.exists()


def test_healthz_over_tcp_needs_nothing(tmp_path, spawn_daemon):
    """/healthz stays open (liveness probes carry no token)."""
    daemon = spawn_daemon(tmp_path / "home")
    assert httpx.get(f"{daemon.url}/healthz", timeout=5).status_code == 200
