"""What the reads answer, made from their rows the same way on both backends: event
entries and records, blocks with their bindings and short ids, a reference resolved to
one id, counts, and the first event since a time. ``Reads`` below is the SQLite
:class:`~memwarden.memory._reads.Reads` or PostgreSQL's ``PgReads``."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from memwarden.errors import AmbiguousIdError, NotFoundError, ValidationInputError
from memwarden.memory import _shortid
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import record_to_block
from memwarden.memory._results import EventRecord

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

    from memwarden.memory._model import Binding, Block
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "MAX_BINS",
    "blocks_of",
    "check_bins",
    "counts_answer",
    "event_entry",
    "event_record",
    "events_by_sensor",
    "first_seq_since",
    "parse_block_ref",
    "resolved",
    "version_entry",
]


# The most bins a retention histogram has: one row each, read at once.
MAX_BINS = 1000


def check_bins(bins: object) -> None:
    """A retention histogram's ``bins`` is an int from 1 to :data:`MAX_BINS` (both
    backends): a ``ValueError`` naming it otherwise."""
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins must be an integer from 1 to {MAX_BINS}, not {bins!r}")


def event_entry(r: Sequence[Any], effects: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry of :meth:`Reads.events_after` from its row (seq, event_id, sensor,
    subject, outcome, observed_at, received_at, message, observed); both backends."""
    return {
        "seq": r[0],
        "event_id": r[1],
        "sensor": r[2],
        "subject": r[3],
        "outcome": r[4],
        "observed_at": from_ts(r[5]).isoformat(),
        "received_at": from_ts(r[6]).isoformat(),
        "message": r[7],
        "observed": json.loads(r[8]) if r[8] is not None else None,
        "effects": effects,
    }


def event_record(r: Sequence[Any]) -> EventRecord:
    """One entry of :meth:`Reads.events_for` from its row (the event's columns, its
    effect's, and its compacted run's count and first time); both backends."""
    return EventRecord(
        seq=r[0],
        event_id=r[1],
        sensor=r[2],
        subject=r[3],
        outcome=r[4],
        observed_at=r[5],
        received_at=r[6],
        reliability=r[7],
        message=r[8],
        observed=json.loads(r[9]) if r[9] is not None else None,
        request_id=r[10],
        state_before=r[11],
        state_after=r[12],
        reliability_before=r[13],
        reliability_after=r[14],
        detail=json.loads(r[15]) if r[15] else None,
        run=None if r[16] is None else (int(r[16]), r[17], r[5]),
    )


def blocks_of(
    recs: Sequence[BlockRecord],
    bindings: Mapping[str, list[Binding]],
    depends: Mapping[int, list[str]],
    short: Mapping[str, str],
    *,
    now: float,
    cfg: PolicyConfig,
) -> list[Block]:
    """The blocks of ``recs``, each with its bindings, dependencies and short id, in
    their state as of ``now``."""
    return [
        record_to_block(
            r,
            bindings=bindings.get(r.id, []),
            now=now,
            cfg=cfg,
            depends_on=depends.get(r.rid),
        ).model_copy(update={"short_id": short.get(r.id)})
        for r in recs
    ]


def parse_block_ref(ref: str, field: str) -> tuple[str, str]:
    """:func:`_shortid.parse_ref`, its refusal a :class:`ValidationInputError` on
    ``field``."""
    try:
        return _shortid.parse_ref(ref)
    except ValueError as err:
        raise ValidationInputError([(field, str(err))]) from None


def resolved(ref: str, ids: Sequence[str], short: Mapping[str, str]) -> str:
    """The one id of ``ids`` (those found for ``ref``): :class:`NotFoundError` when there
    is none, :class:`AmbiguousIdError` naming the first five (with their ``short`` ids)
    when there are more."""
    if not ids:
        raise NotFoundError("block", ref.strip())
    if len(ids) > 1:
        shown = [f"{short[i]} ({i})" for i in ids[:5]] + (["…"] if len(ids) > 5 else [])
        raise AmbiguousIdError(
            ref.strip(),
            list(ids[:5]),
            message=f"ambiguous id {ref.strip()!r}: matches {', '.join(shown)}"
            " (give more digits or the whole id)",
        )
    return ids[0]


async def first_seq_since(
    lo: int, hi: int, since: float, at_or_after: Callable[[int], Awaitable[tuple[int, float]]]
) -> int | None:
    """The ``seq`` of the first event received at or after ``since`` among ``lo``-``hi``
    (the log's bounds), None if none was: a binary search over positions, where
    ``at_or_after(seq)`` is the first stored event at or after ``seq`` (its seq and
    receipt time; gaps from deleted events are skipped). Both backends."""
    if (await at_or_after(hi))[1] < since:
        return None
    while lo < hi:  # the smallest position whose first event at or after it is recent
        mid = (lo + hi) // 2
        if (await at_or_after(mid))[1] >= since:
            hi = mid
        else:
            lo = mid + 1
    return (await at_or_after(lo))[0]


def counts_answer(
    rows: Iterable[Any], events: Any, backlog: Any, reviews: Any, dead: Any
) -> dict[str, Any]:
    """:meth:`Reads.counts`' answer from its rows (state, tier, volatility, count) and
    counters (both backends)."""
    by_state: dict[str, int] = defaultdict(int)
    by_tier: dict[str, int] = defaultdict(int)
    by_volatility: dict[str, int] = defaultdict(int)
    for state, tier, volatility, n in rows:
        by_state[state] += n
        by_tier[tier] += n
        by_volatility[volatility] += n
    return {
        "blocks": sum(by_state.values()),
        "by_state": dict(by_state),
        "by_tier": dict(by_tier),
        "by_volatility": dict(by_volatility),
        "events": int(events or 0),
        "revalidation_backlog": int(backlog or 0),
        "pending_reviews": int(reviews or 0),
        "dead_letters": int(dead or 0),
    }


def events_by_sensor(rows: Iterable[Any]) -> dict[str, dict[int, dict[str, int]]]:
    """Event counts by sensor, then bucket, then outcome, from ``(sensor, outcome,
    bucket, count)`` rows (both backends)."""
    out: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for sensor, outcome, bucket, n in rows:
        out[str(sensor)][int(bucket)][str(outcome)] = int(n)
    return {k: dict(v) for k, v in out.items()}


def version_entry(row: Any) -> dict[str, Any]:
    """One earlier text of a block from its ``block_history`` row (version, title,
    content, tags, replaced_at, replaced_by), as :meth:`Reads.versions` lists it."""
    return {
        "version": int(row[0]),
        "title": row[1],
        "content": row[2],
        "tags": json.loads(row[3]) if row[3] else [],
        "replaced_at": from_ts(row[4]).isoformat(),
        "replaced_by": row[5],
    }
