"""``memwarden open [ID]``: a one-time sign-in link to the console, to a block's page."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import httpx
import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.client import Endpoint

if TYPE_CHECKING:
    from tests.api.conftest import LiveDaemon


@pytest.fixture
def runner(live_daemon: LiveDaemon, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("MEMWARDEN_HOME", str(live_daemon.home))
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    return CliRunner()


def _link(output: str) -> str:
    return next(line for line in output.splitlines() if "/review/login?token=" in line).strip()


def test_open_with_an_id_signs_in_once_onto_the_block_page(runner):
    """The link signs in (once) and lands on the block's page; a short id works too."""
    added = runner.invoke(app, ["add", "The console listens on loopback", "--json"])
    block = json.loads(added.stdout)
    result = runner.invoke(app, ["open", block["short_id"], "--by", "dana"])
    assert result.exit_code == 0, result.output
    link = _link(result.stdout)
    with httpx.Client(follow_redirects=False) as web:
        first = web.get(link)
        assert first.status_code == 303
        assert first.headers["location"] == f"/review/blocks/{block['id']}"
        page = web.get(httpx.URL(link).join(first.headers["location"]))
        assert page.status_code == 200
        assert "The console listens on loopback" in page.text
        assert "signed in as dana" in page.text
        assert web.get(link).status_code == 401  # once only


def test_open_without_an_id_goes_to_search_and_an_unknown_id_is_refused(runner):
    """No id: the search page; an unknown id: exit 1 naming it, and no link printed."""
    result = runner.invoke(app, ["open", "--by", "dana"])
    assert result.exit_code == 0, result.output
    with httpx.Client(follow_redirects=False) as web:
        assert web.get(_link(result.stdout)).headers["location"] == "/review/search"
    unknown = runner.invoke(app, ["open", "0123456789abcdef0123"])
    assert unknown.exit_code != 0
    assert "/review/login" not in unknown.output
    assert "Traceback" not in unknown.output


def test_get_and_search_print_the_console_url_of_a_block(runner, live_daemon):
    """Human output of get and search names each block's console page (the address only:
    it still needs a sign-in, which the printed `memwarden open ID` gives)."""
    added = runner.invoke(app, ["add", "The console listens on loopback", "--json"])
    block = json.loads(added.stdout)
    page = f"/review/blocks/{block['id']}"
    got = runner.invoke(app, ["get", block["id"]])
    assert got.exit_code == 0, got.output
    line = next(ln for ln in got.stdout.splitlines() if ln.startswith("console: "))
    url = line.split()[1]
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith(page)
    assert f"memwarden open {block['id']}" in line
    found = runner.invoke(app, ["search", "console loopback"])
    assert found.exit_code == 0, found.output
    assert url in found.stdout
    now = datetime.now(UTC).isoformat()  # after it was added (its created_at is rounded)
    then = runner.invoke(app, ["get", block["id"], "--as-of", now])
    assert then.exit_code == 0, then.output
    assert f"console: {url}  (sign in: memwarden open {block['id']})" in then.stdout
    then_json = runner.invoke(app, ["get", block["id"], "--as-of", now, "--json"])
    assert "/review/blocks/" not in then_json.stdout  # JSON output is unchanged
    with httpx.Client(follow_redirects=False) as web:
        assert web.get(url).status_code == 401  # sign-in needed
    as_json = json.loads(runner.invoke(app, ["get", block["id"], "--json"]).stdout)
    assert "/review/blocks/" not in json.dumps(as_json)  # JSON output is unchanged


def test_no_console_url_over_a_unix_socket_or_without_an_address():
    """A browser cannot open a Unix socket or an empty address: no URL then; an id is
    quoted into the path."""
    assert Endpoint("http://127.0.0.1:1", "t", uds="/run/mw.sock").console_url("a") is None
    assert Endpoint("", "t").console_url("a") is None
    assert Endpoint("http://127.0.0.1:1/", "t").console_url("a/b") == (
        "http://127.0.0.1:1/review/blocks/a%2Fb"
    )
