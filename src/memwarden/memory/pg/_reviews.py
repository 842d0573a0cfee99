"""The human review queue on PostgreSQL: list, show and decide review items.

The same contract as :mod:`~memwarden.memory._reviews` on SQLite, with its rules shared
(the input checks, the event a decision becomes, the audit detail, the answers): a
decision is a ``review`` event applied through the event log (or the daemon's bus, the
``apply`` given) while the item is still open, then the item is closed with the reviewer,
the decision and the comment, and the review sensor's open requests for the block are
answered. ``tests/pg/test_reviews_contract.py`` holds both backends' answers, errors and
rows equal.

**One decision of an item, across nodes.** On SQLite one process decides at a time (a
lock per store). Here several daemons share the queue, so a decision also holds a
session-level advisory lock on the item (``pg_advisory_lock``, on a connection of its
own, outside the pool: the decision waits on the writer and maybe the bus, which must
never wait for a reader it holds). A second decision of the same item waits for the
first, then finds it decided: the same :class:`ValidationInputError` as on SQLite. A
daemon that dies mid-decision ends its session, which frees the lock.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import asyncpg

from memwarden.errors import NotFoundError
from memwarden.memory._reviews import (
    REVIEW_COLUMNS,
    Decision,
    Review,
    already_decided,
    check_decision,
    check_listing,
    decision_answer,
    decision_audit,
    decision_event,
    escalation_reason,
    listed,
    review_answer,
)
from memwarden.memory.pg._database import CONNECT_ERRORS, connect_error
from memwarden.memory.pg._writer import translate

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from memwarden.memory._model import ValidationEvent
    from memwarden.memory._results import ApplyResult
    from memwarden.memory._reviews import ReviewHost
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["PgReviews"]

_SELECT = f"SELECT {REVIEW_COLUMNS} FROM reviews WHERE id = $1"
_LISTED = ", ".join("r." + c.strip() for c in REVIEW_COLUMNS.split(","))
# The advisory lock's key: the item's id hashed into PostgreSQL's bigint lock space (a
# collision only makes two decisions of different items wait for each other).
_LOCK = "SELECT pg_advisory_lock(hashtextextended('memwarden.review:' || $1, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('memwarden.review:' || $1, 0))"
_LOCK_CONNECT_TIMEOUT_S = 10.0


class PgReviews:
    """The review queue on a :class:`PgDatabase`; ``host`` (the store) gives the blocks,
    their events, the edit and the event log a decision goes through."""

    def __init__(self, db: PgDatabase, host: ReviewHost) -> None:
        self.db = db
        self.host = host
        self._lock = asyncio.Lock()  # one decision at a time in this process, as on SQLite

    async def queue_review(self, block_id: str, *, reason: str) -> Review:
        """Put a block in the queue with a reason; the open item if it already has one."""
        answer = await self.host.request_review(block_id, reason=reason)
        async with self.db.read() as conn:
            return await _fetch(conn, answer["review_id"])

    async def escalation_candidates(
        self,
        *,
        block_ids: Sequence[str],
        below: float,
        now: float,
        unbound_low_volatility: bool = True,
        limit: int = 500,
    ) -> list[tuple[str, str]]:
        """Blocks a human should look at, with the reason, that have no open item yet
        (:func:`memwarden.memory._reviews.escalation_candidates`: of ``block_ids``, those
        below ``below`` or past their window; with ``unbound_low_volatility``, the
        low-volatility blocks no sensor can check; refuted ones never)."""
        found: dict[str, str] = {}
        ids = [i for i in dict.fromkeys(block_ids) if "\x00" not in i]
        async with self.db.read() as conn:
            for i in range(0, len(ids), 500):  # SQLite's chunks, each in id order as there
                for block_id, reliability, stale_at in await conn.fetch(
                    "SELECT k.id, k.reliability, k.stale_at FROM blocks k"
                    " WHERE k.id = ANY($1::text[]) AND k.state NOT IN ('archived', 'refuted')"
                    " AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.block_id = k.id"
                    " AND r.status = 'pending') ORDER BY k.id",
                    ids[i : i + 500],
                ):
                    reason = escalation_reason(reliability, stale_at, below, now)
                    if reason:
                        found[block_id] = reason
            if unbound_low_volatility and len(found) < limit:
                for block_id, reliability, stale_at in await conn.fetch(
                    "SELECT k.id, k.reliability, k.stale_at FROM blocks k"
                    " WHERE k.volatility = 'low' AND k.state NOT IN ('archived', 'refuted')"
                    " AND (k.reliability < $1 OR k.stale_at <= $2)"
                    " AND NOT EXISTS (SELECT 1 FROM bindings g WHERE g.block_rid = k.rid)"
                    " AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.block_id = k.id"
                    " AND r.status = 'pending')"
                    " ORDER BY k.stale_at NULLS FIRST, k.rid LIMIT $3",  # SQLite's NULLs first
                    below,
                    now,
                    max(0, limit - len(found)),
                ):
                    reason = escalation_reason(reliability, stale_at, below, now)
                    if reason:
                        found[block_id] = f"{reason}; no sensor can check it"
        return list(found.items())[:limit]

    async def list_reviews(
        self,
        *,
        status: str = "pending",
        limit: int = 100,
        namespaces: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Items with ``status`` (``pending``, ``decided`` or ``all``), oldest pending first
        (newest first for decided ones), each with a summary of its block; with
        ``namespaces``, only items whose block is of one of them."""
        check_listing(status, limit)
        conditions: list[str] = []
        args: list[Any] = []
        if status != "all":
            args.append(status)
            conditions.append(f"r.status = ${len(args)}")
        if namespaces is not None:
            args.append([n for n in namespaces if "\x00" not in n])  # NUL: no namespace
            conditions.append(f"k.namespace = ANY(${len(args)}::text[])")
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        order = "r.created_at, r.id" if status == "pending" else "r.created_at DESC, r.id DESC"
        args.append(limit)
        sql = (
            f"SELECT {_LISTED}, k.title, k.content, k.state, k.reliability"
            f" FROM reviews r LEFT JOIN blocks k ON k.id = r.block_id{where}"
            f" ORDER BY {order} LIMIT ${len(args)}"
        )
        async with self.db.read() as conn:
            rows = await conn.fetch(sql, *args)
        return [listed(tuple(r)) for r in rows]

    async def get_review(self, review_id: str, *, events: int = 10) -> dict[str, Any]:
        """One item with its block (None once deleted) and the block's last ``events``."""
        async with self.db.read() as conn:
            review = await _fetch(conn, review_id)
        return await review_answer(self.host, review, events=events)

    async def decide_review(
        self,
        review_id: str,
        decision: Decision | str,
        *,
        reviewer: str,
        comment: str = "",
        new_content: str | None = None,
        sensor: str = "review",
        apply: Callable[[Sequence[ValidationEvent]], Awaitable[ApplyResult]] | None = None,
    ) -> dict[str, Any]:
        """Decide an item: confirm, reject, or edit (``new_content`` supersedes the old
        text), as :func:`memwarden.memory._reviews.decide_review` does on SQLite. Raises
        :class:`ValidationInputError` for an item already decided (here or on another node)."""
        choice = check_decision(decision, reviewer, comment, new_content)
        reviewer = reviewer.strip()
        if "\x00" in review_id:  # not an id PostgreSQL can hold (nor lock): no such item
            raise NotFoundError("review", review_id)
        host = self.host
        async with self._lock, self._locked(review_id) as conn:
            review = await _fetch(conn, review_id)
            if review.status != "pending":
                raise already_decided(review)
            if new_content is not None:  # an edit's (check_decision refuses it otherwise)
                await host.update(review.block_id, {"content": new_content}, actor=reviewer)
            request_id = await _open_request(conn, review.block_id, sensor)
            event = decision_event(
                review,
                choice,
                reviewer=reviewer,
                comment=comment,
                sensor=sensor,
                request_id=request_id,
                now=host.clock.time(),
            )
            result = await (apply or host.apply_events)([event])
            await self._close(
                review, choice, reviewer=reviewer, comment=comment, sensor=sensor, event=event
            )
            decided = await _fetch(conn, review.id)
        return await decision_answer(host, decided, event, result)

    def _locked(self, review_id: str) -> _ItemLock:
        return _ItemLock(self.db.dsn, review_id)

    async def _close(
        self,
        review: Review,
        choice: Decision,
        *,
        reviewer: str,
        comment: str,
        sensor: str,
        event: ValidationEvent,
    ) -> None:
        now = self.host.clock.time()

        async def job(conn: PgConnection) -> None:
            status = await conn.execute(
                "UPDATE reviews SET status = 'decided', decided_at = $1, decided_by = $2,"
                " decision = $3, comment = $4 WHERE id = $5 AND status = 'pending'",
                now,
                reviewer,
                choice.value,
                comment,
                review.id,
            )
            if status == "UPDATE 0":  # decided without the item's lock (never by this class)
                return
            await conn.execute(
                "UPDATE revalidations SET status = 'done', finished_at = $1, outcome = $2"
                " WHERE block_id = $3 AND sensor = $4 AND status IN ('pending', 'sent')",
                now,
                event.outcome.value,
                review.block_id,
                sensor,
            )
            await conn.execute(
                "INSERT INTO audit (at, actor, action, block_id, detail)"
                " VALUES ($1, $2, $3, $4, $5)",
                now,
                reviewer,
                "review",
                review.block_id,
                decision_audit(review, choice, comment, event),
            )

        await self.db.write(job)


class _ItemLock:
    """A connection of its own holding the item's advisory lock while the block runs."""

    def __init__(self, dsn: str, review_id: str) -> None:
        self._dsn = dsn
        self._id = review_id
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None

    async def __aenter__(self) -> PgConnection:
        try:
            conn = await asyncpg.connect(self._dsn, timeout=_LOCK_CONNECT_TIMEOUT_S)
        except CONNECT_ERRORS as err:
            raise connect_error(self._dsn, err) from None
        try:
            await conn.execute(_LOCK, self._id)
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as err:
            conn.terminate()
            raise translate(err) from err
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        return conn

    async def __aexit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            await conn.execute(_UNLOCK, self._id)
            await conn.close(timeout=_LOCK_CONNECT_TIMEOUT_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            conn.terminate()  # the session ends: the server frees its locks
        except BaseException:  # cancelled while letting go: end the session all the same
            conn.terminate()
            raise


async def _fetch(conn: PgConnection, review_id: str) -> Review:
    if "\x00" in review_id:  # no text PostgreSQL stores holds one: no such item (as on SQLite)
        raise NotFoundError("review", review_id)
    try:
        row = await conn.fetchrow(_SELECT, review_id)
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as err:
        raise translate(err) from err
    if row is None:
        raise NotFoundError("review", review_id)
    return Review(*row)


async def _open_request(conn: PgConnection, block_id: str, sensor: str) -> str | None:
    """The newest open revalidation request the review sensor holds for the block."""
    if "\x00" in sensor:
        return None
    try:
        found = await conn.fetchval(
            "SELECT id FROM revalidations WHERE block_id = $1 AND sensor = $2"
            " AND status IN ('pending', 'sent') ORDER BY created_at DESC LIMIT 1",
            block_id,
            sensor,
        )
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as err:
        raise translate(err) from err
    return None if found is None else str(found)
