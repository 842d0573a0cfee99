"""The human review queue: list, show and decide review items, and find what to escalate.

Each function takes the :class:`~memwarden.memory._store.Store` (which exposes the main
ones as thin methods): a decision combines store operations (an edit, an event, a read
back); its own queries go through ``store.db``. An item is one ``reviews`` row: a
block, the reason it needs a human, and — when shown — the evidence (the block's last
events). The rules already queue items for a hard refutation no bound sensor can
settle and for repeated check errors; the review sensor queues the others
(:func:`escalation_candidates`).

A decision is an event like any other: ``sensor="review"`` (the review sensor's name),
``block_id`` = the item's block, ``confirmed`` or ``refuted``, the reviewer's comment as
its message and the reviewer in its observed value. An edit first replaces the block's
content through :meth:`Store.update` (the old version stays in ``block_history``,
replaced by the reviewer), then confirms the new text.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from memwarden.errors import NotFoundError, ValidationInputError
from memwarden.memory._blockedit import check_text
from memwarden.memory._clock import from_ts
from memwarden.memory._ids import new_id
from memwarden.memory._model import MAX_CONTENT_CHARS, Outcome, ValidationEvent
from memwarden.memory._sql import placeholders

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._model import Block
    from memwarden.memory._results import EventRecord
    from memwarden.memory._store import ApplyResult, Store

__all__ = [
    "REVIEW_COLUMNS",
    "REVIEW_RELIABILITY",
    "Decision",
    "Review",
    "ReviewHost",
    "already_decided",
    "check_decision",
    "check_listing",
    "decide_review",
    "decision_answer",
    "decision_audit",
    "decision_event",
    "escalation_candidates",
    "escalation_reason",
    "get_review",
    "list_reviews",
    "listed",
    "queue_review",
    "review_answer",
]

REVIEW_RELIABILITY = 0.95  # a person's confirmation
MAX_COMMENT_CHARS = 4096  # an event message holds at most this much
_STATUSES = ("pending", "decided", "all")
REVIEW_COLUMNS = (
    "id, block_id, reason, status, created_at, decided_at, decided_by, decision, comment"
)

# One decision at a time per store in this process: the check that an item is still
# pending, the event and the closing of the item are three writer jobs.
_locks: weakref.WeakKeyDictionary[Store, asyncio.Lock] = weakref.WeakKeyDictionary()


class Decision(StrEnum):
    """What a reviewer decided."""

    CONFIRM = "confirm"
    REJECT = "reject"
    EDIT = "edit"


@dataclass(frozen=True, slots=True)
class Review:
    """One item of the review queue."""

    id: str
    block_id: str
    reason: str
    status: str
    created_at: float
    decided_at: float | None = None
    decided_by: str | None = None
    decision: str | None = None
    comment: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["created_at"] = from_ts(self.created_at).isoformat()
        d["decided_at"] = None if self.decided_at is None else from_ts(self.decided_at).isoformat()
        return d


class ReviewHost(Protocol):
    """What a review decision needs of the store besides its own rows: the block, its
    events, an edit and the event log (the SQLite :class:`Store` and the PostgreSQL
    façade both are one)."""

    clock: Clock

    async def get(self, block_id: str) -> Block: ...

    async def events_for(self, block_id: str, *, limit: int = 50) -> list[EventRecord]: ...

    async def update(
        self, block_id: str, patch: Mapping[str, Any], *, actor: str = "agent"
    ) -> object: ...

    async def apply_events(self, events: Sequence[ValidationEvent]) -> ApplyResult: ...

    async def request_review(self, block_id: str, *, reason: str) -> dict[str, Any]: ...


def check_listing(status: str, limit: int) -> None:
    """A listing's ``status`` and ``limit``, or :class:`ValidationInputError`."""
    if status not in _STATUSES:
        raise ValidationInputError([("status", f"{status!r} is not one of {', '.join(_STATUSES)}")])
    if not 1 <= limit <= 10_000:
        raise ValidationInputError([("limit", f"{limit} is not between 1 and 10000")])


def listed(row: Sequence[Any]) -> dict[str, Any]:
    """A listing's item from its row: the review's columns, then the block's title,
    content, state and reliability (all None once the block is gone)."""
    item = Review(*row[:9]).as_dict()
    title, content, state, reliability = row[9:]
    item["block"] = (
        None
        if state is None
        else {
            "id": row[1],
            "title": title,
            "content": content[:200],
            "state": state,
            "reliability": reliability,
        }
    )
    return item


async def review_answer(host: ReviewHost, review: Review, *, events: int) -> dict[str, Any]:
    """``get_review``'s answer: the item, its block (None once deleted) and its events."""
    try:
        block = await host.get(review.block_id)
    except NotFoundError:
        return {"review": review.as_dict(), "block": None, "events": []}
    history = await host.events_for(review.block_id, limit=events)
    return {
        "review": review.as_dict(),
        "block": block.model_dump(mode="json"),
        "events": [e.as_dict() for e in history],
    }


async def _fetch(store: Store, review_id: str) -> Review:
    async with (
        store.db.read() as conn,
        conn.execute(f"SELECT {REVIEW_COLUMNS} FROM reviews WHERE id = ?", (review_id,)) as cur,
    ):
        row = await cur.fetchone()
    if row is None:
        raise NotFoundError("review", review_id)
    return Review(*row)


async def queue_review(store: Store, block_id: str, *, reason: str) -> Review:
    """Put a block in the queue with a reason; the open item if it already has one."""
    answer = await store.request_review(block_id, reason=reason)
    return await _fetch(store, answer["review_id"])


async def list_reviews(
    store: Store,
    *,
    status: str = "pending",
    limit: int = 100,
    namespaces: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Items with ``status`` (``pending``, ``decided`` or ``all``), oldest pending first
    (newest first for decided ones), each with a summary of its block; with
    ``namespaces``, only items whose block is of one of them."""
    check_listing(status, limit)
    conditions = [] if status == "all" else ["r.status = ?"]
    args: list[Any] = [] if status == "all" else [status]
    if namespaces is not None:
        conditions.append(f"k.namespace IN {placeholders(len(namespaces))}" if namespaces else "0")
        args.extend(namespaces)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    order = "r.created_at, r.id" if status == "pending" else "r.created_at DESC, r.id DESC"
    sql = (
        f"SELECT {', '.join('r.' + c.strip() for c in REVIEW_COLUMNS.split(','))},"
        " k.title, k.content, k.state, k.reliability"
        f" FROM reviews r LEFT JOIN blocks k ON k.id = r.block_id {where}"
        f" ORDER BY {order} LIMIT ?"
    )
    async with store.db.read() as conn, conn.execute(sql, [*args, limit]) as cur:
        rows = await cur.fetchall()
    return [listed(row) for row in rows]


async def get_review(store: Store, review_id: str, *, events: int = 10) -> dict[str, Any]:
    """One item with its block (None once deleted) and the block's last ``events``."""
    return await review_answer(store, await _fetch(store, review_id), events=events)


def check_decision(
    decision: Decision | str, reviewer: str, comment: str, new_content: str | None
) -> Decision:
    """The decision asked for, or every error of the input at once."""
    errors: list[tuple[str, str]] = []
    try:
        choice = Decision(decision)
    except ValueError:
        choice = Decision.CONFIRM
        errors.append(("decision", f"{decision!r} is not one of confirm, reject, edit"))
    if not reviewer.strip():
        errors.append(("decided_by", "a decision needs the reviewer's name"))
    elif len(reviewer) > 128:
        errors.append(("decided_by", "is longer than 128 characters"))
    if len(comment) > MAX_COMMENT_CHARS:
        errors.append(("comment", f"is longer than {MAX_COMMENT_CHARS} characters"))
    for name, text in (("decided_by", reviewer), ("comment", comment)):
        try:  # stored as given: no NUL, valid UTF-8 (neither backend takes others)
            check_text(name, text)
        except ValidationInputError as err:
            errors.extend(err.errors)
    if choice == Decision.EDIT:
        if not new_content:
            errors.append(("content", "an edit needs the new content"))
        elif len(new_content) > MAX_CONTENT_CHARS:
            errors.append(("content", f"is longer than {MAX_CONTENT_CHARS} characters"))
    elif new_content is not None:
        errors.append(("content", "only an edit takes new content"))
    if errors:
        raise ValidationInputError(errors)
    return choice


async def decide_review(
    store: Store,
    review_id: str,
    decision: Decision | str,
    *,
    reviewer: str,
    comment: str = "",
    new_content: str | None = None,
    sensor: str = "review",
    apply: Callable[[Sequence[ValidationEvent]], Awaitable[ApplyResult]] | None = None,
) -> dict[str, Any]:
    """Decide an item: confirm, reject, or edit (``new_content`` supersedes the old text).

    The decision becomes an event from ``sensor`` applied with ``apply`` (the daemon's
    bus; :meth:`Store.apply_events` by default) while the item is still open — so a
    rejection of a block not bound to the review sensor does not queue it again — and
    then closes the item with the reviewer, the decision and the comment. Revalidation
    requests the review sensor holds for the block are answered by it. Raises
    :class:`ValidationInputError` for an item already decided.
    """
    choice = check_decision(decision, reviewer, comment, new_content)
    reviewer = reviewer.strip()
    lock = _locks.setdefault(store, asyncio.Lock())
    async with lock:
        review = await _fetch(store, review_id)
        if review.status != "pending":
            raise already_decided(review)
        if new_content is not None:  # an edit's (check_decision refuses it otherwise)
            await store.update(review.block_id, {"content": new_content}, actor=reviewer)
        request_id = await _open_request(store, review.block_id, sensor)
        event = decision_event(
            review,
            choice,
            reviewer=reviewer,
            comment=comment,
            sensor=sensor,
            request_id=request_id,
            now=store.clock.time(),
        )
        result = await (apply or store.apply_events)([event])
        decided = await _close(
            store, review, choice, reviewer=reviewer, comment=comment, sensor=sensor, event=event
        )
    return await decision_answer(store, decided, event, result)


def already_decided(review: Review) -> ValidationInputError:
    """The conflict of deciding an item someone decided already."""
    already = f"already decided ({review.decision} by {review.decided_by})"
    return ValidationInputError([("id", f"review {review.id} is {already}")])


def decision_event(
    review: Review,
    choice: Decision,
    *,
    reviewer: str,
    comment: str,
    sensor: str,
    request_id: str | None,
    now: float,
) -> ValidationEvent:
    """The event a decision becomes: from ``sensor``, for the item's block, confirmed or
    refuted, with the comment as its message and the reviewer in its observed value."""
    return ValidationEvent(
        event_id=new_id(),
        sensor=sensor,
        subject=review.block_id,
        block_id=review.block_id,
        outcome=Outcome.REFUTED if choice == Decision.REJECT else Outcome.CONFIRMED,
        observed_at=from_ts(now),
        observed={"decision": choice.value, "decided_by": reviewer},
        reliability=REVIEW_RELIABILITY,
        message=comment,
        request_id=request_id,
    )


def decision_audit(review: Review, choice: Decision, comment: str, event: ValidationEvent) -> str:
    """The audit row's detail of a decision."""
    return json.dumps(
        {
            "review_id": review.id,
            "decision": choice.value,
            "comment": comment,
            "event_id": event.event_id,
        }
    )


async def decision_answer(
    host: ReviewHost, decided: Review, event: ValidationEvent, result: ApplyResult
) -> dict[str, Any]:
    """``decide_review``'s answer: the item as decided, its block as it is now (None once
    deleted) and whether the event was applied."""
    try:
        block: dict[str, Any] | None = (await host.get(decided.block_id)).model_dump(mode="json")
    except NotFoundError:
        block = None
    return {
        "review": decided.as_dict(),
        "block": block,
        "event": {
            "event_id": event.event_id,
            "outcome": event.outcome.value,
            "applied": result.accepted > 0 and result.unmatched == 0,
        },
    }


async def _open_request(store: Store, block_id: str, sensor: str) -> str | None:
    """The newest open revalidation request the review sensor holds for the block."""
    async with (
        store.db.read() as conn,
        conn.execute(
            "SELECT id FROM revalidations WHERE block_id = ? AND sensor = ?"
            " AND status IN ('pending', 'sent') ORDER BY created_at DESC LIMIT 1",
            (block_id, sensor),
        ) as cur,
    ):
        row = await cur.fetchone()
    return None if row is None else str(row[0])


async def _close(
    store: Store,
    review: Review,
    choice: Decision,
    *,
    reviewer: str,
    comment: str,
    sensor: str,
    event: ValidationEvent,
) -> Review:
    now = store.clock.time()

    async def job(conn: Any) -> None:
        cur = await conn.execute(
            "UPDATE reviews SET status = 'decided', decided_at = ?, decided_by = ?,"
            " decision = ?, comment = ? WHERE id = ? AND status = 'pending'",
            (now, reviewer, choice.value, comment, review.id),
        )
        if cur.rowcount == 0:  # another process decided it between our check and now
            return
        await conn.execute(
            "UPDATE revalidations SET status = 'done', finished_at = ?, outcome = ?"
            " WHERE block_id = ? AND sensor = ? AND status IN ('pending', 'sent')",
            (now, event.outcome.value, review.block_id, sensor),
        )
        await conn.execute(
            "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, ?, ?, ?)",
            (
                now,
                reviewer,
                "review",
                review.block_id,
                decision_audit(review, choice, comment, event),
            ),
        )

    await store.db.write(job)
    return await _fetch(store, review.id)


async def escalation_candidates(
    store: Store,
    *,
    block_ids: Sequence[str],
    below: float,
    now: float,
    unbound_low_volatility: bool = True,
    limit: int = 500,
) -> list[tuple[str, str]]:
    """Blocks a human should look at, with the reason, that have no open item yet.

    - of ``block_ids`` (the blocks bound to the review sensor): those whose reliability
      is below ``below``, and those past their validity window;
    - with ``unbound_low_volatility``: low-volatility blocks bound to no sensor at all
      that are past their window (the human review cycle) or below
      ``below``; nothing else can ever check them.

    Refuted blocks are left out: a refutation is a verdict (the rules already queue the
    ones no bound sensor can settle), and a human's rejection must not come back.
    """
    found: dict[str, str] = {}
    async with store.db.read() as conn:
        ids = list(dict.fromkeys(block_ids))
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            async with conn.execute(
                "SELECT k.id, k.reliability, k.stale_at FROM blocks k"
                f" WHERE k.id IN ({marks}) AND k.state NOT IN ('archived', 'refuted')"
                " AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.block_id = k.id"
                " AND r.status = 'pending')",
                chunk,
            ) as cur:
                for block_id, reliability, stale_at in await cur.fetchall():
                    reason = escalation_reason(reliability, stale_at, below, now)
                    if reason:
                        found[block_id] = reason
        if unbound_low_volatility and len(found) < limit:
            async with conn.execute(
                "SELECT k.id, k.reliability, k.stale_at FROM blocks k"
                " WHERE k.volatility = 'low' AND k.state NOT IN ('archived', 'refuted')"
                " AND (k.reliability < ? OR k.stale_at <= ?)"
                " AND NOT EXISTS (SELECT 1 FROM bindings g WHERE g.block_rid = k.rid)"
                " AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.block_id = k.id"
                " AND r.status = 'pending') ORDER BY k.stale_at LIMIT ?",
                (below, now, limit - len(found)),
            ) as cur:
                for block_id, reliability, stale_at in await cur.fetchall():
                    reason = escalation_reason(reliability, stale_at, below, now)
                    if reason:
                        found[block_id] = f"{reason}; no sensor can check it"
    return list(found.items())[:limit]


def escalation_reason(
    reliability: float, stale_at: float | None, below: float, now: float
) -> str | None:
    """Why a block needs a person, or None: reliability below ``below``, or past its window."""
    if reliability < below:
        return f"reliability {reliability:.2f} is below {below:.2f}"
    if stale_at is not None and stale_at <= now:
        return f"validity window ran out at {from_ts(stale_at).isoformat()}"
    return None
