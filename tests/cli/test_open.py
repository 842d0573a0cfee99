"""``memwarden open [ID]``: a one-time sign-in link to the console, to a block's page."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import pytest
from typer.testing import CliRunner

from memwarden.cli import app

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
