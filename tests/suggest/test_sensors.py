"""Each sensor's side of binding suggestions: what it finds, and what it never does."""

from __future__ import annotations

import asyncio
import textwrap
from typing import TYPE_CHECKING

from memwarden.plugins import SuggestsBindings
from memwarden.plugins.testing import SensorHarness
from memwarden.sensors import CodeTestSensor, FsSensor, HttpSensor, RuntimeSensor
from memwarden.sensors._selection import PytestLayout
from memwarden.sensors._testcatalog import CatalogLimits, TestCatalog
from memwarden.sensors.code_test import CodeTestBinding, CodeTestConfig
from memwarden.sensors.fs import FsConfig
from memwarden.sensors.http import HttpConfig
from memwarden.sensors.runtime import RuntimeConfig

if TYPE_CHECKING:
    from pathlib import Path


def test_the_four_sensors_have_the_capability(tmp_path: Path):
    """fs, code_test, runtime and http all declare SuggestsBindings (the daemon asks it)."""
    sensors = [
        FsSensor(FsConfig(roots=[tmp_path])),
        CodeTestSensor(CodeTestConfig(project_root=tmp_path)),
        RuntimeSensor(RuntimeConfig()),
        HttpSensor(HttpConfig(allowed_hosts=["127.0.0.1:1"])),
    ]
    assert all(isinstance(s, SuggestsBindings) for s in sensors)


# ---------------------------------------------------------------------- code_test


def _project(root: Path, files: dict[str, str]) -> PytestLayout:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return PytestLayout.load(root)


def test_the_catalog_reads_tests_without_running_them(tmp_path: Path):
    """Functions, class methods and docstrings are found by parsing: the file's code (which
    would write a file if imported) never runs; a file that does not parse is skipped."""
    marker = tmp_path / "imported"
    layout = _project(
        tmp_path,
        {
            "tests/test_a.py": f'''
                open({str(marker)!r}, "w").close()

                def test_login_rejects_expired_token():
                    """A token past its expiry is refused."""

                class TestCart:
                    def test_total(self):
                        pass

                    def helper(self):
                        pass

                def helper_not_a_test():
                    pass
            ''',
            "tests/test_broken.py": "def test_x(:\n",
            "tests/test_deep.py": "x = " + "(" * 5000 + ")" * 5000 + "\n",
            "tests/conftest.py": "def test_in_conftest(): pass\n",
        },
    )
    catalog = TestCatalog(tmp_path, (".git",))
    tests = catalog.refresh(layout)
    assert [t.id for t in tests] == [
        "tests/test_a.py::test_login_rejects_expired_token",
        "tests/test_a.py::TestCart::test_total",
    ]
    assert tests[0].doc == "A token past its expiry is refused."
    assert set(catalog.skipped) == {"tests/test_broken.py", "tests/test_deep.py"}
    assert catalog.skipped["tests/test_broken.py"] == "not parsed (SyntaxError)"  # no content
    assert not marker.exists()


def test_the_catalog_is_bounded_and_parses_a_file_again_only_when_it_changed(tmp_path: Path):
    layout = _project(
        tmp_path,
        {
            "tests/test_big.py": "def test_big(): pass\n" + "# padding\n" * 1000,
            "tests/test_small.py": "def test_small(): pass\n",
        },
    )
    catalog = TestCatalog(tmp_path, (), CatalogLimits(max_file_bytes=500))
    assert [t.name for t in catalog.refresh(layout)] == ["test_small"]
    assert "tests/test_big.py" in catalog.skipped
    first = catalog.refresh(layout)[0]
    assert catalog.refresh(layout)[0] is first  # unchanged: not parsed again
    (tmp_path / "tests/test_small.py").write_text("def test_renamed(): pass\n# longer\n")
    assert [t.name for t in catalog.refresh(layout)] == ["test_renamed"]


async def test_code_test_candidates_come_from_names_and_docstrings(tmp_path: Path):
    _project(
        tmp_path,
        {
            "tests/test_auth.py": '''
                def test_login_rejects_expired_token():
                    """A token past its expiry is refused."""

                def test_login_accepts_fresh_token():
                    pass
            '''
        },
    )
    sensor = CodeTestSensor(CodeTestConfig(project_root=tmp_path))
    found = await sensor.binding_candidates("Expired tokens are rejected at login", limit=5)
    assert found[0].selector == {"test": "tests/test_auth.py::test_login_rejects_expired_token"}
    assert found[0].agrees is None
    assert not found[0].negated
    assert all(c.confidence < found[0].confidence for c in found[1:])
    broken = await sensor.binding_candidates("The expired token login test fails", limit=5)
    assert broken[0].negated
    assert await sensor.binding_candidates("The team meets on Mondays", limit=5) == []


# ---------------------------------------------------------------------- runtime


def _runtime() -> RuntimeSensor:
    return RuntimeSensor(
        RuntimeConfig.model_validate(
            {
                "checks": {
                    "db-port": {"type": "tcp_port", "port": 5432},
                    "billing-worker": {"type": "process", "cmdline": "python -m billing.worker"},
                    "root-disk": {"type": "disk_free", "path": "/", "min_free_percent": 5},
                }
            }
        )
    )


async def test_runtime_candidates_by_port_process_and_name():
    sensor = _runtime()
    by_port = await sensor.binding_candidates("Postgres listens on port 5432", limit=5)
    assert by_port[0].selector == {"check": "db-port"}
    assert "5432" in by_port[0].why
    by_name = await sensor.binding_candidates("The billing worker process is running", limit=5)
    assert by_name[0].selector == {"check": "billing-worker"}
    assert by_name[0].confidence >= 0.8
    down = await sensor.binding_candidates("The billing worker is down", limit=5)
    assert down[0].negated


async def test_runtime_does_not_offer_a_port_check_for_another_port():
    """ "The db listens on port 6543" is not about the check of 5432 (nor is a URL's port)."""
    sensor = _runtime()
    assert await sensor.binding_candidates("The db port is 6543", limit=5) == []
    found = await sensor.binding_candidates("http://127.0.0.1:5432/health is up", limit=5)
    assert all(c.selector != {"check": "db-port"} for c in found)


# ---------------------------------------------------------------------- http


async def test_http_offers_only_urls_on_allowed_hosts_and_fetches_no_other():
    sensor = HttpSensor(HttpConfig(allowed_hosts=["127.0.0.1:8080"]))
    found = await sensor.binding_candidates(
        "http://evil.example.com/x and http://user:pw@127.0.0.1:8080/y are up; "
        "http://127.0.0.1:8080/health returns 503",
        limit=5,
    )
    assert [c.selector for c in found] == [{"url": "http://127.0.0.1:8080/health", "status": [503]}]
    assert sensor.fetches == 0  # a status named: no values looked for
    assert "credentials" not in repr(found)


async def test_code_test_dry_runs_run_in_one_batch_and_emit_nothing(tmp_path: Path):
    """Two dry runs at once are one run of the command; a pass confirms, a failure
    refutes with the message; nothing reaches the store."""
    project = tmp_path / "project"
    _project(
        project,
        {
            "tests/test_math.py": """
                def test_adds():
                    assert 1 + 1 == 2

                def test_wrong():
                    assert 1 + 1 == 3
            """
        },
    )
    config = {"project_root": str(project), "batch_window_ms": 50, "sandbox": "none"}
    async with SensorHarness(CodeTestSensor, config=config, name="tests", tmp_path=tmp_path) as h:
        await h.wait_ready()
        sensor = h.sensor
        assert isinstance(sensor, CodeTestSensor)
        ok, bad = await asyncio.gather(
            sensor.dry_run(CodeTestBinding(test="tests/test_math.py::test_adds")),
            sensor.dry_run(CodeTestBinding(test="tests/test_math.py::test_wrong")),
        )
        assert (ok.outcome, ok.observed) == ("confirmed", "passed")
        assert bad.outcome == "refuted"
        assert "assert" in bad.message
        assert sensor.runs == 1
        assert h.emitted == []
