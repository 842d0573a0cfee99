"""The evidence timeline's SVG on its own: grouping, state bands, the cut to the newest
groups, and escaping of what sensors and facts say."""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

import pytest

from memwarden.daemon._timeline import (
    MAX_MARKS,
    PLOT_HEIGHT,
    PLOT_LEFT,
    PLOT_RIGHT,
    PLOT_TOP,
    WIDTH,
    activity_chart,
    bar_chart,
    group_events,
    timeline,
)
from memwarden.memory import EventRecord, RetentionPoint
from memwarden.memory.policy import PolicyConfig

SVG = "{http://www.w3.org/2000/svg}"


def _event(
    seq: int,
    outcome: str,
    *,
    sensor: str = "fs",
    before: str = "fresh",
    after: str = "fresh",
    run: tuple[int, float, float] | None = None,
) -> EventRecord:
    return EventRecord(
        seq=seq,
        event_id=f"e{seq}",
        sensor=sensor,
        subject="s",
        outcome=outcome,
        observed_at=1_000_000.0 + 60 * seq,
        received_at=1_000_000.0 + 60 * seq,
        reliability=None,
        message="",
        observed=None,
        request_id=None,
        state_before=before,
        state_after=after,
        reliability_before=0.9,
        reliability_after=0.5 if outcome == "refuted" else 0.9,
        detail=None,
        run=run,
    )


def test_identical_events_are_one_group_and_a_state_change_starts_one():
    """confirmed x3, then a refutation that makes it stale, then one from another sensor."""
    events = [
        _event(0, "confirmed", before="unverified"),
        _event(1, "confirmed"),
        _event(2, "confirmed"),
        _event(3, "refuted", after="stale"),
        _event(4, "refuted", before="stale", after="stale", sensor="http"),
    ]
    groups = group_events(events)
    assert [(g.sensor, g.outcome, g.count) for g in groups] == [
        ("fs", "confirmed", 3),
        ("fs", "refuted", 1),
        ("http", "refuted", 1),
    ]
    assert groups[0].state_change == "unverified → fresh"
    assert groups[0].label.startswith("confirmed \u00d73, ")


def test_a_compacted_run_counts_as_its_size():
    """An event standing for a run compaction folded counts as the whole run."""
    [group] = group_events([_event(5, "confirmed", run=(40, 1_000_000.0, 1_000_300.0))])
    assert group.count == 40
    assert group.first_at == 1_000_000.0


def test_the_svg_has_a_mark_per_group_bands_per_state_and_escapes_text():
    """Valid SVG: one g.mark per group, a band per state span, title and desc; a sensor
    name or a title with markup is text."""
    events = [
        _event(0, "confirmed", sensor="<b>x</b>"),
        _event(1, "refuted", sensor="<b>x</b>", after="stale"),
        _event(2, "confirmed", sensor="<b>x</b>", before="stale"),
    ]
    chart = timeline(
        list(reversed(events)),
        start=1_000_000.0,
        now=1_000_600.0,
        state_now="fresh",
        reliability_now=0.9,
        title="<script>alert(1)</script>",
    )
    root = ET.fromstring(str(chart.svg))  # noqa: S314 - our own output: well-formed means nothing unescaped got in
    marks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "mark"]
    assert [m.get("data-outcome") for m in marks] == ["confirmed", "refuted", "confirmed"]
    bands = [r.get("data-state") for r in root.iter(f"{SVG}rect") if r.get("class") == "band"]
    assert bands == ["fresh", "stale", "fresh"]
    assert root.find(f"{SVG}title").text == "Evidence timeline: <script>alert(1)</script>"
    assert root.find(f"{SVG}desc") is not None
    assert "<script>" not in str(chart.svg)


def test_past_the_mark_limit_only_the_newest_groups_are_drawn():
    """Alternating outcomes make a group per event; the chart keeps the newest MAX_MARKS."""
    events = [_event(i, "confirmed" if i % 2 else "error") for i in range(MAX_MARKS + 50)]
    chart = timeline(
        list(reversed(events)),
        start=0.0,
        now=events[-1].observed_at,
        state_now="fresh",
        reliability_now=0.9,
        title="t",
    )
    assert chart.groups_total == MAX_MARKS + 50
    assert len(chart.groups) == MAX_MARKS
    assert str(chart.svg).count('class="mark"') == MAX_MARKS
    assert chart.groups[-1].first_at == events[-1].observed_at


def _point(at: float, *, touched: float | None = None, state: str = "fresh") -> RetentionPoint:
    return RetentionPoint(
        at=at,
        importance=0.8,
        touched_at=at if touched is None else touched,
        half_life_s=600.0,
        tier="short_term",
        state=state,
        stale_at=None,
    )


def test_the_retention_path_draws_the_stored_points_values():
    """The dashed retention path starts at each stored point with the retention the
    formula gives there (read back from the SVG's coordinates), decays between points,
    and the values table lists the same numbers; before the first point it says so."""
    cfg = PolicyConfig()
    start, now = 1_000_000.0, 1_000_000.0 + 3600
    points = [_point(start + 600), _point(start + 1800, touched=start + 1500)]
    chart = timeline(
        [_event(20, "confirmed")],
        start=start,
        now=now,
        state_now="fresh",
        reliability_now=0.9,
        title="t",
        retention=points,
        policy=cfg,
    )
    root = ET.fromstring(str(chart.svg))  # noqa: S314 - our own output
    [path] = [p for p in root.iter(f"{SVG}path") if p.get("class") == "retention-line"]
    coords = [
        (float(a), float(b)) for a, b in re.findall(r"([\d.]+) ([\d.]+)", path.get("d") or "")
    ]
    plot_w = WIDTH - PLOT_LEFT - PLOT_RIGHT

    def value_at(ts: float) -> float:
        px = PLOT_LEFT + (ts - start) / (now - start) * plot_w
        [(_, y)] = [c for c in coords if abs(c[0] - px) < 0.06][-1:]
        return 1 - (y - PLOT_TOP) / PLOT_HEIGHT

    assert value_at(start + 600) == pytest.approx(0.8, abs=1e-3)  # just added: importance
    assert value_at(start + 1800) == pytest.approx(points[1].retention(start + 1800, cfg), abs=1e-3)
    assert value_at(now) == pytest.approx(0.8 * 2 ** (-2100 / 600), abs=1e-3)
    assert chart.retention_now == pytest.approx(0.8 * 2 ** (-2100 / 600))
    assert coords[0][0] == pytest.approx(PLOT_LEFT + 600 / 3600 * plot_w, abs=0.06)
    newest, oldest = chart.retention
    assert (oldest.at, oldest.after, oldest.until) == (start + 600, 0.8, start + 1800)
    assert oldest.before_next == pytest.approx(0.8 * 2 ** (-2.0))
    assert newest.before_next == pytest.approx(chart.retention_now)
    assert chart.retention_gap
    assert "no retention history before 1970-01-12 13:56 UTC" in str(chart.svg)


def test_without_retention_points_the_chart_says_there_is_no_history():
    """An old block with no stored point still renders, and says it has no history."""
    chart = timeline(
        [_event(0, "confirmed")],
        start=1_000_000.0,
        now=1_000_600.0,
        state_now="fresh",
        reliability_now=0.9,
        title="t",
        retention=[],
        policy=PolicyConfig(),
    )
    assert 'class="retention-line"' not in str(chart.svg)
    assert "no retention history" in str(chart.svg)
    assert chart.retention_since is None


def test_every_chart_has_a_title_and_a_description():
    """The bar and activity charts, like the timeline, carry a title and a description
    (the bar chart's lists each value); markup in a label is text."""
    bars = bar_chart([("fresh", 3, "#0f0"), ("<b>", 1, "#f00")], title="By state", css="s")
    root = ET.fromstring(str(bars))  # noqa: S314 - our own output
    assert root.find(f"{SVG}title").text == "By state"
    assert root.find(f"{SVG}desc").text == "fresh: 3; <b>: 1"
    activity = activity_chart(
        {0: {"confirmed": 2}}, n=24, since=1_000_000.0, bucket_s=900.0, name="fs"
    )
    root = ET.fromstring(str(activity))  # noqa: S314 - our own output
    assert root.find(f"{SVG}title").text == "fs: events per 15 minutes"
    assert "stacked by outcome" in root.find(f"{SVG}desc").text
