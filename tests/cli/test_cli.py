"""The CLI end to end: against the running daemon, and offline on a database file."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from tests.api.conftest import REMOTE_SENSOR
from tests.cli.conftest import cli_for

if TYPE_CHECKING:
    from tests.api.conftest import LiveDaemon


@pytest.fixture
def cli(live_daemon: LiveDaemon, monkeypatch: pytest.MonkeyPatch):
    return cli_for(live_daemon.home, monkeypatch)


def _json(result: Any) -> Any:
    return json.loads(result.stdout)


def test_add_search_get_explain_revalidate_against_the_daemon(cli):
    """A fact added with the CLI is found, shown, explained and revalidated via the API."""
    added = _json(
        cli(
            "add",
            "The deploy window is 02:00 UTC",
            "--title",
            "deploy window",
            "-t",
            "ops",
            "--info-type",
            "static",
            "--json",
        )
    )
    block_id = added["id"]
    assert added["volatility"] == "low"
    found = _json(cli("search", "deploy window", "--json"))
    assert [r["block"]["id"] for r in found["results"]] == [block_id]
    assert "unverified: no sensor has confirmed it yet" in found["results"][0]["warnings"]
    shown = cli("get", block_id)
    assert "deploy window" in shown.stdout
    assert "state unverified" in shown.stdout
    explained = _json(cli("explain", block_id, "--json"))
    assert explained
    revalidated = _json(cli("revalidate", block_id, "--wait", "0s", "--json"))
    assert revalidated["requested"] == []  # no bindings: nothing to ask
    table = cli("search", "deploy")
    assert "deploy window" in table.stdout


def test_events_stale_and_health(cli):
    """events lists a block's history; stale and health answer in both formats."""
    block = _json(cli("add", "The queue holds 100 jobs", "--json"))
    assert _json(cli("events", block["id"], "--json")) == []
    assert "no events yet" in cli("events", block["id"]).stdout
    assert isinstance(_json(cli("stale", "--json")), list)
    health = _json(cli("health", "--json"))
    assert 0 <= health["score"] <= 100
    assert "health" in cli("health").stdout


def test_bad_input_is_one_clear_line_per_field(cli):
    """Invalid input prints the field and the expectation and exits 2, with no traceback."""
    result = cli("add", "x", "--reliability", "1.5", code=2)
    assert "reliability" in result.output
    assert "Traceback" not in result.output
    result = cli("add", "x", "--bind", '{"sensor": "nope", "path": "a"}', code=2)
    assert "bindings.0.sensor" in result.output
    result = cli("add", "x", "--bind", "not json", code=2)
    assert "--bind" in result.output


def test_unknown_block_is_an_error_naming_it(cli):
    """get of a missing id says so in one line and exits 1."""
    result = cli("get", "no-such-id", code=1)
    assert result.output == "error: no block with id 'no-such-id'\n"


def test_a_daemon_that_is_not_running_gives_one_clear_line(tmp_path, monkeypatch):
    """Without a daemon, the CLI says how to start it instead of printing a traceback."""
    monkeypatch.setenv("MEMWARDEN_HOME", str(tmp_path))
    monkeypatch.setenv("MEMWARDEN_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("MEMWARDEN_TOKEN", "left-over")
    result = CliRunner().invoke(app, ["search", "anything"])
    assert result.exit_code == 1
    assert "memwarden is not running" in result.output
    assert "memwarden run" in result.output
    assert "Traceback" not in result.output


def test_offline_on_a_database_file_with_export_and_import(tmp_path):
    """--db works without a daemon; export writes JSONL that import reads back."""
    runner = CliRunner()
    db = str(tmp_path / "a.db")
    for text in ("alpha fact one", "beta fact two"):
        assert runner.invoke(app, ["add", text, "--db", db]).exit_code == 0
    dump = tmp_path / "dump.jsonl"
    result = runner.invoke(app, ["export", str(dump), "--db", db])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    assert sorted(x["block"]["content"] for x in lines) == ["alpha fact one", "beta fact two"]
    assert all(x["format"] == "memwarden.export/1" and x["id"] for x in lines)
    other = str(tmp_path / "b.db")
    result = runner.invoke(app, ["import", str(dump), "--db", other])
    assert result.exit_code == 0, result.output
    found = json.loads(runner.invoke(app, ["search", "beta", "--db", other, "--json"]).stdout)
    assert [r["block"]["content"] for r in found["results"]] == ["beta fact two"]
    assert found["results"][0]["block"]["id"] in {x["id"] for x in lines}  # ids kept
    # plain objects (one new block per line, as earlier versions wrote) still import
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"content": "gamma fact three", "tags": ["g"]}\n')
    result = runner.invoke(app, ["import", str(plain), "--db", other])
    assert result.exit_code == 0, result.output
    assert "1 new block(s) created" in result.output


def test_config_check_lists_every_problem_with_its_path(tmp_path):
    """config check prints each problem as path: message and exits 1; a good file is ok."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[scheduler]\nsweep_interval = "5 minutes"\n[api]\nport = "x"\n[bogus]\na = 1\n')
    result = CliRunner().invoke(app, ["config", "check", str(bad)])
    assert result.exit_code == 1
    assert "scheduler.sweep_interval: '5 minutes' is not a duration" in result.stdout
    assert "api.port:" in result.stdout
    assert "bogus: unknown setting" in result.stdout
    good = tmp_path / "good.toml"
    good.write_text("[api]\nport = 8080\n")
    result = CliRunner().invoke(app, ["config", "check", str(good)])
    assert result.exit_code == 0, result.stdout
    assert "ok" in result.stdout


def test_version_and_sensors_listing():
    """--version prints the version; sensors lists installed plugins as JSON."""
    runner = CliRunner()
    assert "memwarden" in runner.invoke(app, ["--version"]).stdout
    listing = runner.invoke(app, ["sensors", "--json"])
    assert listing.exit_code == 0, listing.output
    assert isinstance(json.loads(listing.stdout), list)


def test_tail_prints_events_as_they_are_committed(cli, live_daemon):
    """tail shows committed events with what they did, and stops after --count."""
    import httpx  # noqa: PLC0415 - only this test posts directly

    bind = json.dumps({"sensor": REMOTE_SENSOR, "path": "tail.txt"})
    block = _json(cli("add", "tail watches this fact", "--bind", bind, "--json"))
    response = httpx.post(
        f"{live_daemon.url}/v1/events",
        headers=live_daemon.auth,
        json=[
            {
                "sensor": REMOTE_SENSOR,
                "block_id": block["id"],
                "outcome": "confirmed",
                "observed_at": "2026-01-01T00:00:00Z",
                "message": "looked at it",
            }
        ],
    )
    assert response.json()["accepted"] == 1
    latest = httpx.get(
        f"{live_daemon.url}/v1/events", headers=live_daemon.auth, params={"after": 0, "limit": 1000}
    ).json()
    seq = latest[-1]["seq"]
    lines = cli("tail", "--since", str(seq - 1), "--count", "1", "--json").stdout.splitlines()
    [event] = [json.loads(x) for x in lines]
    assert event["seq"] == seq
    assert event["effects"][0]["block_id"] == block["id"]
    assert event["effects"][0]["state"][1] in ("fresh", "stale")
    human = cli("tail", "--since", str(seq - 1), "--count", "1").stdout
    assert REMOTE_SENSOR in human


def test_run_with_a_bad_config_exits_78(tmp_path):
    """A configuration error is EX_CONFIG (78), which the systemd unit does not retry."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[api]\nport = "x"\n')
    result = CliRunner().invoke(app, ["run", "--config", str(bad)])
    assert result.exit_code == 78
    assert "api.port" in result.output


def test_review_flow_and_sign_in_link(cli, live_daemon):
    """add → ask a review → review list → confirm; --open prints a link that signs in once."""
    import httpx  # noqa: PLC0415 - only this test talks HTTP directly

    block = _json(cli("add", "We chose SQLite for storage", "--json"))
    asked = httpx.post(
        f"{live_daemon.url}/v1/blocks/{block['id']}/review",
        headers=live_daemon.auth,
        json={"reason": "a design decision: confirm it"},
    ).json()
    items = _json(cli("review", "list", "--json"))
    assert asked["review_id"] in [i["id"] for i in items]
    decided = _json(
        cli(
            "review",
            "confirm",
            asked["review_id"],
            "--by",
            "alice",
            "--comment",
            "still true",
            "--json",
        )
    )
    assert decided["review"]["decided_by"] == "alice"
    assert decided["block"]["state"] == "fresh"
    printed = cli("review", "--open", "--by", "bob").stdout
    link = next(line for line in printed.splitlines() if "/review/login?token=" in line)
    with httpx.Client(follow_redirects=False) as web:
        first = web.get(link.strip())
        assert first.status_code == 303
        assert "memwarden_review" in first.headers["set-cookie"]
        assert "HttpOnly" in first.headers["set-cookie"]
        assert web.get(link.strip()).status_code == 401  # once only


def test_export_and_import_keep_unicode_line_separators_inside_a_block(tmp_path):
    """JSONL lines end at "\\n" only: content holding U+2028, U+2029, U+0085 or a form feed
    (which str.splitlines() also splits at) is exported and imported whole."""
    runner = CliRunner()
    db, other = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    text = "line\u2028separator\u2029paragraph\x85next\x0cform feed\x1crecord"
    assert runner.invoke(app, ["add", text, "--db", db]).exit_code == 0
    dump = tmp_path / "dump.jsonl"
    assert runner.invoke(app, ["export", str(dump), "--db", db]).exit_code == 0
    result = runner.invoke(app, ["import", str(dump), "--db", other])
    assert result.exit_code == 0, result.output
    again = tmp_path / "again.jsonl"
    assert runner.invoke(app, ["export", str(again), "--db", other]).exit_code == 0
    assert again.read_text(encoding="utf-8") == dump.read_text(encoding="utf-8")
    assert text in json.loads(again.read_text(encoding="utf-8").split("\n")[0])["block"]["content"]
