"""The domain model's validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memwarden.memory import (
    Binding,
    InfoType,
    NewBlock,
    Outcome,
    RevalidationReason,
    RevalidationRequest,
    ValidationEvent,
    Volatility,
    default_volatility,
)
from memwarden.memory._model import MAX_CONTENT_CHARS

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BAD_UTF8 = b"ok \xff".decode("utf-8", "surrogateescape")  # a lone surrogate, as from bad bytes


def _locs(err: ValidationError) -> list[tuple[int | str, ...]]:
    return [e["loc"] for e in err.errors()]


def _event(**overrides):
    data = {"sensor": "fs", "subject": "config/app.yaml", "outcome": "confirmed"}
    data["observed_at"] = NOW
    data.update(overrides)
    return ValidationEvent.model_validate(data)


# ------------------------------------------------------------------ ranges


@pytest.mark.parametrize("field", ["reliability", "importance"])
@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), float("inf")])
def test_new_block_unit_fields_are_strict(field, value):
    """reliability and importance outside 0..1 (or not finite) are rejected at that field."""
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x", **{field: value})
    assert _locs(info.value) == [(field,)]


@pytest.mark.parametrize("value", [0.0, 1.0, 0.5])
def test_new_block_unit_bounds_are_inclusive(value):
    """0 and 1 themselves are valid reliabilities."""
    assert NewBlock(content="x", reliability=value).reliability == value


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan")])
def test_event_reliability_is_strict(value):
    """An event's reliability outside 0..1 is rejected at that field."""
    with pytest.raises(ValidationError) as info:
        _event(reliability=value)
    assert _locs(info.value) == [("reliability",)]


@pytest.mark.parametrize(
    ("field", "value"),
    [("volatility", "extreme"), ("info_type", "gossip"), ("tier", "archived"), ("category", "x")],
)
def test_new_block_unknown_enum_values(field, value):
    """An unknown volatility, info_type, tier or category names the field and the choices."""
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x", **{field: value})
    (error,) = info.value.errors()
    assert error["loc"] == (field,)
    assert error["type"] == "enum"


def test_event_unknown_outcome_lists_the_outcomes():
    """An unknown outcome is rejected with the four outcomes listed."""
    with pytest.raises(ValidationError) as info:
        _event(outcome="maybe")
    (error,) = info.value.errors()
    assert error["loc"] == ("outcome",)
    for outcome in Outcome:
        assert f"'{outcome.value}'" in error["msg"]


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: NewBlock.model_validate({"content": "x", "relaibility": 0.9}), "relaibility"),
        (lambda: _event(colour="red"), "colour"),
    ],
    ids=["block", "event"],
)
def test_unknown_fields_are_rejected(build, field):
    """NewBlock and ValidationEvent forbid unknown fields (a typo is an error, not ignored)."""
    with pytest.raises(ValidationError) as info:
        build()
    (error,) = info.value.errors()
    assert error["type"] == "extra_forbidden"
    assert error["loc"] == (field,)


# ------------------------------------------------------------------ info_type / volatility


@pytest.mark.parametrize(
    ("given", "info_type", "volatility"),
    [
        ({}, InfoType.SEMI_STATIC, Volatility.MEDIUM),
        ({"info_type": "static"}, InfoType.STATIC, Volatility.LOW),
        ({"info_type": "semi_static"}, InfoType.SEMI_STATIC, Volatility.MEDIUM),
        ({"info_type": "dynamic"}, InfoType.DYNAMIC, Volatility.HIGH),
        ({"info_type": "ephemeral"}, InfoType.EPHEMERAL, Volatility.EPHEMERAL),
        ({"volatility": "low"}, InfoType.STATIC, Volatility.LOW),
        ({"volatility": "high"}, InfoType.DYNAMIC, Volatility.HIGH),
        ({"volatility": "ephemeral"}, InfoType.EPHEMERAL, Volatility.EPHEMERAL),
        ({"info_type": "static", "volatility": "high"}, InfoType.STATIC, Volatility.HIGH),
    ],
)
def test_info_type_and_volatility_derive_each_other(given, info_type, volatility):
    """A missing info_type or volatility is derived from the other; both given are kept."""
    block = NewBlock(content="x", **given)
    assert (block.info_type, block.volatility) == (info_type, volatility)


def test_default_volatility_table():
    """default_volatility maps each info type to its default volatility."""
    assert [default_volatility(t) for t in InfoType] == [
        Volatility.LOW,
        Volatility.MEDIUM,
        Volatility.HIGH,
        Volatility.EPHEMERAL,
    ]


# ------------------------------------------------------------------ bindings


@pytest.mark.parametrize(
    ("data", "subject"),
    [
        ({"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout"}, "config/app.yaml"),
        (
            {"sensor": "tests", "test": "tests/test_api.py::test_timeout"},
            "tests/test_api.py::test_timeout",
        ),
        (
            {"sensor": "api", "url": "http://127.0.0.1:8080/version"},
            "http://127.0.0.1:8080/version",
        ),
        ({"sensor": "runtime", "check": "db-port"}, "db-port"),
        ({"sensor": "mqtt", "topic": "home/door"}, "home/door"),
        ({"sensor": "fs", "path": "a", "test": "b"}, "a"),  # the first key in order wins
        ({"sensor": "runtime", "check": 5432}, "5432"),
        ({"sensor": "fs", "path": True}, ""),  # a bool is not a subject
        ({"sensor": "review"}, ""),
        ({"sensor": "fs", "subject": "explicit", "path": "config/app.yaml"}, "explicit"),
    ],
)
def test_binding_subject_derivation(data, subject):
    """A binding's subject is explicit, or the first of path/test/url/check/topic."""
    assert Binding.model_validate(data).subject == subject


def test_binding_flat_form_keeps_the_selector():
    """Every key but sensor and subject is the sensor's selector, kept as given."""
    binding = Binding.model_validate(
        {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
    )
    assert binding.sensor == "fs"
    assert binding.selector == {"path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
    assert binding.model_dump() == {
        "sensor": "fs",
        "subject": "config/app.yaml",
        "path": "config/app.yaml",
        "key": "/http/timeout",
        "equals": 30,
    }


@pytest.mark.parametrize("name", ["fs", "fs.main", "code_test", "http-2", "a" * 64])
def test_sensor_name_pattern_accepts(name):
    """Sensor names are lowercase identifiers with . _ - (at most 64 characters)."""
    assert Binding(sensor=name).sensor == name
    assert _event(sensor=name).sensor == name


@pytest.mark.parametrize(
    "name", ["", "FS", "1fs", "_fs", "fs main", "fs/x", "fs\n", "a" * 65, "fsé"]
)
def test_sensor_name_pattern_rejects(name):
    """Anything else is rejected at the sensor field, for bindings and events alike."""
    with pytest.raises(ValidationError) as info:
        Binding(sensor=name)
    assert _locs(info.value) == [("sensor",)]
    with pytest.raises(ValidationError) as info:
        _event(sensor=name)
    assert _locs(info.value) == [("sensor",)]


def test_binding_needs_a_sensor():
    """A binding without a sensor is rejected at bindings.N.sensor inside a block."""
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x", bindings=[{"path": "a"}])
    assert _locs(info.value) == [("bindings", 0, "sensor")]


@pytest.mark.parametrize(
    "selector",
    [{"path": BAD_UTF8}, {"path": "a", "equals": {"k": [BAD_UTF8]}}, {"path": "a", "x": {1, 2}}],
)
def test_binding_selector_must_be_storable_json(selector):
    """A selector holding non-UTF-8 text or a non-JSON value is rejected at the binding."""
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x", bindings=[{"sensor": "fs", **selector}])
    (error,) = info.value.errors()
    assert error["loc"] == ("bindings", 0)
    assert "selector" in error["msg"]


# ------------------------------------------------------------------ events


def test_event_needs_subject_or_block_id():
    """An event with neither a subject nor a block_id is rejected; either one suffices."""
    with pytest.raises(ValidationError, match="needs a subject or a block_id"):
        _event(subject="")
    assert _event(subject="", block_id="0190c0de-0000-7000-8000-000000000000").block_id
    assert _event(subject="x").subject == "x"


@pytest.mark.parametrize("when", [datetime(2026, 1, 1), "2026-01-01T00:00:00"])  # noqa: DTZ001
def test_event_needs_an_aware_time(when):
    """observed_at without a timezone is rejected (no guessing which clock it came from)."""
    with pytest.raises(ValidationError) as info:
        _event(observed_at=when)
    assert _locs(info.value) == [("observed_at",)]


def test_event_accepts_any_timezone():
    """An aware observed_at in any zone is accepted and means the same instant."""
    plus2 = timezone(timedelta(hours=2))
    event = _event(observed_at="2026-01-01T02:00:00+02:00")
    assert event.observed_at == datetime(2026, 1, 1, 2, tzinfo=plus2) == NOW


def test_event_json_round_trip():
    """An event survives JSON (the MQTT/HTTP wire form) unchanged, window included."""
    event = _event(
        observed={"timeout": 30, "ok": True, "tags": ["a", None]},
        reliability=0.95,
        validity_window="PT6H",
        request_id="req-1",
        message="checked key /http/timeout",
        agent="agent-7",
        seq=12,
    )
    wire = event.model_dump_json()
    back = ValidationEvent.model_validate_json(wire)
    assert back == event
    assert back.validity_window == timedelta(hours=6)
    assert '"validity_window":"6h"' in wire


def test_event_ids_default_unique():
    """Each event gets its own event_id when the sensor gives none."""
    assert len({_event().event_id for _ in range(100)}) == 100


@pytest.mark.parametrize(
    ("field", "value"),
    [("observed", BAD_UTF8), ("observed", {BAD_UTF8: 1}), ("message", BAD_UTF8)],
)
def test_event_text_must_be_utf8(field, value):
    """An event carrying non-UTF-8 text is rejected at that field, not stored half-broken."""
    with pytest.raises(ValidationError) as info:
        _event(**{field: value})
    assert _locs(info.value) == [(field,)]


def test_event_seq_is_non_negative():
    """A negative agent sequence number is rejected."""
    with pytest.raises(ValidationError):
        _event(seq=-1)


# ------------------------------------------------------------------ content


def test_content_limit_is_256_kib():
    """Content of exactly 256 KiB characters is accepted; one more is rejected."""
    assert len(NewBlock(content="x" * MAX_CONTENT_CHARS).content) == 256 * 1024
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x" * (MAX_CONTENT_CHARS + 1))
    assert _locs(info.value) == [("content",)]


@pytest.mark.parametrize("field", ["content", "title"])
def test_non_utf8_text_rejected(field):
    """Text with a lone surrogate (bytes that were not UTF-8) is rejected at that field."""
    data = {"content": "x", field: BAD_UTF8}
    with pytest.raises(ValidationError) as info:
        NewBlock.model_validate(data)
    assert _locs(info.value) == [(field,)]


def test_nul_rejected():
    """Content with a NUL character is rejected with a message that says so."""
    with pytest.raises(ValidationError, match="NUL") as info:
        NewBlock(content="before\x00after")
    assert _locs(info.value) == [("content",)]


def test_empty_content_rejected():
    """A block needs some content."""
    with pytest.raises(ValidationError) as info:
        NewBlock(content="")
    assert _locs(info.value) == [("content",)]


def test_unicode_content_accepted():
    """Any valid Unicode text is content, emoji and CJK included."""
    text = "Zürich naïve 東京 🚀"
    assert NewBlock(content=text).content == text


def test_tags_are_stripped_and_bounded():
    """Tags are stripped; an empty tag or more than 32 tags are rejected."""
    assert NewBlock(content="x", tags=["  api  "]).tags == ["api"]
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x", tags=["ok", "  "])
    assert _locs(info.value) == [("tags", 1)]
    with pytest.raises(ValidationError) as info:
        NewBlock(content="x", tags=[f"t{i}" for i in range(33)])
    assert _locs(info.value) == [("tags",)]


def test_revalidation_request_timeout():
    """A revalidation request's timeout is its deadline minus its creation time."""
    request = RevalidationRequest(
        block_id="b",
        sensor="fs",
        subject="a",
        binding=Binding(sensor="fs", path="a"),
        reason=RevalidationReason.EXPIRED,
        created_at=NOW,
        deadline=NOW + timedelta(seconds=30),
    )
    assert request.timeout == timedelta(seconds=30)
