"""Reading a JUnit XML report (pytest's, xunit1 or xunit2) into results per test id.

The report is untrusted input (the tests under check wrote into the process that wrote
it), so it is parsed with defusedxml: no entities, no external references.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from defusedxml import ElementTree as SafeET
from defusedxml.common import DefusedXmlException

if TYPE_CHECKING:
    from pathlib import Path
    from xml.etree.ElementTree import Element

__all__ = ["JUnitError", "Report", "TestResult", "parse_junit"]

Result = Literal["passed", "failed", "error", "skipped"]
_RANK: dict[str, int] = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}
_MESSAGE_CHARS = 1000


class JUnitError(ValueError):
    """The report is missing, malformed or not a JUnit report."""


@dataclass(slots=True)
class TestResult:
    __test__ = False  # not a pytest test class, whatever its name says

    outcome: Result
    message: str = ""
    time_s: float = 0.0


@dataclass(slots=True)
class Report:
    """Results by test id (``path::Class::name``) and errors that hit a whole file."""

    tests: dict[str, TestResult] = field(default_factory=dict)
    file_errors: dict[str, str] = field(default_factory=dict)

    def add(self, test_id: str, result: TestResult) -> None:
        """A test reported twice (e.g. passed, then failed in teardown) keeps the worst."""
        old = self.tests.get(test_id)
        if old is None or _RANK[result.outcome] > _RANK[old.outcome]:
            self.tests[test_id] = result


def parse_junit(path: Path, project_root: Path) -> Report:
    """Parse ``path``; test ids are relative to ``project_root`` (pytest's rootdir)."""
    try:
        tree = SafeET.parse(path)
    except FileNotFoundError:
        raise JUnitError(f"no JUnit report was written ({path.name})") from None
    except (SafeET.ParseError, DefusedXmlException, OSError, ValueError) as err:
        raise JUnitError(f"malformed JUnit report: {type(err).__name__}: {err}") from None
    root = tree.getroot()
    if root is None:
        raise JUnitError("malformed JUnit report: no root element")
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(f"not a JUnit report: the root element is <{root.tag}>")
    report = Report()
    for case in root.iter("testcase"):
        _add_case(report, case, project_root)
    return report


def _add_case(report: Report, case: Element, project_root: Path) -> None:
    classname = case.get("classname") or ""
    name = case.get("name") or ""
    if not name:
        raise JUnitError("malformed JUnit report: a <testcase> has no name")
    outcome: Result = "passed"
    message = ""
    for child in case:
        if child.tag in ("failure", "error", "skipped"):
            kind: Result = "failed" if child.tag == "failure" else child.tag  # type: ignore[assignment]
            if _RANK[kind] >= _RANK[outcome] or outcome == "passed":
                outcome = kind
                text = child.get("message") or ""
                body = (child.text or "").strip()
                message = (text + ("\n" + body if body and body != text else ""))[:_MESSAGE_CHARS]
    try:
        time_s = float(case.get("time") or 0.0)
    except ValueError:
        time_s = 0.0
    file_attr = case.get("file")
    if not classname:
        # pytest reports a module that failed to collect as a case without a class.
        path = file_attr or _module_file(name, project_root)[0]
        if outcome in ("error", "failed"):
            report.file_errors[_norm(path)] = message or "collection failure"
        return
    report.add(
        _test_id(classname, name, file_attr, project_root), TestResult(outcome, message, time_s)
    )


def _test_id(classname: str, name: str, file_attr: str | None, project_root: Path) -> str:
    if file_attr:
        path = _norm(file_attr)
        module = path.removesuffix(".py").replace("/", ".")
        if classname == module:
            classes: list[str] = []
        elif classname.startswith(module + "."):
            classes = classname[len(module) + 1 :].split(".")
        else:
            classes = _module_file(classname, project_root)[1]
    else:
        path, classes = _module_file(classname, project_root)
    return "::".join([path, *classes, name])


def _module_file(dotted: str, project_root: Path) -> tuple[str, list[str]]:
    """``tests.test_api.TestX`` -> (``tests/test_api.py``, [``TestX``]) by the files present."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        candidate = "/".join(parts[:k]) + ".py"
        if (project_root / candidate).is_file():
            return candidate, parts[k:]
    return "/".join(parts) + ".py", []


def _norm(path: str) -> str:
    return os.path.normpath(path).replace(os.sep, "/")
