"""Reading JUnit reports: pytest's two families, collection errors, hostile input."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from memwarden.sensors._junit import JUnitError, parse_junit

if TYPE_CHECKING:
    from pathlib import Path


def _report(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "report.xml"
    path.write_text(
        f'<?xml version="1.0"?>\n<testsuites><testsuite>{body}</testsuite></testsuites>'
    )
    return path


def test_xunit1_ids_come_from_the_file_attribute(tmp_path):
    """With file=..., ids are path::Class::Inner::name, parameters kept."""
    body = (
        '<testcase classname="tests.test_api" name="test_ok" file="tests/test_api.py"/>'
        '<testcase classname="tests.test_api.TestX.TestInner" name="test_p[1-a]"'
        ' file="tests/test_api.py"><failure message="boom">trace</failure></testcase>'
    )
    report = parse_junit(_report(tmp_path, body), tmp_path)
    assert report.tests["tests/test_api.py::test_ok"].outcome == "passed"
    failed = report.tests["tests/test_api.py::TestX::TestInner::test_p[1-a]"]
    assert (failed.outcome, failed.message) == ("failed", "boom\ntrace")


def test_xunit2_ids_are_found_from_the_files_present(tmp_path):
    """Without a file attribute, the dotted classname is matched against the project's files."""
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_db.py").write_text("")
    body = (
        '<testcase classname="tests.unit.test_db.TestConn" name="test_open"><skipped/></testcase>'
    )
    report = parse_junit(_report(tmp_path, body), tmp_path)
    assert report.tests["tests/unit/test_db.py::TestConn::test_open"].outcome == "skipped"


def test_a_test_reported_twice_keeps_the_worst_outcome(tmp_path):
    """A pass followed by a teardown error counts as an error."""
    body = (
        '<testcase classname="t" name="test_a" file="t.py"/>'
        '<testcase classname="t" name="test_a" file="t.py"><error message="teardown"/></testcase>'
    )
    assert parse_junit(_report(tmp_path, body), tmp_path).tests["t.py::test_a"].outcome == "error"


def test_a_collection_error_is_kept_per_file(tmp_path):
    """pytest's classless error case for a module becomes a file-level error."""
    body = (
        '<testcase classname="" name="tests.test_broken" file="tests/test_broken.py">'
        '<error message="collection failure">ImportError</error></testcase>'
    )
    report = parse_junit(_report(tmp_path, body), tmp_path)
    assert report.tests == {}
    assert "collection failure" in report.file_errors["tests/test_broken.py"]


@pytest.mark.parametrize(
    "text",
    [
        "<testsuites><testcase",  # truncated
        "<html/>",  # not a report
        '<!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><testsuites>&b;</testsuites>',
        '<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><testsuites>&e;</testsuites>',
    ],
)
def test_malformed_or_hostile_reports_are_refused(tmp_path, text):
    """Truncated XML, a foreign root, entity expansion and external entities all raise."""
    path = tmp_path / "report.xml"
    path.write_text(text)
    with pytest.raises(JUnitError):
        parse_junit(path, tmp_path)


def test_a_missing_report_says_so(tmp_path):
    """No file at all is a JUnitError that says no report was written."""
    with pytest.raises(JUnitError, match="no JUnit report"):
        parse_junit(tmp_path / "absent.xml", tmp_path)
