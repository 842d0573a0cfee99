"""The human review queue (list, show, decide) as a contract both backends keep: the same
script with the same ids and clock on SQLite (the Store) and on PostgreSQL (``PgReviews``
over the PostgreSQL parts) gives equal answers and errors and leaves equal rows (reviews,
events, effects, revalidation requests, blocks, history, audit); two decisions of one
item at once, in one process or from two nodes, make one decision and one clear conflict."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import MemwardenError, NotFoundError, ValidationInputError
from memwarden.memory import Store
from memwarden.memory import _reviews as sqlite_reviews
from memwarden.memory._clock import FakeClock, from_ts
from memwarden.memory._model import ValidationEvent
from memwarden.memory.pg import PgDatabase
from tests.pg.parts import Backend, PgParts, backend_fixtures, same_ids

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from tests.pgserver import PgServer

START = 1_767_225_600.0  # 2026-01-01Z
TABLES = {
    "reviews": (
        "id, block_id, reason, status, created_at, decided_at, decided_by, decision, comment",
        "id",
    ),
    "events": (
        (
            "seq, event_id, sensor, subject, outcome, observed_at, received_at, reliability,"
            " request_id, block_id, message, observed"
        ),
        "seq",
    ),
    "effects": ("block_rid, event_seq, state_before, state_after, reliability_after", "1, 2"),
    "revalidations": (
        "id, block_id, sensor, subject, reason, status, created_at, finished_at, outcome",
        "id",
    ),
    "blocks": ("rid, id, state, version, content, reliability, updated_at", "rid"),
    "block_history": ("block_id, version, content, replaced_at, replaced_by", "1, 2"),
    "audit": ("at, actor, action, block_id, detail", "id"),
}


sqlite_backend, pg_backend, backend = backend_fixtures(TABLES, START)


async def _outcome(call: Awaitable[Any]) -> Any:
    """A call's answer, or its error as (type, message, field errors)."""
    try:
        return await call
    except MemwardenError as err:
        fields = err.errors if isinstance(err, ValidationInputError) else None
        return (type(err).__name__, str(err), fields)


def _refuted(clock: FakeClock, event_id: str, subject: str) -> ValidationEvent:
    return ValidationEvent(
        event_id=event_id,
        sensor="fs",
        subject=subject,
        outcome="refuted",
        observed_at=from_ts(clock.time() - 1),
        reliability=0.99,
    )


async def script(  # noqa: PLR0915 - one script, read top to bottom
    b: Backend, monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    """Items queued by hand and by the rules, listed, shown and decided (confirm, reject,
    edit, a deleted block), with hostile inputs among them; the answers in order."""
    same_ids(monkeypatch)
    s, c, log = b.api, b.clock, []

    async def step(call: Awaitable[Any]) -> Any:
        result = await _outcome(call)
        log.append(result)
        c.advance(7)
        return result

    root, sql_fact, other, doomed = await s.add_many(
        [
            {
                "content": "The deploy config lives in a.yaml",
                "bindings": [{"sensor": "fs", "subject": "a.yaml"}],
            },
            {"content": "'; DROP TABLE reviews; -- «ü» 🐘", "volatility": "low"},
            {"content": "Another project's fact", "namespace": "elsewhere"},
            {"content": "Soon deleted"},
        ]
    )
    (dependent,) = await s.add_many(
        [
            {
                "content": "Rests on the deploy config",
                "depends_on": [root],
                "bindings": [{"sensor": "review", "subject": "people"}],
            }
        ]
    )
    c.advance(60)
    for block_id, reason in (
        (sql_fact, "'; DELETE FROM reviews; --"),
        (other, "«ünïcode» 🐘 " * 50),
        (doomed, "r" * 5000),  # kept to 1000 characters
    ):
        log.append(await s.request_review(block_id, reason=reason))
        c.advance(3)
    # A hard refutation: the dependent goes stale (a request for its review binding).
    log.append(await s.apply_events([_refuted(c, "refute-root", "a.yaml")]))
    c.advance(5)
    log.append(await s.request_review(dependent, reason="its basis was refuted"))
    await step(s.list_reviews())
    await step(s.list_reviews(status="all", limit=2))
    await step(s.list_reviews(namespaces=["default"]))
    await step(s.list_reviews(namespaces=[]))
    await step(s.list_reviews(namespaces=["a\x00b", "'; --"]))
    await step(s.list_reviews(status="open"))
    await step(s.list_reviews(limit=0))
    pending = [r["id"] for r in await s.list_reviews(status="all")]
    first = pending[0]
    await step(s.get_review(first))
    await step(s.get_review(first, events=1))
    await step(s.get_review("0190a0b0-0000-7000-8000-00000000dead"))
    await step(s.get_review("a\x00b"))
    await step(s.get_review("' OR 1=1; --"))
    # Refused decisions change nothing.
    await step(s.decide_review(first, "maybe", reviewer=" "))
    await step(s.decide_review(first, "confirm", reviewer="x" * 129, comment="c" * 5000))
    await step(s.decide_review(first, "confirm", reviewer="ann\x00", comment="nul \x00"))
    await step(s.decide_review(first, "edit", reviewer="ann"))
    await step(s.decide_review(first, "confirm", reviewer="ann", new_content="no"))
    await step(s.decide_review("0190a0b0-0000-7000-8000-00000000dead", "confirm", reviewer="ann"))
    await step(s.decide_review("a\x00b", "confirm", reviewer="ann"))
    by_block = {r["block_id"]: r["id"] for r in await s.list_reviews(status="all")}
    await step(s.decide_review(by_block[sql_fact], "edit", reviewer="eve", new_content="nul \x00"))
    # Decisions: confirm (unicode comment), a second decision, reject (SQL as comment),
    # edit (answers the review sensor's request), and the item of a deleted block.
    await step(s.decide_review(by_block[sql_fact], "confirm", reviewer=" ann ", comment="«ok» 🐘"))
    await step(s.decide_review(by_block[sql_fact], "reject", reviewer="bob"))
    await step(
        s.decide_review(
            by_block[other], "reject", reviewer="bob", comment="'; DROP TABLE audit; --"
        )
    )
    await step(
        s.decide_review(
            by_block[dependent],
            "edit",
            reviewer="carol",
            new_content="Rests on the deploy config in b.yaml " + "é" * 3000,
            comment="moved",
        )
    )
    await s.delete(doomed, reason="gone")
    await step(s.decide_review(by_block[doomed], "confirm", reviewer="dan"))
    await step(s.list_reviews(status="decided"))
    await step(s.list_reviews(status="pending"))
    await step(s.get_review(by_block[dependent], events=5))
    huge = "x" * 100_000
    await step(s.get_review(huge))
    await step(s.decide_review(huge, "confirm", reviewer="ann"))
    await step(s.list_reviews(status="all", namespaces=[f"ns{i}" for i in range(500)]))
    return log


async def test_decisions_answer_as_specified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On each backend: listings filter and order, refused decisions name the field, a
    decision closes its item with an event, a second decision is a conflict."""
    log = await script(backend, monkeypatch)
    listing = log[5]
    assert [r["reason"][:7] for r in listing] == ["'; DELE", "«ünïcod", "rrrrrrr", "its bas"]
    assert [r["reason"] for r in log[7]] == [
        "'; DELETE FROM reviews; --",
        "r" * 1000,
        "its basis was refuted",
    ]
    assert log[8] == []
    assert log[9] == []
    assert log[10][0] == log[11][0] == "ValidationInputError"
    assert log[14][0] == log[15][0] == log[16][0] == "NotFoundError"
    assert {f for f, _ in log[17][2]} == {"decision", "decided_by"}
    assert {f for f, _ in log[18][2]} == {"decided_by", "comment"}
    assert {f for f, _ in log[19][2]} == {"decided_by", "comment"}  # NUL
    assert log[20][2] == [("content", "an edit needs the new content")]
    assert log[22][0] == log[23][0] == "NotFoundError"
    assert log[24][0] == "ValidationInputError"  # NUL in the new content
    confirmed = log[25]
    assert (confirmed["review"]["decided_by"], confirmed["event"]["applied"]) == ("ann", True)
    assert confirmed["block"]["state"] == "fresh"
    assert "already decided (confirm by ann)" in log[26][1]
    assert log[27]["block"]["state"] == "refuted"
    edited = log[28]
    assert edited["block"]["version"] == 2
    assert edited["block"]["content"].startswith("Rests on")
    assert log[29]["block"] is None
    assert log[29]["event"]["applied"] is False
    assert len(log[30]) == 4
    assert log[33][0] == log[34][0] == "NotFoundError"
    assert log[35] == []
    assert log[31] == []
    rows = await backend.dump()
    assert [r[3] for r in rows["reviews"]] == ["decided"] * 4
    answered = [r for r in rows["revalidations"] if r[2] == "review"]
    assert [(r[5], r[8]) for r in answered] == [("done", "confirmed")]
    assert [r[2] for r in rows["audit"] if r[2] == "review"] == ["review"] * 4


async def test_both_backends_decide_alike(
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
    assert sqlite_rows["reviews"]
    assert sqlite_rows["audit"]


async def _queued(b: Backend) -> tuple[str, str]:
    """A new block with an open item: (block id, review id)."""
    (block_id,) = await b.api.add_many([{"content": "contended", "volatility": "low"}])
    b.clock.advance(60)
    answer = await b.api.request_review(block_id, reason="two reviewers")
    b.clock.advance(60)
    return block_id, str(answer["review_id"])


async def _one_decision(b: Backend, outcomes: list[Any], block_id: str, review_id: str) -> None:
    """One decision and one conflict; one review event, one audit row, the item decided."""
    assert sum(isinstance(o, dict) for o in outcomes) == 1, outcomes
    [conflict] = [o for o in outcomes if not isinstance(o, dict)]
    assert isinstance(conflict, ValidationInputError), conflict
    [winner] = [o for o in outcomes if isinstance(o, dict)]
    decided = winner["review"]
    who = decided["decided_by"]
    assert f"review {review_id} is already decided ({decided['decision']} by {who})" in str(
        conflict
    )
    rows = await b.dump()
    assert [r[2] for r in rows["events"] if r[9] == block_id] == ["review"]
    audit = [(r[1], r[2]) for r in rows["audit"] if r[3] == block_id and r[2] == "review"]
    assert audit == [(who, "review")]
    assert [(r[3], r[6]) for r in rows["reviews"] if r[0] == review_id] == [("decided", who)]


async def test_two_decisions_at_once_one_wins(backend: Backend) -> None:
    """Two decisions of one item at once in one process: one decides, the other is told
    the item is already decided; one event, one audit row."""
    block_id, review_id = await _queued(backend)
    outcomes = await asyncio.gather(
        backend.api.decide_review(review_id, "confirm", reviewer="ann"),
        backend.api.decide_review(review_id, "reject", reviewer="bob"),
        return_exceptions=True,
    )
    await _one_decision(backend, list(outcomes), block_id, review_id)


async def test_two_nodes_deciding_one_item_one_wins(pg_server: PgServer) -> None:
    """Two daemons (two pools on one database) decide one item at once, three times: the
    item's lock is the database's, so one decides and the other gets the conflict, as on
    SQLite; the lock goes with each decision."""
    dsn = pg_server.create_database()
    clock = FakeClock(START)
    async with PgDatabase(dsn) as db_a, PgDatabase(dsn) as db_b:
        node_a, node_b = PgParts(db_a, clock), PgParts(db_b, clock)
        backend = Backend(node_a, clock, node_a.rows, TABLES)
        for _ in range(3):
            block_id, review_id = await _queued(backend)
            outcomes = await asyncio.gather(
                node_a.decide_review(review_id, "confirm", reviewer="ann"),
                node_b.decide_review(review_id, "reject", reviewer="bob"),
                return_exceptions=True,
            )
            await _one_decision(backend, list(outcomes), block_id, review_id)
        async with db_a.read() as conn:  # no advisory lock outlives its decision
            assert (
                await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
                == 0
            )


async def test_a_failed_decision_leaves_the_item_open(backend: Backend) -> None:
    """A decision refused after the item's lock was taken (an edit the block refuses)
    leaves the item pending, and the next decision goes through."""
    _, review_id = await _queued(backend)
    with pytest.raises(ValidationInputError):
        await backend.api.decide_review(review_id, "edit", reviewer="ann", new_content="x\x00")
    with pytest.raises(NotFoundError):
        await backend.api.decide_review("no-such-review", "confirm", reviewer="ann")
    done = await backend.api.decide_review(review_id, "confirm", reviewer="ann")
    assert done["review"]["status"] == "decided"


async def escalation_script(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The review sensor's two calls: the candidates (of its blocks, and the unbound
    low-volatility ones), and queueing one (again: the open item)."""
    same_ids(monkeypatch)
    s, c = b.api, b.clock
    sqlite = isinstance(s, Store)

    async def candidates(**kw: Any) -> Any:
        if sqlite:
            return await sqlite_reviews.escalation_candidates(s, **kw)
        return await s.escalation_candidates(**kw)

    async def queue(block_id: str, reason: str) -> Any:
        if sqlite:
            return await _outcome(sqlite_reviews.queue_review(s, block_id, reason=reason))
        return await _outcome(s.queue_review(block_id, reason=reason))

    ids = await s.add_many(
        [
            {"content": "low, unbound", "volatility": "low"},
            {"content": "low, unbound, queued", "volatility": "low"},
            {"content": "high, bound", "bindings": [{"sensor": "fs", "subject": "a"}]},
            {
                "content": "low, the review sensor's",
                "volatility": "low",
                "bindings": [{"sensor": "review", "subject": "people"}],
            },
            {"content": "medium, unbound"},
            {"content": "low, unbound, archived", "volatility": "low"},
        ]
    )
    await s.archive(ids[5], reason="test")
    c.advance(60)
    log = [await queue(ids[1], "asked"), await queue(ids[1], "again"), await queue("nope", "x")]
    later = c.time() + 400 * 86400  # every window ran out
    mine = [ids[3], ids[2], "no-such", "a\x00b", ids[3], ids[5]]
    for kw in (
        {"block_ids": mine, "below": 0.1, "now": later},
        {"block_ids": mine, "below": 0.99, "now": c.time()},
        {"block_ids": [], "below": 0.99, "now": c.time(), "limit": 1},
        {"block_ids": mine, "below": 0.1, "now": later, "unbound_low_volatility": False},
        {"block_ids": [f"{i:04d}" for i in range(1200)] + mine, "below": 0.99, "now": later},
    ):
        log.append(await candidates(**kw))
    return log


async def test_escalation_answers_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review sensor's candidates and queueing answer alike on both backends: its own
    blocks past their window or below the bar, the unbound low-volatility ones that no
    sensor can check, never one already queued, archived or unknown."""
    sqlite_log = await escalation_script(sqlite_backend, monkeypatch)
    pg_log = await escalation_script(pg_backend, monkeypatch)
    for i, (sq, pg) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert pg == sq, i
    first, again, unknown, past, low, one, own_only, many = sqlite_log
    assert again == first
    assert unknown[0] == "NotFoundError"
    ids = [f"0190a0b0-0000-7000-8000-00000000000{i}" for i in range(1, 7)]
    # Not the medium one, the queued one, the archived one, nor the unknown ids.
    assert [block for block, _ in past] == [ids[2], ids[3], ids[0]]
    assert past[2][1].endswith("; no sensor can check it")
    assert [block for block, _ in low] == [ids[2], ids[3], ids[0]]
    assert len(one) == 1
    assert [block for block, _ in own_only] == [ids[2], ids[3]]
    assert [block for block, _ in many] == [ids[2], ids[3], ids[0]]
