"""What the fs sensor knows how to check, as blocking functions without state.

They run in a worker thread: look at a path (or a glob) once, then judge each binding on
it. A path is only read after its real location was checked to lie inside an allowed
root, and never beyond ``max_file_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tomllib
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

import re2
import yaml

from memwarden.sensors._regex import UserRegex, compile_user_regex

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

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
    "resolve_pointer",
    "same_json",
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


def look_at(path: str, roots: Sequence[str], max_file_bytes: int) -> Look:  # noqa: PLR0911 - one return per kind of path
    """Look at one path; follows a symlink only when its target stays inside a root."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return Look(MISSING, exists=False)
    except OSError as err:
        return Look(f"error:{err.errno}", exists=False, problem=_os_problem(err))
    real = os.path.realpath(path)
    if not any(is_within(real, r) for r in roots):
        return Look(
            f"outside:{real}",
            exists=True,
            problem=f"{path} resolves to {real}, outside the allowed roots; not read",
        )
    try:
        st = os.stat(real)
        if os.path.isdir(real):
            return Look("directory", exists=True, is_dir=True)
        if st.st_size > max_file_bytes:
            return _too_large(st.st_size, st.st_mtime_ns)
        with open(real, "rb") as fh:
            data = fh.read(max_file_bytes + 1)
    except FileNotFoundError:
        return Look(MISSING, exists=False)
    except OSError as err:
        return Look(f"error:{err.errno}", exists=True, problem=_os_problem(err))
    if len(data) > max_file_bytes:  # it grew while we looked
        return _too_large(len(data), st.st_mtime_ns)
    return Look(hashlib.sha256(data).hexdigest(), exists=True, content=data, size=len(data))


def _too_large(size: int, mtime_ns: int) -> Look:
    return Look(f"stat:{size}:{mtime_ns}", exists=True, size=size, too_large=True)


def _os_problem(err: OSError) -> str:
    return f"could not read: {err.strerror or type(err).__name__}"


def look_at_glob(spec: GlobSpec, roots: Sequence[str], max_file_bytes: int) -> Look:
    """Look at every file a glob matches (ignored directories are not entered)."""
    entries: list[str] = []
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(spec.prefix, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not _ignored(d, spec.ignore))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if spec.matches(full):
                look = look_at(full, roots, max_file_bytes)
                entries.append(f"{full}\0{look.fingerprint}\n")
                names.append(full)
    if not names:
        return Look(MISSING, exists=False)
    digest = hashlib.sha256("".join(entries).encode("utf-8", "surrogateescape")).hexdigest()
    return Look(f"glob:{digest}", exists=True, matches=tuple(names))


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


def parse_structured(data: bytes, fmt: Literal["json", "toml", "yaml"]) -> Any:
    """Parse JSON, TOML or YAML (``yaml.safe_load``: no object construction)."""
    text = data.decode("utf-8-sig")
    if fmt == "json":
        return json.loads(text)
    if fmt == "toml":
        return tomllib.loads(text)
    return yaml.safe_load(text)


class PointerMissingError(LookupError):
    pass


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """RFC 6901: ``""`` is the whole document; ``/a/0/b~1c`` walks objects and arrays."""
    if pointer == "":
        return doc
    current = doc
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict):
            if token not in current:
                raise PointerMissingError(token)
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
                raise PointerMissingError(token)
            index = int(token)
            if index >= len(current):
                raise PointerMissingError(token)
            current = current[index]
        else:
            raise PointerMissingError(token)
    return current


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
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``30`` equals ``30.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


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
