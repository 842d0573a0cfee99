"""/v1 changes are additive: the API diffed against the committed docs/openapi.v1.json."""

from __future__ import annotations

import copy
import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from tests.api.openapi_compat import breaking_changes

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "openapi.v1.json"
current = runpy.run_path(str(ROOT / "scripts" / "openapi_snapshot.py"))["current"]


def test_the_api_breaks_no_client_of_the_committed_document():
    """Fails on a removed path, operation or parameter, a new required parameter, a
    response field removed or retyped. Additive change? Run scripts/openapi_snapshot.py."""
    committed = json.loads(COMMITTED.read_text())
    problems = breaking_changes(committed, current())
    assert problems == [], "breaking changes to /v1 (see docs/COMPATIBILITY.md):\n" + "\n".join(
        problems
    )


def _doc() -> dict[str, Any]:
    return copy.deepcopy(json.loads(COMMITTED.read_text()))


def _block_schema(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["components"]["schemas"]["Block"]


def _remove_path(d: dict[str, Any]) -> None:
    del d["paths"]["/v1/search"]


def _remove_operation(d: dict[str, Any]) -> None:
    del d["paths"]["/v1/blocks/{block_id}"]["patch"]


def _remove_parameter(d: dict[str, Any]) -> None:
    op = d["paths"]["/v1/search"]["get"]
    op["parameters"] = [p for p in op["parameters"] if p["name"] != "limit"]


def _require_parameter(d: dict[str, Any]) -> None:
    for p in d["paths"]["/v1/search"]["get"]["parameters"]:
        if p["name"] == "limit":
            p["required"] = True


def _add_required_parameter(d: dict[str, Any]) -> None:
    d["paths"]["/v1/stale"]["get"].setdefault("parameters", []).append(
        {"name": "since", "in": "query", "required": True, "schema": {"type": "string"}}
    )


def _remove_response_field(d: dict[str, Any]) -> None:
    del _block_schema(d)["properties"]["state"]


def _retype_response_field(d: dict[str, Any]) -> None:
    _block_schema(d)["properties"]["version"] = {"type": "string"}


def _require_request_field(d: dict[str, Any]) -> None:
    d["components"]["schemas"]["NewBlockRequest"].setdefault("required", []).append("title")


def _drop_success_status(d: dict[str, Any]) -> None:
    responses = d["paths"]["/v1/blocks"]["post"]["responses"]
    responses["202"] = responses.pop("201")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_remove_path, "/v1/search: path removed"),
        (_remove_operation, "PATCH /v1/blocks/{block_id}: operation removed"),
        (_remove_parameter, "GET /v1/search: parameter limit (query) removed"),
        (_require_parameter, "GET /v1/search: parameter limit became required"),
        (_add_required_parameter, "GET /v1/stale: new required parameter since (query)"),
        (_remove_response_field, ".state: response field removed"),
        (_retype_response_field, ".version: type changed from ['integer'] to ['string']"),
        (_require_request_field, "body.title: request field became required"),
        (_drop_success_status, "POST /v1/blocks: success status 201 removed"),
    ],
)
def test_the_checker_catches_each_kind_of_breaking_change(change, expected):
    old = _doc()
    new = _doc()
    change(new)
    problems = breaking_changes(old, new)
    assert any(expected in p for p in problems), problems


def test_additions_are_not_breaking():
    old = _doc()
    new = _doc()
    new["paths"]["/v1/new-thing"] = {"get": {"responses": {"200": {"description": "ok"}}}}
    new["paths"]["/v1/search"]["get"]["parameters"].append(
        {"name": "extra", "in": "query", "required": False, "schema": {"type": "boolean"}}
    )
    _block_schema(new)["properties"]["new_field"] = {"type": "string"}
    assert breaking_changes(old, new) == []
