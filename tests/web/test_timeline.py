"""The evidence timeline's SVG on its own: grouping, state bands, the cut to the newest
groups, and escaping of what sensors and facts say."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from memwarden.daemon._timeline import MAX_MARKS, group_events, timeline
from memwarden.memory import EventRecord

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
