"""An observation of a binding answers its open revalidation request, whoever asked.

A poll's event names no request, yet when it looks at a binding after a check of it was
asked for, the request is closed in the same transaction and reported in ``answered``
(docs/RULES.md, "Who checks when").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from memwarden.memory import FakeClock, Store, ValidationEvent, from_ts

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


def _event(
    clock: FakeClock, subject: str, outcome: str, *, sensor: str = "fs", **kw: Any
) -> ValidationEvent:
    kw.setdefault("observed_at", from_ts(clock.time()))
    return ValidationEvent(sensor=sensor, subject=subject, outcome=outcome, **kw)


async def _requests(store: Store) -> list[tuple[str, str, str, str | None]]:
    """Every request: (id, binding subject, status, outcome), oldest first."""
    async with store.db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT id, subject, status, outcome FROM revalidations ORDER BY created_at, id"
        )
    return [tuple(r) for r in rows]  # type: ignore[misc]


async def _open(store: Store) -> list[str]:
    return [r[0] for r in await _requests(store) if r[2] in ("pending", "sent")]


@pytest.fixture
async def fact(
    make_store: Callable[..., Awaitable[Store]], clock: FakeClock
) -> tuple[Store, FakeClock, str]:
    """A fresh fact bound to one file, confirmed once."""
    store = await make_store()
    block = await store.add(
        {"content": "port is 5432", "bindings": [{"sensor": "fs", "path": "a"}]}
    )
    clock.advance(1)
    await store.apply_events([_event(clock, "a", "confirmed")])
    return store, clock, block.id


@pytest.mark.parametrize("outcome", ["confirmed", "refuted"])
async def test_a_poll_observed_after_a_request_closes_it_and_says_so(fact, outcome):
    """A confirmation or refutation with no request_id, observed after the request was
    made, closes it as done with its outcome and reports its id in answered."""
    store, clock, block_id = fact
    (rid,) = await store.request_revalidation(block_id)
    clock.advance(1)
    result = await store.apply_events([_event(clock, "a", outcome)])
    assert result.answered == [rid]
    assert (await _requests(store))[0] == (rid, "a", "done", outcome)
    # Never sent to the sensor (a refutation queues its own retry, due later).
    assert await store.due_revalidations() == []


@pytest.mark.parametrize("outcome", ["error", "changed"])
async def test_an_error_or_a_change_answers_nothing(fact, outcome):
    """An error could not check and a change asks for a check: the request stays open
    and is still sent."""
    store, clock, block_id = fact
    (rid,) = await store.request_revalidation(block_id)
    clock.advance(1)
    result = await store.apply_events([_event(clock, "a", outcome, message="down")])
    assert rid not in result.answered
    assert await _open(store) == [rid]
    assert [r.id for r in await store.due_revalidations()] == [rid]


async def test_an_observation_made_before_the_request_does_not_answer_it(fact):
    """An event observed before the check was asked for (it waited in a queue) leaves
    the request open: it is no answer to a question asked after it."""
    store, clock, block_id = fact
    seen = clock.time() + 0.5
    clock.advance(1)
    (rid,) = await store.request_revalidation(block_id)
    result = await store.apply_events([_event(clock, "a", "confirmed", observed_at=from_ts(seen))])
    assert result.answered == []
    assert await _open(store) == [rid]


async def test_an_outdated_observation_still_closes_the_request_it_answers(
    make_store, clock: FakeClock
):
    """The pitfall: a block validated later by another binding ignores an older event as
    outdated, but that event looked at its binding after the request was made, so the
    request is closed all the same (else it would be sent again for nothing)."""
    store = await make_store()
    block = await store.add(
        {
            "content": "service answers on 8080",
            "bindings": [{"sensor": "fs", "path": "a"}, {"sensor": "fs", "path": "b"}],
        }
    )
    asked = await store.request_revalidation(block.id)
    assert len(asked) == 2
    clock.advance(1)
    poll_a = _event(clock, "a", "confirmed")  # its check began after the request
    clock.advance(1)
    await store.apply_events([_event(clock, "b", "confirmed")])  # validated later, first
    result = await store.apply_events([poll_a])
    (last, *_) = await store.events_for(block.id)
    assert last.event_id == poll_a.event_id
    assert (last.detail or {}).get("ignored") == "outdated"
    assert len(result.answered) == 1
    assert await _open(store) == []


async def test_only_the_observed_binding_is_answered(make_store, clock: FakeClock):
    """A block with two bindings: a poll of one closes that binding's request only."""
    store = await make_store()
    block = await store.add(
        {
            "content": "both files agree",
            "bindings": [{"sensor": "fs", "path": "a"}, {"sensor": "fs", "path": "b"}],
        }
    )
    await store.request_revalidation(block.id)
    clock.advance(1)
    result = await store.apply_events([_event(clock, "a", "confirmed")])
    assert len(result.answered) == 1
    assert [r[1] for r in await _requests(store) if r[2] == "pending"] == ["b"]


async def test_a_change_is_answered_by_a_later_look_even_in_the_same_batch(fact):
    """A change queues a check made at its observation: a confirmation observed after it
    answers it, whether it comes in the same batch or in the next one."""
    store, clock, _ = fact
    clock.advance(1)
    changed = _event(clock, "a", "changed")
    clock.advance(1)
    confirmed = _event(clock, "a", "confirmed")
    clock.advance(5)  # both arrive late, together
    result = await store.apply_events([confirmed, changed])
    assert result.revalidations == 0
    assert await _requests(store) == []
    clock.advance(1)
    changed = _event(clock, "a", "changed")
    clock.advance(1)
    confirmed = _event(clock, "a", "confirmed")
    clock.advance(5)
    await store.apply_events([changed])
    result = await store.apply_events([confirmed])
    assert len(result.answered) == 1
    assert await _open(store) == []


async def test_a_polled_refutation_answers_a_waiting_retry_and_queues_the_next(fact):
    """A soft refutation's retry waits its interval; a poll refuting again before then is
    the re-check: the retry is closed and one new retry waits, never two."""
    store, clock, block_id = fact
    clock.advance(1)
    await store.apply_events([_event(clock, "a", "refuted")])
    (first,) = await _open(store)
    clock.advance(1)
    result = await store.apply_events([_event(clock, "a", "refuted")])
    assert result.answered == [first]
    (second,) = await _open(store)
    assert second != first
    block = await store.get(block_id)
    assert block.state == "stale"
    assert block.validation.reliability < 0.7  # both refutations counted


async def test_an_answer_to_a_request_still_closes_it_by_id(fact):
    """The request named by request_id is closed as before, error or not."""
    store, clock, block_id = fact
    (rid,) = await store.request_revalidation(block_id)
    clock.advance(1)
    result = await store.apply_events([_event(clock, "a", "error", request_id=rid)])
    assert result.answered == [rid]
    assert await _requests(store) == [(rid, "a", "done", "error")]


async def test_events_naming_their_block_and_events_routed_by_subject_close_alike(
    make_store, clock: FakeClock
):
    """In one batch, an event reaching its block by subject and one naming its block
    directly (block_id: its binding's request was not read with the routes) each close
    their binding's open request, and only that one."""
    store = await make_store()
    blocks = [
        await store.add({"content": f"port {i}", "bindings": [{"sensor": "fs", "path": p}]})
        for i, p in enumerate(("a", "b", "c"))
    ]
    requests = [(await store.request_revalidation(b.id))[0] for b in blocks]
    clock.advance(1)
    result = await store.apply_events(
        [
            _event(clock, "a", "confirmed"),
            _event(clock, "b", "refuted", block_id=blocks[1].id),
        ],
        bound_only=True,
    )
    assert sorted(result.answered) == sorted(requests[:2])
    status = {r[1]: (r[2], r[3]) for r in await _requests(store) if r[0] in requests}
    assert status == {"a": ("done", "confirmed"), "b": ("done", "refuted"), "c": ("pending", None)}
