"""Evidence behind a block: a read's receipt (its error streak, open checks, the
confirmation behind its validation) and what we believed about it at a past time
(``as_of``), rebuilt from the append-only event log."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memwarden.errors import NotFoundError
from memwarden.memory._clock import from_ts
from memwarden.memory._results import FactEvidence
from memwarden.memory._sql import select_in

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from memwarden.memory._database import Database

__all__ = ["Evidence", "belief", "error_streak", "receipts"]


class Evidence:
    """Receipts and as-of reads of blocks."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def receipts_for(self, block_ids: Sequence[str]) -> dict[str, FactEvidence]:
        """What a receipt needs about each block, in one read: its error streak, its open
        checks and the confirmation behind its current validation."""
        ids = list(dict.fromkeys(block_ids))
        out: dict[str, FactEvidence] = {}
        if not ids:
            return out
        async with self.db.read() as conn:
            out = receipts(
                await select_in(
                    conn, "SELECT id, consecutive_errors FROM blocks WHERE id IN ", ids
                ),
                await select_in(  # open checks some sensor can answer
                    conn,
                    "SELECT r.block_id, r.send_at FROM revalidations r"
                    " JOIN blocks k ON k.id = r.block_id"
                    " JOIN bindings g ON g.block_rid = k.rid AND g.sensor = r.sensor"
                    " AND g.subject = r.subject"
                    " WHERE r.status IN ('pending', 'sent') AND r.block_id IN ",
                    ids,
                ),
                await select_in(
                    conn,
                    "SELECT k.id, e.sensor, e.observed_at, e.observed, e.message, e.seq"
                    " FROM blocks k JOIN effects f ON f.block_rid = k.rid"
                    " JOIN events e ON e.seq = f.event_seq"
                    " WHERE e.outcome = 'confirmed' AND e.observed_at = k.validated_at"
                    " AND k.id IN ",
                    ids,
                ),
                await select_in(
                    conn,
                    "SELECT k.id, e.sensor, e.outcome, e.observed, e.message, f.state_after"
                    " FROM blocks k JOIN effects f ON f.block_rid = k.rid"
                    " AND f.event_seq = (SELECT max(event_seq) FROM effects"
                    " WHERE block_rid = k.rid)"
                    " JOIN events e ON e.seq = f.event_seq WHERE k.id IN ",
                    ids,
                ),
            )
            for block_id in [b for b, ev in out.items() if ev.consecutive_errors]:
                rows = await conn.execute_fetchall(
                    "SELECT e.observed_at, e.message FROM effects f"
                    " JOIN events e ON e.seq = f.event_seq"
                    " WHERE f.block_rid = (SELECT rid FROM blocks WHERE id = ?)"
                    " AND e.outcome = 'error' ORDER BY f.event_seq DESC LIMIT ?",
                    (block_id, out[block_id].consecutive_errors),
                )
                error_streak(out[block_id], rows)
        return out

    async def believed_at(self, block_id: str, at: float) -> dict[str, Any]:
        """What we believed about a block at ``at``: its content version, state,
        reliability, validation and the last evidence committed before then.

        Rebuilt from the append-only event log (events and their effects, in commit
        order), the block's history of edits (``block_history``) and the audit log
        (archive, restore). Bi-temporal as far as the evidence goes: each piece of
        evidence says when the world was observed (``observed_at``) and when we learned
        it (``committed_at``); ``at`` is compared with the latter.
        """
        async with self.db.read() as conn:
            rows = list(
                await conn.execute_fetchall(
                    "SELECT rid, created_at, version, title, content, tags, validity_window_s,"
                    " reliability FROM blocks WHERE id = ?",
                    (block_id,),
                )
            )
            if not rows:
                raise NotFoundError("block", block_id)
            rid = rows[0][0]
            history = list(
                await conn.execute_fetchall(
                    "SELECT version, title, content, tags, replaced_at FROM block_history"
                    " WHERE block_id = ? ORDER BY version",
                    (block_id,),
                )
            )
            effects = list(
                await conn.execute_fetchall(
                    "SELECT e.sensor, e.outcome, e.observed_at, e.received_at, e.message,"
                    " e.observed, e.validity_window_s, f.state_after, f.reliability_before,"
                    " f.reliability_after, f.detail FROM effects f"
                    " JOIN events e ON e.seq = f.event_seq WHERE f.block_rid = ?"
                    " ORDER BY e.seq",
                    (rid,),
                )
            )
            archive = list(
                await conn.execute_fetchall(
                    "SELECT at, action FROM audit WHERE block_id = ?"
                    " AND action IN ('archive', 'restore') AND at <= ? ORDER BY id",
                    (block_id, at),
                )
            )
        return belief(block_id, at, rows[0], history=history, effects=effects, archive=archive)


# ------------------------------------------------------------------ shared by the backends
# What a receipt and an as-of read make of the rows, without SQL: the PostgreSQL store's
# PgEvidence (memory/pg/_evidence.py) reads the same rows and runs these on them.


def _json(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


def receipts(
    errors: Iterable[Iterable[Any]],
    open_checks: Iterable[Iterable[Any]],
    confirmations: Iterable[Iterable[Any]],
    last_events: Iterable[Iterable[Any]],
) -> dict[str, FactEvidence]:
    """Receipts from the rows of the four reads: (id, consecutive_errors) per block that
    exists; (block id, send_at) per open check, the confirming events (block id, sensor,
    observed_at, observed, message, seq) and the last effects (block id, sensor, outcome,
    observed, message, state_after). Open checks come in send time order, and the
    latest confirming event (by seq) is the confirmation, whatever order the rows have."""
    out = {block_id: FactEvidence(consecutive_errors=n) for block_id, n in errors}
    for block_id, send_at in sorted(tuple(r) for r in open_checks):
        if block_id in out:
            out[block_id].open_checks.append(send_at)
    for block_id, sensor, observed_at, observed, message, _seq in sorted(
        (tuple(r) for r in confirmations), key=lambda r: r[5]
    ):
        if block_id in out:
            out[block_id].confirmation = {
                "sensor": sensor,
                "observed_at": from_ts(observed_at).isoformat(),
                "observed": _json(observed),
                "message": message,
            }
    for block_id, sensor, outcome, observed, message, state in last_events:
        if block_id in out:
            out[block_id].last_event = {
                "sensor": sensor,
                "outcome": outcome,
                "observed": _json(observed),
                "message": message,
                "state": state,
            }
    return out


def error_streak(evidence: FactEvidence, rows: Iterable[Iterable[Any]]) -> None:
    """Set when the block's error streak began and its last message, from its latest
    error events (observed_at, message), newest first."""
    found = [tuple(r) for r in rows]
    if found:
        evidence.errors_since = found[-1][0]
        evidence.last_error = found[0][1]


def belief(
    block_id: str,
    at: float,
    block: Sequence[Any],
    *,
    history: Sequence[Sequence[Any]],
    effects: Sequence[Sequence[Any]],
    archive: Sequence[Sequence[Any]],
) -> dict[str, Any]:
    """What we believed about a block at ``at`` (:meth:`Evidence.believed_at`), from its
    row (rid, created_at, version, title, content, tags, validity_window_s, reliability),
    its ``block_history`` rows by version, its effects with their events in commit order
    and its archive/restore audit rows up to ``at``."""
    _rid, created_at, version, title, content, tags, window_s, reliability = block
    if created_at > at:
        raise NotFoundError(
            "block",
            block_id,
            message=f"block {block_id!r} did not exist yet at {from_ts(at).isoformat()}",
        )
    shown = (version, title, content, tags)
    for v, t, c, g, replaced_at in history:  # the first version replaced after `at`
        if replaced_at > at:
            shown = (v, t, c, g)
            break
    timeline: list[tuple[float, int, Any]] = [(h[4], 0, h) for h in history if h[4] <= at]
    timeline += [(e[3], 1, e) for e in effects if e[3] <= at]
    timeline.sort(key=lambda item: (item[0], item[1]))
    state = "unverified"
    rel = effects[0][8] if effects else reliability
    validated_by: str | None = None
    validated_at: float | None = None
    window = window_s
    evidence: dict[str, Any] | None = None
    for _when, kind, item in timeline:
        if kind == 0:  # an edit: a new text was never checked
            if state in ("fresh", "stale", "refuted"):
                state = "unverified"
            continue
        sensor, outcome, observed_at, received_at, message, observed, ev_window = item[:7]
        detail = json.loads(item[10]) if item[10] else {}
        if detail.get("ignored"):
            continue
        state, rel = item[7], item[9]
        if outcome == "confirmed":
            validated_by, validated_at = sensor, observed_at
            window = ev_window if ev_window is not None else window_s
        evidence = {
            "sensor": sensor,
            "outcome": outcome,
            "observed_at": from_ts(observed_at).isoformat(),
            "committed_at": from_ts(received_at).isoformat(),
            "observed": json.loads(observed) if observed is not None else None,
            "message": message,
        }
    reasons: list[str] = []
    if state == "fresh" and validated_at is not None and validated_at + window <= at:
        state, reasons = "stale", ["expired"]
    if archive and archive[-1][1] == "archive":
        state = "archived"
    return {
        "as_of": from_ts(at).isoformat(),
        "block_id": block_id,
        "version": shown[0],
        "title": shown[1],
        "content": shown[2],
        "tags": json.loads(shown[3]) if isinstance(shown[3], str) else shown[3],
        "state": state,
        "stale_reasons": reasons,
        "reliability": round(rel, 4),
        "validated_by": validated_by,
        "validated_at": from_ts(validated_at).isoformat() if validated_at else None,
        "stale_at": from_ts(validated_at + window).isoformat() if validated_at else None,
        "last_evidence": evidence,
        "current_version": version,
    }
