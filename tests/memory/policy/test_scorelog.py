# Copyright 2026 memwarden contributors. MIT License.
"""The JSONL score log: one line per scoring, kept apart from the blocks, rotated by size."""

from __future__ import annotations

import math
import threading

import pytest

from memwarden.memory import ScoreLog
from memwarden.memory._scorelog import read
from memwarden.memory.policy import ScoreResult

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _result(block_id: str = "b1", total: float = 7.25) -> ScoreResult:
    return ScoreResult(
        scorer="composite",
        block_id=block_id,
        total=total,
        threshold=7.0,
        breakdown={"access_pattern": 7.5, "content_stability": 8.0},
        candidate=True,
    )


def test_append_writes_one_json_line(tmp_path):
    """Each scoring becomes one line with time, block, scorer, total, breakdown and verdict."""
    path = tmp_path / "scores.jsonl"
    with ScoreLog(path) as log:
        log.append(_result(), at=T0, verdict="promoted")
        log.append(_result("b2", 3.0), at=T0 + 60, event="consolidation")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    first, second = read(path)
    assert first == {
        "at": "2026-01-01T00:00:00+00:00",
        "event": "score",
        "block_id": "b1",
        "scorer": "composite",
        "total": 7.25,
        "threshold": 7.0,
        "candidate": True,
        "breakdown": {"access_pattern": 7.5, "content_stability": 8.0},
        "verdict": "promoted",
    }
    assert second["event"] == "consolidation"
    assert second["at"] == "2026-01-01T00:01:00+00:00"


def test_rotates_by_size_and_keeps_the_backups(tmp_path):
    """Past max_bytes the file moves to .1, .2, .3; the oldest beyond that is dropped."""
    path = tmp_path / "scores.jsonl"
    with ScoreLog(path, max_bytes=1000, backups=3) as log:
        for i in range(100):
            log.append(_result(f"b{i:03d}"), at=T0 + i)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["scores.jsonl", "scores.jsonl.1", "scores.jsonl.2", "scores.jsonl.3"]
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())
    kept = read(path, include_backups=True)
    ids = [r["block_id"] for r in kept]
    assert 0 < len(ids) < 100
    assert ids == [f"b{i:03d}" for i in range(100 - len(ids), 100)]  # oldest first, no gaps


def test_no_backups_truncates(tmp_path):
    """With backups=0 the log starts over instead of keeping old files."""
    path = tmp_path / "scores.jsonl"
    with ScoreLog(path, max_bytes=500, backups=0) as log:
        for i in range(20):
            log.append(_result(f"b{i:03d}"), at=T0 + i)
    assert [p.name for p in tmp_path.iterdir()] == ["scores.jsonl"]
    assert read(path)[-1]["block_id"] == "b019"


def test_reopens_an_existing_log_and_counts_its_size(tmp_path):
    """A restarted daemon appends to the existing file and rotates on its real size."""
    path = tmp_path / "scores.jsonl"
    with ScoreLog(path, max_bytes=600) as log:
        log.append(_result(), at=T0)
        log.append(_result(), at=T0)
    with ScoreLog(path, max_bytes=600) as log:
        for _ in range(3):
            log.append(_result(), at=T0)
    assert (tmp_path / "scores.jsonl.1").exists()
    assert len(read(path, include_backups=True)) == 5


def test_non_finite_numbers_become_null(tmp_path):
    """JSON has no NaN: a broken number is written as null, and the line stays valid."""
    path = tmp_path / "scores.jsonl"
    with ScoreLog(path) as log:
        log.write({"total": math.nan, "breakdown": {"x": math.inf}, "list": [-math.inf]})
    assert read(path) == [{"total": None, "breakdown": {"x": None}, "list": [None]}]


def test_threads_do_not_interleave_lines(tmp_path):
    """Four threads appending at once leave 400 whole lines."""
    path = tmp_path / "scores.jsonl"
    with ScoreLog(path) as log:

        def worker(n: int) -> None:
            for i in range(100):
                log.append(_result(f"t{n}-{i}"), at=T0)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(read(path)) == 400


def test_creates_the_directory(tmp_path):
    """The log's directory is created on the first write."""
    path = tmp_path / "state" / "scores.jsonl"
    with ScoreLog(path) as log:
        log.append(_result(), at=T0)
    assert len(read(path)) == 1


def test_read_missing_file_is_empty(tmp_path):
    """Reading a log that was never written gives no records."""
    assert read(tmp_path / "nope.jsonl", include_backups=True) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"max_bytes": 0}, "max_bytes must be at least 1"), ({"backups": -1}, "backups must be 0")],
)
def test_rejects_bad_settings(tmp_path, kwargs, message):
    """Nonsense sizes are refused with the value in the message."""
    with pytest.raises(ValueError, match=message):
        ScoreLog(tmp_path / "s.jsonl", **kwargs)
