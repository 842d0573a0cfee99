"""Online backup of a live store: SQLite's backup API, in steps, while the daemon writes.

The copy is one consistent snapshot: the source connection holds a single read
transaction for the whole backup, so under WAL the daemon keeps committing while we
copy (its commits after our snapshot are simply not in the copy), and the paged backup
never restarts because of them. The copy is written next to the destination under a
temporary name, switched to ``journal_mode=DELETE`` (one self-contained file),
``PRAGMA integrity_check``-ed, synced, and only then moved into place; a failed backup
leaves nothing at the destination.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from memwarden.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["BackupResult", "backup_database"]

_SIDECARS = ("-wal", "-shm", "-journal")


@dataclass(frozen=True, slots=True)
class BackupResult:
    """What :func:`backup_database` wrote."""

    source: Path
    path: Path
    size_bytes: int
    pages: int
    integrity: str
    elapsed_s: float

    def as_dict(self) -> dict[str, object]:
        return {
            "source": str(self.source),
            "path": str(self.path),
            "size_bytes": self.size_bytes,
            "pages": self.pages,
            "integrity": self.integrity,
            "elapsed_s": round(self.elapsed_s, 3),
        }


def backup_database(
    source: str | Path,
    dest: str | Path,
    *,
    force: bool = False,
    pages_per_step: int = 1024,
    progress: Callable[[int, int], None] | None = None,
) -> BackupResult:
    """Copy the database at ``source`` to ``dest`` while other connections keep writing.

    ``dest`` may be an existing directory: the copy is then named
    ``memwarden-<UTC time>.db`` inside it. An existing file is replaced only with
    ``force``. ``progress(copied_pages, total_pages)`` is called after every step.
    Raises :class:`StorageError` (missing source, existing destination, a source that
    is not a database, a copy that fails its integrity check).
    """
    if pages_per_step < 1:
        raise ValueError(f"pages_per_step must be at least 1, not {pages_per_step}")
    src = Path(source)
    target = _destination(src, Path(dest), force=force)
    started = time.monotonic()
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        pages = _copy(src, partial, pages_per_step, progress)
        integrity = _finish(partial)
        _install(partial, target, force=force)
    except OSError as err:
        raise StorageError(f"backup to {target} failed: {err}") from err
    finally:
        for leftover in (partial, *(Path(f"{partial}{s}") for s in _SIDECARS)):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return BackupResult(
        source=src,
        path=target,
        size_bytes=target.stat().st_size,
        pages=pages,
        integrity=integrity,
        elapsed_s=time.monotonic() - started,
    )


def _destination(src: Path, dest: Path, *, force: bool) -> Path:
    if not src.is_file():
        raise StorageError(f"no database at {src}")
    if dest.is_dir():
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        dest /= f"memwarden-{stamp}.db"
    if not dest.parent.is_dir():
        raise StorageError(f"cannot write {dest}: {dest.parent} is not a directory")
    if dest.exists():
        if dest.samefile(src):
            raise StorageError(f"{dest} is the live database itself")
        if not force:
            raise StorageError(f"{dest} already exists (pass --force to replace it)")
    return dest


@contextlib.contextmanager
def _own_sidecars(src: Path) -> Iterator[None]:
    """Give -wal/-shm files this process creates to the database's owner.

    As root (an operator backing up a service's database), SQLite would otherwise
    leave root-owned sidecar files the service can no longer open.
    """
    before = {s for s in _SIDECARS if Path(f"{src}{s}").exists()}
    try:
        yield
    finally:
        if os.geteuid() == 0:
            owner = src.stat()
            for suffix in set(_SIDECARS) - before:
                with contextlib.suppress(OSError):
                    os.chown(f"{src}{suffix}", owner.st_uid, owner.st_gid)


def _copy(
    src: Path, partial: Path, pages_per_step: int, progress: Callable[[int, int], None] | None
) -> int:
    copied = 0

    def step(_status: int, remaining: int, total: int) -> None:
        nonlocal copied
        copied = total - remaining
        if progress is not None:
            progress(copied, total)

    with _own_sidecars(src):
        try:
            # mode=rw: never create a database where there was none.
            source = sqlite3.connect(
                f"{src.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None, timeout=10
            )
        except sqlite3.Error as err:
            raise StorageError(f"cannot open {src}: {err}") from err
        try:
            source.execute("PRAGMA query_only = ON")
            # One read transaction for the whole copy: a fixed snapshot, no restarts.
            source.execute("BEGIN")
            source.execute("SELECT count(*) FROM sqlite_master").fetchone()
            total = int(source.execute("PRAGMA page_count").fetchone()[0])
            # The copy holds everything the database does: readable by its owner only.
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            target = sqlite3.connect(partial, isolation_level=None)
            try:
                source.backup(target, pages=pages_per_step, progress=step)
            finally:
                target.close()
            source.execute("COMMIT")
        except sqlite3.Error as err:
            raise StorageError(f"backup of {src} failed: {err}") from err
        finally:
            source.close()
    return max(copied, total)


def _finish(partial: Path) -> str:
    conn = sqlite3.connect(partial, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check(100)")]
    except sqlite3.Error as err:
        raise StorageError(f"the copy cannot be read back: {err}") from err
    finally:
        conn.close()
    if rows != ["ok"]:
        problems = [line for row in rows for line in str(row).splitlines() if line.strip()]
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise StorageError(f"the copy failed its integrity check: {'; '.join(problems[:5])}{more}")
    fd = os.open(partial, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return "ok"


def _install(partial: Path, target: Path, *, force: bool) -> None:
    if force:
        partial.replace(target)
    else:
        try:
            os.link(partial, target)  # fails if someone created target meanwhile
        except FileExistsError:
            raise StorageError(f"{target} already exists (pass --force to replace it)") from None
        except OSError:  # a file system without hard links
            if target.exists():
                raise StorageError(
                    f"{target} already exists (pass --force to replace it)"
                ) from None
            partial.replace(target)
    with contextlib.suppress(OSError):  # not every file system can sync a directory
        fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
