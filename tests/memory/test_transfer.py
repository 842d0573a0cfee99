"""Export and import: whole blocks from one store into another, idempotent by id."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import ValidationInputError
from memwarden.memory import ValidationEvent, from_ts

if TYPE_CHECKING:
    from memwarden.memory import FakeClock, Store

APP = "config/app.yaml"
FS_APP = {"sensor": "fs", "path": APP, "key": "/http/timeout", "equals": 30}


def _ev(outcome: str, at: float, subject: str = APP) -> ValidationEvent:
    return ValidationEvent(sensor="fs", subject=subject, outcome=outcome, observed_at=from_ts(at))


async def _everything(store: Store) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after = None
    while page := await store.export_blocks(after=after, limit=2):  # several pages
        rows.extend(page)
        after = page[-1]["id"]
    return rows


def _text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def _count(store: Store, table: str) -> int:
    with sqlite3.connect(store.path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


async def _a_lived_in_store(store: Store, clock: FakeClock) -> dict[str, str]:
    """Blocks with bindings, history (one event reaching two blocks), an edit, a
    dependency, an archived block and a refuted one."""
    timeout = await store.add({"content": "The timeout is 30 s", "bindings": [FS_APP]})
    twin = await store.add(
        {"content": "Timeouts are set in app.yaml", "bindings": [{"sensor": "fs", "path": APP}]}
    )
    base = await store.add({"content": "The service reads its config at start", "tags": ["x"]})
    dependent = await store.add(
        {"content": "A restart applies config changes", "depends_on": [base.id]}
    )
    gone = await store.add({"content": "An old fact"})
    await store.apply_events([_ev("confirmed", clock.time())])
    clock.advance(60)
    await store.apply_events([_ev("refuted", clock.time())])
    clock.advance(60)
    await store.update(base.id, {"content": "The service reads its config at each start"})
    await store.archive(gone.id, reason="obsolete")
    return {"timeout": timeout.id, "twin": twin.id, "dependent": dependent.id, "gone": gone.id}


async def test_export_wipe_import_export_is_identical(make_store, clock):
    source = await make_store()
    ids = await _a_lived_in_store(source, clock)
    exported = await _everything(source)
    assert len(exported) == 5
    by_id = {r["id"]: r for r in exported}
    timeout = by_id[ids["timeout"]]
    assert timeout["format"] == "memwarden.export/1"
    assert timeout["block"]["state"] in {"stale", "refuted"}  # one refutation is soft
    assert timeout["record"]["reliability"] == timeout["block"]["validation"]["reliability"]
    assert [h["event"]["outcome"] for h in timeout["history"]] == ["confirmed", "refuted"]
    assert timeout["bindings"][0]["sensor"] == "fs"
    assert by_id[ids["dependent"]]["depends_on"]
    assert by_id[ids["gone"]]["block"]["state"] == "archived"

    target = await make_store()  # a wiped store: a new, empty file
    report = await target.import_blocks(exported)
    assert sorted(report.added) == sorted(by_id)
    assert report.sensors == {"fs"}
    assert _text(await _everything(target)) == _text(exported)
    # the event reaching two blocks is stored once, with an effect on each
    assert _count(target, "events") == _count(source, "events") == 2
    assert _count(target, "effects") == _count(source, "effects")
    # the imported store works: search finds what it found before, not the archived one
    found = {h.block.id for h in await target.search("timeout")}
    assert found
    assert found == {h.block.id for h in await source.search("timeout")}
    assert await target.search("old fact") == []


async def test_reimport_changes_nothing(make_store, clock):
    source = await make_store()
    await _a_lived_in_store(source, clock)
    exported = await _everything(source)
    target = await make_store()
    await target.import_blocks(exported)
    before = _text(await _everything(target))
    events = _count(target, "events")
    clock.advance(3600)
    again = await target.import_blocks(exported)
    assert again.added == []
    assert len(again.existing) == 5
    assert _text(await _everything(target)) == before
    assert _count(target, "events") == events
    # into the source itself: all already there
    assert (await source.import_blocks(exported)).added == []


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pop("record"), "0"),
        (lambda r: r["record"].update(id="someone-else"), "0.record.id"),
        (lambda r: r.update(bindings="fs"), "0.bindings"),
        (lambda r: r["bindings"].append({"sensor": "fs"}), "0.bindings.1"),
        (lambda r: r["history"][0]["event"].update(outcome="maybe"), "0.history.0"),
        (lambda r: r["record"].update(state="sort of"), "0.record"),
        (lambda r: r["record"].update(content=None), "0"),
    ],
)
async def test_a_malformed_object_is_refused_by_name_and_nothing_is_written(
    make_store, clock, mutate, field
):
    source = await make_store()
    ids = await _a_lived_in_store(source, clock)
    rows = [r for r in await _everything(source) if r["id"] == ids["timeout"]]
    rows += [r for r in await _everything(source) if r["id"] != ids["timeout"]]
    mutate(rows[0])
    target = await make_store()
    with pytest.raises(ValidationInputError) as info:
        await target.import_blocks(rows)
    assert info.value.errors[0][0] == field
    assert _count(target, "blocks") == 0
    assert _count(target, "events") == 0


async def test_columns_are_matched_by_name(make_store, clock):
    """An export of another schema imports: unknown columns dropped, missing ones defaulted."""
    source = await make_store()
    ids = await _a_lived_in_store(source, clock)
    row = next(r for r in await _everything(source) if r["id"] == ids["timeout"])
    row["record"]["from_the_future"] = 1
    del row["record"]["flapping"]
    row["bindings"][0]["also_new"] = "x"
    target = await make_store()
    assert (await target.import_blocks([row])).added == [ids["timeout"]]
    assert (await target.get(ids["timeout"])).flapping is False


async def test_quarantined_bindings_are_stored_as_such(make_store, clock):
    source = await make_store()
    ids = await _a_lived_in_store(source, clock)
    row = next(r for r in await _everything(source) if r["id"] == ids["timeout"])
    target = await make_store()
    await target.import_blocks([row], quarantine={(0, 0): "refused on import: no sensor"})
    assert await target.bindings_for_sensor("fs") == []
    with sqlite3.connect(target.path) as conn:
        assert conn.execute("SELECT quarantine FROM bindings").fetchall() == [
            ("refused on import: no sensor",)
        ]


async def test_an_imported_block_is_seen_by_dedupe_and_by_its_short_id(make_store, clock):
    """An export from before content keys existed still imports into a deduplicating store."""
    source = await make_store()
    ids = await _a_lived_in_store(source, clock)
    row = next(r for r in await _everything(source) if r["id"] == ids["timeout"])
    row["record"].pop("content_key", None)  # as an older memwarden wrote it
    target = await make_store()
    await target.import_blocks([row])
    same = await target.add({"content": "  " + row["record"]["content"].upper()}, dedupe=True)
    assert same.duplicate_of == ids["timeout"]
    short = (await target.get(ids["timeout"])).short_id
    assert short is not None
    assert await target.resolve_id(short) == ids["timeout"]
