"""Issue 13 item 8: upgrades never crash-loop.

A database written by an older memwarden can hold bindings that today's rules refuse (a
regex RE2 will not compile, a glob that cannot match, a path outside the roots, a
selector the model no longer reads). A real ``memwarden run`` on such a database
reaches ready and answers ``/healthz``; each of those bindings is quarantined (never
checked, never sent to its sensor), its block gets one ``error`` event naming the rule,
and it is listed in ``/v1/health``, ``memwarden health`` and ``/v1/sensors``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from memwarden.memory import FakeClock, Store
from tests.security._code_test_support import OK_ID, live_daemon, make_project
from tests.security.sensor_daemon import HealthProbe, real_daemon

if TYPE_CHECKING:
    from tests.security.sensor_daemon import RealDaemon

GOOD = {"sensor": "fs", "path": "app.txt", "regex": "^ok"}
BAD = {
    "backreference": ({"sensor": "fs", "path": "app.txt", "regex": r"(a)\1"}, "RE2"),
    "lookahead": ({"sensor": "fs", "path": "app.txt", "regex": r"^(?=ok)"}, "RE2"),
    "glob": ({"sensor": "fs", "path": "**/[z-a]*", "exists": True}, "path"),
    "outside": ({"sensor": "fs", "path": "/etc/hostname", "exists": True}, "root"),
    "unknown_key": ({"sensor": "fs", "path": "app.txt", "follow": True}, "follow"),
}


def _old_database(db: Path) -> dict[str, str]:
    """Blocks stored as an older memwarden would have: the selectors are not checked by
    any sensor's rules (the store only keeps them). Returns name -> block id."""

    async def build() -> dict[str, str]:
        ids = {}
        async with Store(db, clock=FakeClock()) as store:
            for name, binding in [("good", GOOD), *((n, b) for n, (b, _) in BAD.items())]:
                block = await store.add(
                    {"content": f"fact {name}", "bindings": [{**binding, "subject": name}]}
                )
                ids[name] = block.id
        return ids

    ids = asyncio.run(build())
    conn = sqlite3.connect(db)
    with conn:  # a selector that is not even a JSON object any more
        block = conn.execute("SELECT rid FROM blocks WHERE id = ?", (ids["good"],)).fetchone()
        conn.execute(
            "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at)"
            " VALUES (?, 'fs', 'garbled', '[1, 2]', 0)",
            block,
        )
    conn.close()
    for path in db.parent.iterdir():
        path.chmod(0o600)
    return ids


def _get(d: RealDaemon, path: str) -> Any:
    response = httpx.get(f"{d.url}{path}", headers=d.auth, timeout=30)
    response.raise_for_status()
    return response.json()


def _quarantine_events(d: RealDaemon, block_id: str) -> list[dict[str, Any]]:
    return [
        e
        for e in d.events(block_id)
        if e["outcome"] == "error" and e["message"].startswith("binding quarantined:")
    ]


def test_a_database_with_bindings_todays_rules_refuse_starts_and_quarantines_them(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "app.txt").write_text("ok\n")
    ids = _old_database(home / "memwarden.db")

    with real_daemon(tmp_path) as d:  # reached ready, /healthz answered
        health = _get(d, "/v1/health")
        listed = {q["block_id"]: q for q in health["quarantined_bindings"]}
        for name, (_, word) in BAD.items():
            entry = listed[ids[name]]
            assert entry["sensor"] == "fs"
            assert word in entry["rule"], (name, entry["rule"])
            (event,) = _quarantine_events(d, ids[name])
            assert word in event["message"]
        garbled = [q for q in health["quarantined_bindings"] if q["subject"] == "garbled"]
        assert len(garbled) == 1
        assert garbled[0]["block_id"] == ids["good"]
        assert set(listed) == {ids[n] for n in BAD} | {ids["good"]}
        assert not [q for q in health["quarantined_bindings"] if q["subject"] == "good"]
        assert any(w["category"] == "bindings" for w in health["warnings"])
        (fs,) = [s for s in _get(d, "/v1/sensors") if s["name"] == "fs"]
        assert fs["quarantined_bindings"] == len(BAD) + 1

        with HealthProbe(d.url) as probe:
            # A quarantined binding is never checked: no request is even queued...
            answer = d.revalidate(ids["backreference"], wait="2s")
            assert answer["requested"] == []
            # ... while the good binding still works.
            good = d.revalidate(ids["good"])
            assert good["answered"]
            assert good["block"]["state"] == "fresh"
        probe.assert_responsive()

        cli = subprocess.run(
            [str(Path(sys.executable).with_name("memwarden")), "health"],
            env={**os.environ, "MEMWARDEN_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout.count("quarantined: fs binding") == len(BAD) + 1
        assert "Traceback" not in cli.stdout + cli.stderr

    # A restart finds them quarantined already: no second error event, still listed.
    with real_daemon(tmp_path) as d:
        assert len(_get(d, "/v1/health")["quarantined_bindings"]) == len(BAD) + 1
        for name in BAD:
            assert len(_quarantine_events(d, ids[name])) == 1
        assert d.alive()


async def test_quarantined_bindings_feed_no_sensor_and_no_revalidation(tmp_path):
    """Store level: a quarantined binding is out of bindings_for_sensor, out of the
    requests the sweep and request_revalidation queue, and back once released."""
    async with Store(tmp_path / "q.db", clock=FakeClock()) as store:
        block = await store.add(
            {"content": "x", "bindings": [GOOD, {"sensor": "fs", "path": "b.txt", "exists": True}]}
        )
        rows = await store.stored_bindings(["fs"])
        assert len(rows) == 2
        bad = next(r for r in rows if r.subject == "b.txt")
        assert await store.set_quarantine([(bad, "path: outside the roots")]) == 1
        (again,) = [r for r in await store.stored_bindings(["fs"]) if r.id == bad.id]
        assert again.quarantine == "path: outside the roots"
        assert await store.set_quarantine([(again, "path: outside the roots")]) == 0

        bound = await store.bindings_for_sensor("fs")
        assert [b.subject for _, b in bound] == ["app.txt"]
        await store.request_revalidation(block.id)
        due = await store.due_revalidations()
        assert [r.subject for r in due] == ["app.txt"]
        (event,) = [e for e in await store.events_for(block.id) if e.outcome == "error"]
        assert event.message == "binding quarantined: path: outside the roots"
        (listed,) = await store.quarantined_bindings()
        assert listed.as_dict()["rule"] == "path: outside the roots"

        await store.set_quarantine([], released=[bad.id])
        assert len(await store.bindings_for_sensor("fs")) == 2
        assert await store.quarantined_bindings() == []


async def test_code_test_judges_stored_selections_by_the_projects_own_config(tmp_path):
    """At start a stored code_test selection is judged with the project's pytest config
    loaded (python_files = check_*.py here), not pytest's defaults: a valid check_*.py
    selection stays active, an ``@file`` one is quarantined, and nothing hostile runs."""
    project = make_project(tmp_path)
    (project.root / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npython_files = ["check_*.py", "test_*.py"]\n'
    )
    (project.root / "tests" / "check_cfg.py").write_text("def test_cfg():\n    pass\n")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    selections = {
        "check": {"sensor": "tests", "test": "tests/check_cfg.py::test_cfg"},
        "ok": {"sensor": "tests", "test": OK_ID},
        "at_file": {"sensor": "tests", "prefix": f"@{project.other}/args.txt"},
    }
    async with Store(home / "memwarden.db", clock=FakeClock()) as store:
        ids = {
            name: (await store.add({"content": name, "bindings": [binding]})).id
            for name, binding in selections.items()
        }
    for path in home.iterdir():
        path.chmod(0o600)

    async with live_daemon(home, project.root) as live:
        quarantined = await live.daemon.store.quarantined_bindings()
        assert [q.block_id for q in quarantined] == [ids["at_file"]]
        assert "'@'" in (quarantined[0].quarantine or "")
        bound = await live.daemon.store.bindings_for_sensor("tests")
        assert sorted(b.subject for _, b in bound) == sorted(
            ["tests/check_cfg.py::test_cfg", OK_ID]
        )
        answer = await live.daemon.revalidate(ids["check"], wait_s=30)
        assert answer["answered"]
        assert answer["block"].state == "fresh"
    assert project.ran() == []
