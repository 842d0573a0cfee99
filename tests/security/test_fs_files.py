"""The fs sensor reads only regular files inside its roots, never blocks, and does not
copy them into events (issue 13, items 3 and 6).

Before: a FIFO inside a root blocked a worker thread forever; the file was opened by
path after the symlink check, so a link swapped in between was followed; ``"key": ""``
echoed up to ~2000 characters of any file; ``"**/[z-a]*"`` was accepted and raised
``re.error`` inside the sensor.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from memwarden.sensors import _fscheck as fc
from memwarden.sensors.fs import FsBinding, FsConfig
from tests.security.sensor_daemon import HealthProbe, RealDaemon, real_daemon

if TYPE_CHECKING:
    from collections.abc import Iterator

SECRET = b"the secret outside every root\n"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    with real_daemon(tmp_path_factory.mktemp("fsfiles")) as d:
        yield d


def _judged(daemon: RealDaemon, binding: dict[str, object]) -> dict[str, object]:
    response = daemon.add({"sensor": "fs", **binding})
    assert response.status_code == 201, response.text
    block_id = response.json()["id"]
    answer = daemon.revalidate(block_id, wait="10s")
    assert answer["answered"], answer
    return next(e for e in daemon.events(block_id) if e["sensor"] == "fs")


def test_a_fifo_in_a_root_is_an_error_and_blocks_nothing(daemon):
    """Content checks on a FIFO answer `error` at once; the daemon keeps answering."""
    os.mkfifo(daemon.root / "pipe")
    with HealthProbe(daemon.url) as probe:
        for binding in ({"path": "pipe", "regex": "x"}, {"path": "pipe", "key": "/a"}):
            event = _judged(daemon, binding)
            assert event["outcome"] == "error"
            assert "is a FIFO, not a regular file; not read" in str(event["message"])
        # And again, the way a change event would look at it: still no reader stuck.
        event = _judged(daemon, {"path": "pipe", "sha256": "0" * 64})
        assert event["outcome"] == "error"
    probe.assert_responsive()
    assert daemon.alive()


def test_observed_values_are_cut_to_256_characters(daemon):
    """``"key": ""`` on a big document and ``".*"`` on a big file confirm, but the
    event carries at most 256 characters of what was read."""
    # No secret-naming key ("password"): its value would be redacted (docs/PRIVACY.md).
    big = {"padding": "p" * 5000, "more": list(range(1000))}
    (daemon.root / "big.json").write_text(json.dumps(big))
    (daemon.root / "big.txt").write_text("s" * 100_000)
    whole = _judged(daemon, {"path": "big.json", "key": ""})
    assert whole["outcome"] == "confirmed"
    assert isinstance(whole["observed"], str)
    assert len(whole["observed"]) == 256
    assert whole["observed"].endswith("…")
    one = _judged(daemon, {"path": "big.json", "key": "/padding"})
    assert one["observed"] == "p" * 255 + "…"
    matched = _judged(daemon, {"path": "big.txt", "regex": ".*"})
    assert matched["outcome"] == "confirmed"
    assert matched["observed"] == "s" * 255 + "…"
    small = _judged(daemon, {"path": "big.json", "key": "/more/3"})
    assert small["observed"] == 3


@pytest.mark.parametrize("path", ["**/[z-a]*", "docs/[z-a].md", "a/**/[9-0]/*.txt", "*.[Z-A]"])
def test_a_glob_that_cannot_be_matched_is_refused_when_added(daemon, path):
    """422 on bindings.0.path naming the glob; nothing stored; the sensor never sees it."""
    before = daemon.block_count()
    response = daemon.add({"sensor": "fs", "path": path, "exists": True})
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["bindings", "0", "path"]
    assert "is not a valid glob" in problem["msg"]
    assert daemon.block_count() == before


def test_a_bad_ignore_glob_is_refused_by_the_config():
    with pytest.raises(ValidationError, match="not a valid glob"):
        FsConfig.model_validate({"roots": ["/"], "ignore": ["[z-a]"]})
    assert FsBinding.model_validate({"path": "docs/**/[!_]*.md", "exists": True})


# ---------------------------------------------------------------------- the sensor's own reads


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    (root / "data").mkdir(parents=True)
    (root / "data" / "f.txt").write_bytes(b"inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_bytes(SECRET)
    return root, outside


def test_a_link_swapped_in_while_a_file_is_checked_is_never_followed(layout):
    """A thread swaps the bound file between a regular file and a symlink to a file
    outside the root, thousands of times, while the sensor looks at it: every look is
    the inside content, missing, or a refusal, and never the secret."""
    root, outside = layout
    target = root / "data" / "f.txt"
    link = root / "data" / "link.tmp"
    regular = root / "data" / "regular.tmp"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            link.unlink(missing_ok=True)
            link.symlink_to(outside / "f.txt")
            link.replace(target)
            regular.write_bytes(b"inside\n")
            regular.replace(target)

    swapper = threading.Thread(target=swap, name="swapper")
    swapper.start()
    seen: set[str] = set()
    try:
        for _ in range(3000):
            look = fc.look_at(str(target), [str(root)], 1 << 20)
            assert look.content != SECRET
            assert look.content in (None, b"inside\n")
            seen.add("read" if look.content else (look.problem or "missing").split(" ", 1)[-1])
    finally:
        stop.set()
        swapper.join(timeout=10)
    assert "read" in seen


def test_a_directory_swapped_for_a_link_after_the_check_is_not_followed(layout, monkeypatch):
    """The check saw root/data as a directory; by the time of the open it is a link out
    of the root. Opening component by component with O_NOFOLLOW refuses it."""
    root, outside = layout
    (root / "data" / "f.txt").unlink()
    (root / "data").rmdir()
    (root / "data").symlink_to(outside)
    # realpath ran before the swap: it still names the path inside the root.
    monkeypatch.setattr(fc.os.path, "realpath", lambda p: p)
    look = fc.look_at(str(root / "data" / "f.txt"), [str(root)], 1 << 20)
    assert look.content is None
    assert look.problem is not None
    assert "symbolic link" in look.problem


def test_a_fifo_swapped_in_after_the_check_does_not_block(tmp_path, monkeypatch):
    """The check saw a regular file; the open finds a FIFO: non-blocking open, fstat
    says FIFO, nothing is read (a blocking open would wait for a writer forever)."""
    root = tmp_path / "root"
    root.mkdir()
    fifo = root / "f.txt"
    os.mkfifo(fifo)
    regular = Path(__file__).stat()
    real_lstat = os.lstat
    monkeypatch.setattr(
        fc.os, "lstat", lambda p, *a, **k: regular if str(p) == str(fifo) else real_lstat(p)
    )
    result: list[fc.Look] = []
    worker = threading.Thread(
        target=lambda: result.append(fc.look_at(str(fifo), [str(root)], 1 << 20)), daemon=True
    )
    worker.start()
    worker.join(timeout=5)
    if worker.is_alive():  # release the stuck reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("looking at a FIFO blocked")
    [look] = result
    assert look.content is None
    assert look.problem is not None
    assert "is a FIFO, not a regular file" in look.problem
