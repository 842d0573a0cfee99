"""Quarantined bindings on PostgreSQL: stored bindings that today's rules refuse.

The same contract as :mod:`~memwarden.memory._quarantine` on SQLite, with its rules
shared (:class:`StoredBinding`, which pairs change a row, the ``error`` event naming the
rule, its id derived from the binding and the rule so a crash between the event and the
row never doubles it); only the SQL differs. ``tests/pg/test_quarantine_contract.py``
holds both backends' answers and rows equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwarden.memory._quarantine import StoredBinding, fresh_failures, quarantine_events

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._model import ValidationEvent
    from memwarden.memory._results import ApplyResult
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["PgQuarantine"]

_SELECT = (
    "SELECT g.id, k.id, g.sensor, g.subject, g.selector, g.quarantine, g.quarantined_at"
    " FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
)


class PgQuarantine:
    """Quarantined bindings on a :class:`PgDatabase`; the ``error`` events go through
    ``apply`` (the store's ``apply_events``)."""

    def __init__(
        self,
        db: PgDatabase,
        clock: Clock,
        *,
        apply: Callable[[Sequence[ValidationEvent]], Awaitable[ApplyResult]],
    ) -> None:
        self.db = db
        self.clock = clock
        self.apply = apply

    async def stored_bindings(self, sensors: Sequence[str]) -> list[StoredBinding]:
        """Every stored binding of these sensors (quarantined or not), of blocks not
        archived (a sensor name holding NUL has none)."""
        named = [s for s in sensors if "\x00" not in s]
        if not named:
            return []
        async with self.db.read() as conn:
            rows = await conn.fetch(
                f"{_SELECT} WHERE g.sensor = ANY($1::text[]) AND k.state <> 'archived'"
                " ORDER BY g.id",
                named,
            )
        return [StoredBinding(*r) for r in rows]

    async def quarantined_bindings(self) -> list[StoredBinding]:
        """The quarantined bindings, oldest first."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                f"{_SELECT} WHERE g.quarantine IS NOT NULL ORDER BY g.quarantined_at, g.id"
            )
        return [StoredBinding(*r) for r in rows]

    async def set_quarantine(
        self,
        failing: Sequence[tuple[StoredBinding, str]],
        released: Sequence[int] = (),
    ) -> int:
        """Quarantine ``(binding, rule)`` pairs (an ``error`` event each for the newly
        quarantined, or those under another rule) and release the binding ids in
        ``released``; how many changed."""
        now = self.clock.time()
        fresh = fresh_failures(failing)
        if fresh:
            await self.apply(quarantine_events(fresh, now))
        release = list(released)
        if not fresh and not release:
            return 0

        # One rule per binding, the last given (as SQLite's row-by-row updates leave it).
        rules = {b.id: rule for b, rule in fresh}

        async def job(conn: PgConnection) -> None:
            if rules:
                await conn.execute(
                    "UPDATE bindings g SET quarantine = v.rule, quarantined_at = $3"
                    " FROM unnest($1::bigint[], $2::text[]) AS v(id, rule) WHERE g.id = v.id",
                    list(rules),
                    list(rules.values()),
                    now,
                )
            if release:
                await conn.execute(
                    "UPDATE bindings SET quarantine = NULL, quarantined_at = NULL"
                    " WHERE id = ANY($1::bigint[])",
                    release,
                )

        await self.db.write(job)
        return len(fresh) + len(release)
