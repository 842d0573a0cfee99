"""Export and import against the running daemon (API, client and CLI): idempotent by id."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING

import httpx
import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.client import Client
from memwarden.errors import ValidationInputError
from memwarden.memory import new_id
from tests.api.conftest import REMOTE_SENSOR

if TYPE_CHECKING:
    from pathlib import Path

    from tests.api.conftest import LiveDaemon


def _all(client: Client) -> list[dict]:
    rows: list[dict] = []
    after = None
    while page := client.export(after=after, limit=3):
        rows.extend(page)
        after = page[-1]["id"]
    return rows


def test_export_import_through_the_api(live_daemon: LiveDaemon):
    with Client(live_daemon.url, live_daemon.token) as client:
        mine = client.add(
            {
                "content": "The edge host keeps app.yaml",
                "bindings": [{"sensor": REMOTE_SENSOR, "path": "app.yaml"}],
            }
        )
        rows = _all(client)
        row = next(r for r in rows if r["id"] == mine.id)
        assert row["format"] == "memwarden.export/1"
        assert row["bindings"][0]["sensor"] == REMOTE_SENSOR
        # re-import: nothing changes
        answer = client.import_blocks(rows)
        assert answer["added"] == 0
        assert answer["existing"] == len(rows)
        assert _all(client) == rows

        # another memwarden's block: a new id, a sensor this daemon does not have
        other = copy.deepcopy(row)
        other["id"] = other["record"]["id"] = other["block"]["id"] = new_id()
        other["bindings"][0]["sensor"] = "their-sensor"
        other["history"] = []
        # it claims to have been confirmed by a person: a token holder cannot vouch
        other["record"].update(
            state="fresh", reliability=1.0, validated_by="review", validated_at=1.0
        )
        answer = client.import_blocks([other, {"content": "a plain new block"}])
        assert answer == {"added": 1, "existing": 0, "created": 1, "quarantined": 1}
        imported = client.get(other["id"])
        assert imported.content == "The edge host keeps app.yaml"
        assert imported.state == "unverified"
        assert imported.validation.reliability == 0.6  # the agent source's
        assert imported.validation.validated_by is None
        assert client.import_blocks([other])["added"] == 0


def test_a_malformed_import_is_refused_and_writes_nothing(live_daemon: LiveDaemon):
    with Client(live_daemon.url, live_daemon.token) as client:
        before = len(_all(client))
        bad = {"format": "memwarden.export/1", "id": new_id(), "record": {"id": "other"}}
        with pytest.raises(ValidationInputError) as info:
            client.import_blocks([bad])
        assert info.value.errors[0][0] == "0.record.id"
        assert len(_all(client)) == before
    answer = httpx.post(
        f"{live_daemon.url}/v1/import", headers=live_daemon.auth, content=b"{no", timeout=10
    )
    assert answer.status_code == 422
    assert "not JSON" in answer.text


def test_cli_export_needs_no_db_and_reimport_is_a_no_op(
    live_daemon: LiveDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MEMWARDEN_HOME", str(live_daemon.home))
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    runner = CliRunner()
    assert runner.invoke(app, ["add", "exported by the CLI"]).exit_code == 0
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    result = runner.invoke(app, ["export", str(first)])
    assert result.exit_code == 0, result.output
    lines = first.read_text().removesuffix("\n").split("\n")  # JSONL: lines end at a newline only
    assert any(json.loads(line)["block"]["content"] == "exported by the CLI" for line in lines)
    again = runner.invoke(app, ["import", str(first)])
    assert again.exit_code == 0, again.output
    assert f"imported 0 block(s), {len(lines)} already here (unchanged)" in again.output
    assert runner.invoke(app, ["export", str(second)]).exit_code == 0
    assert second.read_text() == first.read_text()
    # the same file into a new database file, offline: a full copy
    copy_db = tmp_path / "copy.db"
    offline = runner.invoke(app, ["import", str(first), "--db", str(copy_db)])
    assert offline.exit_code == 0, offline.output
    third = tmp_path / "third.jsonl"
    assert runner.invoke(app, ["export", str(third), "--db", str(copy_db)]).exit_code == 0
    assert third.read_text() == first.read_text()
