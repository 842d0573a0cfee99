"""The dependents' fall: when a block goes stale or is refuted, the blocks that depend on
it go stale too (reason ``dependency``), transitively, each with one revalidation request
per binding (docs/RULES.md)."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from memwarden.memory._codec import EVIDENCE_COLUMNS, evidence_record, evidence_row
from memwarden.memory._ids import new_id
from memwarden.memory._model import StaleReason
from memwarden.memory._results import StateChange
from memwarden.memory._sql import EVIDENCE_UPDATE, REVALIDATION_INSERT, in_thread, select_in_now
from memwarden.memory.policy import PolicyConfig, mark_stale

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterable

    import aiosqlite

    from memwarden.memory._eventbatch import PendingEvidence
    from memwarden.memory._record import BlockRecord

__all__ = [
    "dependency_requests",
    "propagate_dependencies",
    "propagate_on_thread",
    "stale_dependents",
]

# The evidence of the blocks that depend on any of a set of blocks.
_DEPENDENTS_SELECT = (
    "SELECT "
    + ", ".join(f"k.{c}" for c in EVIDENCE_COLUMNS)
    + " FROM dependencies d JOIN blocks k ON k.rid = d.block_rid WHERE d.depends_on IN "
)


async def propagate_dependencies(
    conn: aiosqlite.Connection,
    roots: Iterable[str],
    *,
    now: float,
    cfg: PolicyConfig,
    max_depth: int = 16,
) -> list[StateChange]:
    """Dependents of refuted or stale blocks go stale (reason ``dependency``), transitively,
    each with one revalidation request per binding. Returns their state changes."""
    return await in_thread(
        conn, lambda c: propagate_on_thread(c, roots, now=now, cfg=cfg, max_depth=max_depth)
    )


def propagate_on_thread(
    conn: sqlite3.Connection,
    roots: Iterable[str],
    *,
    now: float,
    cfg: PolicyConfig,
    max_depth: int = 16,
    pending: PendingEvidence | None = None,
) -> list[StateChange]:
    """:func:`propagate_dependencies` on the connection's own thread. ``pending``: the
    evidence the writer's run has not written yet, flushed before a dependent it holds
    is read (the row would be out of date)."""
    changes: list[StateChange] = []
    frontier = list(dict.fromkeys(roots))
    seen = set(frontier)
    timeout_s = cfg.staleness.revalidation_timeout.total_seconds()
    for _ in range(max_depth):
        if not frontier:
            break
        rows = select_in_now(conn, _DEPENDENTS_SELECT, frontier)
        if pending is not None and any(r[1] in pending.records for r in rows):
            pending.flush(conn)
            rows = select_in_now(conn, _DEPENDENTS_SELECT, frontier)
        staled = stale_dependents(rows, seen, now, changes)
        if not staled:
            break
        conn.executemany(EVIDENCE_UPDATE, [evidence_row(r) for r in staled])
        bindings = select_in_now(
            conn,
            "SELECT k.id, g.sensor, g.subject FROM bindings g"
            " JOIN blocks k ON k.rid = g.block_rid WHERE g.quarantine IS NULL"
            " AND g.block_rid IN ",
            [r.rid for r in staled],
        )
        conn.executemany(REVALIDATION_INSERT, dependency_requests(bindings, now, timeout_s))
        frontier = [r.id for r in staled]
    return changes


def stale_dependents(
    rows: Iterable[Iterable[Any]], seen: set[str], now: float, changes: list[StateChange]
) -> list[BlockRecord]:
    """One step of the dependency propagation, whatever the backend: the dependents (their
    evidence rows, ``EVIDENCE_COLUMNS``) not ``seen`` yet that go stale now, in rid order
    so that every backend makes the same changes in the same order; each change appended
    to ``changes``."""
    staled = []
    for row in sorted((tuple(r) for r in rows), key=operator.itemgetter(0)):
        rec = evidence_record(row)
        if rec.id in seen:
            continue
        seen.add(rec.id)
        before = rec.state
        if mark_stale(rec, now, StaleReason.DEPENDENCY):
            staled.append(rec)
            changes.append(StateChange(rec.id, before, rec.state, rec.reliability, now, ""))
    return staled


def dependency_requests(
    bindings: Iterable[Iterable[Any]], now: float, timeout_s: float
) -> list[tuple[Any, ...]]:
    """The ``REVALIDATION_INSERT`` rows for the bindings (block id, sensor, subject) of
    blocks a dependency made stale, in a stable order."""
    return [
        (new_id(), b, sensor, subject, "dependency", now, now, timeout_s)
        for b, sensor, subject in sorted(tuple(r) for r in bindings)
    ]
