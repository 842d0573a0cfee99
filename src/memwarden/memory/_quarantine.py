"""Quarantined bindings: stored bindings that today's rules refuse.

A binding accepted by an older memwarden (a backtracking regex RE2 refuses, a ``0s``
interval, an ``@file`` test selection) must not crash-loop an upgraded daemon, nor run.
At start the daemon re-checks every stored binding with its sensor's current rules; one
that fails is *quarantined*: its row keeps the rule it broke, the block gets an ``error``
event naming it, and the binding is never checked nor sent to its sensor (the store's
queries that feed sensors and revalidations skip it) until the rules accept it again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from memwarden.errors import ValidationInputError
from memwarden.memory._blockedit import storable
from memwarden.memory._clock import from_ts
from memwarden.memory._model import Binding, Outcome, ValidationEvent

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._results import ApplyResult

__all__ = [
    "StoredBinding",
    "fresh_failures",
    "quarantine_events",
    "quarantined",
    "set_quarantine",
    "stored_bindings",
]

_MESSAGE_MAX = 4096


@dataclass(frozen=True, slots=True)
class StoredBinding:
    """A binding row as stored, not yet validated by any model."""

    id: int
    block_id: str
    sensor: str
    subject: str
    selector: str  # the stored JSON
    quarantine: str | None  # the rule it broke, or None
    quarantined_at: float | None

    def as_binding(self) -> Binding:
        """The binding, validated by today's generic model (ValidationInputError)."""
        try:
            raw = json.loads(self.selector)
            if not isinstance(raw, dict):
                raise ValidationInputError([("selector", "is not a JSON object")])
            return Binding.model_validate({**raw, "sensor": self.sensor, "subject": self.subject})
        except ValidationError as err:
            raise ValidationInputError(
                [(".".join(str(p) for p in e["loc"]) or "binding", e["msg"]) for e in err.errors()]
            ) from None
        except ValueError as err:  # not JSON at all
            raise ValidationInputError([("selector", f"is not JSON: {err}")]) from None

    def as_dict(self) -> dict[str, Any]:
        try:
            selector: Any = json.loads(self.selector)
        except ValueError:
            selector = self.selector
        return {
            "binding_id": self.id,
            "block_id": self.block_id,
            "sensor": self.sensor,
            "subject": self.subject,
            "selector": selector,
            "rule": self.quarantine,
            "quarantined_at": None
            if self.quarantined_at is None
            else from_ts(self.quarantined_at).isoformat(),
        }


_SELECT = (
    "SELECT g.id, k.id, g.sensor, g.subject, g.selector, g.quarantine, g.quarantined_at"
    " FROM bindings g JOIN blocks k ON k.rid = g.block_rid"
)


async def stored_bindings(db: Database, sensors: Sequence[str]) -> list[StoredBinding]:
    """Every stored binding of these sensors (quarantined or not), of blocks not archived."""
    if not sensors:
        return []
    marks = ",".join("?" * len(sensors))
    async with db.read() as conn:
        rows = await conn.execute_fetchall(
            f"{_SELECT} WHERE g.sensor IN ({marks}) AND k.state <> 'archived' ORDER BY g.id",
            list(sensors),
        )
    return [StoredBinding(*r) for r in rows]


async def quarantined(db: Database) -> list[StoredBinding]:
    """The quarantined bindings, oldest first."""
    async with db.read() as conn:
        rows = await conn.execute_fetchall(
            f"{_SELECT} WHERE g.quarantine IS NOT NULL ORDER BY g.quarantined_at, g.id"
        )
    return [StoredBinding(*r) for r in rows]


def _event_id(binding: StoredBinding, rule: str) -> str:
    digest = hashlib.sha256(rule.encode()).hexdigest()[:16]
    return f"quarantine-{binding.id}-{digest}"


def fresh_failures(
    failing: Sequence[tuple[StoredBinding, str]],
) -> list[tuple[StoredBinding, str]]:
    """The pairs that change a row: newly quarantined, or under another rule (the rule as
    stored: a NUL or a lone surrogate of a validator's message becomes U+FFFD)."""
    cleaned = [(b, storable(rule)) for b, rule in failing]
    return [(b, rule) for b, rule in cleaned if b.quarantine != rule]


def quarantine_events(
    fresh: Sequence[tuple[StoredBinding, str]], now: float
) -> list[ValidationEvent]:
    """An ``error`` event for each newly quarantined binding's block, naming the rule."""
    return [
        ValidationEvent(
            event_id=_event_id(b, rule),
            sensor=b.sensor,
            block_id=b.block_id,
            outcome=Outcome.ERROR,
            observed_at=from_ts(now),
            message=f"binding quarantined: {rule}"[:_MESSAGE_MAX],
        )
        for b, rule in fresh
    ]


async def set_quarantine(
    db: Database,
    clock: Clock,
    failing: Sequence[tuple[StoredBinding, str]],
    released: Sequence[int] = (),
    *,
    apply: Callable[[Sequence[ValidationEvent]], Awaitable[ApplyResult]],
) -> int:
    """Quarantine ``(binding, rule)`` pairs and release the binding ids in ``released``.

    Each newly quarantined binding (or one whose rule changed) gives its block an
    ``error`` event naming the rule (its id derives from the binding and the rule, so
    a crash between the two writes never doubles it). Returns how many changed.
    """
    now = clock.time()
    fresh = fresh_failures(failing)
    if fresh:
        await apply(quarantine_events(fresh, now))
    release = list(released)
    if not fresh and not release:
        return 0

    async def job(conn: aiosqlite.Connection) -> None:
        await conn.executemany(
            "UPDATE bindings SET quarantine = ?, quarantined_at = ? WHERE id = ?",
            [(rule, now, b.id) for b, rule in fresh],
        )
        await conn.executemany(
            "UPDATE bindings SET quarantine = NULL, quarantined_at = NULL WHERE id = ?",
            [(i,) for i in release],
        )

    await db.write(job)
    return len(fresh) + len(release)
