"""The repository stands alone: nothing in it refers to design notes kept outside it."""

from __future__ import annotations

import re
from pathlib import Path

from memwarden.daemon._api import create_app

ROOT = Path(__file__).resolve().parents[1]
# Built from parts so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            "DESIGN" + r"\.md",
            "STYLE" + r"\.md",
            r"\bseeds? 0\d\d",
            r"\.\./" + "shared",
            "/work/" + "shared",
        ]
    ),
    re.IGNORECASE,
)


def _texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for top in ("src", "docs", "tests", "examples", "benchmarks", "systemd", "scripts"):
        files.extend(
            p
            for p in (ROOT / top).rglob("*")
            if p.is_file() and p.suffix in {".py", ".md", ".toml", ".json", ".html", ".sh", ""}
        )
    return [f for f in files if f.exists()]


def test_no_file_refers_to_documents_outside_the_repository():
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _texts()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert hits == []


def test_the_architecture_page_exists_and_is_linked_from_the_readme():
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert "sensor" in arch
    assert "bus" in arch
    assert "store" in arch
    assert "docs/ARCHITECTURE.md" in (ROOT / "README.md").read_text()


def test_the_openapi_description_points_inside_the_repository():
    class _Daemon:  # create_app only keeps a reference
        pass

    spec = create_app(_Daemon(), token="x" * 32).openapi()
    assert not OUTSIDE.search(spec["info"]["description"])
