"""The published JSON Schemas match the models."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from memwarden.memory import NewBlock, Outcome, ValidationEvent

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "export_schema.py"
EVENT_SCHEMA = ROOT / "docs" / "schema" / "validation-event.v1.json"
BLOCK_SCHEMA = ROOT / "docs" / "schema" / "block.v1.json"


def _load_exporter() -> Any:
    spec = importlib.util.spec_from_file_location("export_schema", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXPORTER = _load_exporter()


@pytest.mark.parametrize("path", sorted(EXPORTER.schemas()), ids=lambda p: p.name)
def test_checked_in_schema_matches_model(path):
    """Each file in docs/schema is exactly what the model generates now."""
    expected = EXPORTER.schemas()[path]
    actual = path.read_text(encoding="utf-8") if path.exists() else "<missing>"
    assert actual == expected, (
        f"{path.relative_to(ROOT)} is out of date with the model: "
        "run `.venv/bin/python scripts/export_schema.py` and commit the result"
    )


def test_both_schemas_are_published():
    """The event and block schemas are the published ones, each with its own $id."""
    assert set(EXPORTER.schemas()) == {EVENT_SCHEMA, BLOCK_SCHEMA}
    for path in (EVENT_SCHEMA, BLOCK_SCHEMA):
        schema = json.loads(path.read_text(encoding="utf-8"))
        assert schema["$id"].endswith("/" + path.name)
        assert schema["type"] == "object"


# ------------------------------------------------------------------ a tiny structural check

_TYPES: dict[str, Any] = {
    "string": str,
    "boolean": bool,
    "null": type(None),
    "object": dict,
    "array": list,
}


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in schema:
        return schema
    target = root["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}


def _scalar_problems(schema: dict[str, Any], value: Any, at: str) -> list[str]:
    out = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{at}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            out.append(f"{at}: bad length")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{at}: does not match {schema['pattern']}")
    if _is_type(value, "number") and not (
        schema.get("minimum", value) <= value <= schema.get("maximum", value)
    ):
        out.append(f"{at}: out of range")
    return out


def problems(schema: dict[str, Any], value: Any, root: dict[str, Any], at: str = "") -> list[str]:
    """What is wrong with ``value`` under ``schema`` (the keywords pydantic emits here)."""
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        options = [problems(s, value, root, at) for s in schema["anyOf"]]
        return [] if any(not p for p in options) else [f"{at}: matches no option"]
    if "type" in schema and not _is_type(value, schema["type"]):
        return [f"{at}: not {schema['type']}"]
    out = _scalar_problems(schema, value, at)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{at}.{k}: required" for k in schema.get("required", []) if k not in value]
        for key, item in value.items():
            if key in props:
                out += problems(props[key], item, root, f"{at}.{key}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{at}.{key}: not allowed")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += problems(schema["items"], item, root, f"{at}.{i}")
    return out


def _schema(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


GOOD_EVENTS = [
    {
        "sensor": "fs",
        "subject": "config/app.yaml",
        "outcome": "confirmed",
        "observed_at": "2026-01-01T00:00:00Z",
    },
    {
        "event_id": "0190c0de-1",
        "sensor": "tests.unit",
        "subject": "tests/test_api.py::test_timeout",
        "outcome": "refuted",
        "observed_at": "2026-01-01T00:00:00+02:00",
        "observed": {"exit": 1, "failed": ["test_timeout"]},
        "reliability": 1.0,
        "validity_window": "6h",
        "request_id": "r-1",
        "message": "1 failed",
        "agent": "ci-runner",
        "seq": 7,
    },
    {
        "sensor": "review",
        "block_id": "0190c0de-0000-7000-8000-000000000000",
        "outcome": "error",
        "observed_at": "2026-01-01T00:00:00Z",
        "validity_window": 30,
    },
]
BAD_EVENTS = [
    ({"subject": "a", "outcome": "confirmed", "observed_at": "2026-01-01T00:00:00Z"}, "sensor"),
    ({"sensor": "fs", "subject": "a", "observed_at": "2026-01-01T00:00:00Z"}, "outcome"),
    (
        {"sensor": "fs", "subject": "a", "outcome": "maybe", "observed_at": "2026-01-01T00:00:00Z"},
        "outcome",
    ),
    ({"sensor": "fs", "subject": "a", "outcome": "changed"}, "observed_at"),
    (
        {
            "sensor": "FS",
            "subject": "a",
            "outcome": "changed",
            "observed_at": "2026-01-01T00:00:00Z",
        },
        "sensor",
    ),
    (
        {
            "sensor": "fs",
            "subject": "a",
            "outcome": "changed",
            "observed_at": "2026-01-01T00:00:00Z",
            "reliability": 2,
        },
        "reliability",
    ),
    (
        {
            "sensor": "fs",
            "subject": "a",
            "outcome": "changed",
            "observed_at": "2026-01-01T00:00:00Z",
            "ttl": 5,
        },
        "ttl",
    ),
]


@pytest.mark.parametrize("payload", GOOD_EVENTS)
def test_good_events_validate_with_model_and_schema(payload):
    """Example events are accepted both by the model and by the published schema."""
    ValidationEvent.model_validate(payload)
    assert problems(_schema(EVENT_SCHEMA), payload, _schema(EVENT_SCHEMA)) == []


@pytest.mark.parametrize(("payload", "field"), BAD_EVENTS)
def test_bad_events_fail_model_and_schema(payload, field):
    """Events missing a required key, with an unknown outcome or key, fail both checks."""
    with pytest.raises(ValidationError):
        ValidationEvent.model_validate(payload)
    found = problems(_schema(EVENT_SCHEMA), payload, _schema(EVENT_SCHEMA))
    assert any(p.startswith(f".{field}") for p in found), found


def test_event_schema_requires_and_enumerates():
    """The event schema requires sensor, outcome and observed_at and lists the four outcomes."""
    schema = _schema(EVENT_SCHEMA)
    assert set(schema["required"]) == {"sensor", "outcome", "observed_at"}
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Outcome"]["enum"] == [o.value for o in Outcome]


GOOD_BLOCKS = [
    {"content": "the API timeout is 30 s"},
    {
        "title": "timeout",
        "content": "the API timeout is 30 s",
        "tags": ["api"],
        "source": "user",
        "volatility": "medium",
        "reliability": 0.8,
        "validity_window": "7d",
        "bindings": [
            {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
        ],
    },
]
BAD_BLOCKS = [
    ({"title": "no content"}, "content"),
    ({"content": "x", "volatility": "extreme"}, "volatility"),
    ({"content": "x", "bindings": [{"path": "a"}]}, "bindings.0.sensor"),
    ({"content": "x", "colour": "red"}, "colour"),
]


@pytest.mark.parametrize("payload", GOOD_BLOCKS)
def test_good_blocks_validate_with_model_and_schema(payload):
    """Example blocks are accepted by the model and by the published block schema."""
    NewBlock.model_validate(payload)
    assert problems(_schema(BLOCK_SCHEMA), payload, _schema(BLOCK_SCHEMA)) == []


@pytest.mark.parametrize(("payload", "field"), BAD_BLOCKS)
def test_bad_blocks_fail_model_and_schema(payload, field):
    """Bad blocks fail both the model and the schema at the same place."""
    with pytest.raises(ValidationError):
        NewBlock.model_validate(payload)
    found = problems(_schema(BLOCK_SCHEMA), payload, _schema(BLOCK_SCHEMA))
    assert any(p.startswith(f".{field}") for p in found), found
