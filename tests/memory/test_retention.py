"""Retention on the injected clock: nothing goes unless configured; each rule archives,
purges or trims history of exactly the blocks it names, once they are old enough."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError

from memwarden.errors import NotFoundError
from memwarden.memory import RetentionConfig, ValidationEvent, from_ts

if TYPE_CHECKING:
    from memwarden.memory import Store

DAY = timedelta(days=1)


def cfg(**kw: Any) -> RetentionConfig:
    return RetentionConfig.model_validate(kw)


def rows(store: Store, sql: str, *args: Any) -> list[Any]:
    conn = sqlite3.connect(store.path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


async def confirm(store: Store, subject: str, n: int = 1) -> None:
    for _ in range(n):
        await store.apply_events(
            [
                ValidationEvent(
                    sensor="fs",
                    subject=subject,
                    outcome="confirmed",
                    observed_at=from_ts(store.clock.time()),
                    observed=f"seen in {subject}",
                )
            ]
        )


async def test_nothing_is_removed_unless_configured(store, clock):
    """The default [retention] removes nothing, however old the data."""
    block = await store.add({"content": "old fact", "bindings": [{"sensor": "fs", "path": "a"}]})
    await confirm(store, "a", 3)
    await store.archive((await store.add({"content": "archived long ago"})).id, reason="x")
    clock.advance(3650 * DAY)
    assert not RetentionConfig().active
    report = await store.enforce_retention(RetentionConfig())
    assert report.removed == dict.fromkeys(report.removed, 0)
    assert (await store.get(block.id)).state != "archived"
    assert len(await store.events_for(block.id)) == 3
    assert rows(store, "SELECT count(*) FROM blocks") == [(2,)]


async def test_max_age_archives_only_the_blocks_the_rule_names(store, clock):
    """A rule with tag and source archives those blocks once created longer ago than
    max_age; younger ones and blocks the filters do not name stay live."""
    old_tmp = await store.add({"content": "scratch a", "tags": ["tmp"], "source": "agent"})
    old_user = await store.add({"content": "scratch b", "tags": ["tmp"], "source": "user"})
    old_other = await store.add({"content": "keeper", "tags": ["kept"], "source": "agent"})
    clock.advance(10 * DAY)
    young = await store.add({"content": "scratch c", "tags": ["tmp"], "source": "agent"})
    rule = {"tag": "tmp", "source": "agent", "max_age": "7d"}
    report = await store.enforce_retention(cfg(rules=[rule]))
    assert report.archived == 1
    states = {b: (await store.get(b)).state for b in (old_tmp.id, old_user.id, old_other.id)}
    assert states[old_tmp.id] == "archived"
    assert states[old_user.id] != "archived"
    assert states[old_other.id] != "archived"
    assert (await store.get(young.id)).state != "archived"
    assert (await store.enforce_retention(cfg(rules=[rule]))).archived == 0  # idempotent


async def test_archived_max_age_purges_with_a_tombstone(store, clock):
    """An archived block older than archived_max_age is erased (actor retention); one
    archived more recently waits."""
    a = await store.add({"content": "short lived one", "tier": "short_term"})
    b = await store.add({"content": "short lived two", "tier": "short_term"})
    await store.archive(a.id, reason="decayed")
    clock.advance(5 * DAY)
    await store.archive(b.id, reason="decayed")
    clock.advance(3 * DAY)
    rule = {"tier": "short_term", "archived_max_age": "7d"}
    report = await store.enforce_retention(cfg(rules=[rule]))
    assert (report.purged, report.purged_ids) == (1, [a.id])
    with pytest.raises(NotFoundError):
        await store.get(a.id)
    assert (await store.get(b.id)).state == "archived"
    [tomb] = await store.erasures()
    assert (tomb["block_id"], tomb["actor"]) == (a.id, "retention")
    assert "archived_max_age 7d" in tomb["reason"]
    assert b"short lived one" not in store.path.read_bytes()


async def test_events_max_age_trims_history_of_the_named_blocks(store, clock):
    """Per rule: the named blocks' old events go, their state stays; another block's
    history is untouched; the newest event of the log always stays."""
    named = await store.add(
        {"content": "named", "tags": ["noisy"], "bindings": [{"sensor": "fs", "path": "n"}]}
    )
    other = await store.add({"content": "other", "bindings": [{"sensor": "fs", "path": "o"}]})
    await confirm(store, "n", 3)
    await confirm(store, "o", 2)
    clock.advance(40 * DAY)
    await confirm(store, "n", 1)
    state = (await store.get(named.id)).state
    report = await store.enforce_retention(cfg(rules=[{"tag": "noisy", "events_max_age": "30d"}]))
    assert (report.effects_deleted, report.events_deleted) == (3, 3)
    assert len(await store.events_for(named.id)) == 1
    assert len(await store.events_for(other.id)) == 2
    assert (await store.get(named.id)).state == state


async def test_global_events_max_age_also_drops_unmatched_events(store, clock):
    """The top-level setting reaches every event, those that reached no block too."""
    block = await store.add({"content": "b", "bindings": [{"sensor": "fs", "path": "b"}]})
    await confirm(store, "b", 2)
    await confirm(store, "nobody-binds-this", 2)
    clock.advance(2 * DAY)
    await confirm(store, "b", 1)
    report = await store.enforce_retention(cfg(events_max_age="1d"))
    assert report.events_deleted == 4
    assert rows(store, "SELECT count(*) FROM events") == [(1,)]
    assert len(await store.events_for(block.id)) == 1


async def test_score_log_max_age_drops_old_lines(make_store, clock, tmp_path):
    """Lines written before the cutoff go; newer ones and unparsable lines stay."""
    store = await make_store(tmp_path / "m.db", score_log=tmp_path / "scores.jsonl")
    assert store.score_log is not None
    store.score_log.write({"at": from_ts(clock.time()).isoformat(), "block_id": "a"})
    clock.advance(20 * DAY)
    store.score_log.write({"at": from_ts(clock.time()).isoformat(), "block_id": "b"})
    store.score_log.write({"block_id": "no time"})
    report = await store.enforce_retention(cfg(score_log_max_age="10d"))
    assert report.score_log_lines == 1
    kept = [json.loads(x)["block_id"] for x in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert kept == ["b", "no time"]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"rules": [{"max_age": "soon"}]}, "max_age"),
        ({"rules": [{"tier": "forever", "max_age": "1d"}]}, "tier"),
        ({"rules": [{"tag": "x", "maxage": "1d"}]}, "maxage"),
        ({"events_max_age": -1}, "events_max_age"),
    ],
)
def test_bad_retention_config_names_the_field(raw, field):
    """A bad [retention] table is refused, the field named."""
    with pytest.raises(ValidationError) as info:
        RetentionConfig.model_validate(raw)
    assert field in str(info.value)
