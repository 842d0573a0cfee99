# The chart labels are typeset: they use the multiplication sign and the en dash.
# ruff: noqa: RUF001, RUF002
"""The evidence timeline of a block: server-side SVG, no JavaScript.

Reliability over time is drawn from the block's events and their effects (each effect
records the reliability before and after); retention over time from the block's
retention points (the decay formula's inputs at each change, ``memory._decayline``):
between two points the formula itself gives the value, so the curve is exact. Each
*group* of repeated identical events (same sensor, same outcome; a state change starts a
new group) is one mark, on its lane, coloured and shaped by outcome; spans of time in
each state are shaded behind the lines.
The same values are given as a table (behind a ``<details>`` on the page), and the SVG
carries a title and a description, so the chart is not the only way to read them.

The geometry is hand-written: a line, rectangles and a few symbols do not need a
charting library, and the page stays small (see docs/BENCHMARKS.md, Issue 21).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from memwarden.memory import retention_line

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory import EventRecord, RetentionPoint
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "EventGroup",
    "RetentionRow",
    "Timeline",
    "activity_chart",
    "bar_chart",
    "group_events",
    "series_chart",
    "series_table",
    "timeline",
]

WIDTH = 720
PLOT_LEFT = 44
PLOT_RIGHT = 12
PLOT_TOP = 22  # room for the legend above the plot
PLOT_HEIGHT = 150
LANE_HEIGHT = 22
AXIS_HEIGHT = 22
MAX_LINE_POINTS = 400  # the reliability line is thinned past this many points
MAX_MARKS = 200  # past this many groups, only the newest are drawn (and their time span)
STATE_FILL = {
    "fresh": "#e3f4e3",
    "unverified": "#eeeeee",
    "stale": "#fbefd5",
    "refuted": "#f9dcdc",
    "archived": "#e4e4f0",
}
OUTCOME_COLOUR = {
    "confirmed": "#1a7f37",
    "refuted": "#c62828",
    "changed": "#c62828",
    "error": "#b35900",
    "unreachable": "#b35900",
}
OTHER_COLOUR = "#555555"
RELIABILITY_COLOUR = "#1f4e9c"
RETENTION_COLOUR = "#8a3ffc"
RETENTION_TABLED = 50  # the newest retention points in the values table


@dataclass(slots=True)
class EventGroup:
    """Repeated identical events, shown as one mark ("confirmed ×5, 10:20–10:21")."""

    sensor: str
    outcome: str
    count: int
    first_at: float
    last_at: float
    state_before: str | None
    state_after: str | None
    reliability_after: float | None
    message: str

    @property
    def label(self) -> str:
        times = _hm(self.first_at)
        if self.count > 1 and _hm(self.last_at) != times:
            times += f"–{_hm(self.last_at)}"
        count = f" ×{self.count}" if self.count > 1 else ""
        return f"{self.outcome}{count}, {times}"

    @property
    def when(self) -> str:
        """``2026-11-24 10:20:05 UTC``, or a span ``2026-11-24 10:20:05–10:21:40 UTC``."""
        first = datetime.fromtimestamp(self.first_at, UTC)
        if self.count == 1 or self.last_at == self.first_at:
            return first.strftime("%Y-%m-%d %H:%M:%S UTC")
        last = datetime.fromtimestamp(self.last_at, UTC)
        fmt = "%H:%M:%S UTC" if last.date() == first.date() else "%Y-%m-%d %H:%M:%S UTC"
        return f"{first:%Y-%m-%d %H:%M:%S}–{last.strftime(fmt)}"

    @property
    def state_change(self) -> str | None:
        if self.state_before and self.state_after and self.state_before != self.state_after:
            return f"{self.state_before} → {self.state_after}"
        return None


@dataclass(slots=True)
class Timeline:
    """What the block page shows: the SVG and the groups it was drawn from."""

    svg: Markup
    groups: list[EventGroup] = field(default_factory=list)
    groups_total: int = 0  # before the cut to MAX_MARKS
    bands: list[tuple[float, float, str]] = field(default_factory=list)
    retention: list[RetentionRow] = field(default_factory=list)  # newest first
    retention_since: float | None = None  # no history before this (None: none at all)
    retention_gap: bool = False  # the chart starts before the first point
    retention_now: float | None = None
    retention_total: int = 0  # the points stored (the table lists the newest)


@dataclass(slots=True, frozen=True)
class RetentionRow:
    """One stored retention point as the values table lists it."""

    at: float
    after: float | None  # retention right after the change (None: archived)
    until: float  # when the next point (or now) takes over
    before_next: float | None  # retention just before that
    importance: float
    half_life_s: float
    state: str
    tier: str

    @property
    def when(self) -> str:
        return datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _hm(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def group_events(events: Sequence[EventRecord]) -> list[EventGroup]:
    """Consecutive events (oldest first) with the same sensor and outcome as one group
    each; an event that changes the block's state starts a group (so a group changes
    state at most at its first event). A run compaction folded counts as its size."""
    groups: list[EventGroup] = []
    for ev in events:
        count, first = (ev.run[0], ev.run[1]) if ev.run else (1, ev.observed_at)
        changes = bool(ev.state_before and ev.state_after and ev.state_before != ev.state_after)
        last = groups[-1] if groups else None
        if (
            last is not None
            and not changes
            and (last.sensor, last.outcome) == (ev.sensor, ev.outcome)
        ):
            last.count += count
            last.last_at = max(last.last_at, ev.observed_at)
            last.first_at = min(last.first_at, first)
            last.reliability_after = ev.reliability_after
            continue
        groups.append(
            EventGroup(
                sensor=ev.sensor,
                outcome=ev.outcome,
                count=count,
                first_at=first,
                last_at=ev.observed_at,
                state_before=ev.state_before,
                state_after=ev.state_after,
                reliability_after=ev.reliability_after,
                message=ev.message,
            )
        )
    return groups


def _bands(
    events: Sequence[EventRecord], start: float, end: float, state_now: str
) -> list[tuple[float, float, str]]:
    """Spans of time in each state, from the state changes the effects record."""
    state = next((e.state_before for e in events if e.state_before), None) or state_now
    bands: list[tuple[float, float, str]] = []
    since = start
    for ev in events:
        if ev.state_after and ev.state_after != state:
            bands.append((since, ev.observed_at, state))
            since, state = ev.observed_at, ev.state_after
    bands.append((since, end, state))
    return [b for b in bands if b[1] > b[0]] or [(start, end, state)]


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _steps(
    ordered: Sequence[EventRecord], start: float, end: float, reliability_now: float
) -> list[tuple[float, float]]:
    """The corners of the reliability step line: it holds until the next change."""
    first = next(
        (e.reliability_before for e in ordered if e.reliability_before is not None),
        reliability_now,
    )
    changes = [(start, first)]
    for e in ordered:  # a step line needs only the changes
        if e.reliability_after is not None and e.reliability_after != changes[-1][1]:
            changes.append((e.observed_at, e.reliability_after))
    changes.append((end, reliability_now))
    if len(changes) > MAX_LINE_POINTS:  # keep the first, the last, and an even spread
        step = len(changes) / MAX_LINE_POINTS
        changes = [changes[int(i * step)] for i in range(MAX_LINE_POINTS)] + [changes[-1]]
    corners: list[tuple[float, float]] = []
    for ts, rel in changes:
        if corners:
            corners.append((ts, corners[-1][1]))
        corners.append((ts, rel))
    return corners


def timeline(
    events: Sequence[EventRecord],
    *,
    start: float,
    now: float,
    state_now: str,
    reliability_now: float,
    title: str,
    edits: Sequence[tuple[float, int]] = (),
    retention: Sequence[RetentionPoint] = (),
    policy: PolicyConfig | None = None,
) -> Timeline:
    """The timeline of ``events`` (newest first, as the store gives them) from ``start``
    (the block's creation, or the oldest event shown) to ``now``; ``edits`` are
    (when, new version) pairs, drawn as dashed lines; ``retention`` the block's
    retention points (oldest first), drawn as a curve with ``policy``'s decay settings."""
    ordered = sorted(events, key=lambda e: (e.observed_at, e.seq))
    groups = group_events(ordered)
    groups_total = len(groups)
    if groups_total > MAX_MARKS:  # more marks than the width can tell apart: the newest
        cut = groups[-MAX_MARKS].first_at
        ordered = [e for e in ordered if e.observed_at >= cut]
        groups = group_events(ordered)
        start = cut
    if ordered:
        start = min(start, ordered[0].run[1] if ordered[0].run else ordered[0].observed_at)
    end = max(now, ordered[-1].observed_at if ordered else now)
    if end - start < 60:  # at least a minute wide
        end = start + 60
    bands = _bands(ordered, start, end, state_now)
    sensors = sorted({g.sensor for g in groups})
    plot_w = WIDTH - PLOT_LEFT - PLOT_RIGHT
    lanes_top = PLOT_TOP + PLOT_HEIGHT + 6
    height = lanes_top + LANE_HEIGHT * len(sensors) + AXIS_HEIGHT

    def x(ts: float) -> float:
        return PLOT_LEFT + (ts - start) / (end - start) * plot_w

    def y(rel: float) -> float:
        return PLOT_TOP + (1 - max(0.0, min(1.0, rel))) * PLOT_HEIGHT

    line = " ".join(
        f"{_f(x(ts))},{_f(y(rel))}" for ts, rel in _steps(ordered, start, end, reliability_now)
    )
    points = list(retention)
    segments = retention_line(points, start=start, end=end, cfg=policy) if policy and points else []
    since = points[0].at if points else None
    gap = since is None or since > start + 1.0
    retention_now = segments[-1][-1][1] if segments and segments[-1][-1][0] >= end else None
    curve = "".join("M" + "L".join(_thin([(x(t), y(v)) for t, v in seg])) for seg in segments)
    rows = _retention_rows(points, end, policy) if policy else []

    out: list[str] = [
        (
            f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" role="img"'
            ' aria-labelledby="tl-title tl-desc" xmlns="http://www.w3.org/2000/svg">'
        ),
        f'<title id="tl-title">Evidence timeline: {escape(title)}</title>',
        (
            f'<desc id="tl-desc">Reliability from {_when(start)} to {_when(end)}, now'
            f" {reliability_now:.2f}; {_retention_desc(since, gap=gap, now_value=retention_now)};"
            f" {sum(g.count for g in groups)} events in"
            f" {len(groups)} groups from {len(sensors)} sensor(s);"
            f" {sum(1 for g in groups if g.state_change)} state change(s)."
            " The values are in the table below the chart.</desc>"
        ),
    ]
    for b_start, b_end, state in bands:
        fill = STATE_FILL.get(state, "#f4f4f4")
        out.append(
            f'<rect class="band" data-state="{escape(state)}" x="{_f(x(b_start))}"'
            f' y="{PLOT_TOP}" width="{_f(max(0.5, x(b_end) - x(b_start)))}"'
            f' height="{PLOT_HEIGHT}" fill="{fill}"><title>{escape(state)}: {_when(b_start)}'
            f" – {_when(b_end)}</title></rect>"
        )
    out.extend(
        f'<line x1="{PLOT_LEFT}" x2="{WIDTH - PLOT_RIGHT}" y1="{_f(y(rel))}"'
        f' y2="{_f(y(rel))}" stroke="#ccc" stroke-width="0.5"/>'
        f'<text x="{PLOT_LEFT - 4}" y="{_f(y(rel) + 4)}" text-anchor="end"'
        f' font-size="11">{rel:.1f}</text>'
        for rel in (0.0, 0.5, 1.0)
    )
    for at, version in edits:
        if start <= at <= end:
            out.append(
                f'<line class="edit" x1="{_f(x(at))}" x2="{_f(x(at))}" y1="{PLOT_TOP}"'
                f' y2="{PLOT_TOP + PLOT_HEIGHT}" stroke="#444" stroke-dasharray="4 3">'
                f"<title>edited: version {version} from {_when(at)}</title></line>"
            )
    out.append(
        f'<polyline class="reliability" fill="none" stroke="{RELIABILITY_COLOUR}"'
        f' stroke-width="2" points="{line}"><title>reliability, now {reliability_now:.2f}'
        "</title></polyline>"
    )
    if curve:
        out.append(
            f'<path class="retention-line" fill="none" stroke="{RETENTION_COLOUR}"'
            f' stroke-width="2" stroke-dasharray="7 2" d="{curve}"><title>retention'
            + (f", now {retention_now:.2f}" if retention_now is not None else "")
            + "</title></path>"
        )
    if gap:
        note = f"no retention history before {_when(since)}" if since else "no retention history"
        out.append(
            f'<text class="no-history" x="{_f(PLOT_LEFT + 4)}" y="{PLOT_TOP + PLOT_HEIGHT - 5}"'
            f' font-size="11" fill="{RETENTION_COLOUR}">{note}</text>'
        )
    out.append(_legend())
    for i, sensor in enumerate(sensors):
        lane_y = lanes_top + i * LANE_HEIGHT + LANE_HEIGHT / 2
        out.append(
            f'<text x="{PLOT_LEFT - 4}" y="{_f(lane_y + 4)}" text-anchor="end" font-size="11">'
            f"{escape(sensor[:8])}</text>"
            f'<line x1="{PLOT_LEFT}" x2="{WIDTH - PLOT_RIGHT}" y1="{_f(lane_y)}"'
            f' y2="{_f(lane_y)}" stroke="#e2e2e2"/>'
        )
    lane_of = {s: i for i, s in enumerate(sensors)}
    for g in groups:
        lane_y = lanes_top + lane_of[g.sensor] * LANE_HEIGHT + LANE_HEIGHT / 2
        out.append(_mark(g, x(g.first_at), x(g.last_at), lane_y))
    axis_y = height - 6
    out.append(
        f'<text x="{PLOT_LEFT}" y="{axis_y}" font-size="11">{_when(start)}</text>'
        f'<text x="{WIDTH - PLOT_RIGHT}" y="{axis_y}" font-size="11" text-anchor="end">'
        f"{_when(end)}</text></svg>"
    )
    return Timeline(
        svg=Markup("".join(out)),  # noqa: S704 - every value above is escaped or a number
        groups=groups,
        bands=bands,
        groups_total=groups_total,
        retention=rows,
        retention_since=since,
        retention_gap=gap,
        retention_now=retention_now,
        retention_total=len(points),
    )


def _thin(coords: list[tuple[float, float]]) -> list[str]:
    """``x y`` pairs at a tenth of a unit, without repeats and without the middle ones
    of a level stretch (the same drawn height): a long history of small steps is a few
    hundred points, not one per sample."""
    pairs: list[tuple[float, float]] = []
    for cx, cy in coords:
        pair = (round(cx, 1), round(cy, 1))
        if pairs and pair == pairs[-1]:
            continue
        if len(pairs) >= 2 and pairs[-2][1] == pairs[-1][1] == pair[1]:
            pairs[-1] = pair  # the level stretch goes on: move its end
            continue
        pairs.append(pair)
    return [f"{x:g} {y:g}" for x, y in pairs]  # :g drops a ".0"


def _retention_desc(since: float | None, *, gap: bool, now_value: float | None) -> str:
    if since is None:
        return "no retention history"
    text = "retention" + (f" now {now_value:.2f}" if now_value is not None else "")
    if gap:
        text += f", no retention history before {_when(since)}"
    return text


def _retention_rows(
    points: Sequence[RetentionPoint], end: float, policy: PolicyConfig
) -> list[RetentionRow]:
    """The values table's rows: each point with retention right after it and just
    before the next one takes over, newest first (the newest RETENTION_TABLED)."""
    rows: list[RetentionRow] = []
    first = max(0, len(points) - RETENTION_TABLED)  # only the newest are tabled
    for i, p in enumerate(points[first:], start=first):
        until = points[i + 1].at if i + 1 < len(points) else max(end, p.at)
        rows.append(
            RetentionRow(
                at=p.at,
                after=p.retention(p.at, policy),
                until=until,
                before_next=p.retention(until, policy),
                importance=p.importance,
                half_life_s=p.half_life_s,
                state=p.state,
                tier=p.tier,
            )
        )
    return list(reversed(rows))


def _legend() -> str:
    """What the two lines are (shape as well as colour: retention is dashed)."""
    y = PLOT_TOP - 8
    x0 = PLOT_LEFT
    return (
        f'<g class="legend" font-size="11"><line x1="{x0}" x2="{x0 + 18}" y1="{y - 4}"'
        f' y2="{y - 4}" stroke="{RELIABILITY_COLOUR}" stroke-width="2"/>'
        f'<text x="{x0 + 22}" y="{y}">reliability</text>'
        f'<line x1="{x0 + 90}" x2="{x0 + 108}" y1="{y - 4}" y2="{y - 4}"'
        f' stroke="{RETENTION_COLOUR}" stroke-width="2" stroke-dasharray="7 2"/>'
        f'<text x="{x0 + 112}" y="{y}">retention</text></g>'
    )


def _mark(g: EventGroup, x0: float, x1: float, cy: float) -> str:
    """One group's mark: a circle (confirmed), a cross (refuted, changed), a triangle
    (error, unreachable) or a square; a bar under it spans a group's time."""
    colour = OUTCOME_COLOUR.get(g.outcome, OTHER_COLOUR)
    cx = (x0 + x1) / 2
    tip = f"{g.sensor}: {g.label}" + (f" ({g.state_change})" if g.state_change else "")
    parts = [
        (
            f'<g class="mark" data-outcome="{escape(g.outcome)}"'
            f' data-sensor="{escape(g.sensor)}" data-count="{g.count}">'
            f"<title>{escape(tip)}</title>"
        )
    ]
    if x1 - x0 > 2:  # a span wider than the mark
        parts.append(
            f'<line x1="{_f(x0)}" x2="{_f(x1)}" y1="{_f(cy)}" y2="{_f(cy)}"'
            f' stroke="{colour}" stroke-width="3" opacity="0.5"/>'
        )
    if g.outcome == "confirmed":
        parts.append(f'<circle cx="{_f(cx)}" cy="{_f(cy)}" r="5" fill="{colour}"/>')
    elif g.outcome in ("refuted", "changed"):
        d = 5
        parts.append(
            f'<path d="M{_f(cx - d)} {_f(cy - d)}L{_f(cx + d)} {_f(cy + d)}M{_f(cx - d)}'
            f' {_f(cy + d)}L{_f(cx + d)} {_f(cy - d)}" stroke="{colour}" stroke-width="2.5"/>'
        )
    elif g.outcome in ("error", "unreachable"):
        parts.append(
            f'<path d="M{_f(cx)} {_f(cy - 6)}L{_f(cx + 6)} {_f(cy + 5)}L{_f(cx - 6)}'
            f' {_f(cy + 5)}Z" fill="{colour}"/>'
        )
    else:
        parts.append(
            f'<rect x="{_f(cx - 4)}" y="{_f(cy - 4)}" width="8" height="8" fill="{colour}"/>'
        )
    if g.count > 1:  # the count beside the mark; left of it near the right edge
        right = cx + 7 + 6 * len(str(g.count)) + 8 <= WIDTH
        where = f'x="{_f(cx + 7)}"' if right else f'x="{_f(cx - 7)}" text-anchor="end"'
        parts.append(f'<text {where} y="{_f(cy - 5)}" font-size="10">×{g.count}</text>')
    parts.append("</g>")
    return "".join(parts)


BAR_WIDTH = 360
BAR_HEIGHT = 60
BAR_ORDER = ("confirmed", "changed", "refuted", "error")


def activity_chart(
    buckets: dict[int, dict[str, int]], *, n: int, since: float, bucket_s: float, name: str
) -> Markup:
    """A sensor's events per time bucket as stacked bars (confirmed, changed, refuted,
    error), ``n`` buckets from ``since``; the tallest bar fills the height."""
    tallest = max((sum(b.values()) for b in buckets.values()), default=0) or 1
    slot = BAR_WIDTH / n
    total = sum(sum(b.values()) for b in buckets.values())
    errors = sum(b.get("error", 0) for b in buckets.values())
    hours = n * bucket_s / 3600
    out = [
        (
            f'<svg class="activity" viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT + 17}" role="img"'
            f' aria-label="{escape(name)}: {total} events, {errors} errors in the last'
            f' {hours:g} hours" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{escape(name)}: events per {bucket_s / 60:g} minutes</title>"
            f"<desc>{n} bars of {bucket_s / 60:g} minutes from {_when(since)}, each"
            " stacked by outcome (confirmed, changed, refuted, error); the values are in"
            " the table below the chart.</desc>"
        ),
        f'<line x1="0" x2="{BAR_WIDTH}" y1="{BAR_HEIGHT}" y2="{BAR_HEIGHT}" stroke="#bbb"/>',
    ]
    for i in range(n):
        counts = buckets.get(i, {})
        top = float(BAR_HEIGHT)
        for outcome in (*BAR_ORDER, *sorted(set(counts) - set(BAR_ORDER))):
            k = counts.get(outcome, 0)
            if not k:
                continue
            h = k / tallest * (BAR_HEIGHT - 2)
            top -= h
            colour = OUTCOME_COLOUR.get(outcome, OTHER_COLOUR)
            out.append(
                f'<rect class="bar" data-outcome="{escape(outcome)}" data-count="{k}"'
                f' x="{_f(i * slot + 1)}" y="{_f(top)}" width="{_f(max(1.0, slot - 2))}"'
                f' height="{_f(h)}" fill="{colour}"><title>{_when(since + i * bucket_s)}:'
                f" {k} {escape(outcome)}</title></rect>"
            )
    out.append(
        f'<text x="0" y="{BAR_HEIGHT + 13}" font-size="11">{_hm(since)} UTC</text>'
        f'<text x="{BAR_WIDTH}" y="{BAR_HEIGHT + 13}" font-size="11" text-anchor="end">'
        f"now</text></svg>"
    )
    return Markup("".join(out))  # noqa: S704 - every value above is escaped or a number


def bar_chart(bars: list[tuple[str, int, str]], *, title: str, css: str) -> Markup:
    """Horizontal bars, one per (label, value, colour), labelled with their values; the
    longest fills the width. The description lists every value (for screen readers)."""
    width, row, label_w = 360, 18, 90
    longest = max((v for _, v, _ in bars), default=0) or 1
    out = [
        (
            f'<svg class="{escape(css)}" viewBox="0 0 {width} {row * len(bars) + 4}"'
            f' role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{escape(title)}</title><desc>"
            + str(escape("; ".join(f"{label}: {value}" for label, value, _ in bars)))
            + "</desc>"
        )
    ]
    for i, (label, value, colour) in enumerate(bars):
        y = i * row + 2
        w = value / longest * (width - label_w - 40)
        out.append(
            f'<g class="bar" data-label="{escape(label)}" data-value="{value}">'
            f'<text x="{label_w - 4}" y="{y + 12}" font-size="11" text-anchor="end">'
            f"{escape(label)}</text>"
            f'<rect x="{label_w}" y="{y}" width="{_f(max(w, 0.5 if value else 0))}"'
            f' height="{row - 4}" fill="{colour}"/>'
            f'<text x="{_f(label_w + w + 4)}" y="{y + 12}" font-size="11">{value}</text></g>'
        )
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 - every value above is escaped or a number


SERIES_WIDTH = 360
SERIES_HEIGHT = 90
SERIES_LEFT = 30
SERIES_LEGEND = 14


def series_chart(
    series: dict[str, list[tuple[float, int]]],
    *,
    since: float,
    now: float,
    step: float,
    colours: dict[str, str],
    title: str,
    desc: str,
    css: str,
) -> Markup:
    """Lines over time, one per key of ``series`` ((slot start, value) oldest first),
    from ``since`` to ``now``; a line breaks where a slot has no sample (the daemon was
    down). Keys in ``colours`` come first, in its order; the highest value fills the
    height. A title and a description for screen readers; the values go in a table
    beside it (:func:`series_table`)."""
    keys = [k for k in colours if k in series] + sorted(set(series) - set(colours))
    top = max((v for k in keys for _, v in series[k]), default=0) or 1
    plot_w = SERIES_WIDTH - SERIES_LEFT - 4
    span = max(now - since, step)

    def x(at: float) -> float:
        return SERIES_LEFT + (at - since) / span * plot_w

    def y(v: int) -> float:
        return SERIES_LEGEND + 4 + (1 - v / top) * (SERIES_HEIGHT - 4)

    base = SERIES_LEGEND + 4 + SERIES_HEIGHT - 4
    out = [
        (
            f'<svg class="{escape(css)}" viewBox="0 0 {SERIES_WIDTH} {base + 17}" role="img"'
            f' aria-labelledby="{escape(css)}-t {escape(css)}-d"'
            f' xmlns="http://www.w3.org/2000/svg">'
            f'<title id="{escape(css)}-t">{escape(title)}</title>'
            f'<desc id="{escape(css)}-d">{escape(desc)}</desc>'
        ),
        (
            f'<line x1="{SERIES_LEFT}" x2="{SERIES_WIDTH - 4}" y1="{_f(base)}" y2="{_f(base)}"'
            ' stroke="#bbb"/>'
        ),
        (
            f'<text x="{SERIES_LEFT - 3}" y="{SERIES_LEGEND + 12}" font-size="11"'
            f' text-anchor="end">{top}</text>'
            f'<text x="{SERIES_LEFT - 3}" y="{_f(base)}" font-size="11" text-anchor="end">0</text>'
        ),
    ]
    legend_x = float(SERIES_LEFT)
    for key in keys:
        colour = colours.get(key, OTHER_COLOUR)
        points = series[key]
        label = key or "open"
        out.append(
            f'<rect x="{_f(legend_x)}" y="3" width="8" height="8" fill="{colour}"/>'
            f'<text x="{_f(legend_x + 10)}" y="11" font-size="11">{escape(label)}</text>'
        )
        legend_x += 18 + 6.5 * len(label)
        segment: list[tuple[float, int]] = []
        segments = [segment]
        for at, v in points:
            if segment and at - segment[-1][0] > step * 1.5:
                segment = []
                segments.append(segment)
            segment.append((at, v))
        for seg in segments:
            if not seg:
                continue
            latest = seg[-1]
            if len(seg) == 1:
                out.append(
                    f'<circle class="point" data-key="{escape(key)}" cx="{_f(x(latest[0]))}"'
                    f' cy="{_f(y(latest[1]))}" r="1.5" fill="{colour}"/>'
                )
                continue
            path = " ".join(f"{_f(x(at))},{_f(y(v))}" for at, v in seg)
            out.append(
                f'<polyline class="line" data-key="{escape(key)}" points="{path}" fill="none"'
                f' stroke="{colour}" stroke-width="1.5"><title>{escape(label)}: {latest[1]}'
                f" at {_when(latest[0])}</title></polyline>"
            )
    out.append(
        f'<text x="{SERIES_LEFT}" y="{_f(base + 13)}" font-size="11">{_when(since)}</text>'
        f'<text x="{SERIES_WIDTH - 4}" y="{_f(base + 13)}" font-size="11" text-anchor="end">'
        "now</text></svg>"
    )
    return Markup("".join(out))  # noqa: S704 - every value above is escaped or a number


def series_table(
    series: dict[str, list[tuple[float, int]]], *, every: float
) -> tuple[list[str], list[tuple[str, list[int | None]]]]:
    """The values of ``series`` as (keys, rows): one row per ``every`` seconds that has
    a sample (the last sample in it), newest first; a key with no sample there is None."""
    keys = sorted(series)
    rows: dict[float, dict[str, int]] = {}
    for key in keys:
        for at, v in series[key]:
            rows.setdefault((at // every) * every, {})[key] = v
    return keys, [(_when(at), [rows[at].get(k) for k in keys]) for at in sorted(rows, reverse=True)]
