"""`memwarden backup`: an online, consistent, checked copy of a live store."""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import threading
import time
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.errors import StorageError
from memwarden.memory import Store, ValidationEvent, from_ts
from memwarden.memory._backup import backup_database

if TYPE_CHECKING:
    from pathlib import Path

SUBJECT = "config/app.yaml"
BINDING = {"sensor": "fs", "path": SUBJECT}


def event(n: int) -> ValidationEvent:
    return ValidationEvent(
        event_id=f"ev-{n:06d}",
        sensor="fs",
        subject=SUBJECT,
        outcome="confirmed" if n % 2 else "changed",
        observed_at=from_ts(time.time()),
    )


def event_ids(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT event_id FROM events")}
    finally:
        conn.close()


async def make_db(path: Path, events: int = 3) -> str:
    """A closed store with one bound block and ``events`` events; returns the block id."""
    async with Store(path) as store:
        block = await store.add({"content": "timeout is 30 s", "bindings": [BINDING]})
        await store.apply_events([event(n) for n in range(events)])
    return block.id


class EventWriter:
    """Commits one event at a time into a live Store until stopped, like a busy daemon."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.committed: list[str] = []
        self.warm = asyncio.Event()  # set after 20 commits
        self.tick = threading.Event()  # set after each commit, for the backup thread
        self._stop = asyncio.Event()

    async def run(self) -> None:
        n = 0
        while not self._stop.is_set():
            ev = event(n)
            await self.store.apply_events([ev])
            self.committed.append(ev.event_id)
            self.tick.set()
            if len(self.committed) >= 20:
                self.warm.set()
            n += 1

    def stop(self) -> None:
        self._stop.set()


async def test_backup_of_a_store_being_written_is_complete_and_consistent(tmp_path):
    """While a real Store commits events between every backup step, the copy opens, passes
    integrity_check, holds every event committed before the backup began, and the writer
    was never blocked."""
    live = tmp_path / "live.db"
    dest = tmp_path / "copy.db"
    steps: list[tuple[int, int]] = []
    async with Store(live) as store:
        block = await store.add({"content": "timeout is 30 s", "bindings": [BINDING]})
        await store.add_many([{"content": f"filler {n} " + "x" * 400} for n in range(200)])
        writer = EventWriter(store)

        def progress(done: int, total: int) -> None:
            steps.append((done, total))
            if len(steps) <= 10:  # let the writer commit between these steps
                writer.tick.clear()
                assert writer.tick.wait(timeout=10), "the writer stopped committing"

        task = asyncio.create_task(writer.run(), name="writer")
        await writer.warm.wait()
        before = set(writer.committed)
        result = await asyncio.to_thread(
            backup_database, live, dest, pages_per_step=2, progress=progress
        )
        during = len(writer.committed) - len(before)
        writer.stop()
        await task

    assert during >= 10, "the daemon's writes went on during the backup"
    assert len(steps) > 10
    assert all(b[0] > a[0] for a, b in itertools.pairwise(steps)), "every step moved on"
    assert (result.integrity, result.pages) == ("ok", steps[-1][1])
    assert result.size_bytes == dest.stat().st_size > 0
    assert before <= event_ids(dest) <= set(writer.committed)
    conn = sqlite3.connect(dest)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        conn.close()
    assert dest.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".copy.db.partial-*"))
    async with Store(dest) as restored:  # a restored copy works as a store
        assert (await restored.get(block.id)).content == "timeout is 30 s"


async def test_backup_refuses_an_existing_destination_unless_forced(tmp_path):
    """An existing DEST is left untouched without force, and replaced with it."""
    live = tmp_path / "live.db"
    await make_db(live)
    dest = tmp_path / "copy.db"
    dest.write_bytes(b"precious")
    with pytest.raises(StorageError, match="already exists"):
        backup_database(live, dest)
    assert dest.read_bytes() == b"precious"
    result = backup_database(live, dest, force=True)
    assert result.integrity == "ok"
    assert event_ids(dest) == {"ev-000000", "ev-000001", "ev-000002"}


async def test_backup_into_a_directory_writes_a_timestamped_file(tmp_path):
    """DEST may be a directory: the copy is memwarden-<UTC time>.db inside it."""
    live = tmp_path / "live.db"
    await make_db(live)
    backups = tmp_path / "backups"
    backups.mkdir()
    result = backup_database(live, backups)
    assert result.path.parent == backups
    assert result.path.name.startswith("memwarden-")
    assert result.path.name.endswith("Z.db")
    assert [p.name for p in backups.iterdir()] == [result.path.name]


async def test_backup_of_a_stopped_store_leaves_its_directory_as_it_was(tmp_path):
    """Backing up a store nobody has open leaves no -wal/-shm files beside it."""
    state = tmp_path / "state"
    state.mkdir()
    await make_db(state / "memwarden.db")
    before = sorted(p.name for p in state.iterdir())
    backup_database(state / "memwarden.db", tmp_path / "copy.db")
    assert sorted(p.name for p in state.iterdir()) == before == ["memwarden.db"]


def test_backup_errors_are_clear_and_leave_nothing_behind(tmp_path):
    """A missing source (not created), a non-database source, the live file as DEST, and a
    missing DEST directory each fail with a one-line reason and no partial file."""
    missing = tmp_path / "missing.db"
    with pytest.raises(StorageError, match="no database at"):
        backup_database(missing, tmp_path / "a.db")
    assert not missing.exists()

    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, but long enough to have a header " * 20)
    with pytest.raises(StorageError, match="not a database"):
        backup_database(text, tmp_path / "b.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]

    with pytest.raises(StorageError, match="live database itself"):
        backup_database(text, text, force=True)
    with pytest.raises(StorageError, match="not a directory"):
        backup_database(text, tmp_path / "nowhere" / "c.db")
    with pytest.raises(ValueError, match="at least 1"):
        backup_database(text, tmp_path / "d.db", pages_per_step=0)


async def test_cli_backup_uses_the_settings_database_and_prints_size_and_integrity(
    tmp_path, monkeypatch
):
    """`memwarden backup DEST` finds the database from the settings (MEMWARDEN_HOME), prints
    the copy's size and integrity, refuses to overwrite, and --force --json replaces it."""
    home = tmp_path / "home"
    await make_db(home / "memwarden.db")
    monkeypatch.setenv("MEMWARDEN_HOME", str(home))
    monkeypatch.delenv("MEMWARDEN_DB", raising=False)
    dest = tmp_path / "copy.db"
    runner = CliRunner()

    first = runner.invoke(app, ["backup", str(dest)])
    assert first.exit_code == 0, first.output
    size = dest.stat().st_size
    assert f"{size:,} bytes" in first.output
    assert "integrity ok" in first.output
    assert str(home / "memwarden.db") in first.output

    again = runner.invoke(app, ["backup", str(dest)])
    assert again.exit_code == 1
    assert "already exists" in again.output

    args = ["backup", str(dest), "--force", "--json", "--db", str(home / "memwarden.db")]
    forced = runner.invoke(app, args)
    assert forced.exit_code == 0, forced.output
    data = json.loads(forced.stdout)
    assert data["integrity"] == "ok"
    assert data["size_bytes"] == size
    assert data["path"] == str(dest)


def test_a_copy_that_fails_its_integrity_check_is_not_kept(tmp_path):
    """A source with a damaged index copies page for page; the check on the copy fails,
    names the problems, and nothing is left at DEST."""
    source = tmp_path / "damaged.db"
    conn = sqlite3.connect(source)
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.execute("CREATE INDEX t_x ON t (x)")
    conn.executemany("INSERT INTO t VALUES (?)", [(f"row {n:05d}",) for n in range(2000)])
    conn.commit()
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't_x'").fetchone()
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    with source.open("r+b") as fh:  # scribble over cells of an index page
        fh.seek(root * page_size + 100)
        fh.write(b"\xff" * 200)
    with pytest.raises(StorageError, match=r"failed its integrity check: .*tree page"):
        backup_database(source, tmp_path / "copy.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.db"]
