"""The CLI's writes with ``--db`` (no daemon) pass the same privacy doors as the API's:
``add`` (source agent), ``import`` (source import: plain rows and export objects) and the
review decisions (source review), with the policy of ./memwarden.toml overridden by one
a PUT kept in the database's state dir, and that dir's key, so placeholders equal the
daemon's. Checked on the bytes of the database file, not only on what the CLI prints."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import stat
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.daemon._privacy import POLICY_FILE, StoredPolicy, write_policy_file
from memwarden.memory import Store
from memwarden.privacy import PrivacySettings, Redactor
from tests.cli.conftest import invoker

if TYPE_CHECKING:
    from pathlib import Path

EMAIL = "Jane.Doe@example.com"
TOKEN = "ghp_" + "a1B2" * 9  # a GitHub token's shape


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args, code=0)`` in a directory of its own (no memwarden.toml unless the
    test writes one), with no memwarden variables from the environment."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in ("MEMWARDEN_HOME", "MEMWARDEN_URL", "MEMWARDEN_TOKEN", "MEMWARDEN_DB"):
        monkeypatch.delenv(name, raising=False)
    return invoker()


def raw_bytes(db: Path) -> bytes:
    """The database file and its WAL, as stored."""
    return b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def placeholder(home: Path, kind: str, normal: str) -> str:
    """The placeholder the daemon of ``home`` makes (its key, the default policy)."""
    key = bytes.fromhex((home / "privacy.key").read_text().strip())
    return Redactor(PrivacySettings(), key).placeholder(kind, normal)


def test_add_with_db_redacts_an_email_and_a_token(cli, tmp_path):
    """What an agent's add through the API would store: placeholders, made with the key
    beside the database (0600, made on first use), the raw values nowhere in the file."""
    db = tmp_path / "state" / "memwarden.db"
    db.parent.mkdir()
    out = cli("add", f"mail {EMAIL} with {TOKEN}", "--title", EMAIL, "--db", str(db), "--json")
    block = json.loads(out.stdout)
    email = placeholder(db.parent, "email", EMAIL.lower())
    assert block["content"].startswith(f"mail {email} with [secret:")
    assert block["title"] == email
    key = db.parent / "privacy.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    data = raw_bytes(db)
    for raw in (EMAIL, EMAIL.lower(), TOKEN):
        assert raw.encode() not in data, raw


def test_a_reject_rule_of_the_configuration_refuses_the_add(cli, tmp_path):
    (tmp_path / "work" / "memwarden.toml").write_text('[privacy.rules]\nemail = "reject"\n')
    db = tmp_path / "memwarden.db"
    result = cli("add", f"mail {EMAIL}", "--db", str(db), code=2)
    assert "content" in result.output
    assert "'email' is 'reject'" in result.output
    assert EMAIL.encode() not in raw_bytes(db)
    assert json.loads(cli("list", "--db", str(db), "--json").stdout)["blocks"] == []


def test_a_policy_kept_by_put_overrides_the_configuration(cli, tmp_path):
    """The state dir's privacy.policy.json wins over [privacy], as it does in the daemon."""
    home = tmp_path / "state"
    db = home / "memwarden.db"
    policy = PrivacySettings.model_validate({"rules": {"email": "reject"}})
    write_policy_file(home, StoredPolicy(policy, 0.0, "default"))
    assert (home / POLICY_FILE).exists()
    cli("add", f"mail {EMAIL}", "--db", str(db), code=2)
    (home / POLICY_FILE).write_text("{")  # unfit: never a write without the policy
    result = cli("add", "an ordinary fact", "--db", str(db), code=1)
    assert POLICY_FILE in result.output
    assert json.loads(cli("list", "--db", str(db), "--json").stdout)["blocks"] == []


def test_a_configuration_that_does_not_load_writes_nothing(cli, tmp_path):
    (tmp_path / "work" / "memwarden.toml").write_text("[privacy\n")
    db = tmp_path / "memwarden.db"
    result = cli("add", f"mail {EMAIL}", "--db", str(db), code=1)
    assert "memwarden.toml" in result.output
    assert "Traceback" not in result.output
    assert EMAIL.encode() not in raw_bytes(db) if db.exists() else True


def test_import_with_db_screens_plain_rows_and_export_objects(cli, tmp_path):
    """A plain new block and a (hand-made, hostile) export object carrying raw values are
    both stored redacted; the export's history observation too."""
    db = tmp_path / "memwarden.db"
    cli("add", "a first fact", "--db", str(db))
    dump = tmp_path / "dump.jsonl"
    cli("export", str(dump), "--db", str(db))
    [row] = [json.loads(line) for line in dump.read_text().splitlines()]
    row["id"] = row["block"]["id"] = row["record"]["id"] = "01a20000-0000-7000-8000-00000000beef"
    row["record"]["content"] = row["block"]["content"] = f"exported {EMAIL}"
    plain = {"content": f"plain {TOKEN}"}
    (tmp_path / "in.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(plain) + "\n")
    cli("import", str(tmp_path / "in.jsonl"), "--db", str(db))
    data = raw_bytes(db)
    assert EMAIL.encode() not in data
    assert EMAIL.lower().encode() not in data
    assert TOKEN.encode() not in data
    found = json.loads(cli("list", "--db", str(db), "--json").stdout)["blocks"]
    texts = sorted(b["content"] for b in found)
    assert texts[0] == "a first fact"
    assert texts[1].startswith("exported [email:")
    assert texts[2].startswith("plain [secret:")


def test_review_decisions_with_db_redact_the_comment_and_new_content(cli, tmp_path):
    db = tmp_path / "memwarden.db"
    block = json.loads(cli("add", "The cache TTL is 60 s", "--db", str(db), "--json").stdout)

    async def ask() -> str:
        async with Store(db) as store:
            item = await store.request_review(block["id"], reason="is it still true?")
        return str(item["review_id"])

    review_id = asyncio.run(ask())
    cli(
        "review",
        "edit",
        review_id,
        "--content",
        f"The cache TTL is 90 s (ask {EMAIL})",
        "--comment",
        f"per {EMAIL}, token {TOKEN}",
        "--by",
        "ann",
        "--db",
        str(db),
    )
    data = raw_bytes(db)
    assert EMAIL.encode() not in data
    assert EMAIL.lower().encode() not in data
    assert TOKEN.encode() not in data
    shown = json.loads(cli("review", "show", review_id, "--db", str(db), "--json").stdout)
    assert shown["review"]["comment"].startswith("per [email:")
    assert shown["block"]["content"].startswith("The cache TTL is 90 s (ask [email:")


def test_forget_with_db_keeps_no_address_in_the_tombstone(cli, tmp_path):
    """The reason of an erasure stays in the erasure log: it passes the policy first,
    so "at the request of <address>" keeps a placeholder, never the address."""
    db = tmp_path / "memwarden.db"
    block = json.loads(cli("add", "a fact to erase", "--db", str(db), "--json").stdout)
    reason = f"at the request of {EMAIL}"
    cli("forget", block["id"], "--yes", "--reason", reason, "--db", str(db))
    data = raw_bytes(db)
    assert EMAIL.encode() not in data
    assert EMAIL.lower().encode() not in data
    email = placeholder(db.parent, "email", EMAIL.lower())
    with sqlite3.connect(db) as conn:
        [(kept,)] = conn.execute("SELECT reason FROM erasures").fetchall()
    assert kept == f"at the request of {email}"
