"""`memwarden add --auto-bind` / `--suggest` against a real `memwarden run` whose fs sensor
indexes the demo workspace."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from memwarden.demo import build_workspace
from tests.cli.conftest import cli_for
from tests.support import daemon_env, memwarden_running

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support import DaemonProcess

TIMEOUT = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("bind")
    build_workspace(root / "ws")
    home = root / "ws" / "state"
    sensors = json.dumps({"fs": {"roots": [str(root / "ws")], "index": True}})
    with memwarden_running(home, env=daemon_env(home, MEMWARDEN_SENSORS=sensors)) as running:
        yield running


@pytest.fixture
def cli(indexed: DaemonProcess, monkeypatch: pytest.MonkeyPatch):
    return cli_for(indexed.home, monkeypatch)


def _bindings(daemon: DaemonProcess, block_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{daemon.url}/v1/blocks/{block_id}", headers=daemon.auth, timeout=10)
    answer.raise_for_status()
    return list(answer.json()["bindings"])


def test_add_auto_bind_binds_and_prints_what_and_why(cli, indexed):
    """--auto-bind stores the confirming binding; the output names it and says why."""
    out = cli("add", "The API timeout is 30 s", "--auto-bind", "--no-dedupe").output
    assert out.startswith("added ")
    assert f"bound: {json.dumps(TIMEOUT)}" in out
    assert "the key /http/timeout matches timeout" in out
    data = json.loads(
        cli("add", "The API timeout is 30 s", "--auto-bind", "--no-dedupe", "--json").stdout
    )
    assert data["bind"]["chosen"]["binding"] == TIMEOUT
    assert data["bind"]["why"].startswith("bound: ")
    [stored] = _bindings(indexed, data["id"])
    assert TIMEOUT.items() <= stored.items()


def test_add_suggest_stores_unbound_and_prints_the_candidates(cli, indexed):
    out = cli("add", "The database host is db.internal", "--suggest", "--no-dedupe").output
    assert "stored unbound" in out
    assert '"key": "/database/host"' in out
    block_id = cli("add", "The web app is at version 2.4.1", "--suggest", "-q").stdout.strip()
    assert _bindings(indexed, block_id) == []


def test_add_auto_bind_shows_a_contradiction(cli):
    """A fact the file refutes is stored unbound, and the output says what the file says."""
    out = cli("add", "The API timeout is 45 s", "--auto-bind", "--no-dedupe").output
    assert "bound:" not in out
    assert "contradicted" in out
    assert "the file says 30" in out


def test_bind_flags_refuse_what_cannot_work(cli, tmp_path: Path, indexed):
    """Both flags, a flag with --bind, or a flag with --db: exit 2, one line, nothing stored."""
    before = httpx.get(f"{indexed.url}/v1/health", headers=indexed.auth, timeout=10).json()
    out = cli("add", "x", "--auto-bind", "--suggest", code=2).output
    assert "choose one" in out
    out = cli("add", "x", "--auto-bind", "--bind", json.dumps(TIMEOUT), code=2).output
    assert "--auto-bind and --bind" in out
    db = tmp_path / "offline.db"
    out = cli("add", "x", "--suggest", "--db", str(db), code=2).output
    assert "needs the running daemon" in out
    assert not db.exists()
    after = httpx.get(f"{indexed.url}/v1/health", headers=indexed.auth, timeout=10).json()
    assert after["counts"]["blocks"] == before["counts"]["blocks"]
    assert "Traceback" not in out


def test_review_proposals_list_accept_and_reject(cli, indexed):
    """`memwarden review proposals` lists what the pass proposed; accept-proposal binds the
    fact; deciding twice or an unknown --status is one line, exit 2."""
    block_id = cli("add", "The cache TTL is 10 minutes", "--no-dedupe", "-q").stdout.strip()
    other = cli("add", "The worker memory limit is 512Mi", "--no-dedupe", "-q").stdout.strip()
    ran = httpx.post(f"{indexed.url}/v1/proposal-pass", headers=indexed.auth, timeout=30)
    assert ran.json()["proposed"] >= 2
    listed = json.loads(cli("review", "proposals", "--json").stdout)
    mine = next(p for p in listed if p["block_id"].endswith(block_id[-8:]))
    assert mine["proposal"]["key"] == "/cache/ttl_s"
    theirs = next(p for p in listed if p["block_id"].endswith(other[-8:]))
    table = cli("review", "proposals").output
    assert "config/cache.yaml" in table
    assert "/cache/ttl_s equals=600" in table
    assert block_id.replace("-", "")[-8:] in table
    out = cli("review", "accept-proposal", mine["id"], "--by", "ann").output
    assert out.startswith(f"accepted {mine['id']}")
    [stored] = _bindings(indexed, mine["block_id"])
    assert stored["key"] == "/cache/ttl_s"
    out = cli("review", "reject-proposal", theirs["id"], "--by", "ann").output
    assert out.startswith("rejected")
    assert _bindings(indexed, theirs["block_id"]) == []
    again = cli("review", "accept-proposal", mine["id"], "--by", "ann", code=2).output
    assert "accepted already" in again
    assert "--status" in cli("review", "proposals", "--status", "maybe", code=2).output


def test_review_proposals_reads_a_database_file(cli, tmp_path: Path):
    db = tmp_path / "offline.db"
    cli("add", "The API timeout is 30 s", "--db", str(db))
    assert "no proposals pending" in cli("review", "proposals", "--db", str(db)).output
    assert json.loads(cli("review", "proposals", "--db", str(db), "--json").stdout) == []


def test_bind_auto_binds_a_stored_fact_and_says_why(cli, indexed):
    """`memwarden bind ID --auto` binds an unbound fact to the binding that confirms it."""
    block_id = cli("add", "The API timeout is 30 s", "--no-dedupe", "-q").output.strip()
    assert _bindings(indexed, block_id) == []
    out = cli("bind", block_id, "--auto").output
    assert out.startswith(f"bound {block_id}: ")
    assert '"key": "/http/timeout"' in out
    assert "confidence" in out
    assert TIMEOUT.items() <= _bindings(indexed, block_id)[0].items()


def test_bind_binding_replaces_and_clear_unbinds(cli, indexed):
    block_id = cli("add", "The web port is 8080", "--no-dedupe", "-q").output.strip()
    port = {"sensor": "fs", "path": "config/app.yaml", "exists": True}
    out = cli("bind", block_id, "--binding", json.dumps(port), "--json").output
    assert json.loads(out)["bindings"][0]["path"] == "config/app.yaml"
    assert _bindings(indexed, block_id)[0]["path"] == "config/app.yaml"
    out = cli("bind", block_id, "--clear").output
    assert "no bindings" in out
    assert _bindings(indexed, block_id) == []


def test_bind_refuses_a_bad_binding_naming_it_and_changes_nothing(cli, indexed):
    block_id = cli("add", "The API timeout is 30 s", "--no-dedupe", "-q").output.strip()
    out = cli("bind", block_id, "--binding", json.dumps({**TIMEOUT, "sensor": "nope"}), code=2)
    assert "bindings.0.sensor" in out.output
    outside = {"sensor": "fs", "path": "/etc/passwd", "exists": True}
    out = cli("bind", block_id, "--binding", json.dumps(outside), code=2)
    assert "bindings.0" in out.output
    out = cli("bind", block_id, "--binding", "{not json", code=2)
    assert "--binding 1: not JSON" in out.output
    out = cli("bind", block_id, code=2)
    assert "one of --auto, --binding or --clear" in out.output
    assert _bindings(indexed, block_id) == []
