# ruff: noqa: INP001 - a script run by path, not an importable package
"""Write the API's OpenAPI document to docs/openapi.v1.json (the committed contract).

Run it after an additive API change; tests/api/test_openapi_compat.py fails on any change
that would break a client of the committed document (see docs/COMPATIBILITY.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from memwarden.daemon._api import create_app

TARGET = Path(__file__).resolve().parent.parent / "docs" / "openapi.v1.json"


def current() -> dict[str, object]:
    """The document as the app publishes it, without the release-specific version."""
    doc = create_app(None, token="unused").openapi()  # type: ignore[arg-type]  # noqa: S106 - no server runs
    doc["info"] = {k: v for k, v in doc["info"].items() if k != "version"}
    return doc


if __name__ == "__main__":
    TARGET.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {TARGET}")  # noqa: T201 - a script's one line of output
