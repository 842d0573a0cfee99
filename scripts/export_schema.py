# ruff: noqa: INP001 - a script run by path, not an importable package
"""Write the published JSON Schemas of the wire formats to docs/schema/.

Run ``.venv/bin/python scripts/export_schema.py`` after changing ValidationEvent or
NewBlock; tests/memory/test_schema_export.py fails until the files match the models.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from memwarden.memory import NewBlock, ValidationEvent

if TYPE_CHECKING:
    from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "docs" / "schema"
BASE_URL = "https://memwarden.dev/schema/"
MODELS: dict[str, type[BaseModel]] = {
    "validation-event.v1.json": ValidationEvent,
    "block.v1.json": NewBlock,
}


def render(name: str, model: type[BaseModel]) -> str:
    """The schema text of ``model`` as published: sorted keys, indent 2, trailing newline.

    A model that names no ``$id`` of its own gets the URL it is published under.
    """
    schema = model.model_json_schema(mode="validation")
    schema.setdefault("$id", BASE_URL + name)
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def schemas() -> dict[Path, str]:
    """Every published schema file and the text it must hold."""
    return {SCHEMA_DIR / name: render(name, model) for name, model in MODELS.items()}


def main() -> int:
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    for path, text in schemas().items():
        path.write_text(text, encoding="utf-8")
        sys.stdout.write(f"wrote {path.relative_to(ROOT)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
