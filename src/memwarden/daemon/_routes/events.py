"""``/v1/events`` and ``/v1/sensors``: follow the event log (or a session's notices),
ingest events from remote sensors, and what each configured sensor is and does.

Ingest is gated before anything is stored: each schema-valid event goes through the
daemon's event gate (who may report what, ``observed_at`` not ahead of our clock,
values capped); one refusal refuses the whole request (:class:`EventRefusedError`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from pydantic import BaseModel, Field, ValidationError

from memwarden.daemon._ingest import RefusalError
from memwarden.daemon._routes._deps import DaemonDep, ErrorMessage, Reader, Reporter
from memwarden.daemon._routes._errors import EventRefusedError
from memwarden.errors import ValidationInputError
from memwarden.memory import ValidationEvent, parse_duration

if TYPE_CHECKING:
    from memwarden.daemon._app import Daemon

__all__ = ["EventsAccepted", "router"]

router = APIRouter(tags=["sensors"])


class EventsAccepted(BaseModel):
    """What ``POST /v1/events`` did."""

    accepted: int
    duplicates: int
    unmatched: int
    rejected: list[dict[str, str]]
    capped: list[dict[str, str]] = Field(
        default_factory=list,
        description="Values above the sensor's cap, stored clamped: event, field, given, stored.",
    )
    spooled: int = Field(
        default=0,
        description="Events kept in this node's local spool because its PostgreSQL database"
        " could not be reached (or others wait there before them): committed to the spool,"
        " stored and applied once the database answers again, exactly once by event id"
        " (docs/SCALE.md). Not yet counted in accepted or duplicates.",
    )


async def _authorise(daemon: Daemon, payloads: list[Any]) -> tuple[list[Any], list[dict[str, str]]]:
    """The payloads with each schema-valid event checked (and capped) by the event gate.

    Raises :class:`EventRefusedError` on the first event the gate refuses: nothing is stored.
    Payloads that do not fit the schema stay as they are (the bus dead-letters them).
    """
    out: list[Any] = []
    capped: list[dict[str, str]] = []
    skew = daemon.settings.api.max_future_skew
    events: list[tuple[int, ValidationEvent]] = []
    for i, payload in enumerate(payloads):
        try:
            event = ValidationEvent.model_validate(payload)
        except ValidationError:
            out.append(payload)
            continue
        try:
            event, caps = daemon.gate.check(event, via="http", max_future_skew=skew)
        except RefusalError as refusal:
            raise EventRefusedError(i, refusal) from None
        capped.extend(
            {"event": str(i), "field": c.field, "given": c.given, "stored": c.stored} for c in caps
        )
        events.append((i, event))
        out.append(event)
    try:
        unbound = await daemon.gate.first_unbound(daemon.store, [e for _, e in events])
    except Exception as err:
        if not daemon.store_unavailable(err):
            raise
        # The database away: the events go to the spool with bound_only, and the store
        # refuses (dead-letters) an unbound one when they are delivered.
        unbound = None
    if unbound is not None:
        position, why = unbound
        raise EventRefusedError(events[position][0], why)
    return out, capped


@router.get("/v1/events")
async def follow_events(
    caller: Reader,
    daemon: DaemonDep,
    after: Annotated[
        int, Query(ge=0, le=2**63 - 1, description="Return events after this seq.")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    wait: Annotated[str, Query(description="Long-poll up to this long: 10s.")] = "0s",
    session: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=128,
            description="Instead of the log: this session's notices (a fact it read was "
            "refuted or went stale), numbered per session; ``after`` is that number.",
        ),
    ] = None,
) -> list[dict[str, Any]]:
    """The event log after ``after``; with ``wait``, hold the request until there is some.

    The log spans every namespace: an agent limited to some namespaces gets its own
    session's notices only (403 for the log)."""
    try:
        wait_s = min(parse_duration(wait).total_seconds(), 60.0)
    except ValueError as err:
        raise ValidationInputError([("wait", str(err))]) from None
    if session is not None:
        key = caller.session_key(session) or session
        notices = daemon.sessions.after(key, after, limit=limit)
        if not notices and wait_s > 0:
            await daemon.sessions.wait(key, after, wait_s)
            notices = daemon.sessions.after(key, after, limit=limit)
        return notices
    if caller.namespaces is not None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"agent {caller.name!r} may not read the event log: it spans every namespace "
            "(follow a session's notices with ?session=, or give the agent namespaces = "
            '["*"])',
        )
    mark = daemon.events_mark()  # before the read: a commit after it ends the wait at once
    events = await daemon.store.events_after(after, limit=limit)
    if not events and wait_s > 0:
        await daemon.wait_for_events(wait_s, since=mark)
        events = await daemon.store.events_after(after, limit=limit)
    return events


@router.post(
    "/v1/events",
    responses={403: {"model": ErrorMessage, "description": "A sensor may not report this."}},
)
async def ingest(request: Request, _: Reporter, daemon: DaemonDep) -> EventsAccepted:
    """Ingest events from remote sensors (the MQTT payload schema); answers after commit.

    On PostgreSQL, while the database cannot be reached, the events are committed to the
    node's local spool instead and counted in ``spooled`` (delivered later).

    Only sensors configured ``remote = true`` (with ``"http"`` in ``report_via``) may
    report, and only about blocks bound to them. One refused event refuses the whole
    request (403 for who, 422 for an ``observed_at`` ahead of our clock) and nothing
    is stored; events that do not fit the schema are listed in ``rejected``.
    """
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValidationInputError([("body", f"not JSON: {err}")]) from None
    payloads: list[Any] = body if isinstance(body, list) else [body]
    if len(payloads) > 10_000:
        raise ValidationInputError([("body", "at most 10000 events per request")])
    checked, capped = await _authorise(daemon, payloads)
    result = await daemon.bus.submit("remote:http", checked, bound_only=True)
    return EventsAccepted(
        accepted=result.accepted,
        duplicates=result.duplicates,
        unmatched=result.unmatched,
        rejected=[{"event": i, "reason": r} for i, r in result.rejected],
        capped=capped,
        spooled=result.spooled,
    )


@router.get("/v1/sensors")
async def sensors(_: Reader, daemon: DaemonDep) -> list[dict[str, Any]]:
    """Every configured sensor and its status. Each running one also says what a
    binding to it may name (``binds``: roots, test files, checks, allowed hosts),
    its ``binding_keys`` and ``examples`` of whole bindings to adapt."""
    return daemon.sensor_status(describe=True)
