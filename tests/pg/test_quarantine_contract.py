"""Quarantined bindings (list the stored ones, quarantine, release) as a contract both
backends keep: the same script with the same ids and clock on SQLite (the Store) and on
PostgreSQL (``PgQuarantine``) gives equal answers and leaves equal rows (bindings, the
``error`` events and their effects); a rule quarantined again is not a second event; a
quarantined binding feeds no proposal's ``bound_to``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.pg.parts import Backend, backend_fixtures, same_ids

if TYPE_CHECKING:
    from collections.abc import Awaitable


START = 1_767_225_600.0  # 2026-01-01Z
TABLES = {
    "bindings": (
        "id, block_rid, sensor, subject, selector, created_at, quarantine, quarantined_at",
        "id",
    ),
    "events": ("seq, event_id, sensor, subject, outcome, observed_at, block_id, message", "seq"),
    "effects": ("block_rid, event_seq, state_before, state_after, reliability_after", "1, 2"),
}


sqlite_backend, pg_backend, backend = backend_fixtures(TABLES, START)


async def script(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Stored bindings listed by sensor (hostile names among them), quarantined under a
    rule with NUL, a huge one and SQL, again, under another rule, released."""
    same_ids(monkeypatch)
    s, c, log = b.api, b.clock, []

    async def step(call: Awaitable[Any]) -> Any:
        result = await call
        log.append(result)
        c.advance(7)
        return result

    first, second, archived = await s.add_many(
        [
            {
                "content": "The timeout is 30 s",
                "bindings": [
                    {"sensor": "fs", "path": "config/app.yaml", "key": "/t", "equals": 30},
                    {"sensor": "fs", "path": "b.txt", "exists": True},
                ],
            },
            {
                "content": "The API answers",
                "bindings": [
                    {"sensor": "http", "url": "https://x/", "regex": "(a+)+$"},
                    {"sensor": "fs", "path": "config/app.yaml", "exists": True},
                ],
            },
            {"content": "Archived", "bindings": [{"sensor": "fs", "path": "old.txt"}]},
        ]
    )
    await s.archive(archived, reason="test")
    c.advance(60)
    await step(s.stored_bindings(["fs"]))
    await step(s.stored_bindings(["fs", "http", "fs"]))
    await step(s.stored_bindings([]))
    await step(s.stored_bindings(["\x00", "'; DROP TABLE bindings; --"]))
    fs_rows = {r.subject + str(r.block_id == first): r for r in log[0]}
    http = next(r for r in log[1] if r.sensor == "http")
    bad_path = fs_rows["b.txtTrue"]
    shared = fs_rows["config/app.yamlFalse"]
    huge = "regex: " + "«(a+)+$» 🐘 " * 20_000  # past the event message's 4096
    await step(
        s.set_quarantine(
            [
                (bad_path, "path: outside the roots \x00 nul"),
                (http, huge),
                (shared, "'; DROP TABLE events; --"),
            ]
        )
    )
    await step(s.quarantined_bindings())
    again = {r.id: r for r in await s.stored_bindings(["fs", "http"])}
    await step(s.set_quarantine([(again[bad_path.id], "path: outside the roots \x00 nul")]))
    await step(s.set_quarantine([(again[http.id], huge), (again[shared.id], "another rule")]))
    await step(s.bound_to([("fs", "config/app.yaml"), ("http", "https://x/")]))
    await step(s.set_quarantine([], released=[bad_path.id, shared.id, 10**6]))
    await step(s.set_quarantine([], released=[]))
    await step(s.quarantined_bindings())
    await step(s.bound_to([("fs", "config/app.yaml"), ("http", "https://x/")]))
    log.append([r.as_dict() for r in await s.stored_bindings(["fs", "http"])])
    log.append([(await s.get(x)).state for x in (first, second)])
    return log


async def test_quarantine_answers_as_specified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On each backend: archived blocks' bindings are not listed; each newly quarantined
    binding is one error event; the same rule again changes nothing; release lifts it."""
    log = await script(backend, monkeypatch)
    assert len(log[0]) == 3  # fs: two of first, one of second; not the archived one's
    assert len(log[1]) == 4
    assert log[2] == log[3] == []
    assert log[4] == 3
    assert log[5][0].quarantine == "path: outside the roots \ufffd nul"
    assert log[6] == 0  # the same rule (as stored)
    assert log[7] == 1  # the shared binding's new rule; the huge one unchanged
    first, second = (f"0190a0b0-0000-7000-8000-00000000000{i}" for i in (1, 2))
    assert log[8] == {("fs", "config/app.yaml"): [first]}  # second's binding: quarantined
    assert log[9] == 3  # two released, one unknown id counted as asked
    assert log[10] == 0
    assert [r.sensor for r in log[11]] == ["http"]
    assert log[12] == {("fs", "config/app.yaml"): [first, second]}
    rows = await backend.dump()
    errors = [r for r in rows["events"] if r[4] == "error"]
    assert len(errors) == 4
    assert all(len(r[7]) <= 4096 for r in errors)


async def test_both_backends_quarantine_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same script gives the same answers and leaves the same rows on both backends."""
    sqlite_log = await script(sqlite_backend, monkeypatch)
    pg_log = await script(pg_backend, monkeypatch)
    for i, (sq, pg) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert pg == sq, i
    sqlite_rows, pg_rows = await sqlite_backend.dump(), await pg_backend.dump()
    for table in TABLES:
        assert pg_rows[table] == sqlite_rows[table], table
    assert any(r[6] for r in sqlite_rows["bindings"])
