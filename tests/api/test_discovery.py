"""A client finds its daemon like git finds a repository, and never mixes two state dirs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from memwarden.client import Client, DaemonNotRunningError, find_home, resolve_endpoint
from tests.support import start_memwarden

if TYPE_CHECKING:
    from pathlib import Path

    from tests.api.conftest import LiveDaemon


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("MEMWARDEN_HOME", "MEMWARDEN_URL", "MEMWARDEN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    return tmp_path


def _state(directory: Path, *, url: str | None, token: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token + "\n")
    if url is not None:
        (directory / "api.json").write_text(json.dumps({"url": url, "pid": 1}))
    return directory


def test_the_order_is_flag_then_environment_then_nearest_dot_memwarden_then_user_dir(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
):
    project = clean_env / "project"
    nested = project / "src" / "pkg"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    user_dir = clean_env / "xdg" / "memwarden"
    assert find_home().path == user_dir
    assert find_home().found_by == "the user state dir"

    (project / ".memwarden").mkdir()
    found = find_home()
    assert found.path.resolve() == (project / ".memwarden").resolve()
    assert str(project) in found.found_by

    (nested / ".memwarden").mkdir()  # the nearest one wins, as with git
    assert find_home().path.resolve() == (nested / ".memwarden").resolve()

    monkeypatch.setenv("MEMWARDEN_HOME", str(clean_env / "env-home"))
    assert find_home().path == clean_env / "env-home"
    assert find_home().found_by == "MEMWARDEN_HOME"
    assert find_home(clean_env / "flag-home").path == clean_env / "flag-home"
    assert find_home(clean_env / "flag-home").found_by == "--home"


def test_url_and_token_always_come_from_the_same_state_dir(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
):
    """A repository's ./.memwarden/api.json never receives a token kept elsewhere."""
    trusted = _state(clean_env / "trusted", url="http://127.0.0.1:7777", token="t" * 40)
    repo = clean_env / "repo"
    _state(repo / ".memwarden", url="http://evil.example:80", token="r" * 40)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("MEMWARDEN_HOME", str(trusted))
    endpoint = resolve_endpoint()
    assert (endpoint.url, endpoint.token) == ("http://127.0.0.1:7777", "t" * 40)

    # The trusted dir's daemon is stopped (no api.json): not running, not the repo's URL.
    (trusted / "api.json").unlink()
    endpoint = resolve_endpoint()
    assert endpoint.url == ""
    assert endpoint.token == "t" * 40
    with Client() as client, pytest.raises(DaemonNotRunningError, match="not running for"):
        client.health()

    # Without MEMWARDEN_HOME the repo's own dir is used: its own URL with its own token.
    monkeypatch.delenv("MEMWARDEN_HOME")
    endpoint = resolve_endpoint()
    assert (endpoint.url, endpoint.token) == ("http://evil.example:80", "r" * 40)


def test_an_explicit_url_is_used_as_given(clean_env: Path, monkeypatch: pytest.MonkeyPatch):
    home = _state(clean_env / "home", url="http://127.0.0.1:1111", token="t" * 40)
    assert resolve_endpoint("http://127.0.0.1:2222/", home=home).url == "http://127.0.0.1:2222"
    monkeypatch.setenv("MEMWARDEN_URL", "unix:/run/x.sock")
    endpoint = resolve_endpoint(home=home)
    assert endpoint.uds == "/run/x.sock"
    assert endpoint.shown == "unix:/run/x.sock"


def test_a_daemon_is_found_from_a_subdirectory_of_its_project(
    live_daemon: LiveDaemon, clean_env: Path, monkeypatch: pytest.MonkeyPatch
):
    project = clean_env / "project"
    _state(
        project / ".memwarden",
        url=json.loads((live_daemon.home / "api.json").read_text())["url"],
        token=live_daemon.token,
    )
    (project / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(project / "deep" / "er")
    with Client() as client:
        assert client.healthz()["status"] == "ok"
        assert client.health()["score"] >= 0


def test_a_given_token_never_goes_to_a_url_found_by_looking_around(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
):
    repo = clean_env / "repo"
    _state(repo / ".memwarden", url="http://evil.example:80", token="r" * 40)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("MEMWARDEN_TOKEN", "s" * 40)
    endpoint = resolve_endpoint()
    assert (endpoint.url, endpoint.token) == ("http://127.0.0.1:7077", "s" * 40)
    # a state dir the user names is trusted for its URL
    named = _state(clean_env / "named", url="http://127.0.0.1:5555", token="n" * 40)
    assert resolve_endpoint(home=named).url == "http://127.0.0.1:5555"
    assert resolve_endpoint(home=named).token == "s" * 40


def test_the_api_json_a_daemon_killed_with_kill_9_left_is_refused(clean_env: Path):
    """``kill -9`` leaves the daemon's ``api.json`` behind: a client on this host sees
    that the pid it names has exited and says so, instead of calling a dead (or reused)
    address."""
    home = clean_env / "home"
    d = start_memwarden(home)
    try:
        advert = json.loads((home / "api.json").read_text())
        assert (advert["pid"], advert["host"]) == (d.process.pid, socket.gethostname())
        with Client(home=home) as client:
            assert client.healthz()["status"] == "ok"
        d.process.kill()
        d.process.wait()
    finally:
        if d.alive():
            d.process.kill()
            d.process.wait()
    assert (home / "api.json").exists()  # nothing removed it
    endpoint = resolve_endpoint(home=home)
    assert (endpoint.url, endpoint.dead_pid) == ("", d.process.pid)
    with Client(home=home) as client, pytest.raises(DaemonNotRunningError) as err:
        client.healthz()
    assert f"names pid {d.process.pid}, which has exited" in str(err.value)
    assert str(home) in str(err.value)


def test_an_api_json_whose_pid_cannot_be_judged_here_is_used(clean_env: Path):
    """A live pid, another host's file (a shared state dir) or a file without a pid
    (an older daemon's) keep their URL."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    home = _state(clean_env / "h", url="http://127.0.0.1:5555", token="t" * 40)
    for advert, url in (
        ({"pid": os.getpid()}, "http://127.0.0.1:5555"),
        ({"pid": gone.pid, "host": "another-host"}, "http://127.0.0.1:5555"),
        ({}, "http://127.0.0.1:5555"),
        ({"pid": "12"}, "http://127.0.0.1:5555"),
        ({"pid": gone.pid}, ""),  # no host said: judged here
        ({"pid": gone.pid, "host": socket.gethostname()}, ""),
    ):
        (home / "api.json").write_text(json.dumps({"url": "http://127.0.0.1:5555", **advert}))
        assert resolve_endpoint(home=home).url == url, advert
