"""The review page: server-rendered, usable without JavaScript.

Sign-in is by a one-time link (``memwarden review --open`` prints it; the Jupyter token
pattern): the link's token is exchanged once for a session cookie (HttpOnly,
SameSite=Strict) that names the reviewer. Every form carries the session's CSRF token.
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import cookie_parser

from memwarden.daemon._routes._deps import DaemonDep
from memwarden.daemon._timeline import bar_chart, group_events, series_chart, series_table
from memwarden.errors import MemwardenError, NotFoundError, ValidationInputError
from memwarden.memory import SERIES_STEP_S

if TYPE_CHECKING:
    from memwarden.daemon._app import Daemon

__all__ = [
    "ReviewSessions",
    "SignedIn",
    "csrf_ok",
    "forged",
    "page",
    "router",
    "signed_out",
    "signed_out_page",
]

COOKIE = "memwarden_review"
LINK_TTL_S = 600.0
SESSION_TTL_S = 12 * 3600.0
# What new_link() makes (token_urlsafe(24): 32 characters); anything else is not a link token.
LINK_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")
# Where a sign-in link may send the browser after signing in (``memwarden open ID``).
NEXT_PAGE = re.compile(r"/review(/[A-Za-z0-9_-]+){0,3}")
PROPOSALS_SHOWN = 200  # pending proposals on the page, oldest first
REVIEW_EVENTS = 50  # a review item's newest events, shown grouped (the newest 5 groups)
# The health page's charts: a colour per state; retention from low (red) to high (green).
STATE_BARS = {
    "fresh": "#3f9c4a",
    "unverified": "#9e9e9e",
    "stale": "#e09b1a",
    "refuted": "#d32f2f",
    "archived": "#7a7ab8",
}
TIER_LINES = {"short_term": "#90a4ae", "long_term": "#1565c0", "core": "#6a1b9a"}
HISTORY_S = 24 * 3600.0  # the health page's charts over time: the last 24 hours
RETENTION_BARS = (
    "#c62828",
    "#d84315",
    "#ef6c00",
    "#f9a825",
    "#fbc02d",
    "#c0ca33",
    "#9ccc65",
    "#66bb6a",
    "#43a047",
    "#2e7d32",
)

_templates = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(value: float | str | None) -> str:
    """A timestamp (epoch seconds or ISO) as ``YYYY-MM-DD HH:MM:SS UTC``; "" for none."""
    if value is None or value == "":
        return ""
    try:
        moment = (
            datetime.fromtimestamp(value, UTC)
            if isinstance(value, int | float)
            else datetime.fromisoformat(value).astimezone(UTC)
        )
    except (ValueError, OverflowError, OSError):
        return str(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


_templates.filters["when"] = _when


@dataclass(slots=True)
class _Session:
    reviewer: str
    csrf: str
    expires: float


@dataclass(slots=True)
class ReviewSessions:
    """One-time sign-in links and the sessions they open (in memory: a restart signs out)."""

    links: dict[str, tuple[str, float]] = field(default_factory=dict)
    sessions: dict[str, _Session] = field(default_factory=dict)

    def new_link(self, reviewer: str) -> str:
        token = secrets.token_urlsafe(24)
        self.links[token] = (reviewer, time.monotonic() + LINK_TTL_S)
        return token

    def redeem(self, token: str) -> tuple[str, _Session] | None:
        """A session for a live one-time token (well-formed: see ``LINK_TOKEN``), once."""
        now = time.monotonic()
        for key in [k for k, (_, exp) in self.links.items() if exp < now]:
            del self.links[key]
        if not LINK_TOKEN.fullmatch(token):
            return None
        found = None
        for key in list(self.links):
            if hmac.compare_digest(key.encode(), token.encode()):
                found = key
        if found is None:
            return None
        reviewer, _ = self.links.pop(found)  # one time only
        session_id = secrets.token_urlsafe(32)
        session = _Session(reviewer, secrets.token_urlsafe(24), now + SESSION_TTL_S)
        self.sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> _Session | None:
        if not session_id:
            return None
        session = self.sessions.get(session_id)
        if session is None or session.expires < time.monotonic():
            self.sessions.pop(session_id, None)
            return None
        return session

    def cookie_ok(self, cookie_header: str | None) -> bool:
        """Whether a raw ``Cookie`` header carries a live session (for the guard)."""
        if not cookie_header:
            return False
        return self.get(cookie_parser(cookie_header).get(COOKIE)) is not None


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A template rendered (autoescaped) as the response."""
    return HTMLResponse(_templates.get_template(name).render(**context), status_code=status)


def signed_out_page() -> tuple[int, str]:
    """The 401 page (status, HTML) for a request that needs a review session."""
    return 401, _templates.get_template("signed_out.html").render()


def signed_out() -> HTMLResponse:
    return page("signed_out.html", status=401)


def get_sessions(request: Request) -> ReviewSessions:
    """The application's sign-in links and sessions (``app.state.review_sessions``)."""
    sessions: ReviewSessions = request.app.state.review_sessions
    return sessions


Sessions = Annotated[ReviewSessions, Depends(get_sessions)]


def current_session(request: Request, sessions: Sessions) -> _Session | None:
    """The live review session the request's cookie names, if any."""
    return sessions.get(request.cookies.get(COOKIE))


SignedIn = Annotated[_Session | None, Depends(current_session)]

router = APIRouter(prefix="/review", include_in_schema=False)
"""The ``/review`` pages; the daemon and the sessions come through ``Depends``."""


def csrf_ok(session: _Session, given: str) -> bool:
    """Whether a form's ``csrf`` field is the session's token (constant time)."""
    return bool(given) and hmac.compare_digest(given.encode(), session.csrf.encode())


def form_ok(session: _Session | None, csrf: str) -> TypeGuard[_Session]:
    """A form post may act: a live session, and its CSRF token in the form."""
    return session is not None and csrf_ok(session, csrf)


def refused(session: _Session | None) -> HTMLResponse:
    """What a form post that may not act gets: 401 signed out, else 403 forged."""
    return signed_out() if session is None else forged()


def forged() -> HTMLResponse:
    """The 403 page for a form without the session's CSRF token."""
    return page(
        "error.html",
        status=403,
        message="This form is stale or forged: reload the page and try again.",
    )


@router.get("/login")
async def login(
    sessions: Sessions,
    token: str = "",
    next_page: Annotated[str, Query(alias="next")] = "",  # the link's ?next=
) -> Response:
    if not LINK_TOKEN.fullmatch(token):
        return page(
            "error.html",
            status=400,
            message=(
                "This sign-in link is malformed: its token should be 16-128 letters, "
                "digits, '-' or '_'. Copy the whole link, or get a new one with "
                "memwarden review --open."
            ),
        )
    redeemed = sessions.redeem(token)
    if redeemed is None:
        return page("signed_out.html", status=401, expired=True)
    session_id, _ = redeemed
    # Only a page of ours: a path under /review, nothing that could leave the site.
    target = next_page if NEXT_PAGE.fullmatch(next_page) else "/review"
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        httponly=True,
        samesite="strict",
        path="/review",
        max_age=int(SESSION_TTL_S),
    )
    return response


@router.get("")
async def queue(session: SignedIn, daemon: DaemonDep, flash: str = "") -> Response:
    if session is None:
        return signed_out()
    pending = await daemon.store.list_reviews(status="pending", limit=200)
    items = [await daemon.store.get_review(item["id"], events=0) for item in pending]
    for item in items:  # the evidence, repeated identical events as one row
        if item["block"] is not None:
            history = await daemon.store.events_for(item["block"]["id"], limit=REVIEW_EVENTS)
            item["groups"] = list(reversed(group_events(list(reversed(history)))))[:5]
    proposed = await _proposals_by_block(daemon)
    return page(
        "queue.html", items=items, proposed=proposed, session=session, flash=flash, nav="review"
    )


async def _proposals_by_block(daemon: Daemon) -> list[dict[str, Any]]:
    """Pending proposals grouped by the fact they are for, with the facts' texts."""
    groups: dict[str, dict[str, Any]] = {}
    for p in await daemon.store.list_proposals(status="pending", limit=PROPOSALS_SHOWN):
        group = groups.get(p.block_id)
        if group is None:
            try:
                block = await daemon.store.get(p.block_id)
            except NotFoundError:  # deleted while we read: its proposals went with it
                continue
            group = groups[p.block_id] = {"block": block, "items": []}
        entry = p.as_dict()
        if p.kind == "depends_on":
            target = str(p.proposal.get("depends_on", ""))
            try:
                entry["target"] = await daemon.store.get(target)
            except NotFoundError:  # deleted since: accepting it would be refused
                entry["target"] = None
        group["items"].append(entry)
    return list(groups.values())


@router.post("/{review_id}")
async def decide(
    session: SignedIn,
    daemon: DaemonDep,
    review_id: str,
    action: Annotated[str, Form()],
    csrf: Annotated[str, Form()] = "",
    comment: Annotated[str, Form()] = "",
    content: Annotated[str, Form()] = "",
) -> Response:
    if not form_ok(session, csrf):
        return refused(session)
    try:
        result = await daemon.decide_review(
            review_id,
            action,
            reviewer=session.reviewer,
            comment=comment,
            new_content=content if action == "edit" else None,
        )
    except (ValidationInputError, NotFoundError) as err:
        return page("error.html", status=422, message=str(err))
    block = result["block"] or {}
    flash = f"{action}ed: {block.get('title') or block.get('content', '')[:60]}"
    return RedirectResponse(f"/review?flash={flash}", status_code=303)


@router.post("/proposals/{proposal_id}")
async def decide_proposal(
    session: SignedIn,
    daemon: DaemonDep,
    proposal_id: str,
    action: Annotated[str, Form()],
    csrf: Annotated[str, Form()] = "",
) -> Response:
    """Accept (bind the fact, or record its dependency) or reject a proposal."""
    if not form_ok(session, csrf):
        return refused(session)
    if action not in ("accept", "reject"):
        return page("error.html", status=422, message="action: use accept or reject")
    try:
        decided = await daemon.decide_proposal(
            proposal_id, accept=action == "accept", actor=session.reviewer
        )
        block = await daemon.store.get(decided.block_id)
    except (ValidationInputError, NotFoundError) as err:
        return page("error.html", status=422, message=str(err))
    flash = f"{action}ed the proposal for: {block.title or block.content[:60]}"
    return RedirectResponse(f"/review?{urlencode({'flash': flash})}", status_code=303)


@router.get("/health")
async def health(session: SignedIn, daemon: DaemonDep) -> Response:
    if session is None:
        return signed_out()
    try:
        report = await daemon.health()
    except MemwardenError as err:
        return page("error.html", status=503, message=str(err))
    by_state = report["counts"].get("by_state", {})
    states = [(k, int(by_state.get(k, 0)), c) for k, c in STATE_BARS.items()]
    retention = await daemon.store.retention_histogram(bins=len(RETENTION_BARS))
    bins = [
        (f"{i / len(RETENTION_BARS):.1f}-{(i + 1) / len(RETENTION_BARS):.1f}", n, colour)
        for i, (n, colour) in enumerate(zip(retention, RETENTION_BARS, strict=True))
    ]
    charts = {
        "states": bar_chart(states, title="Blocks by state now", css="by-state"),
        "retention": bar_chart(bins, title="Live blocks by retention", css="retention"),
    }
    now = daemon.clock.time()
    since = now - HISTORY_S
    over_time = []
    for metric, css, title, colours in (
        ("state", "states-over-time", "Blocks by state", STATE_BARS),
        ("tier", "tiers-over-time", "Blocks by tier", TIER_LINES),
        ("backlog", "backlog-over-time", "Revalidation backlog", {"": "#3949ab"}),
    ):
        series = await daemon.store.series(metric, since=since)
        samples = sum(len(v) for v in series.values())
        keys, rows = series_table(series, every=3600.0)
        desc = (
            f"{title} every 5 minutes over the last {HISTORY_S / 3600:g} hours"
            f" ({samples} samples); the values are in the table below the chart."
        )
        chart = series_chart(
            series,
            since=since,
            now=now,
            step=SERIES_STEP_S,
            colours=colours,
            title=f"{title} over the last {HISTORY_S / 3600:g} hours",
            desc=desc,
            css=css,
        )
        over_time.append(
            {"title": title, "css": css, "chart": chart, "columns": keys, "rows": rows}
        )
    return page(
        "health.html",
        report=report,
        session=session,
        nav="health",
        charts=charts,
        retention=bins,
        over_time=over_time,
    )
