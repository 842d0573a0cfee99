"""What the fs sensor knows how to check, as blocking functions without state.

They run in a worker thread: look at a path (or a glob) once, then judge each binding on
it. A path is only read after its real location was checked to lie inside an allowed
root, and never beyond ``max_file_bytes``.
"""

from __future__ import annotations

import configparser
import errno
import hashlib
import json
import math
import os
import stat
import tomllib
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

import re2
import yaml

from memwarden.sensors._regex import UserRegex, compile_user_regex

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = [
    "MISSING",
    "GlobSpec",
    "Look",
    "Verdict",
    "check_glob",
    "glob_prefix",
    "glob_regex",
    "is_glob",
    "is_within",
    "look_at",
    "look_at_glob",
    "parse_structured",
]

MISSING = "missing"
_GLOB_CHARS = frozenset("*?[")
_SHOWN_MATCHES = 20


def is_within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalized)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def is_glob(path: str) -> bool:
    return any(c in _GLOB_CHARS for c in path)


def glob_prefix(pattern: str) -> str:
    """The directory above the first component that holds a wildcard."""
    parts = pattern.split("/")
    fixed: list[str] = []
    for part in parts[:-1]:
        if is_glob(part):
            break
        fixed.append(part)
    return "/".join(fixed) or "/"


@lru_cache(maxsize=1024)
def glob_regex(pattern: str) -> UserRegex:
    """A regex for a path glob: ``*`` and ``?`` stay in one component, ``**/`` spans any.

    Compiled with RE2 (linear time: ``*a*a*a*…`` cannot make matching a long name slow);
    ``ValueError`` when the glob makes no valid pattern (``[z-a]``). A file name that
    is not valid UTF-8 is matched by literal parts only, never by a wildcard.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if pattern.startswith("**", i) and i + 2 == n:
            out.append(".*")
            i += 2
            continue
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re2.escape(c))
            else:
                body = pattern[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re2.escape(c))
        i += 1
    try:
        return compile_user_regex("(?s)" + "".join(out) + r"\z")
    except ValueError:
        raise ValueError(f"{pattern!r} is not a valid glob") from None


def check_glob(pattern: str) -> None:
    """``ValueError`` naming the problem when ``pattern`` is not a glob the sensor can use."""
    try:
        glob_regex(pattern)
    except ValueError as err:
        detail = ""
        # Say which part RE2 stumbled on (an inverted range, an unbalanced class ...).
        for part in pattern.split("/"):
            if is_glob(part):
                try:
                    glob_regex(part)
                except ValueError:
                    detail = f" (the component {part!r})"
                    break
        raise ValueError(f"{err}{detail}: use *, ?, ** and [a-z] classes") from None


@dataclass(frozen=True, slots=True)
class GlobSpec:
    pattern: str  # absolute
    prefix: str  # the fixed directory above the first wildcard
    ignore: tuple[str, ...]

    def matches(self, path: str) -> bool:
        if not is_within(path, self.prefix) or path == self.prefix:
            return False
        rel = path[len(self.prefix.rstrip("/")) + 1 :]
        if any(_ignored(part, self.ignore) for part in rel.split("/")):
            return False
        return glob_regex(self.pattern).fullmatch(_fs_bytes(path))


def _ignored(name: str, ignore: Sequence[str]) -> bool:
    return any(name == pat or _fnmatch(name, pat) for pat in ignore)


def _fnmatch(name: str, pattern: str) -> bool:
    return is_glob(pattern) and glob_regex(pattern).fullmatch(_fs_bytes(name))


def _fs_bytes(path: str) -> bytes:
    """A path as the bytes the OS gave (``os.walk`` decodes with surrogateescape)."""
    try:
        return path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate the OS did not make: matches no wildcard
        return path.encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------- looking


@dataclass(frozen=True, slots=True)
class Look:
    """What a path looked like: its fingerprint and, when small enough, its bytes.

    ``fingerprint`` is the sha256 of the content, ``missing``, ``directory``, a stat
    signature for a file above ``max_file_bytes``, or for a glob a digest over its
    matches. ``problem`` says why the path could not be looked at (outside the roots,
    unreadable).
    """

    fingerprint: str
    exists: bool
    content: bytes | None = None
    size: int | None = None
    too_large: bool = False
    is_dir: bool = False
    problem: str | None = None
    matches: tuple[str, ...] = ()


def look_at(path: str, roots: Sequence[str], max_file_bytes: int) -> Look:
    """Look at one path; follows a symlink only when its target stays inside a root.

    Only a regular file is opened, and without following any link: the resolved path is
    opened one component at a time below its root with ``O_NOFOLLOW`` (a link swapped in
    after the check makes the open fail), with ``O_NONBLOCK`` (a FIFO swapped in cannot
    block the thread), and ``fstat`` on the open descriptor decides what it is.
    """
    try:
        os.lstat(path)
    except FileNotFoundError:
        return Look(MISSING, exists=False)
    except OSError as err:
        return Look(f"error:{err.errno}", exists=False, problem=_os_problem(err))
    try:
        real = os.path.realpath(path)
    except OSError as err:  # the path changed while it was resolved (a link came or went)
        return Look(f"error:{err.errno}", exists=True, problem=_os_problem(err))
    root = max((r for r in roots if is_within(real, r)), key=len, default=None)
    if root is None:
        return Look(
            f"outside:{real}",
            exists=True,
            problem=f"{path} resolves to {real}, outside the allowed roots; not read",
        )
    opened = _open_regular(path, real, root)
    if isinstance(opened, Look):
        return opened
    return _read(opened, path, max_file_bytes)


def _open_regular(path: str, real: str, root: str) -> int | Look:  # noqa: PLR0911 - one return per kind of path
    """A descriptor on the regular file at ``real``, or what it is instead."""
    swapped = Look(
        "error:swapped",
        exists=True,
        problem=f"{path} changed into a symbolic link while being read; not read",
    )
    try:
        st = os.lstat(real)
        if stat.S_ISLNK(st.st_mode):
            return swapped
        if stat.S_ISDIR(st.st_mode):
            return Look("directory", exists=True, is_dir=True)
        if not stat.S_ISREG(st.st_mode):  # not even opened: a FIFO, socket or device
            return _special(path, st.st_mode)
        return _open_beneath(real, root)
    except FileNotFoundError:
        return Look(MISSING, exists=False)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            return swapped
        return Look(f"error:{err.errno}", exists=True, problem=_os_problem(err))


def _read(fd: int, path: str, max_file_bytes: int) -> Look:
    """Read an opened file (closed here) if ``fstat`` says it is a regular file."""
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return Look("directory", exists=True, is_dir=True)
        if not stat.S_ISREG(st.st_mode):
            return _special(path, st.st_mode)
        if st.st_size > max_file_bytes:
            return _too_large(st.st_size, st.st_mtime_ns)
        data = _read_at_most(fd, max_file_bytes + 1)
    except OSError as err:
        return Look(f"error:{err.errno}", exists=True, problem=_os_problem(err))
    finally:
        os.close(fd)
    if len(data) > max_file_bytes:  # it grew while we looked
        return _too_large(len(data), st.st_mtime_ns)
    return Look(hashlib.sha256(data).hexdigest(), exists=True, content=data, size=len(data))


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def _open_beneath(real: str, root: str, *, directory: bool = False) -> int:
    """Open ``real`` (a resolved path inside ``root``) following no symlink on the way."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the config's root
    try:
        parts = [p for p in real[len(root) :].split("/") if p]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1 and not directory
            child = os.open(part, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _special(path: str, mode: int) -> Look:
    kind = (
        "FIFO"
        if stat.S_ISFIFO(mode)
        else "socket"
        if stat.S_ISSOCK(mode)
        else "device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "special file"
    )
    return Look(
        f"special:{kind}",
        exists=True,
        problem=f"{path} is a {kind}, not a regular file; not read",
    )


def _too_large(size: int, mtime_ns: int) -> Look:
    return Look(f"stat:{size}:{mtime_ns}", exists=True, size=size, too_large=True)


def _os_problem(err: OSError) -> str:
    return f"could not read: {err.strerror or type(err).__name__}"


def look_at_glob(spec: GlobSpec, roots: Sequence[str], max_file_bytes: int) -> Look:
    """Look at every file a glob matches (ignored directories are not entered).

    The glob's fixed directory must resolve inside a root; it is opened like a file
    (component by component, no link followed) and walked from that descriptor without
    following links, so no directory outside the roots is ever listed.
    """
    try:
        real = os.path.realpath(spec.prefix)
    except OSError as err:
        return Look(f"error:{err.errno}", exists=False, problem=_os_problem(err))
    root = max((r for r in roots if is_within(real, r)), key=len, default=None)
    if root is None:
        return Look(
            f"outside:{real}",
            exists=True,
            problem=f"{spec.prefix} resolves to {real}, outside the allowed roots; not read",
        )
    try:
        top = _open_beneath(real, root, directory=True)
    except OSError:
        return Look(MISSING, exists=False)  # not there, not a directory, or swapped for a link
    entries: list[str] = []
    names: list[str] = []
    base = spec.prefix.rstrip("/")
    for rel, filenames in _walk(top, spec.ignore):
        here = f"{base}/{rel}" if rel else base
        for name in filenames:
            full = f"{here}/{name}"
            if spec.matches(full):
                look = look_at(full, roots, max_file_bytes)
                entries.append(f"{full}\0{look.fingerprint}\n")
                names.append(full)
    if not names:
        return Look(MISSING, exists=False)
    digest = hashlib.sha256("".join(entries).encode("utf-8", "surrogateescape")).hexdigest()
    return Look(f"glob:{digest}", exists=True, matches=tuple(names))


def _walk(top: int, ignore: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """``(directory relative to top, sorted file names)`` for ``top`` (a descriptor, closed
    here) and every directory below it, top-down and sorted like ``os.walk``.

    Only real directories are entered, each opened relative to its parent with
    ``O_NOFOLLOW``: a link to a directory is neither entered nor opened (``os.walk`` and
    ``os.fwalk`` open a link's target before deciding to skip it), and a directory
    swapped for a link during the walk makes its open fail.
    """
    stack: list[tuple[int, str, Iterator[str]]] = [(top, "", iter(()))]
    try:
        files, subdirs = _list(top, ignore)
        stack[-1] = (top, "", iter(subdirs))
        yield "", files
        while stack:
            fd, rel, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            here = f"{rel}/{name}" if rel else name
            stack.append((child, here, iter(())))
            files, subdirs = _list(child, ignore)
            stack[-1] = (child, here, iter(subdirs))
            yield here, files
    finally:  # a consumer that stopped early: close what is still open
        for fd, _, _ in stack:
            os.close(fd)


def _list(fd: int, ignore: Sequence[str]) -> tuple[list[str], list[str]]:
    """The file names and the (not ignored) subdirectory names in directory ``fd``."""
    try:
        with os.scandir(fd) as it:
            listing = sorted(it, key=lambda e: e.name)
    except OSError:
        return [], []
    files: list[str] = []
    subdirs: list[str] = []
    for entry in listing:
        try:
            if entry.is_dir(follow_symlinks=False):
                if not _ignored(entry.name, ignore):
                    subdirs.append(entry.name)
            elif not entry.is_dir():  # a link to a directory is neither, like os.walk
                files.append(entry.name)
        except OSError:
            continue
    return files, subdirs


# ---------------------------------------------------------------------- judging

Outcome = Literal["confirmed", "refuted", "changed", "error"]


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    observed: Any = None
    message: str = ""


def observed_of(look: Look, *, base: str = "") -> Any:
    """What to report as ``observed`` for a change: the new hash, or ``missing``."""
    if look.matches:
        shown = [
            m[len(base) + 1 :] if base and m.startswith(base + "/") else m for m in look.matches
        ]
        return {"matches": len(look.matches), "first": shown[:_SHOWN_MATCHES]}
    if look.content is not None:
        return {"sha256": look.fingerprint, "bytes": look.size}
    if look.too_large:
        return {"bytes": look.size}
    return look.fingerprint if look.fingerprint in (MISSING, "directory") else None


# What parsing a malformed document raises: json, tomllib and a bad encoding raise
# ValueError (JSONDecodeError, TOMLDecodeError, UnicodeDecodeError), PyYAML its YAMLError
# (and, on some malformed scalars such as a bad timestamp, AttributeError or IndexError),
# configparser its Error; a document nested too deeply, RecursionError.
PARSE_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    LookupError,
    AttributeError,
    TypeError,
    RecursionError,
    yaml.YAMLError,
    configparser.Error,
)


def parse_structured(data: bytes, fmt: Literal["json", "toml", "yaml"]) -> Any:
    """Parse JSON, TOML or YAML (``yaml.safe_load``: no object construction)."""
    text = data.decode("utf-8-sig")
    if fmt == "json":
        return json.loads(text)
    if fmt == "toml":
        return tomllib.loads(text)
    return yaml.safe_load(text)


class TooBigError(ValueError):
    pass


def to_json(value: Any, budget: list[int] | None = None) -> Any:
    """A parsed value as JSON (YAML and TOML dates become ISO strings).

    At most 100 000 nodes: YAML aliases can make a small file expand enormously.
    """
    budget = budget if budget is not None else [100_000]
    budget[0] -= 1
    if budget[0] < 0:
        raise TooBigError("the value is too large to compare (more than 100 000 nodes)")
    if isinstance(value, dict):
        return {str(k): to_json(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v, budget) for v in value]
    return json_scalar(value)


def json_scalar(value: Any) -> str | int | float | bool | None:
    """A parsed non-container value as a JSON scalar: dates as ISO strings, NaN and the
    infinities as text, anything else unknown as its ``str``."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def format_of(path: str, explicit: str | None) -> Literal["json", "toml", "yaml"] | None:
    if explicit in ("json", "toml", "yaml"):
        return explicit  # type: ignore[return-value]
    ext = os.path.splitext(path)[1].lower()
    return {".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}.get(ext)  # type: ignore[return-value]


def shorten(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def all_names(values: Iterable[str]) -> str:
    return ", ".join(sorted(values))
