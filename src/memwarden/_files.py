"""Private state files: created 0600 (directories 0700) whatever the umask.

The state dir holds the API token, the database and what the sensors saw: readable by
the daemon's user only. Modes are set explicitly at each creation rather than by a
process umask: a umask is process-wide (threads race on it) and would be inherited by
the sensors' child processes (a test run writing caches into the user's project).
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = [
    "FILE_MODE",
    "fsync_dir",
    "open_private",
    "prepare_database",
    "private_dir",
    "read_private",
    "tighten_file",
    "write_private",
]

FILE_MODE = 0o600
DIR_MODE = 0o700

log = structlog.get_logger("memwarden.files")


def private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) 0700; tighten it to 0700 if it is looser.

    A pre-existing directory readable or writable by group or others is chmod-ed, with
    a ``state_dir_tightened`` log line naming the old mode.
    """
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        path.chmod(mode & ~0o077 | DIR_MODE)
        log.warning("state_dir_tightened", path=str(path), was=f"{mode:04o}", now=f"{DIR_MODE:04o}")


def tighten_file(path: Path) -> None:
    """Make an existing file 0600 if group or others may read or write it; no-op if absent."""
    try:
        mode = stat.S_IMODE(path.lstat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077 and not path.is_symlink():
        path.chmod(mode & ~0o077)
        log.info("state_file_tightened", path=str(path), was=f"{mode:04o}")


def open_private(path: Path, flags: int) -> int:
    """``os.open`` with mode 0600 on creation, never following a symlink at ``path``;
    an existing looser file is tightened. Returns the file descriptor."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            os.fchmod(fd, mode & ~0o077)
    except BaseException:
        os.close(fd)
        raise
    return fd


def prepare_database(path: Path) -> None:
    """Before SQLite opens ``path``: create it empty and 0600 if absent (SQLite gives its
    ``-wal``, ``-shm`` and ``-journal`` files the database file's mode), and tighten an
    existing database and its side files left looser by an older version or a umask.
    A directory made for it is 0700; an existing one is left as it is."""
    if str(path) == ":memory:" or str(path).startswith("file:"):
        return
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=DIR_MODE)
    try:
        os.close(open_private(path, os.O_WRONLY | os.O_EXCL))
    except FileExistsError:  # ours to tighten; another user's (read it only) or a symlink: not
        with contextlib.suppress(PermissionError):
            tighten_file(path)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(PermissionError):
            tighten_file(path.with_name(path.name + suffix))


def fsync_dir(path: Path) -> None:
    """Make a rename or a new name in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes, *, durable: bool = True, replace: bool = True) -> bool:
    """Write ``data`` to ``path`` atomically, 0600: a temp file in the same directory,
    fsync, then renamed over ``path`` and the directory fsync-ed (``durable``).

    With ``replace=False`` an existing ``path`` is left alone (the name is linked, not
    renamed, so two writers cannot both win) and ``False`` is returned.
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
    )
    try:
        try:
            os.fchmod(fd, FILE_MODE)  # O_CREAT's mode is masked by the umask; this is not
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            tmp.replace(path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    if durable:
        fsync_dir(path.parent)
    return True


def read_private(path: Path, limit: int, refuse: Callable[[str], Exception]) -> bytes:
    """The content of a file the daemon keeps private (the API token, the privacy key and
    policy): a regular file, not a symbolic link, of the daemon's user, mode 0600, of at
    most ``limit`` bytes. Each problem is raised as ``refuse(problem)``; the caller judges
    the content."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        if path.is_symlink():
            raise refuse("is a symbolic link; it must be a regular file") from None
        raise refuse(f"cannot be read ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refuse("is not a regular file")
        if info.st_uid != os.geteuid():
            raise refuse(
                f"is owned by uid {info.st_uid}, not by the daemon's user (uid {os.geteuid()})"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise refuse(f"has mode {mode:04o}; it must be 0600 (chmod 600 {path})")
        raw = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise refuse(f"is larger than {limit} bytes")
    return raw
