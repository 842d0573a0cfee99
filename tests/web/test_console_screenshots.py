"""scripts/console_screenshots.py runs: it saves a PNG of every console page (the ones
docs/CONSOLE.md shows), each a real screenshot of a signed-in page."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

from tests.web.test_review_page import CHROMIUM

SCRIPT = Path(__file__).parents[2] / "scripts" / "console_screenshots.py"
DOCS = Path(__file__).parents[2] / "docs" / "images"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def test_the_script_saves_every_page_and_the_docs_show_them(tmp_path):
    """Seven PNGs (six pages at desktop width, the block page at phone width); the ones
    committed under docs/images are the same set, and docs/CONSOLE.md shows each."""
    assert CHROMIUM
    spec = importlib.util.spec_from_file_location("console_screenshots", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the script's models through it
    spec.loader.exec_module(module)
    saved = await module.take(tmp_path)
    names = sorted(p.name for p in saved)
    assert names == sorted(
        [
            "console-block-phone.png",
            "console-block.png",
            "console-health.png",
            "console-review.png",
            "console-search.png",
            "console-sensors.png",
            "console-stale.png",
        ]
    )
    for path in saved:
        width, height = _png_size(path)
        assert width == (375 if "phone" in path.name else 1000), path.name
        assert height >= 600, path.name
    guide = (Path(__file__).parents[2] / "docs" / "CONSOLE.md").read_text()
    for name in names:
        assert (DOCS / name).is_file(), name
        assert f"images/{name}" in guide, name
