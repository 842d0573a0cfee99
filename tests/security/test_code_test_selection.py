"""Test selections select, never configure (issue 13, item 2).

Each hostile binding is first shown to run code against plain pytest (the control), then
sent to the real code_test sensor: it is refused when added, naming the binding key, and
nothing runs. The guarantee: the test process runs the configured argv, the sensor's
fixed arguments and a checked selection, nothing else.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwarden.errors import ValidationInputError
from memwarden.plugins.testing import SensorHarness
from memwarden.sensors import CodeTestSensor
from memwarden.sensors import _selection as picks
from tests.security._code_test_support import FAST_ENV, OK_ID, live_daemon, make_project
from tests.support import assert_responsive

# (binding, the key the refusal names, what the control run of plain pytest executes)
HOSTILE = {
    "at-file prefix": ({"prefix": "@{other}/args.txt"}, "prefix", "outside"),
    "at-file test id": ({"test": "@{other}/args.txt::x"}, "test", "outside"),
    "non-test module": ({"prefix": "tests/helpers.py"}, "prefix", "helpers"),
    "non-test module id": ({"test": "tools/evil.py::x"}, "test", "tools"),
    "nested pytest.ini": ({"prefix": "tests/sub"}, "prefix", "nested-ini"),
    "nested pytest.ini id": ({"test": "tests/sub/test_sub.py::test_sub"}, "test", "nested-ini"),
    "symlink out": ({"prefix": "tests/test_link.py"}, "prefix", "symlinked"),
    "absolute path": ({"prefix": "{other}/evil.py"}, "prefix", "outside"),
    "dot-dot": ({"prefix": "tests/../../other/evil.py"}, "prefix", "outside"),
}
OPTIONS_AS_SELECTION = {
    "option as prefix": {"prefix": "-ptests.sub.evil_plugin"},
    "option as keyword": {"keyword": "-p tests.sub.evil_plugin"},
    "at-file keyword": {"keyword": "@/tmp/args.txt"},
    "keyword with quotes": {"keyword": "x' or __import__('os')"},
    "newline": {"test": "tests/test_ok.py::test_ok\n--pdb"},
}


_OPTIONS_KEYED = {
    case: (binding, next(iter(binding)), "") for case, binding in OPTIONS_AS_SELECTION.items()
}


def _fill(binding: dict[str, str], other: Path) -> dict[str, str]:
    return {k: v.format(other=other) for k, v in binding.items()}


def _control_args(binding: dict[str, str]) -> list[str]:
    value = next(iter(binding.values()))
    return [value.split("::")[0] if not value.startswith("@") else value]


@pytest.fixture
def project(tmp_path):
    p = make_project(tmp_path)
    (p.root / "tests" / "test_link.py").symlink_to(p.other / "test_outside.py")
    return p


def _harness(tmp_path: Path, root: Path, **config) -> SensorHarness:
    (tmp_path / "harness").mkdir(exist_ok=True)
    return SensorHarness(
        CodeTestSensor,
        config={"project_root": str(root), "batch_window_ms": 0, "env": FAST_ENV, **config},
        name="tests",
        tmp_path=tmp_path / "harness",
        revalidate_timeout_s=60.0,
    )


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_hostile_selection_is_refused_naming_its_key_and_nothing_runs(
    case, project, tmp_path
):
    """Each row: plain pytest runs the hostile code; the sensor refuses the binding."""
    raw, key, module = HOSTILE[case]
    binding = _fill(raw, project.other)
    assert module in project.control(*_control_args(binding)), "the attack works on pytest"
    for marker in project.markers.iterdir():
        marker.unlink()

    async with _harness(tmp_path, project.root) as h:
        with pytest.raises(ValidationInputError) as refused:
            await h.set_bindings([binding])
        assert refused.value.field == f"bindings.0.{key}"
        assert h.sensor.runs == 0
    assert project.ran() == []


@pytest.mark.parametrize("case", list(OPTIONS_AS_SELECTION))
async def test_options_and_file_references_are_refused_in_every_key(case, project, tmp_path):
    """'-', '@', quotes or a newline in an id, prefix or keyword: refused by the model."""
    binding = OPTIONS_AS_SELECTION[case]
    async with _harness(tmp_path, project.root) as h:
        with pytest.raises(ValidationInputError) as refused:
            await h.set_bindings([binding])
        assert refused.value.field == f"bindings.0.{next(iter(binding))}"
        assert h.sensor.runs == 0
    assert project.ran() == []


async def test_the_daemon_api_answers_422_naming_the_field_and_nothing_runs(project, tmp_path):
    """Through a running daemon: POST /v1/blocks with each hostile binding is a 422 naming
    the binding key; no block is stored, nothing runs, /healthz stays fast."""
    async with live_daemon(tmp_path / "home", project.root) as live:
        latencies = []
        for case, (raw, key, _) in {**HOSTILE, **_OPTIONS_KEYED}.items():
            response = await live.add_block(_fill(raw, project.other))
            assert response.status_code == 422, (case, response.text)
            problems = response.json()["detail"]
            assert problems[0]["loc"] == ["bindings", "0", key], (case, problems)
            latencies.append(await live.healthz_ms())
        assert_responsive(latencies)
        response = await live.add_block({"prefix": f"@{project.other}/args.txt"})
        assert "'@'" in response.json()["detail"][0]["msg"]
        response = await live.add_block({"prefix": "tests/helpers.py"})
        assert "not a test file" in response.json()["detail"][0]["msg"]
        assert live.daemon.runners["tests"].sensor.runs == 0
        assert await live.daemon.store.list_blocks() == []
        ok = await live.add_block({"test": OK_ID})  # the same daemon takes a good one
        assert ok.status_code == 201, ok.text
    assert project.ran() == []


async def test_a_selection_that_turned_hostile_after_it_was_added_never_runs(project, tmp_path):
    """Checked again right before the run: a test file swapped for a symlink out is refused."""
    target = project.root / "tests" / "test_later.py"
    target.write_text("def test_later():\n    pass\n")
    async with _harness(tmp_path, project.root) as h:
        await h.set_bindings([{"test": "tests/test_later.py::test_later"}, {"test": OK_ID}])
        await h.wait_ready()
        target.unlink()
        target.symlink_to(project.other / "test_outside.py")
        [refused], [ok] = await asyncio.gather(
            h.revalidate("tests/test_later.py::test_later"), h.revalidate(OK_ID)
        )
        assert refused.outcome == "error"
        assert "selection refused, nothing ran" in refused.message
        assert "outside the project root" in refused.message
        assert ok.outcome == "confirmed"
        assert "tests/test_later.py::test_later" not in h.sensor.last_argv
    assert project.ran() == []


async def test_the_run_is_the_configured_argv_plus_the_selection_and_nothing_else(
    project, tmp_path
):
    """argv = command, report, the project's ini, rootdir/confcutdir, fixed flags, -- ids."""
    (project.root / "pytest.ini").write_text("[pytest]\npython_files = test_*.py\n")
    command = [sys.executable, "-m", "pytest", "-q"]
    async with _harness(tmp_path, project.root, command=command) as h:
        await h.set_bindings([{"test": OK_ID}, {"keyword": "ok and not slow"}])
        await h.wait_ready()
        [event] = await h.revalidate(OK_ID)
        assert event.outcome == "confirmed"
        argv = h.sensor.last_argv
        report = argv[len(command)]
        assert report.startswith("--junitxml=")
        assert argv == [
            *command,
            report,
            "-c",
            str(project.root / "pytest.ini"),
            f"--rootdir={project.root}",
            f"--confcutdir={project.root}",
            "-o",
            "junit_family=xunit1",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            "--",
            OK_ID,
        ]
        [kw] = await h.revalidate("k:ok and not slow")
        assert kw.outcome == "confirmed"
        assert h.sensor.last_argv[-1] == "-kok and not slow"  # one token: never an option
        assert "--" not in h.sensor.last_argv


def test_python_files_comes_from_the_projects_own_ini(tmp_path):
    """A project that names its test files check_*.py: only those may be selected."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npython_files = ["check_*.py"]\n'
    )
    layout = picks.PytestLayout.load(tmp_path)
    assert layout.ini == tmp_path / "pyproject.toml"
    assert picks.check_selection(layout, "t/check_a.py::x", "test") == "t/check_a.py::x"
    with pytest.raises(ValidationInputError, match="not a test file"):
        picks.check_selection(layout, "t/test_a.py::x", "test")


# ---------------------------------------------------------------------- property


_PIECES = [*"ab_-@./:[]() \\~=+,*\n'\"$", "tests/", "test_", ".py", "::"]


def _refusal(layout: picks.PytestLayout, key: str, value: str) -> ValidationInputError | None:
    try:
        if key == "keyword":
            picks.check_keyword(value)
        else:
            picks.check_selection(layout, value, key, file_only=key == "test")
    except ValidationInputError as err:
        return err
    return None


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    key=st.sampled_from(["test", "prefix", "keyword"]),
    value=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=12).map("".join),
)
def test_no_accepted_selection_reaches_pytest_as_anything_but_a_selection(
    key, value, tmp_path_factory
):
    """Any value either is refused naming its key, or becomes one argument that is neither
    an option nor a file reference, naming a test file or a directory inside the project."""
    root = tmp_path_factory.getbasetemp() / "prop-project"
    (root / "tests").mkdir(parents=True, exist_ok=True)
    layout = picks.PytestLayout.load(root)
    refused = _refusal(layout, key, value)
    if refused is not None:
        assert refused.field == key
        return
    assert value[0] not in "-@"
    if key == "keyword":
        assert not set(value) & set("\n'\"$=\\@*~,")
        return
    assert not set(value.split("::")[0]) & set("\n'\"$\\@*")
    path = value.split("::")[0]
    resolved = (root / path).resolve()
    assert resolved.is_relative_to(root.resolve())
    assert resolved.is_dir() or layout.is_test_file(Path(path))
    assert key == "prefix" or "::" in value
