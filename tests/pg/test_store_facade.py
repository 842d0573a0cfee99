"""The whole ``Store`` contract on PostgreSQL: every public coroutine method of the class
(found by introspection, so a method added later without a case here fails the test)
runs on ``Store("postgresql://…")`` against a small world and answers, none refusing as
"not on PostgreSQL yet" or not implemented. The answers' equality with SQLite's is the
contract tests' work (``tests/pg/test_*_contract.py``); this one checks the wiring: the
façade sends each call to a PostgreSQL part that does it, with its own score log and an
embedder (search by meaning on PostgreSQL)."""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

from memwarden.embedders import StubEmbedder
from memwarden.memory import (
    RetentionConfig,
    RevalidationReason,
    Store,
    ValidationEvent,
    from_ts,
)
from memwarden.memory._clock import FakeClock
from memwarden.memory._proposals import NewProposal
from memwarden.memory.pg._erasure import UNREACHABLE as PG_UNREACHABLE
from memwarden.memory.pg._vectors import PgVectorIndex

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from tests.pgserver import PgServer

START = 1_750_000_000.0
SENSOR = "fs"

# Each public coroutine method of Store, called with what the world below holds. ``w``
# is the world (ids made by the script), ``s`` the store.
CASES: dict[str, Callable[[Store, dict[str, Any]], Awaitable[Any]]] = {
    "add": lambda s, w: s.add({"title": "t", "content": "another fact about nginx"}),
    "add_many": lambda s, w: s.add_many([{"title": "m", "content": "a third fact"}]),
    "add_proposals": lambda s, w: s.add_proposals(
        [NewProposal(w["free"], "dependency", {"depends_on": w["bound"]}, 0.5, "words")]
    ),
    "agent_high_water": lambda s, w: s.agent_high_water(["agent-1"]),
    "apply_events": lambda s, w: s.apply_events(
        [
            ValidationEvent(
                sensor=SENSOR,
                subject="etc/app.yaml",
                outcome="confirmed",
                observed_at=from_ts(s.clock.time()),
                message="still there",
            )
        ]
    ),
    "archive": lambda s, w: s.archive(w["spare"], reason="not needed"),
    "believed_at": lambda s, w: s.believed_at(w["bound"], s.clock.time()),
    "bindings_for_sensor": lambda s, w: s.bindings_for_sensor(SENSOR),
    "bound_to": lambda s, w: s.bound_to([(SENSOR, "etc/app.yaml")]),
    "close": lambda s, w: asyncio.sleep(0),  # run by the script's end, not in the middle
    "compact_events": lambda s, w: s.compact_events(),
    "consolidate": lambda s, w: s.consolidate(),
    "count_refuted_matches": lambda s, w: s.count_refuted_matches("nginx", mode="hybrid"),
    "counts": lambda s, w: s.counts(),
    "coverage": lambda s, w: s.coverage([SENSOR]),
    "dead_letter": lambda s, w: s.dead_letter(source="test", reason="bad", payload=b"{"),
    "decay_cycle": lambda s, w: s.decay_cycle(),
    "decide_proposal": lambda s, w: s.decide_proposal(w["proposal"], accept=False, actor="me"),
    "decide_review": lambda s, w: s.decide_review(w["review"], "confirm", reviewer="ana"),
    "delete": lambda s, w: s.delete(w["doomed"], reason="test"),
    "dependents": lambda s, w: s.dependents(w["bound"]),
    "due_for_revalidation": lambda s, w: s.due_for_revalidation(),
    "due_revalidations": lambda s, w: s.due_revalidations(),
    "enforce_retention": lambda s, w: s.enforce_retention(RetentionConfig()),
    "erase": lambda s, w: s.erase([w["secret"]], actor="test", reason="asked"),
    "erasure_targets": lambda s, w: s.erasure_targets(tag="secret"),
    "erasures": lambda s, w: s.erasures(),
    "escalation_candidates": lambda s, w: s.escalation_candidates(
        block_ids=[w["bound"]], below=0.9, now=s.clock.time()
    ),
    "event_counts": lambda s, w: s.event_counts(since=START - 10, bucket_s=60),
    "events_after": lambda s, w: s.events_after(0),
    "events_for": lambda s, w: s.events_for(w["bound"]),
    "explain": lambda s, w: s.explain(w["bound"]),
    "export_blocks": lambda s, w: s.export_blocks(),
    "find_by_subject": lambda s, w: s.find_by_subject(SENSOR, "etc/app.yaml"),
    "get": lambda s, w: s.get(w["bound"]),
    "get_meta": lambda s, w: s.get_meta("k"),
    "get_proposal": lambda s, w: s.get_proposal(w["proposal"]),
    "get_record": lambda s, w: s.get_record(w["bound"]),
    "get_review": lambda s, w: s.get_review(w["review"]),
    "health": lambda s, w: s.health(),
    "heuristic_cycle": lambda s, w: s.heuristic_cycle(),
    "import_blocks": lambda s, w: s.import_blocks(w["exported"]),
    "list_blocks": lambda s, w: s.list_blocks(),
    "list_proposals": lambda s, w: s.list_proposals(status="all"),
    "list_reviews": lambda s, w: s.list_reviews(status="all"),
    "mark_stale": lambda s, w: s.mark_stale([w["bound"]]),
    "open": lambda s, w: s.open(),  # already open: a no-op
    "outbox_delete": lambda s, w: s.outbox_delete([1]),
    "outbox_peek": lambda s, w: s.outbox_peek(),
    "outbox_put": lambda s, w: s.outbox_put([("t", b"x", 1, False)], max_rows=10),
    "outbox_stats": lambda s, w: s.outbox_stats(),
    "answered_requests": lambda s, w: s.answered_requests(["nope", "a\x00"]),
    "put_back_revalidation": lambda s, w: s.put_back_revalidation("nope", send_at=START),
    "quarantined_bindings": lambda s, w: s.quarantined_bindings(),
    "queue_review": lambda s, w: s.queue_review(w["free"], reason="look at it"),
    "receipts_for": lambda s, w: s.receipts_for([w["bound"]]),
    "recent_event_counts": lambda s, w: s.recent_event_counts(since=START - 10, bucket_s=60),
    "record_access": lambda s, w: s.record_access([w["bound"]], session="s1"),
    "record_series": lambda s, w: s.record_series(),
    "reembed": lambda s, w: s.reembed(),
    "request_checks": lambda s, w: s.request_checks(
        [w["bound"]], reason=RevalidationReason.ON_READ
    ),
    "request_revalidation": lambda s, w: s.request_revalidation(w["bound"]),
    "request_review": lambda s, w: s.request_review(w["bound"], reason="check it"),
    "requeue_sent_revalidations": lambda s, w: s.requeue_sent_revalidations(),
    "claim_revalidations": lambda s, w: s.claim_revalidations(),
    "keep_servers": lambda s, w: s.keep_servers(),
    "resolve_id": lambda s, w: s.resolve_id(w["bound"][-8:]),
    "restore": lambda s, w: s.restore(w["spare"]),
    "retention_histogram": lambda s, w: s.retention_histogram(),
    "retention_points": lambda s, w: s.retention_points(w["bound"]),
    "retire_proposals": lambda s, w: s.retire_proposals(),
    "search": lambda s, w: s.search("nginx config", session="s1"),
    "sensors_bound": lambda s, w: s.sensors_bound([w["bound"]]),
    "series": lambda s, w: s.series("blocks", since=START - 600),
    "set_meta": lambda s, w: s.set_meta("k", "v"),
    "set_quarantine": lambda s, w: s.set_quarantine([(w["stored"][0], "a rule")]),
    "set_revalidation_status": lambda s, w: s.set_revalidation_status(["nope"], "done"),
    "short_ids": lambda s, w: s.short_ids([w["bound"]]),
    "stored_bindings": lambda s, w: s.stored_bindings([SENSOR]),
    "unbound_live": lambda s, w: s.unbound_live(),
    "update": lambda s, w: s.update(w["free"], {"content": "nginx listens on 8080"}),
    "validity_windows": lambda s, w: s.validity_windows([w["bound"]]),
    "versions": lambda s, w: s.versions(w["bound"]),
    "visible_ids": lambda s, w: s.visible_ids([w["bound"]], ["default"]),
}


def _public_coroutines() -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(Store)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }


def test_every_public_method_has_a_case() -> None:
    """A new Store method joins CASES (and so is shown to run on PostgreSQL)."""
    assert _public_coroutines() == set(CASES)


async def _world(store: Store) -> dict[str, Any]:
    bound = await store.add(
        {
            "title": "Where the nginx config lives",
            "content": "nginx reads its config from etc/app.yaml",
            "volatility": "high",
            "bindings": [{"sensor": SENSOR, "subject": "etc/app.yaml", "path": "etc/app.yaml"}],
        }
    )
    free = await store.add({"title": "free", "content": "the deploy runs on fridays"})
    spare = await store.add({"title": "spare", "content": "an old note"})
    doomed = await store.add({"title": "doomed", "content": "to be deleted"})
    secret = await store.add({"title": "secret", "content": "a secret", "tags": ["secret"]})
    review = await store.request_review(free.id, reason="is it true?")
    await store.add_proposals(
        [NewProposal(free.id, "dependency", {"depends_on": spare.id}, 0.5, "shared words")]
    )
    [proposal] = await store.list_proposals()
    exported = await store.export_blocks(limit=1)
    return {
        "bound": bound.id,
        "free": free.id,
        "spare": spare.id,
        "doomed": doomed.id,
        "secret": secret.id,
        "review": review["review_id"],
        "proposal": proposal.id,
        "stored": await store.stored_bindings([SENSOR]),
        # An export from another store: new ids to import here.
        "exported": [
            {**row, "block": {**row["block"], "id": "0190a0b0-0000-7000-8000-00000000ffff"}}
            for row in exported
        ],
    }


def test_every_public_store_method_runs_on_postgresql(pg_server: PgServer, tmp_path: Path) -> None:
    dsn = pg_server.create_database()
    clock = FakeClock(START)

    async def script() -> dict[str, str]:
        failures: dict[str, str] = {}
        store = Store(
            dsn,
            clock=clock,
            score_log=tmp_path / "scores.jsonl",
            embedder=StubEmbedder(),
        )
        async with store:
            assert store.backend == "postgresql"
            assert isinstance(store.vectors, PgVectorIndex)  # an embedder is not refused
            assert store.default_search_mode == "hybrid"
            assert store.unreachable == PG_UNREACHABLE
            world = await _world(store)
            await store.vectors.drain_once()
            clock.advance(60)
            for name in sorted(CASES):
                try:
                    await CASES[name](store, world)
                except NotImplementedError as err:
                    failures[name] = f"NotImplementedError: {err}"
                except Exception as err:  # noqa: BLE001 - every failure, named, at once
                    failures[name] = f"{type(err).__name__}: {err}"
            hits = await store.search("nginx config", mode="vector")
            assert world["bound"] in [h.id for h in hits]
            assert await store.erasures(block_id=world["secret"])
        return failures

    assert asyncio.run(script()) == {}
