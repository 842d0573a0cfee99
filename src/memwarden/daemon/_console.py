"""The memory console: Search, Block, Stale & failing and Sensors pages beside the review queue.

Server-rendered like the review page (``daemon/_web.py``) and under the same ``/review``
prefix, so the same one-time sign-in, session cookie (``Path=/review``), CSRF token and
request guard apply unchanged: ``GET`` pages check the session themselves, every ``POST``
needs a live session (the guard) and the session's CSRF token (here). No JavaScript.

- ``/review/search``: the daemon's own search (the API's ranking), with each result's
  state, receipt verdict, warnings and score factors; filters state, tier, sensor, tag;
  an empty query lists the newest blocks.
- ``/review/blocks/{id}``: a block's text and earlier versions (word diff), bindings with
  their sensor's status and last observation, dependencies both ways, the evidence
  timeline (``daemon/_timeline.py``) and actions: revalidate now, ask for review, edit,
  archive.
- ``/review/stale``: what is stale, unreachable (its sensor is down) or flapping now,
  each named with why.
- ``/review/sensors``: each sensor's status, error rate, bound facts, what a binding may
  name, a bar chart of its events over the last 6 hours by outcome and its events and
  errors over the last 24 hours (both from the time series; the last minutes, which
  the series pass may not have counted yet, from the event log).
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form
from fastapi.responses import RedirectResponse, Response

from memwarden.daemon._routes._deps import DaemonDep
from memwarden.daemon._timeline import activity_chart, timeline
from memwarden.daemon._web import SignedIn, form_ok, page, refused, signed_out
from memwarden.errors import (
    AmbiguousIdError,
    NotFoundError,
    ValidationInputError,
    VersionConflictError,
)
from memwarden.memory import SERIES_STEP_S, BlockState, Tier, series_slot

if TYPE_CHECKING:
    from memwarden.daemon._app import Daemon
    from memwarden.memory import Block, EventRecord

__all__ = ["console"]

SEARCH_SHOWN = 50  # results (or newest blocks) on the search page
EVENTS_LOADED = 1000  # the newest events of a block the timeline is drawn from
GROUPS_TABLED = 100  # the newest event groups in the values table
STALE_SHOWN = 500  # blocks per section of the stale & failing page
ACTIVITY_BUCKET_S = 15 * 60.0  # the sensors page's charts: 24 bars of 15 minutes
ACTIVITY_BUCKETS = 24
MAX_QUERY_CHARS = 1000
MAX_FILTER_CHARS = 200
MAX_REASON_CHARS = 1000

# Why a block is not fresh, in words (memory.StaleReason values).
STALE_WHY = {
    "expired": "its validity window ran out",
    "low_reliability": "its reliability fell below the threshold",
    "source_changed": "its source changed",
    "dependency": "a fact it depends on is no longer fresh",
    "soft_refuted": "a sensor refuted it (not yet for good)",
    "flapping": "its checks keep flipping",
}

console = APIRouter(prefix="/review", include_in_schema=False)
"""The console pages (included beside the review router)."""


def _problem(status: int, message: str, session: Any) -> Response:
    return page("error.html", status=status, message=message, session=session)


class _RefusedError(ValueError):
    """A query parameter the page cannot take; the message names the field."""


def _choice(field: str, value: str, allowed: type[BlockState | Tier]) -> str | None:
    if not value:
        return None
    names = [m.value for m in allowed]
    if value not in names:
        raise _RefusedError(f"{field}: {value[:40]!r} is not one of {', '.join(names)}")
    return value


def _at_most(field: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise _RefusedError(f"{field}: {len(value)} characters; at most {limit}")


@console.get("/search")
async def search_page(
    session: SignedIn,
    daemon: DaemonDep,
    q: str = "",
    state: str = "",
    tier: str = "",
    sensor: str = "",
    tag: str = "",
) -> Response:
    if session is None:
        return signed_out()
    try:
        _at_most("q", q, MAX_QUERY_CHARS)
        _at_most("sensor", sensor, MAX_FILTER_CHARS)
        _at_most("tag", tag, MAX_FILTER_CHARS)
        want_state = _choice("state", state, BlockState)
        want_tier = _choice("tier", tier, Tier)
    except _RefusedError as err:
        return _problem(422, str(err), session)
    filters = {"state": want_state, "tier": want_tier, "sensor": sensor or None, "tag": tag or None}
    rows: list[dict[str, Any]] = []
    hidden = 0
    if q.strip():
        answer = await daemon.search(
            q, limit=SEARCH_SHOWN, include_refuted=want_state == "refuted", wait_s=0.0
        )
        hidden = answer["hidden_refuted"]
        for r in answer["results"]:
            b = r["block"]
            if not _matches(b, filters):
                continue
            rows.append(
                {
                    "block": b,
                    "receipt": r["receipt"],
                    "warnings": r["warnings"],
                    "factors": r["factors"],
                    "rank": r["rank"],
                }
            )
    else:
        flt = {k: v for k, v in filters.items() if v is not None}
        blocks = await daemon.store.list_blocks(
            {**flt, "newest_first": True, "limit": SEARCH_SHOWN}
        )
        receipts = await daemon.receipts(blocks)
        rows = [
            {
                "block": b.model_dump(mode="json"),
                "receipt": receipts[b.id],
                "warnings": [],
                "factors": None,
                "rank": None,
            }
            for b in blocks
        ]
    return page(
        "search.html",
        session=session,
        q=q,
        filters={"state": state, "tier": tier, "sensor": sensor, "tag": tag},
        states=[s.value for s in BlockState],
        tiers=[t.value for t in Tier],
        sensors=sorted(daemon.liveness()),
        rows=rows,
        hidden=hidden,
        nav="search",
    )


def _matches(block: dict[str, Any], filters: dict[str, str | None]) -> bool:
    if filters["state"] and block["state"] != filters["state"]:
        return False
    if filters["tier"] and block["tier"] != filters["tier"]:
        return False
    if filters["sensor"] and all(b["sensor"] != filters["sensor"] for b in block["bindings"]):
        return False
    return not (filters["tag"] and filters["tag"] not in block["tags"])


async def _resolve(daemon: Daemon, ref: str) -> str:
    if len(ref) > 128:  # longer than any id or short id
        raise NotFoundError("block", ref[:40] + "…")
    return await daemon.store.resolve_id(ref)


@console.get("/blocks/{block_id}")
async def block_page(
    session: SignedIn, daemon: DaemonDep, block_id: str, flash: str = ""
) -> Response:
    if session is None:
        return signed_out()
    try:
        full = await _resolve(daemon, block_id)
        block = await daemon.store.get(full)
    except (NotFoundError, AmbiguousIdError, ValidationInputError) as err:
        return page("not_found.html", status=404, message=str(err), session=session, nav="search")
    receipt = (await daemon.receipts([block]))[block.id]
    events = await daemon.store.events_for(block.id, limit=EVENTS_LOADED)
    versions = await daemon.store.versions(block.id)
    points = await daemon.store.retention_points(block.id)
    now = daemon.clock.time()
    chart = timeline(
        events,
        start=block.created_at.timestamp(),
        now=now,
        state_now=block.state.value,
        reliability_now=block.validation.reliability,
        title=block.title or block.content[:60],
        edits=[
            (datetime.fromisoformat(v["replaced_at"]).timestamp(), v["version"] + 1)
            for v in versions
        ],
        retention=points,
        policy=daemon.store.policy,
    )
    return page(
        "block.html",
        session=session,
        nav="search",
        flash=flash[:300],
        block=block,
        receipt=receipt,
        versions=_with_diffs(versions, block),
        bindings=_bindings(daemon, block, events),
        depends_on=await _named(daemon, block.depends_on),
        dependents=await _named(daemon, await daemon.store.dependents(block.id)),
        chart=chart,
        groups=list(reversed(chart.groups))[:GROUPS_TABLED],
        events_total=len(events),
        events_loaded=EVENTS_LOADED,
        stale_why=STALE_WHY,
        groups_tabled=GROUPS_TABLED,
    )


def _bindings(daemon: Daemon, block: Block, events: list[EventRecord]) -> list[dict[str, Any]]:
    """Each binding with its sensor's liveness and the last event it reported (newest)."""
    live = daemon.liveness()
    out = []
    for b in block.bindings:
        last = next((e for e in events if (e.sensor, e.subject) == (b.sensor, b.subject)), None)
        status = live.get(b.sensor)
        out.append(
            {
                "sensor": b.sensor,
                "subject": b.subject,
                "selector": b.model_dump(mode="json"),
                "alive": status.alive if status else False,
                "why": (status.why if status else "no such sensor is configured") or "",
                "last": last.as_dict() if last else None,
            }
        )
    return out


async def _named(daemon: Daemon, ids: list[str]) -> list[dict[str, Any]]:
    """The blocks behind these ids, for links (a deleted one is named as such)."""
    out: list[dict[str, Any]] = []
    for block_id in ids:
        try:
            b = await daemon.store.get(block_id)
        except NotFoundError:
            out.append({"id": block_id, "title": "(deleted)", "state": "gone"})
            continue
        out.append({"id": b.id, "title": b.title or b.content[:80], "state": b.state.value})
    return out


def _with_diffs(versions: list[dict[str, Any]], block: Block) -> list[dict[str, Any]]:
    """Newest first: each version with the word diff from the one before it."""
    texts = [
        *versions,
        {
            "version": block.version,
            "title": block.title,
            "content": block.content,
            "tags": block.tags,
            "replaced_at": None,
            "replaced_by": None,
        },
    ]
    out = []
    for before, after in zip([None, *texts[:-1]], texts, strict=True):
        entry = dict(after)
        entry["diff"] = _word_diff(before["content"], after["content"]) if before else None
        text = ("title", "content", "tags")
        # The same text as the version before: its bindings changed (a new version too).
        entry["rebound"] = before is not None and all(before[k] == after[k] for k in text)
        entry["current"] = after["version"] == block.version
        out.append(entry)
    return list(reversed(out))


def _word_diff(old: str, new: str) -> list[tuple[str, str]]:
    """(op, text) spans: ``=`` kept, ``-`` removed, ``+`` added, word by word."""
    a, b = old.split(" "), new.split(" ")
    spans: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            spans.append(("=", " ".join(a[i1:i2])))
            continue
        if i2 > i1:
            spans.append(("-", " ".join(a[i1:i2])))
        if j2 > j1:
            spans.append(("+", " ".join(b[j1:j2])))
    return spans


def _back(block_id: str, flash: str) -> RedirectResponse:
    return RedirectResponse(
        f"/review/blocks/{quote(block_id, safe='')}?{urlencode({'flash': flash})}",
        status_code=303,
    )


@console.post("/blocks/{block_id}/revalidate")
async def revalidate(
    session: SignedIn, daemon: DaemonDep, block_id: str, csrf: Annotated[str, Form()] = ""
) -> Response:
    """Ask the block's sensors to check it now (waits up to 2 s for their answers)."""
    if not form_ok(session, csrf):
        return refused(session)
    try:
        full = await _resolve(daemon, block_id)
        answer = await daemon.revalidate(full, wait_s=2.0)
    except (NotFoundError, AmbiguousIdError, ValidationInputError) as err:
        return page("not_found.html", status=404, message=str(err), session=session)
    asked, answered = len(answer["requested"]), len(answer["answered"])
    if not asked:
        flash = "Nothing can check this fact: it has no binding to a running sensor."
    else:
        flash = f"Asked {asked} sensor check(s); {answered} answered within 2 s."
    return _back(full, flash)


@console.post("/blocks/{block_id}/ask-review")
async def ask_review(
    session: SignedIn,
    daemon: DaemonDep,
    block_id: str,
    csrf: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    """Put the block in the review queue with the reason given."""
    if not form_ok(session, csrf):
        return refused(session)
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        return _problem(422, f"reason: say why, in 1 to {MAX_REASON_CHARS} characters", session)
    try:
        full = await _resolve(daemon, block_id)
        await daemon.request_review(
            full, reason=f"{reason} (asked by {session.reviewer})", source="review"
        )
    except (NotFoundError, AmbiguousIdError, ValidationInputError) as err:
        return page("not_found.html", status=404, message=str(err), session=session)
    return _back(full, "Queued for review.")


@console.post("/blocks/{block_id}/edit")
async def edit(
    session: SignedIn,
    daemon: DaemonDep,
    block_id: str,
    csrf: Annotated[str, Form()] = "",
    title: Annotated[str, Form()] = "",
    content: Annotated[str, Form()] = "",
    version: Annotated[str, Form()] = "",
) -> Response:
    """A new text (a new version; the old one is kept), applied only to the version the
    form was made from; the reviewer is recorded as who edited it."""
    if not form_ok(session, csrf):
        return refused(session)
    if not version.isdigit() or len(version) > 9:
        return _problem(422, "version: reload the page (the form names no version)", session)
    try:
        full = await _resolve(daemon, block_id)
        await daemon.edit_block(
            full,
            {"title": title.strip(), "content": content},
            actor=session.reviewer,
            expected_version=int(version),
            source="review",
        )
    except (NotFoundError, AmbiguousIdError) as err:
        return page("not_found.html", status=404, message=str(err), session=session)
    except (ValidationInputError, VersionConflictError) as err:
        conflict = isinstance(err, VersionConflictError)
        again = " Reload the page to edit the current text." if conflict else ""
        return _problem(409 if conflict else 422, f"{err}{again}", session)
    return _back(full, "Saved: a new version, unverified until its sensors confirm it.")


@console.post("/blocks/{block_id}/archive")
async def archive(
    session: SignedIn,
    daemon: DaemonDep,
    block_id: str,
    csrf: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    """Archive the block (out of search; restorable), recording who and why."""
    if not form_ok(session, csrf):
        return refused(session)
    reason = reason.strip() or "archived from the console"
    if len(reason) > MAX_REASON_CHARS:
        return _problem(422, f"reason: at most {MAX_REASON_CHARS} characters", session)
    try:
        full = await _resolve(daemon, block_id)
        await daemon.archive_block(full, reason=reason, actor=session.reviewer, source="review")
    except (NotFoundError, AmbiguousIdError, ValidationInputError) as err:
        return page("not_found.html", status=404, message=str(err), session=session)
    return _back(full, "Archived.")


@console.get("/stale")
async def stale_page(session: SignedIn, daemon: DaemonDep) -> Response:
    if session is None:
        return signed_out()
    stale = await daemon.store.list_blocks(
        {"state": "stale", "newest_first": True, "limit": STALE_SHOWN}
    )
    flapping = await daemon.store.list_blocks(
        {"flapping": True, "newest_first": True, "limit": STALE_SHOWN}
    )
    live = daemon.liveness()
    unreachable: list[dict[str, Any]] = []
    for name, status in sorted(live.items()):
        if status.alive:
            continue
        bound = await daemon.store.bindings_for_sensor(name)
        ids = list(dict.fromkeys(block_id for block_id, _ in bound))[:STALE_SHOWN]
        unreachable.append(
            {
                "sensor": name,
                "why": status.why,
                "since": status.since,
                "blocks": await _named(daemon, ids),
            }
        )
    failing = [s for s in daemon.sensor_status() if s.get("status") not in ("running", None)]
    return page(
        "stale.html",
        session=session,
        nav="stale",
        stale=stale,
        stale_why=STALE_WHY,
        flapping=flapping,
        unreachable=unreachable,
        failing=failing,
    )


async def _activity(
    daemon: Daemon, now: float
) -> tuple[float, dict[str, dict[int, dict[str, int]]]]:
    """Each sensor's events over the last 6 hours by 15-minute bar (aligned to the
    quarter hour, the last one is the current quarter) and outcome: from the time
    series (``outcome`` metric) for the 5-minute slots its pass has completed, from the
    event log for the current slot and the one before (which the pass may not have
    rewritten since it ended): only those events are read (at most 10 minutes' worth,
    found by a binary search on the log), whatever the log's size."""
    since = (now // ACTIVITY_BUCKET_S + 1 - ACTIVITY_BUCKETS) * ACTIVITY_BUCKET_S
    live_from = series_slot(now) - SERIES_STEP_S
    out: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))

    def add(sensor: str, at: float, outcome: str, n: int) -> None:
        bar = int((at - since) // ACTIVITY_BUCKET_S)
        if 0 <= bar < ACTIVITY_BUCKETS and n:
            counts = out[sensor][bar]
            counts[outcome] = counts.get(outcome, 0) + n

    for key, points in (await daemon.store.series("outcome", since=since)).items():
        sensor, _, outcome = key.partition(" ")
        for at, n in points:
            if at < live_from:
                add(sensor, at, outcome, n)
    live = await daemon.store.recent_event_counts(since=live_from, bucket_s=SERIES_STEP_S)
    for sensor, slots in live.items():
        for i, outcomes in slots.items():
            for outcome, n in outcomes.items():
                add(sensor, live_from + i * SERIES_STEP_S, outcome, n)
    return since, {k: dict(v) for k, v in out.items()}


@console.get("/sensors")
async def sensors_page(session: SignedIn, daemon: DaemonDep) -> Response:
    """Each sensor: status, last check, error rate, a chart of its events over the last
    6 hours (from the time series, the last minutes from the event log), what a binding
    to it may name, and its bound facts."""
    if session is None:
        return signed_out()
    now = daemon.clock.time()
    since, counts = await _activity(daemon, now)
    day = now - 86400.0  # the last 24 hours, from the time series (5-minute counts)
    day_events = await daemon.store.series("events", since=day)
    day_errors = await daemon.store.series("errors", since=day)
    rows = []
    for s in daemon.sensor_status(describe=True):
        name = str(s.get("name", ""))
        buckets = counts.get(name, {})
        recent = sum(sum(b.values()) for b in buckets.values())
        recent_errors = sum(b.get("error", 0) for b in buckets.values())
        events, errors = int(s.get("events") or 0), int(s.get("errors") or 0)
        rows.append(
            {
                **s,
                "error_rate": errors / events if events else None,
                "recent": recent,
                "recent_errors": recent_errors,
                "day_events": sum(v for _, v in day_events.get(name, [])),
                "day_errors": sum(v for _, v in day_errors.get(name, [])),
                "bound": len(await daemon.store.bindings_for_sensor(name)),
                "chart": activity_chart(
                    buckets,
                    n=ACTIVITY_BUCKETS,
                    since=since,
                    bucket_s=ACTIVITY_BUCKET_S,
                    name=name,
                ),
                "buckets": [(since + i * ACTIVITY_BUCKET_S, buckets[i]) for i in sorted(buckets)],
            }
        )
    return page("sensors.html", session=session, nav="sensors", sensors=rows)
