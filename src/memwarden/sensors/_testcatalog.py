"""The tests of a pytest project as the code_test sensor's binding suggestions see them.

Collected **statically**: each test file (pytest's ``python_files``) is parsed with
:mod:`ast`, never imported or run — the project's code is untrusted and collecting it
with pytest would execute its conftest. Found: module-level ``test*`` functions, and
``test*`` methods of ``Test*`` classes, with their docstrings, as pytest ids
(``tests/test_auth.py::TestLogin::test_rejects_expired_token``). Parametrized tests are
one id (a binding on it covers every parameter); tests made by plugins or hooks are not
seen. Bounded: at most ``max_files`` files of at most ``max_file_bytes`` each; a file
that does not parse (or nests too deeply) is skipped. A file is parsed again only when
its size or mtime changed.
"""

from __future__ import annotations

import ast
import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TypeGuard

from memwarden.sensors._textmatch import stems

if TYPE_CHECKING:
    from collections.abc import Iterable

    from memwarden.sensors._selection import PytestLayout

__all__ = ["CatalogLimits", "TestCase", "TestCatalog"]


@dataclass(frozen=True, slots=True)
class CatalogLimits:
    max_files: int = 2_000
    max_file_bytes: int = 512 * 1024
    max_entries: int = 20_000  # directory entries looked at while finding test files
    max_doc_chars: int = 500


@dataclass(frozen=True, slots=True)
class TestCase:
    """One test: its pytest id, name, docstring, and the stems matching uses."""

    __test__ = False  # not a pytest class, whatever its name

    id: str
    name: str
    cls: str
    doc: str
    name_stems: tuple[str, ...]
    doc_stems: tuple[str, ...]
    file_stems: tuple[str, ...]


@dataclass(slots=True)
class TestCatalog:
    """The project's tests; :meth:`refresh` (blocking: run it in a thread) keeps it."""

    __test__ = False

    root: Path
    ignore: tuple[str, ...]
    limits: CatalogLimits = field(default_factory=CatalogLimits)
    tests: list[TestCase] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    _files: dict[str, tuple[tuple[int, int], list[TestCase]]] = field(default_factory=dict)

    def refresh(self, layout: PytestLayout, ignored: Iterable[str] = ()) -> list[TestCase]:
        """Find the test files again; parse those new or changed since the last time."""
        skip = (*self.ignore, *ignored)
        found: dict[str, tuple[tuple[int, int], list[TestCase]]] = {}
        self.skipped = {}
        for rel, stat in self._test_files(layout, skip):
            old = self._files.get(rel)
            if old is not None and old[0] == stat:
                found[rel] = old
                continue
            found[rel] = (stat, self._parse(rel))
        self._files = found
        self.tests = [t for _, (_, tests) in sorted(found.items()) for t in tests]
        return self.tests

    def _test_files(
        self, layout: PytestLayout, skip: tuple[str, ...]
    ) -> list[tuple[str, tuple[int, int]]]:
        out: list[tuple[str, tuple[int, int]]] = []
        seen = 0
        for top, dirs, names in os.walk(self.root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not _skipped(d, skip))
            for name in sorted(names):
                seen += 1
                if seen > self.limits.max_entries or len(out) >= self.limits.max_files:
                    return out
                if not name.endswith(".py") or _skipped(name, skip):
                    continue
                path = Path(top) / name
                rel = PurePosixPath(path.relative_to(self.root).as_posix())
                if not layout.is_test_file(rel):
                    continue
                try:
                    st = path.lstat()
                except OSError:
                    continue
                out.append((str(rel), (st.st_size, st.st_mtime_ns)))
        return out

    def _parse(self, rel: str) -> list[TestCase]:
        path = self.root / rel
        try:
            if path.is_symlink() or path.stat().st_size > self.limits.max_file_bytes:
                self.skipped[rel] = f"over {self.limits.max_file_bytes} bytes, or a link"
                return []
            tree = ast.parse(path.read_bytes(), filename=rel)
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError) as err:
            self.skipped[rel] = f"not parsed ({type(err).__name__})"
            return []
        file_stems = tuple(stems(PurePosixPath(rel).stem))
        out: list[TestCase] = []
        for node in tree.body:
            if _is_test_function(node):
                out.append(self._case(rel, "", node, file_stems))
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                out.extend(
                    self._case(rel, node.name, item, file_stems)
                    for item in node.body
                    if _is_test_function(item)
                )
        return out

    def _case(
        self,
        rel: str,
        cls: str,
        node: ast.FunctionDef | ast.AsyncFunctionDef,
        file_stems: tuple[str, ...],
    ) -> TestCase:
        doc = (ast.get_docstring(node) or "")[: self.limits.max_doc_chars]
        test_id = f"{rel}::{cls}::{node.name}" if cls else f"{rel}::{node.name}"
        name_stems = tuple(stems(f"{cls.removeprefix('Test')} {node.name}"))
        return TestCase(test_id, node.name, cls, doc, name_stems, tuple(stems(doc)), file_stems)


def _is_test_function(node: ast.AST) -> TypeGuard[ast.FunctionDef | ast.AsyncFunctionDef]:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")


def _skipped(name: str, skip: tuple[str, ...]) -> bool:
    return any(name == pat or fnmatch.fnmatchcase(name, pat) for pat in skip)
