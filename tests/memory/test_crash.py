"""Nothing acknowledged is lost: kill -9 mid-stream."""

from __future__ import annotations

import os
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

WRITER = Path(__file__).with_name("_crash_writer.py")
BATCH = 20
DEADLINE_S = 20.0


def _run_and_kill(db: Path, kill_after: int) -> dict[int, list[str]]:
    """Run the writer, read acknowledgements until ``kill_after`` batches, SIGKILL it.

    Returns the acknowledged batches: batch number -> event ids.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(db), str(BATCH)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    acked: dict[int, list[str]] = {}
    buffer = b""
    deadline = time.monotonic() + DEADLINE_S
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while len(acked) < kill_after:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(timeout=remaining):
                    pytest.fail(f"the writer acknowledged only {len(acked)} batches in time")
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    stderr = proc.stderr.read().decode(errors="replace")
                    pytest.fail(f"the writer exited early:\n{stderr}")
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    word, *rest = line.decode().split()
                    assert word in {"READY", "ACK"}, line
                    if word == "ACK":
                        acked[int(rest[0])] = rest[1:]
        # Mid-stream: the writer is still committing the next batches right now.
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


@pytest.mark.parametrize("kill_after", [1, 7, 40])
def test_kill_minus_9_loses_no_acknowledged_event(tmp_path, kill_after):
    """After SIGKILL: every acknowledged event is stored, no batch is partial, the file is sound."""
    db = tmp_path / "crash.db"
    acked = _run_and_kill(db, kill_after)
    assert len(acked) >= kill_after

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = {r[0] for r in conn.execute("SELECT event_id FROM events")}
        seqs = [r[0] for r in conn.execute("SELECT seq FROM events ORDER BY seq")]
        effects_orphans = conn.execute(
            "SELECT count(*) FROM effects WHERE event_seq NOT IN (SELECT seq FROM events)"
        ).fetchone()[0]
    finally:
        conn.close()

    for batch, ids in acked.items():
        assert len(ids) == BATCH
        missing = set(ids) - stored
        assert not missing, f"batch {batch} was acknowledged but lost {sorted(missing)}"
    by_batch: dict[str, set[str]] = defaultdict(set)
    for event_id in stored:
        by_batch[event_id.split("-")[0]].add(event_id)
    for batch, ids in by_batch.items():
        assert len(ids) == BATCH, f"batch {batch} is partial: {len(ids)} of {BATCH} events"
    assert seqs == list(range(1, len(seqs) + 1))
    assert effects_orphans == 0


async def test_store_reopens_after_kill(tmp_path, make_store):
    """A store killed mid-write reopens, and its acknowledged events are readable through it."""
    db = tmp_path / "crash.db"
    acked = _run_and_kill(db, 3)
    store = await make_store(db)
    counts = await store.counts()
    assert counts["events"] >= 3 * BATCH
    (block,) = await store.list_blocks()
    history = await store.events_for(block.id, limit=1000)
    assert {r.event_id for r in history} >= {
        eid for ids in acked.values() for i, eid in enumerate(ids) if i % 2
    }
