"""Durations as people write them."""

from __future__ import annotations

import math
import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from memwarden.memory import NewBlock, Validation, format_duration, parse_duration
from memwarden.memory._durations import ACCEPTED_FORMS

MAX = timedelta(days=100 * 365)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("6h", timedelta(hours=6)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("500ms", timedelta(milliseconds=500)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d12h30m15s", timedelta(days=1, hours=12, minutes=30, seconds=15)),
        ("1.5h", timedelta(minutes=90)),
        ("6H", timedelta(hours=6)),
        (" 5m ", timedelta(minutes=5)),
        ("PT6H", timedelta(hours=6)),
        ("pt6h", timedelta(hours=6)),
        ("P7D", timedelta(days=7)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("PT1H30M", timedelta(hours=1, minutes=30)),
        ("PT0.5S", timedelta(milliseconds=500)),
        ("P1W", timedelta(weeks=1)),
        ("30", timedelta(seconds=30)),
        ("2.5", timedelta(seconds=2.5)),
        ("0", timedelta(0)),
    ],
)
def test_accepted_text_forms(text, expected):
    """Every documented text form parses to the exact duration it names."""
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (30, timedelta(seconds=30)),
        (0, timedelta(0)),
        (1.5, timedelta(seconds=1.5)),
        (86400.0, timedelta(days=1)),
        (timedelta(minutes=3), timedelta(minutes=3)),
        (timedelta(days=1, microseconds=7), timedelta(days=1, microseconds=7)),
    ],
)
def test_accepted_numbers_and_timedeltas(value, expected):
    """Numbers are seconds; a timedelta passes through unchanged (to the microsecond)."""
    assert parse_duration(value) == expected


def test_upper_bound_is_inclusive():
    """A century is the longest duration accepted, and exactly a century is accepted."""
    assert parse_duration(MAX) == MAX
    assert parse_duration(f"{MAX.days}d") == MAX


@pytest.mark.parametrize(
    "value",
    [
        "5 minutes",
        "6 hours",
        "",
        "   ",
        "5m30",
        "m",
        "P",
        "PT",
        "P1M",  # months have no fixed length
        "P1DT",
        "inf",
        "nan",
        "-5",
        "-5m",
        -5,
        -0.001,
        float("nan"),
        float("inf"),
        True,
        False,
        None,
        [5],
        object(),
        timedelta(seconds=-1),
        MAX + timedelta(microseconds=1),
        "36501d",
        1e12,
        10**400,  # too large even for a float
        "1e400",
    ],
    ids=repr,
)
def test_rejections_show_value_and_forms(value):
    """Anything else is rejected with a message that shows the value and the accepted forms."""
    with pytest.raises(PydanticCustomError) as info:
        parse_duration(value)
    message = str(info.value)
    assert ACCEPTED_FORMS in message
    shown = repr(value)
    assert shown[:40] in message or message.startswith(shown[:57])


def test_rejection_message_truncates_long_values():
    """A huge bad value is shown truncated, so the message stays readable."""
    with pytest.raises(PydanticCustomError) as info:
        parse_duration("x" * 10_000)
    message = str(info.value)
    assert "..." in message
    assert len(message) < 200


def test_model_field_error_names_field_and_shows_expectation():
    """Through a model, a bad duration is a validation error at that field with the forms."""
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x", validity_window="5 minutes")
    (error,) = info.value.errors()
    assert error["loc"] == ("validity_window",)
    assert "'5 minutes' is not a duration" in error["msg"]
    assert "30s, 5m, 6h, 7d" in error["msg"]


def test_none_rejected_where_not_optional():
    """None is not a duration: a required duration field rejects it, an optional one keeps it."""
    with pytest.raises(ValidationError) as info:
        Validation(validity_window=None, reliability=1.0)
    assert info.value.errors()[0]["loc"] == ("validity_window",)
    assert NewBlock(content="x", validity_window=None).validity_window is None


def test_model_serializes_durations_compactly_in_json():
    """In JSON a duration is written in its compact form, and read back equal."""
    block = NewBlock(content="x", validity_window="PT36H")
    data = block.model_dump(mode="json")
    assert data["validity_window"] == "1d12h"
    assert NewBlock.model_validate(data).validity_window == timedelta(hours=36)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(hours=6), "6h"),
        (timedelta(days=7), "7d"),
        (timedelta(days=1, hours=12), "1d12h"),
        (timedelta(milliseconds=500), "0.5s"),
        (timedelta(minutes=1, milliseconds=250), "1m0.25s"),
        (timedelta(seconds=123456, milliseconds=789), "1d10h17m36.789s"),
        (timedelta(microseconds=1), "0.000001s"),
    ],
)
def test_format_examples(value, text):
    """format_duration writes the exact compact form, largest units first."""
    assert format_duration(value) == text


_COMPACT = re.compile(
    r"(?:(?P<d>[1-9]\d*)d)?(?:(?P<h>[1-9]|1\d|2[0-3])h)?(?:(?P<m>[1-9]|[1-5]\d)m)?"
    r"(?:(?P<s>[1-9]|[1-5]\d|0(?=\.)|[1-5]?\d(?=\.))(?P<f>\.\d*[1-9])?s)?"
)


def _assert_compact(text: str) -> None:
    if text == "0s":
        return
    match = _COMPACT.fullmatch(text)
    assert match is not None, text
    assert any(match.groups()), text


@given(st.integers(min_value=0, max_value=int(MAX.total_seconds())))
def test_round_trip_whole_seconds(seconds):
    """Formatting then parsing any whole-second duration gives it back, in compact form."""
    td = timedelta(seconds=seconds)
    text = format_duration(td)
    assert parse_duration(text) == td
    _assert_compact(text)


@given(st.integers(min_value=0, max_value=int(MAX.total_seconds() * 1000)))
def test_round_trip_milliseconds(millis):
    """Formatting then parsing any millisecond duration gives it back exactly, compactly."""
    td = timedelta(milliseconds=millis)
    text = format_duration(td)
    assert parse_duration(text) == td
    _assert_compact(text)
    assert len(text) <= len("36500d23h59m59.999s")


@given(st.floats(min_value=0, max_value=MAX.total_seconds(), allow_nan=False))
def test_numbers_are_seconds(seconds):
    """Any finite, non-negative number of seconds in range parses to that many seconds."""
    parsed = parse_duration(seconds)
    assert math.isclose(parsed.total_seconds(), seconds, abs_tol=1e-6, rel_tol=1e-12)
