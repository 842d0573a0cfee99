"""The code_test sensor running a real small pytest project (and a few scripted commands)."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError
from tests.sensors.conftest import PASSING_API, Watch, outcomes

from memwarden.daemon import Daemon, load_settings
from memwarden.errors import PluginError
from memwarden.plugins import Registry
from memwarden.sensors import CodeTestBinding, CodeTestSensor

TIMEOUT = "tests/test_api.py::test_timeout"
LIMITS = "tests/test_api.py::TestLimits"
SKIPPED = "tests/test_api.py::test_skipped"
NO_SANDBOX = {"sandbox": "none"}

# A stand-in for the test command: writes the report its FAKE_MODE says, and more.
FAKE_RUNNER = """
import os, sys
report = next(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--junitxml="))
mode = os.environ["FAKE_MODE"]
if mode == "garbage":
    open(report, "w").write("<testsuites><testcase name='t' classname='tests.test_a'")
elif mode == "not-junit":
    open(report, "w").write("<html><body>hello</body></html>")
elif mode == "collect-error":
    open(report, "w").write(
        "<testsuites><testsuite><testcase classname='' name='tests.test_a'"
        " file='tests/test_a.py'><error message='collection failure'>ImportError: nope"
        "</error></testcase></testsuite></testsuites>"
    )
elif mode == "mixed":
    case = "<testcase classname='tests.test_a' name='{}' file='tests/test_a.py'>{}</testcase>"
    open(report, "w").write(
        "<testsuites><testsuite>"
        + case.format("test_ok", "")
        + case.format("test_bad", "<failure message='bad one'/>")
        + case.format("test_worse", "<error message='worse one'/>")
        + case.format("test_skip", "<skipped/>")
        + "</testsuite></testsuites>"
    )
else:
    if mode == "env":
        open(os.environ["FAKE_OUT"], "w").write("\\n".join(sorted(os.environ)))
    if mode == "spam":
        sys.stdout.write("x" * 3_000_000)
    open(report, "w").write(
        "<testsuites><testsuite><testcase classname='tests.test_a' name='test_ok'"
        " file='tests/test_a.py'/></testsuite></testsuites>"
    )
"""


def _fake(tmp_path: Path) -> tuple[Path, list[str]]:
    """A project and a stand-in command (run unsandboxed: it writes outside the project)."""
    project = tmp_path / "fake-project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_a.py").write_text("def test_ok():\n    pass\n")
    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE_RUNNER)
    return project, [sys.executable, str(script)]


def _gone(pid: int) -> bool:
    """True once the process is gone (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


# ---------------------------------------------------------------------- real pytest runs


async def test_break_a_test_then_fix_it(small_project, code_harness):
    """Requests are batched into one run; a broken test refutes, the fix confirms again."""
    bindings = [{"test": TIMEOUT}, {"prefix": LIMITS}, {"test": SKIPPED}, {"keyword": "timeout"}]
    async with code_harness(small_project, bindings, source_dirs=["tests"], debounce_ms=50) as h:
        await h.wait_ready()
        sensor = h.sensor
        answers = await asyncio.gather(
            h.revalidate(TIMEOUT), h.revalidate(LIMITS), h.revalidate(SKIPPED)
        )
        assert sensor.runs == 1  # three requests, one run
        [timeout], [limits], skipped = answers
        assert (timeout.outcome, timeout.reliability) == ("confirmed", 1.0)
        assert (limits.outcome, limits.observed) == (
            "confirmed",
            {"passed": 1, "failed": 0, "skipped": 0},
        )
        assert skipped == []  # a skip says nothing about the fact

        w = Watch(h)
        broken = PASSING_API.replace("assert 30 == 30", "assert 31 == 30, 'timeout moved'")
        (small_project / "tests" / "test_api.py").write_text(textwrap.dedent(broken))
        events = {e.subject: e for e in await w.next(3, timeout_s=30)}
        assert events[TIMEOUT].outcome == "refuted"
        assert "timeout moved" in events[TIMEOUT].message
        assert events[LIMITS].outcome == "confirmed"
        assert events["k:timeout"].outcome == "refuted"
        block = await h.block(TIMEOUT)
        assert "refuted" in [e.outcome for e in await h.store.events_for(block.id)]

        (small_project / "tests" / "test_api.py").write_text(textwrap.dedent(PASSING_API))
        fixed = await w.next(3, timeout_s=30)
        assert outcomes(fixed) == ["confirmed"] * 3


async def test_a_test_id_that_does_not_exist_is_an_error_and_the_rest_still_run(
    small_project, code_harness
):
    """pytest refuses unknown ids; the sensor reports them as errors and reruns the others."""
    gone = "tests/test_api.py::test_gone"
    ok = "tests/test_api.py::test_other"
    async with code_harness(small_project, [{"test": gone}, {"test": ok}]) as h:
        await h.wait_ready()
        [missing], [found] = await asyncio.gather(h.revalidate(gone), h.revalidate(ok))
        assert missing.outcome == "error"
        assert "not found" in missing.message
        assert found.outcome == "confirmed"


async def test_a_hanging_test_times_out_and_leaves_no_process(tmp_path, code_harness):
    """A run past timeout_s kills its whole process group: error events, no orphan."""
    project = tmp_path / "hang"
    (project / "tests").mkdir(parents=True)
    pids = tmp_path / "pids"
    (project / "tests" / "test_hang.py").write_text(
        textwrap.dedent(
            """
            import os, pathlib, subprocess, sys, time

            def test_hang():
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
                pathlib.Path(os.environ["PIDS_FILE"]).write_text(f"{os.getpid()} {child.pid}")
                time.sleep(120)
            """
        )
    )
    test_id = "tests/test_hang.py::test_hang"
    # Unsandboxed: the pids the test sees are the daemon's (tests/security covers bwrap).
    config = {
        "timeout_s": 4.0,
        "kill_grace_s": 0.5,
        # No third-party plugins: pytest starts in a second, not four, on a busy machine.
        "env": {"PIDS_FILE": str(pids), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        "sandbox": "none",
    }
    async with code_harness(project, [{"test": test_id}], **config) as h:
        await h.wait_ready()
        [event] = await h.revalidate(test_id)
        assert event.outcome == "error"
        assert "timed out after 4s" in event.message
        runner_pid, child_pid = (int(p) for p in pids.read_text().split())
        assert runner_pid == h.sensor.last_pid
        assert _gone(runner_pid)
        assert _gone(child_pid)
        block = await h.block(test_id)
        assert [e.outcome for e in await h.store.events_for(block.id)] == ["error"]


# ---------------------------------------------------------------------- failures to start


async def test_a_missing_command_fails_the_daemon_under_policy_error(tmp_path, small_project):
    """With startup policy 'error', a missing test command makes daemon.run raise, naming it."""
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "home",
        api={"enabled": False},
        sensors={
            "tests": {
                "kind": "code_test",
                "project_root": str(small_project),
                "command": ["memwarden-no-such-runner", "-q"],
                "startup": "error",
            }
        },
    )
    daemon = Daemon(settings, registry=Registry.from_classes({"code_test": CodeTestSensor}))
    with pytest.raises(PluginError, match="memwarden-no-such-runner"):
        await asyncio.wait_for(daemon.run(), 20)


async def test_a_missing_command_under_policy_retry_backs_off(small_project, code_harness):
    """With startup policy 'retry', the sensor waits in backoff and says which command."""
    async with code_harness(
        small_project, command=["memwarden-no-such-runner"], startup="retry"
    ) as h:
        assert h.status == "backoff"
        assert "memwarden-no-such-runner" in (h.counters.last_error or "")


# ---------------------------------------------------------------------- scripted commands


@pytest.mark.parametrize("mode", ["garbage", "not-junit"])
async def test_a_malformed_report_is_an_error_and_nothing_else(tmp_path, code_harness, mode):
    """A broken or foreign JUnit file gives an error event; no confirmation, no refutation."""
    project, command = _fake(tmp_path)
    test_id = "tests/test_a.py::test_ok"
    config = {"command": command, "env": {"FAKE_MODE": mode}, **NO_SANDBOX}
    async with code_harness(project, [{"test": test_id}], **config) as h:
        await h.wait_ready()
        [event] = await h.revalidate(test_id)
        assert event.outcome == "error"
        assert "JUnit report" in event.message
        block = await h.block(test_id)
        assert str(block.state) == "unverified"
        assert block.validation.validated_by is None


async def test_the_environment_passed_down_is_explicit(tmp_path, code_harness, monkeypatch):
    """Only PATH, HOME, LANG and the config's env reach the command; secrets stay behind."""
    monkeypatch.setenv("MEMWARDEN_TEST_SECRET", "hunter2")
    project, command = _fake(tmp_path)
    out = tmp_path / "env.txt"
    config = {"command": command, "env": {"FAKE_MODE": "env", "FAKE_OUT": str(out)}, **NO_SANDBOX}
    async with code_harness(project, [{"test": "tests/test_a.py::test_ok"}], **config) as h:
        await h.wait_ready()
        [event] = await h.revalidate("tests/test_a.py::test_ok")
        assert event.outcome == "confirmed"
    names = set(out.read_text().split())
    # Python itself may add LC_CTYPE when it coerces a C locale (PEP 538).
    assert names - {"LC_CTYPE"} <= {"PATH", "HOME", "LANG", "FAKE_MODE", "FAKE_OUT"}
    assert "MEMWARDEN_TEST_SECRET" not in names


async def test_output_is_captured_and_capped(tmp_path, code_harness):
    """A command that prints megabytes keeps only max_output_bytes of it and still finishes."""
    project, command = _fake(tmp_path)
    config = {
        "command": command,
        "env": {"FAKE_MODE": "spam"},
        "max_output_bytes": 10_000,
        **NO_SANDBOX,
    }
    async with code_harness(project, [{"test": "tests/test_a.py::test_ok"}], **config) as h:
        await h.wait_ready()
        [event] = await h.revalidate("tests/test_a.py::test_ok")
        assert event.outcome == "confirmed"
        result = h.sensor.last_result
        assert result.truncated
        assert len(result.output) == 10_000


async def test_a_module_that_fails_to_collect_refutes_its_tests(tmp_path, code_harness):
    """pytest's collection error for a file refutes a test bound in that file."""
    project, command = _fake(tmp_path)
    config = {"command": command, "env": {"FAKE_MODE": "collect-error"}, **NO_SANDBOX}
    async with code_harness(project, [{"test": "tests/test_a.py::test_ok"}], **config) as h:
        await h.wait_ready()
        [event] = await h.revalidate("tests/test_a.py::test_ok")
        assert event.outcome == "refuted"
        assert "collection failed" in event.message
        assert "ImportError" in event.message


async def test_a_prefix_sums_up_its_tests_and_the_schedule_runs_them(tmp_path, code_harness):
    """The schedule reruns bound selections; a prefix is refuted by any failure, with counts."""
    project, command = _fake(tmp_path)
    bindings = [{"prefix": "tests/test_a.py"}, {"test": "tests/test_a.py::test_skip"}]
    config = {
        "command": command,
        "env": {"FAKE_MODE": "mixed"},
        "schedule_interval_s": 0.05,
        **NO_SANDBOX,
    }
    async with code_harness(project, bindings, **config) as h:
        [event] = await Watch(h).next()  # the skipped test says nothing
        assert event.subject == "tests/test_a.py"
        assert event.outcome == "refuted"
        assert event.observed == {"passed": 1, "failed": 2, "skipped": 1}
        assert "2 of 4 failed" in event.message
        assert "bad one" in event.message
        assert "worse one" in event.message


async def test_a_missing_project_root_fails_setup(tmp_path, code_harness):
    """setup refuses a project_root that is not a directory, naming it."""
    with pytest.raises(PluginError, match="project_root"):
        async with code_harness(tmp_path / "nowhere"):
            pass


# ---------------------------------------------------------------------- the binding model


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ({"test": "--collect-only::x"}, "would be read as an option"),
        ({"keyword": "-x"}, "would be read as an option"),
        ({"test": "/etc/passwd::x"}, "relative to the project root"),
        ({"prefix": "../other/tests"}, "relative to the project root"),
        ({"test": "tests/test_api.py"}, "use prefix for a file"),
        ({"test": "a::b", "keyword": "b"}, "exactly one"),
        ({}, "exactly one"),
    ],
)
def test_bindings_name_tests_never_options(selector, problem):
    """A binding selects tests; anything that could become a command-line option is refused."""
    with pytest.raises(ValidationError, match=problem):
        CodeTestBinding.model_validate(selector)


def test_subjects_of_the_three_binding_forms():
    """The subject is the test id, the prefix, or k:<expression>."""
    assert CodeTestBinding(test=TIMEOUT).subject_of() == TIMEOUT
    assert CodeTestBinding(prefix="tests/test_api.py").subject_of() == "tests/test_api.py"
    assert CodeTestBinding(keyword="slow and not db").subject_of() == "k:slow and not db"


@pytest.mark.parametrize("source_dir", ["/abs/src", "../elsewhere"])
def test_source_dirs_stay_under_the_project(source_dir, tmp_path):
    """source_dirs must be relative directories under project_root."""
    from memwarden.sensors import CodeTestConfig  # noqa: PLC0415

    with pytest.raises(ValidationError, match="under project_root"):
        CodeTestConfig(project_root=tmp_path, source_dirs=[source_dir])
