"""An index of the structured values under the fs sensor's roots, for binding suggestions.

Every JSON, YAML, TOML, INI and ``.env`` file under the roots (ignored directories are
not entered) is parsed into ``(file, pointer, value)`` entries: ``/http/timeout`` -> ``30``.
The suggester (:mod:`memwarden.sensors._suggest`) matches a fact's words and values
against them.

The files are untrusted, so every step is bounded (:class:`IndexLimits`, documented in
``docs/SUGGESTIONS.md``): bytes per file, nesting depth, nodes per file, files and entries
in all. YAML is read with a ``SafeLoader`` that refuses aliases (a "billion laughs" file
expands through them) and counts nodes as it composes. A file over a limit is recorded
with the reason and contributes nothing (or, past the depth limit, nothing below it).

Secret-looking values (every value of a ``.env*`` file, and keys named like ``password``,
``secret``, ``token``, ``api_key``, ``private``) are kept only as an HMAC-SHA256 under a
key drawn at random when the index is made and never written anywhere: a fact's value can
be matched against them, and nothing can echo them.

Parsing runs in a worker thread (``asyncio.to_thread``), not the event loop; a worker
process would also bound its CPU time, which is not done yet. The index does not watch
anything itself: the fs sensor's one watcher watches every directory the index looks in
(:meth:`ValueIndex.walk_dirs_sync`, each non-recursively, so a directory moved away and
made again is simply a new directory to watch), hands the index what it touched
(:meth:`ValueIndex.changes_of`, :meth:`ValueIndex.apply_changes`), and rebuilds it when
the kernel's event queue overflowed.
"""

from __future__ import annotations

import asyncio
import configparser
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import yaml

from memwarden.jsonpointer import pointer_of
from memwarden.sensors import _fscheck as fc
from memwarden.sensors._watch import event_paths

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from watchdog.events import FileSystemEvent

    from memwarden.sensors._watch import Change

__all__ = [
    "Entry",
    "IndexLimits",
    "LimitError",
    "ValueIndex",
    "file_format",
    "is_secret_key",
    "parse_entries",
]

Format = Literal["json", "yaml", "toml", "ini", "env"]
Scalar = str | int | float | bool | None

_SECRET_KEY = re.compile(
    r"passw(or)?d|passphrase|secret|token|api[_-]?key|apikey|private|credential", re.IGNORECASE
)
_NOT_SECRET_TAIL = re.compile(
    r"(ttl|lifetime|expiry|expires|expiration|timeout|length|len|rounds|min|max|count|size|"
    r"algorithm|alg|issuer|enabled|required|file|path|header|type|name)$",
    re.IGNORECASE,
)
_EXTENSIONS: dict[str, Format] = {
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".ini": "ini",
    ".cfg": "ini",
}


@dataclass(frozen=True, slots=True)
class IndexLimits:
    """How much of the untrusted files the index takes (see docs/SUGGESTIONS.md)."""

    max_file_bytes: int = 256 * 1024
    max_depth: int = 24
    max_nodes_per_file: int = 20_000
    max_files: int = 20_000
    max_entries: int = 500_000
    max_dirs: int = 10_000


@dataclass(frozen=True, slots=True)
class Entry:
    """One scalar at a pointer in one file; a secret has ``value`` None and a hash."""

    path: str
    pointer: str
    value: Scalar
    fmt: Format
    secret_hash: str | None = None

    @property
    def secret(self) -> bool:
        return self.secret_hash is not None


class LimitError(ValueError):
    """A file exceeds one of the index's limits."""


def is_secret_key(pointer: str) -> bool:
    """Whether a key path names something secret (``/db/password``, ``/API_TOKEN``,
    ``/secrets/stripe``) — not a setting *about* one (``/password/min_length``,
    ``/jwt/access_token_ttl``: the last key ends in a length, a lifetime, a count...)."""
    if not _SECRET_KEY.search(pointer):
        return False
    return not _NOT_SECRET_TAIL.search(pointer.rsplit("/", 1)[-1])


def file_format(path: str) -> Format | None:
    """The format the index reads a file as, by its name; None: not indexed."""
    name = os.path.basename(path)
    if name == ".env" or name.startswith(".env.") or name.endswith(".env"):
        return "env"
    return _EXTENSIONS.get(os.path.splitext(name)[1].lower())


def _ignored(name: str, ignore: Sequence[str]) -> bool:
    """The fs sensor's ``ignore`` rule: a name, or a name glob."""
    return any(name == pat or fnmatch.fnmatchcase(name, pat) for pat in ignore)


# ---------------------------------------------------------------------- parsing


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses aliases and stops after a number of nodes."""

    max_nodes = 20_000
    nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise LimitError(f"YAML aliases are not indexed (line {event.start_mark.line + 1})")
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise LimitError(f"more than {self.max_nodes} YAML nodes")
        return super().compose_node(parent, index)


def _load_yaml(text: str, max_nodes: int) -> Any:
    loader = _NoAliasLoader(text)
    loader.max_nodes = max_nodes
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _load_env(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


class _CaseConfigParser(configparser.ConfigParser):
    def optionxform(self, optionstr: str) -> str:
        return optionstr  # keep the keys' case: a pointer names them as written


def _load_ini(text: str) -> dict[str, dict[str, str]]:
    parser = _CaseConfigParser(interpolation=None, strict=False)
    parser.read_string(text)
    out = {s: dict(parser.items(s, raw=True)) for s in parser.sections()}
    if parser.defaults():
        out[parser.default_section] = dict(parser.defaults())
    return out


_NUMERIC = re.compile(r"-?\d{1,18}(\.\d+)?")


def _scalar(value: Any, *, untyped: bool = False) -> Scalar:
    if untyped and isinstance(value, str) and _NUMERIC.fullmatch(value.strip()):
        text = value.strip()  # INI has only strings: "4" is taken as the number it says
        return float(text) if "." in text else int(text)
    if untyped and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"  # and "True" as the boolean
    return fc.json_scalar(value)


def _not_parsed(fmt: Format, err: Exception) -> str:
    """Why a document was not indexed. The parser's message may quote the file: say only
    what kind of failure."""
    if isinstance(err, RecursionError):
        return f"not indexed: nested too deeply to parse as {fmt}"
    return f"not indexed: not valid {fmt} ({type(err).__name__})"


def parse_entries(
    path: str, data: bytes, fmt: Format, limits: IndexLimits, key: bytes
) -> tuple[list[Entry], str | None]:
    """The entries of one file's bytes, and a note when a limit cut something off.

    Raises :class:`LimitError` or a parser's error when the file gives nothing.
    """
    text = data.decode("utf-8-sig")
    doc: Any
    if fmt == "json":
        doc = json.loads(text)
    elif fmt == "toml":
        doc = tomllib.loads(text)
    elif fmt == "yaml":
        doc = _load_yaml(text, limits.max_nodes_per_file)
    elif fmt == "ini":
        doc = _load_ini(text)
    else:
        doc = _load_env(text)
    entries: list[Entry] = []
    note: list[str] = []
    nodes = 0
    # An explicit stack, not recursion: depth is bounded by the limit, never by Python's.
    stack: list[tuple[str, Any, int]] = [("", doc, 0)]
    while stack:
        pointer, value, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes_per_file:
            raise LimitError(f"more than {limits.max_nodes_per_file} nodes")
        if isinstance(value, dict | list):
            if depth >= limits.max_depth:
                if not note:
                    note.append(f"nested deeper than {limits.max_depth} levels: cut off there")
                continue
            items = value.items() if isinstance(value, dict) else enumerate(value)
            children = [(pointer + pointer_of((str(k),)), v, depth + 1) for k, v in items]
            stack.extend(reversed(children))
            continue
        if pointer == "":
            continue  # a document that is one scalar names nothing
        scalar = _scalar(value, untyped=fmt == "ini")
        if fmt == "env" or is_secret_key(pointer):
            digest = secret_digest(key, scalar)
            entries.append(Entry(path, pointer, None, fmt, digest))
        else:
            entries.append(Entry(path, pointer, scalar, fmt))
    return entries, (note[0] if note else None)


def secret_digest(key: bytes, value: Scalar) -> str:
    """The keyed hash a secret is kept as (its text form: ``30`` and ``"30"`` agree)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return hmac.new(key, text.strip().encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


# ---------------------------------------------------------------------- the index


@dataclass(slots=True)
class _Parsed:
    entries: tuple[Entry, ...] = ()
    problem: str | None = None
    keys: tuple[tuple[str, Entry], ...] = ()


@dataclass(slots=True)
class ValueIndex:
    """The values under ``roots``: built by :meth:`rebuild`, kept by :meth:`apply_changes`."""

    roots: tuple[str, ...]
    ignore: tuple[str, ...] = ()
    limits: IndexLimits = field(default_factory=IndexLimits)
    files: dict[str, tuple[Entry, ...]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    entry_count: int = 0
    truncated: bool = False
    dirs_truncated: bool = False
    builds: int = 0
    updates: int = 0
    keys_of: Callable[[Entry], Iterable[str]] | None = None
    """Lookup keys of an entry (computed in the worker thread): :meth:`find` answers by them."""
    lookup: dict[str, set[Entry]] = field(default_factory=dict)
    _file_keys: dict[str, tuple[tuple[str, Entry], ...]] = field(default_factory=dict)
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    # ------------------------------------------------------------------ reading

    def entries(self) -> Iterator[Entry]:
        for entries in self.files.values():
            yield from entries

    def find(self, keys: Iterable[str]) -> set[Entry]:
        """The entries having any of these lookup keys (see ``keys_of``)."""
        out: set[Entry] = set()
        for key in keys:
            found = self.lookup.get(key)
            if found:
                out |= found
        return out

    def digest(self, value: Scalar) -> str:
        """A fact's value hashed as the secrets are, to compare with ``secret_hash``."""
        return secret_digest(self._key, value)

    def stats(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "entries": self.entry_count,
            "skipped": len(self.problems),
            "truncated": self.truncated or self.dirs_truncated,
            "builds": self.builds,
            "updates": self.updates,
        }

    # ------------------------------------------------------------------ building

    def _walk_sync(self, tops: Sequence[str] | None = None) -> list[str]:
        found: list[str] = []
        for root in self.roots if tops is None else tops:
            for top, dirs, names in os.walk(root, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not _ignored(d, self.ignore))
                found.extend(os.path.join(top, n) for n in sorted(names) if file_format(n))
                if len(found) > self.limits.max_files:
                    return found
        return found

    def _parse_sync(self, paths: Iterable[str]) -> dict[str, _Parsed]:
        out: dict[str, _Parsed] = {}
        for path in paths:
            out[path] = self._parse_one(path)
        return out

    def _parse_one(self, path: str) -> _Parsed:
        fmt = file_format(path)
        if fmt is None:
            return _Parsed()
        look = fc.look_at(path, self.roots, self.limits.max_file_bytes)
        if not look.exists:
            return _Parsed()
        if look.problem is not None or look.is_dir:
            return _Parsed(problem=look.problem or "a directory")
        if look.too_large or look.content is None:
            return _Parsed(
                problem=f"{look.size} bytes, over the index's {self.limits.max_file_bytes}"
            )
        try:
            entries, note = parse_entries(path, look.content, fmt, self.limits, self._key)
        except fc.PARSE_ERRORS as err:  # the file is skipped
            return _Parsed(problem=_not_parsed(fmt, err))
        keys: tuple[tuple[str, Entry], ...] = ()
        if self.keys_of is not None:
            keys = tuple((k, e) for e in entries for k in self.keys_of(e))
        return _Parsed(tuple(entries), note, keys)

    def _apply(self, parsed: dict[str, _Parsed]) -> None:
        for path, result in parsed.items():
            old = self.files.pop(path, ())
            self.entry_count -= len(old)
            self.problems.pop(path, None)
            for key, entry in self._file_keys.pop(path, ()):
                bucket = self.lookup.get(key)
                if bucket is not None:
                    bucket.discard(entry)
                    if not bucket:
                        del self.lookup[key]
            if result.problem is not None:
                self.problems[path] = result.problem
            if not result.entries:
                continue
            if (
                len(self.files) >= self.limits.max_files
                or self.entry_count + len(result.entries) > self.limits.max_entries
            ):
                self.truncated = True
                self.problems[path] = "not indexed: the index is full (max_files/max_entries)"
                continue
            self.files[path] = result.entries
            self.entry_count += len(result.entries)
            self._file_keys[path] = result.keys
            for key, entry in result.keys:
                self.lookup.setdefault(key, set()).add(entry)

    def add_document(self, path: str, data: bytes, fmt: Format) -> str | None:
        """Index one document that is not a file (an HTTP answer) under the name ``path``,
        with the same limits and the same secret hashing; blocking (parsing): run it in a
        thread. Returns why nothing was indexed, or None."""
        if len(data) > self.limits.max_file_bytes:
            problem = f"{len(data)} bytes, over the index's {self.limits.max_file_bytes}"
            self._apply({path: _Parsed(problem=problem)})
            return problem
        try:
            entries, note = parse_entries(path, data, fmt, self.limits, self._key)
        except fc.PARSE_ERRORS as err:  # nothing is indexed
            entries, note = [], _not_parsed(fmt, err)
        keys: tuple[tuple[str, Entry], ...] = ()
        if self.keys_of is not None:
            keys = tuple((k, e) for e in entries for k in self.keys_of(e))
        self._apply({path: _Parsed(tuple(entries), note, keys)})
        return None if entries else note

    async def rebuild(self) -> None:
        """Walk the roots and parse every indexable file (in a worker thread)."""
        paths = await asyncio.to_thread(self._walk_sync)
        parsed = await asyncio.to_thread(self._parse_sync, paths[: self.limits.max_files + 1])
        self.files.clear()
        self.problems.clear()
        self.lookup.clear()
        self._file_keys.clear()
        self.entry_count = 0
        self.truncated = len(paths) > self.limits.max_files
        self._apply(parsed)
        self.builds += 1

    async def update(self, paths: Sequence[str]) -> None:
        """Parse these paths again (gone ones leave the index)."""
        parsed = await asyncio.to_thread(self._parse_sync, sorted(set(paths)))
        self._apply(parsed)
        self.updates += 1

    # ------------------------------------------------------------------ following

    def walk_dirs_sync(self) -> list[str]:
        """Worker thread: the directories under the roots the index looks in (ignored ones
        are not entered; links not followed), at most ``max_dirs``: the fs sensor watches
        each of them, non-recursively, with the watcher that follows its bindings."""
        found: list[str] = []
        for root in self.roots:
            for top, dirs, _ in os.walk(root, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not _ignored(d, self.ignore))
                found.append(top)
                if len(found) >= self.limits.max_dirs:
                    self.dirs_truncated = True
                    return found
        self.dirs_truncated = False
        return found

    def changes_of(self, event: FileSystemEvent) -> list[Change]:
        """Observer thread: the indexable files (``x``) and directories (``X``) an event
        touches (string tests only, no I/O)."""
        out: list[Change] = []
        for path in event_paths(event):
            rel = self._relative(path)
            if rel is None or any(_ignored(p, self.ignore) for p in rel[:-1]):
                continue
            if event.is_directory:
                if not (rel and _ignored(rel[-1], self.ignore)):
                    out.append(("X", path))
            elif rel and file_format(rel[-1]) is not None:
                out.append(("x", path))
        return out

    def _relative(self, path: str) -> list[str] | None:
        """A path's parts below the root it is in; None: in none of them."""
        for root in self.roots:
            if path == root:
                return []
            if path.startswith(root.rstrip("/") + "/"):
                return path[len(root.rstrip("/")) + 1 :].split("/")
        return None

    def _under_sync(self, dirs: Sequence[str], had: Sequence[str]) -> list[str]:
        """Worker thread: the indexable files below these directories now, and ``had``,
        those the index knew below them (gone ones leave it)."""
        return sorted({*had, *self._walk_sync([d for d in dirs if os.path.isdir(d)])})

    async def apply_changes(self, files: Iterable[str], dirs: Iterable[str]) -> None:
        """Parse these files again, and everything below these directories (a directory
        came, went, moved, or was newly watched): only what changed is looked at."""
        todo = set(files)
        below = sorted(set(dirs))
        if below:
            known = [*self.files, *self.problems]
            had = [p for p in known if any(fc.is_within(p, d) for d in below)]
            todo.update(await asyncio.to_thread(self._under_sync, below, had))
        if todo:
            await self.update(sorted(todo))
