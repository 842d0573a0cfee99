"""The benchmark suite runs end to end at a tiny scale (figures are not checked)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIGURES = {
    "ingest",
    "sweep",
    "search_common",
    "search_mid",
    "decay_cycle",
    "fs_latency",
    "fs_burst",
    "regex_check",
    "short_id_lookup",
    "suggest",
    "startup",
    "idle_rss",
    "mqtt_ingest",
    "erase_10k",
    "erase_100k",
    "secure_delete",
    "redact",
    "console_block_page",
    "console_health_page",
    "retention_history",
    "embed_throughput",
    "search_hybrid",
    "hybrid_rss",
    "hybrid_startup",
    "pg_driver_ingest",
    "pg_driver_read",
    "pg_ingest",
    "pg_ingest_two_nodes",
    "pg_sweep",
    "pg_search_common",
    "pg_search_mid",
    "pg_decay",
    "pg_erase_10k",
}


def _run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Not measured for coverage: the benchmarks' loops under branch tracing took 111 s of
    # CPU against 68 s untraced (this is the suite's longest test; the code paths are
    # measured by the tests of their own).
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    # A fixed command: this interpreter running the repository's own benchmarks package.
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # The quick suite takes about two minutes on a loaded 2-core machine (the
        # PostgreSQL benchmarks start a server each); the bound only catches a hang.
        timeout=300,
        check=False,
    )


@pytest.mark.timeout(330)
def test_quick_run_writes_every_figure(tmp_path):
    """`python -m benchmarks --quick` writes a numeric result for every benchmark."""
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert isinstance(results, list)
    assert {r["name"] for r in results} >= FIGURES  # other benchmarks may join the suite
    for r in results:
        for key in ("value", "baseline", "ratio"):
            assert isinstance(r[key], float | int), (r["name"], key, r[key])
            assert math.isfinite(r[key]), (r["name"], key, r[key])
        assert isinstance(r["ok"], bool)
        assert r["unit"]
        assert r["target"]
    ingest = next(r for r in results if r["name"] == "ingest")
    assert ingest["same_end_state"] is True  # the baseline did the store's work
    machine = json.loads((tmp_path / "machine.json").read_text())
    assert {"cpu_count", "python", "sqlite", "platform"} <= machine.keys()
    # The machine's speed at the start and the end, to read absolute figures against.
    assert set(machine["cpu_reference_s"]) == {"start", "end"}
    assert all(0 < v < 10 for v in machine["cpu_reference_s"].values())
    assert "MISSED" in proc.stdout or "all targets met" in proc.stdout
    # A smoke run's PostgreSQL benchmarks share one server (benchmarks/_pg.py).
    ports = set(re.findall(r"PostgreSQL .* on port (\d+)", proc.stderr))
    assert len(ports) == 1, ports


@pytest.mark.timeout(330)
def test_subset_run_merges_by_name(tmp_path):
    """Running one benchmark replaces its figure and keeps the others in results.json."""
    path = tmp_path / "results.json"
    path.write_text(json.dumps([{"name": "ingest", "value": -1}, {"name": "other", "value": 1}]))
    proc = _run(tmp_path, "search_mid")  # a figure name selects its benchmark
    assert proc.returncode == 0, proc.stderr[-4000:]
    names = [r["name"] for r in json.loads(path.read_text())]
    assert names == ["ingest", "other", "search_common", "search_mid"]
    assert json.loads(path.read_text())[0]["value"] == -1
