"""The filesystem sensor (``fs``): watches bound files and checks assertions about them.

A binding names a path (a file, or a glob) under one of the configured ``roots`` and at
most one assertion: ``exists``/``absent``, ``sha256``, ``regex`` (+ ``match``), or
``key`` (a JSON pointer into a JSON, TOML or YAML file) with ``equals``. When a bound
path changes, an assertion is checked at once (``confirmed`` or ``refuted`` with the
value found); without one the sensor reports ``changed`` (truth unknown).

Nothing is missed: watches are set before files are looked at; at start every bound
path is compared with its last known hash (kept in the state dir), so a change made
while the daemon was down is seen; a kernel queue overflow, a watch that died or a
directory that was replaced triggers a rescan. Unbound file events cost one dict
lookup in the observer thread and no I/O.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, JsonValue, field_validator, model_validator

from memwarden._files import write_private
from memwarden.jsonpointer import PointerMissingError, check_pointer, json_equal, resolve_pointer
from memwarden.memory import Outcome
from memwarden.plugins import (
    PLUGIN_API,
    BaseBinding,
    BaseSensorConfig,
    BindingCandidate,
    BoundSubject,
    DryRun,
    ValidationInputError,
)
from memwarden.sensors import _fscheck as fc
from memwarden.sensors._observed import bounded
from memwarden.sensors._regex import (
    RegexTimeoutError,
    UserRegex,
    compile_user_regex,
    regex_field,
)
from memwarden.sensors._suggest import candidates, match_keys
from memwarden.sensors._tasks import task_group
from memwarden.sensors._valueindex import ValueIndex
from memwarden.sensors._watch import Change, Watcher, event_paths

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from watchdog.events import FileSystemEvent

    from memwarden.memory import RevalidationRequest, ValidationEvent
    from memwarden.plugins import SensorContext

__all__ = ["DEFAULT_IGNORE", "FsBinding", "FsConfig", "FsSensor"]

DEFAULT_IGNORE = (".git", "__pycache__", "node_modules", ".venv")
STATE_FILE = "fs-state.json"
_STATE_VERSION = 1
_CONTENT_KINDS = frozenset({"sha256", "regex", "key"})

Assertion = Literal["none", "exists", "absent", "sha256", "regex", "key"]


class FsConfig(BaseSensorConfig):
    """The ``[sensors.fs]`` table."""

    roots: list[Path] = Field(
        min_length=1,
        description="Directories the sensor may read; relative binding paths use the first.",
    )
    ignore: list[str] = Field(
        default_factory=lambda: list(DEFAULT_IGNORE),
        description="Directory or file names (or name globs) a glob binding never matches.",
    )
    debounce_ms: int = Field(default=50, ge=0, le=60_000)
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    reliability: float = Field(default=0.9, ge=0.0, le=1.0)
    state_flush_ms: int = Field(default=1000, ge=0, le=600_000)
    health_interval_s: float = Field(default=5.0, gt=0.0, le=3600.0)
    rescan_interval_s: float | None = Field(
        default=600.0,
        gt=0.0,
        description="Look at every bound path this often anyway (a safety net); None: never.",
    )
    index: bool = Field(
        default=True,
        description="Index the JSON/YAML/TOML/INI/.env values under the roots, for binding "
        "suggestions (docs/SUGGESTIONS.md); every directory under the roots (ignored ones "
        "not) is then watched.",
    )

    @field_validator("ignore")
    @classmethod
    def _valid_ignore(cls, ignore: list[str]) -> list[str]:
        for pattern in ignore:
            if fc.is_glob(pattern):
                fc.check_glob(pattern)
        return ignore

    @field_validator("roots")
    @classmethod
    def _resolve_roots(cls, roots: list[Path]) -> list[Path]:
        return [Path(os.path.realpath(os.path.expanduser(r))) for r in roots]


class FsBinding(BaseBinding):
    """The selector of an fs binding: a path and at most one assertion."""

    path: str = Field(min_length=1, max_length=4096)
    exists: bool | None = None
    absent: bool | None = None
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    regex: str | None = Field(default=None, max_length=4096)
    match: bool = True
    key: str | None = Field(default=None, max_length=4096)
    equals: JsonValue = None
    format: Literal["json", "toml", "yaml"] | None = None

    _check_regex = field_validator("regex")(regex_field)

    @field_validator("key")
    @classmethod
    def _pointer(cls, value: str | None) -> str | None:
        return None if value is None else check_pointer(value)

    @field_validator("path")
    @classmethod
    def _valid_path(cls, path: str) -> str:
        if "\0" in path:
            raise ValueError("contains a NUL character")
        if fc.is_glob(path):
            fc.check_glob(path)
        return path

    @model_validator(mode="after")
    def _one_assertion(self) -> FsBinding:
        given = [
            name
            for name in ("exists", "absent", "sha256", "regex", "key")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise ValueError(f"at most one assertion per binding, got {', '.join(given)}")
        fields = self.model_fields_set
        if "match" in fields and self.regex is None:
            raise ValueError("match: only goes with regex")
        if "equals" in fields and self.key is None:
            raise ValueError("equals: needs key (a JSON pointer such as /http/timeout)")
        if "format" in fields and self.key is None:
            raise ValueError("format: only goes with key")
        if fc.is_glob(self.path) and self.assertion in _CONTENT_KINDS:
            raise ValueError(
                f"{self.assertion}: needs one file, and {self.path!r} is a glob "
                "(a glob takes exists, absent or no assertion)"
            )
        return self

    @property
    def assertion(self) -> Assertion:
        if self.exists is not None:
            return "exists" if self.exists else "absent"
        if self.absent is not None:
            return "absent" if self.absent else "exists"
        if self.sha256 is not None:
            return "sha256"
        if self.regex is not None:
            return "regex"
        if self.key is not None:
            return "key"
        return "none"

    def subject_of(self) -> str | None:
        return self.path


# ---------------------------------------------------------------------- bookkeeping


@dataclass(frozen=True, slots=True)
class _Target:
    """One thing to look at: a normalized absolute path, or a glob."""

    key: str
    path: str
    glob: fc.GlobSpec | None = None


@dataclass(frozen=True, slots=True)
class _Bound:
    """One binding the sensor owns, resolved to its target."""

    id: str
    block_id: str
    subject: str
    selector: FsBinding
    target: _Target
    pattern: UserRegex | None = None


@dataclass(frozen=True, slots=True)
class _Lookup:
    """What the observer thread matches events against (replaced whole, never mutated)."""

    files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    dirs: frozenset[str] = frozenset()
    globs: tuple[tuple[fc.GlobSpec, str], ...] = ()


Mode = Literal["old", "new", "force"]


def binding_id(block_id: str, subject: str, selector: dict[str, Any]) -> str:
    raw = json.dumps([block_id, subject, selector], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class FsSensor:
    """Watches bound files with watchdog (inotify on Linux); see the module docstring."""

    quick_check: ClassVar[bool] = True  # answers in milliseconds: read-through may wait

    api_version: ClassVar[int] = PLUGIN_API
    kind: ClassVar[str] = "fs"
    Config: ClassVar[type[BaseSensorConfig]] = FsConfig
    Binding: ClassVar[type[BaseBinding]] = FsBinding

    def __init__(self, config: FsConfig) -> None:
        self.config = config
        self.roots: tuple[str, ...] = tuple(str(r) for r in config.roots)
        self._ctx: SensorContext[FsBinding] | None = None
        self._watcher: Watcher | None = None
        self._bound: dict[str, _Bound] = {}
        self._by_key: dict[str, list[_Bound]] = {}
        self._targets: dict[str, _Target] = {}
        self._invalid: dict[str, str] = {}  # binding id -> why it was refused (reported once)
        self._fp: dict[str, str] = {}  # last known fingerprint per target key
        self._seen: set[str] = set()  # binding ids judged or baselined at least once
        self._lookup = _Lookup()
        self._lock = asyncio.Lock()
        self._dirty = asyncio.Event()
        self._state_path: Path | None = None
        self._reconciled = False
        self.rescans = 0
        self.index: ValueIndex | None = (
            ValueIndex(self.roots, tuple(config.ignore), keys_of=match_keys)
            if config.index
            else None
        )
        # What the watcher saw for the index, taken by its own task (so a slow parse never
        # holds up a binding's check): files, directories, and whether events were lost.
        self._index_files: set[str] = set()
        self._index_dirs: set[str] = set()
        self._index_rebuild = False
        self._index_wake = asyncio.Event()
        self._index_dir_list: list[str] | None = None  # the last walk of the index's dirs

    # ------------------------------------------------------------------ contract

    def describe(self) -> dict[str, Any]:
        """What a binding may name (the roots) and examples an agent can adapt."""
        root = Path(self.roots[0])
        known = next(
            (n for n in ("README.md", "pyproject.toml", "package.json") if (root / n).is_file()),
            "README.md",
        )
        return {
            "summary": "A file's existence, hash, a regex over it, or a value at a JSON pointer "
            "in JSON/TOML/YAML. Relative paths start at the first root.",
            "binds": {"roots": list(self.roots), "ignore": list(self.config.ignore)},
            "keys": {
                "path": "a file under a root (relative or absolute; a glob for many)",
                "exists / absent / sha256 / regex (+ match) / key (+ equals, format)": (
                    "at most one assertion; none: any change of the file refutes"
                ),
            },
            "examples": [
                {"path": known, "exists": True},
                {"path": known, "regex": "memwarden"},
                {"path": "config/app.yaml", "key": "/http/timeout", "equals": 30},
            ],
        }

    async def setup(self, ctx: SensorContext[FsBinding]) -> None:
        self._ctx = ctx
        for root in self.roots:
            if not await asyncio.to_thread(os.path.isdir, root):
                raise FileNotFoundError(f"fs: root {root!r} is not a directory")
        self._state_path = ctx.state_dir / STATE_FILE
        self._load_state()

    async def run(self, ctx: SensorContext[FsBinding]) -> None:
        self._ctx = ctx
        # A (re)start looks at every binding again: whatever happened while nothing was
        # watching is found by comparing with the last known hashes.
        self._bound = {}
        watcher = Watcher(self._accept, debounce_ms=self.config.debounce_ms, name=ctx.name)
        try:
            async with watcher:
                self._watcher = watcher
                await self._reconcile(await ctx.wait_bindings_changed())
                ctx.ready()
                async with task_group() as tg:
                    tg.create_task(self._follow_bindings(ctx), name=f"sensor[{ctx.name}].bindings")
                    tg.create_task(
                        self._follow_changes(watcher), name=f"sensor[{ctx.name}].changes"
                    )
                    tg.create_task(self._flush_state(), name=f"sensor[{ctx.name}].state")
                    if self.index is not None:
                        tg.create_task(
                            self._follow_index(ctx, self.index), name=f"sensor[{ctx.name}].index"
                        )
        finally:
            self._watcher = None
            self._lookup = _Lookup()
            self._save_state()

    async def revalidate(
        self, request: RevalidationRequest, ctx: SensorContext[FsBinding]
    ) -> ValidationEvent | None:
        try:
            selector = ctx.parse_binding(request.binding)
            target = self._target_of(selector)
        except (ValidationInputError, ValueError) as err:
            return ctx.event(
                request.subject, Outcome.ERROR, message=str(err), block_id=request.block_id
            )
        bid = binding_id(request.block_id, request.binding.subject, request.binding.selector)
        bound = self._bound.get(bid) or self._make_bound(
            bid, request.block_id, request.binding.subject, selector, target
        )
        answer: ValidationEvent | None = None
        async with self._lock:
            tracked = bid in self._bound
            bounds: list[tuple[_Bound, Mode]] = [(bound, "force")]
            if tracked:
                bounds += [(b, "old") for b in self._by_key.get(target.key, []) if b.id != bid]
            old = self._fp.get(target.key) if tracked else None
            results = await asyncio.to_thread(self._check_sync, [(target.key, old, bounds)])
            for key, fingerprint, verdicts in results:
                if tracked:
                    self._remember(key, fingerprint, [b.id for b, _ in bounds])
                for b, verdict in verdicts:
                    event = self._event(b, verdict)
                    if b.id == bid:
                        answer = event
                    else:
                        await ctx.emit(event)
        return answer

    async def binding_candidates(self, text: str, *, limit: int) -> list[BindingCandidate]:
        """Values in the roots' files that the text names (:mod:`._suggest`); none
        without the index (``index = false``) or before it is built."""
        if self.index is None:
            return []
        found = candidates(text, self.index, limit=limit)
        return [
            BindingCandidate(
                c.selector(self.roots[0]),
                c.confidence,
                c.why,
                rank=c.rank,
                agrees=c.agrees,
                secret=c.entry.secret,
                found="the file says",
            )
            for c in found
        ]

    async def dry_run(self, selector: FsBinding) -> DryRun:
        """Check a binding once now, as a revalidation would; nothing is kept or emitted.

        A path outside the roots is an ``error``.
        """
        try:
            target = self._target_of(selector)
        except ValueError as err:
            return DryRun("error", message=str(err))
        bound = self._make_bound("dry-run", "", selector.path, selector, target)
        results = await asyncio.to_thread(
            self._check_sync, [(target.key, None, [(bound, "force")])]
        )
        verdict = results[0][2][0][1]
        return DryRun(str(verdict.outcome), verdict.observed, verdict.message)

    async def _follow_index(self, ctx: SensorContext[FsBinding], index: ValueIndex) -> None:
        """Keep the value index current from what the sensor's watcher hands over (its
        directories are watched since the first replan); its failure costs suggestions,
        never the checks."""
        try:
            await index.rebuild()
            while True:
                await self._index_wake.wait()
                self._index_wake.clear()
                files, self._index_files = self._index_files, set()
                dirs, self._index_dirs = self._index_dirs, set()
                rebuild, self._index_rebuild = self._index_rebuild, False
                if rebuild:
                    await index.rebuild()  # events were lost: walk everything again
                else:
                    await index.apply_changes(files, dirs)
        except Exception as err:  # noqa: BLE001 - the index is a helper: log, keep checking
            ctx.log.warning("fs_index_stopped", error=repr(err))

    def _to_index(
        self, files: Iterable[str], dirs: Iterable[str], *, rebuild: bool = False
    ) -> None:
        if self.index is None:
            return
        self._index_files.update(files)
        self._index_dirs.update(dirs)
        self._index_rebuild = self._index_rebuild or rebuild
        if self._index_files or self._index_dirs or self._index_rebuild:
            self._index_wake.set()

    async def teardown(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await watcher.stop()
        self._save_state()

    def validate_binding(self, selector: FsBinding) -> None:
        """Refuse, when a block is added, a path outside the allowed roots."""
        self._target_of(selector)

    # ------------------------------------------------------------------ resolving

    def _target_of(self, selector: FsBinding) -> _Target:
        raw = selector.path
        path = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(self.roots[0], raw))
        roots = ", ".join(self.roots)
        if not any(fc.is_within(path, r) for r in self.roots):
            raise ValueError(f"path {raw!r} is outside the allowed roots ({roots})")
        if fc.is_glob(path):
            fc.check_glob(path)
            prefix = fc.glob_prefix(path)
            if not any(fc.is_within(prefix, r) for r in self.roots):
                prefix = next(r for r in self.roots if fc.is_within(path, r))
            spec = fc.GlobSpec(path, prefix, tuple(self.config.ignore))
            return _Target("glob:" + path, path, spec)
        if os.path.lexists(path):
            real = os.path.realpath(path)
            if not any(fc.is_within(real, r) for r in self.roots):
                raise ValueError(
                    f"path {raw!r} resolves to {real!r} (a symlink), "
                    f"outside the allowed roots ({roots})"
                )
        return _Target(path, path)

    def _make_bound(
        self, bid: str, block_id: str, subject: str, selector: FsBinding, target: _Target
    ) -> _Bound:
        pattern = compile_user_regex(selector.regex) if selector.regex is not None else None
        return _Bound(bid, block_id, subject or selector.path, selector, target, pattern)

    # ------------------------------------------------------------------ bindings

    async def _follow_bindings(self, ctx: SensorContext[FsBinding]) -> None:
        while True:
            await self._reconcile(await ctx.wait_bindings_changed())

    async def _reconcile(self, bindings: Sequence[BoundSubject[FsBinding]]) -> None:
        """Take the new bindings: watch what they need, then judge the new ones."""
        ctx = self._require_ctx()
        bound: dict[str, _Bound] = {}
        refused: list[tuple[str, BoundSubject[FsBinding], str]] = []
        for bs in bindings:
            bid = binding_id(bs.block_id, bs.subject, bs.binding.selector)
            if bid in self._bound:
                bound[bid] = self._bound[bid]
                continue
            try:
                target = self._target_of(bs.selector)
            except ValueError as err:
                refused.append((bid, bs, str(err)))
                continue
            bound[bid] = self._make_bound(bid, bs.block_id, bs.subject, bs.selector, target)
        added = [b for bid, b in bound.items() if bid not in self._bound]
        self._bound = bound
        by_key: dict[str, list[_Bound]] = defaultdict(list)
        for b in bound.values():
            by_key[b.target.key].append(b)
        self._by_key = dict(by_key)
        self._targets = {k: bs[0].target for k, bs in by_key.items()}
        touched = await self._replan()
        keys = {b.target.key for b in added} | self._keys_under(touched)
        await self._check_and_emit(keys, new={b.id for b in added})
        for bid, bs, message in refused:
            if self._invalid.get(bid) != message:
                self._invalid[bid] = message
                ctx.log.warning("fs_binding_refused", block_id=bs.block_id, error=message)
                await ctx.emit(
                    ctx.event(bs.subject, Outcome.ERROR, message=message, block_id=bs.block_id)
                )
        if not self._reconciled:
            self._reconciled = True
            self._dirty.set()  # prune the state file to what is bound now

    # ------------------------------------------------------------------ watching

    def _accept(self, event: FileSystemEvent) -> list[Change]:
        """Observer thread: which targets this event touches (dict/set lookups only)."""
        lookup = self._lookup
        out: list[Change] = []
        for path in event_paths(event):
            keys = lookup.files.get(path)
            if keys:
                out.extend(("k", k) for k in keys)
            if event.is_directory and path in lookup.dirs:
                out.append(("d", path))
            for spec, key in lookup.globs:
                if fc.is_within(path, spec.prefix) and (event.is_directory or spec.matches(path)):
                    out.append(("k", key))
        if self.index is not None:
            out.extend(self.index.changes_of(event))
        return out

    async def _follow_changes(self, watcher: Watcher) -> None:
        ctx = self._require_ctx()
        loop = asyncio.get_running_loop()
        every = self.config.rescan_interval_s
        next_rescan = loop.time() + every if every is not None else None
        while True:
            batch = await watcher.next_batch(timeout_s=self.config.health_interval_s)
            if not watcher.alive():
                raise RuntimeError("the watchdog observer thread stopped")
            keys = {v for kind, v in batch.changes if kind == "k"}
            dirs = {v for kind, v in batch.changes if kind == "d"}
            index_dirs = {v for kind, v in batch.changes if kind == "X"}
            index_files = {v for kind, v in batch.changes if kind == "x"}
            due = next_rescan is not None and loop.time() >= next_rescan
            if batch.overflow or due:
                if batch.overflow:
                    self.rescans += 1
                    ctx.log.warning("fs_events_lost_rescanning", targets=len(self._targets))
                if every is not None:
                    next_rescan = loop.time() + every
                touched = await self._replan()
                keys = set(self._targets)
                self._to_index(index_files, index_dirs | touched, rebuild=batch.overflow)
            elif dirs or index_dirs or not batch:
                # A directory came or went (or it is time for a health check): watch
                # what exists now and look again below whatever changed. A health check
                # alone reuses the index's last list of directories (no walk of the tree).
                touched = await self._replan(walk=bool(dirs or index_dirs))
                keys |= self._keys_under(dirs | touched)
                # A newly watched directory may have got files before its watch: the
                # index looks below it (and below every directory event) once more.
                self._to_index(index_files, index_dirs | touched)
            else:
                self._to_index(index_files, ())
            if keys:
                await self._check_and_emit(keys)

    async def _replan(self, *, walk: bool = True) -> set[str]:
        """Watch the directories the targets (and the index) need; returns those
        (re)watched or dropped. ``walk``: list the index's directories afresh."""
        watcher = self._watcher
        if watcher is None:
            return set()
        targets = list(self._targets.values())
        lookup, want = await asyncio.to_thread(self._plan_sync, targets, walk=walk)
        self._lookup = lookup
        return await asyncio.to_thread(self._apply_plan_sync, watcher, want)

    def _plan_sync(
        self, targets: Sequence[_Target], *, walk: bool = True
    ) -> tuple[_Lookup, dict[str, bool]]:
        files: dict[str, list[str]] = defaultdict(list)
        dirs: set[str] = set()
        want: dict[str, bool] = {}
        if self.index is not None:
            if walk or self._index_dir_list is None:
                self._index_dir_list = self.index.walk_dirs_sync()
            # Every directory the index looks in, each watched alone (not one recursive
            # watch of the root: watchdog's recursive watches warn, and may go deaf below,
            # when a directory is moved away and made again; ignored directories such as
            # node_modules are then not watched at all).
            want = dict.fromkeys(self._index_dir_list, False)
        globs: list[tuple[fc.GlobSpec, str]] = []
        isdir: dict[str, bool] = {}

        def chain(path: str, *, leaf_dir: bool) -> None:
            root = max((r for r in self.roots if fc.is_within(path, r)), key=len, default=None)
            if root is None:
                return
            parts = path[len(root) :].strip("/").split("/") if path != root else []
            if not leaf_dir and parts:
                parts = parts[:-1]
            current = root
            chain_dirs = [root]
            for part in parts:
                current = os.path.join(current, part)
                chain_dirs.append(current)
            for d in chain_dirs:
                dirs.add(d)
                if d not in isdir:
                    isdir[d] = os.path.isdir(d) and not os.path.islink(d)
                if not isdir[d]:
                    break
                recursive = leaf_dir and d == chain_dirs[-1]
                want[d] = want.get(d, False) or recursive

        for t in targets:
            if t.glob is not None:
                globs.append((t.glob, t.key))
                chain(t.glob.prefix, leaf_dir=True)
                continue
            files[t.path].append(t.key)
            chain(t.path, leaf_dir=False)
            real = os.path.realpath(t.path)
            if real != t.path and any(fc.is_within(real, r) for r in self.roots):
                files[real].append(t.key)  # a symlink inside the roots: watch its target too
                chain(real, leaf_dir=False)
        recursive = [d for d, rec in want.items() if rec]
        if recursive:
            want = {
                d: rec
                for d, rec in want.items()
                if rec or not any(d != r and fc.is_within(d, r) for r in recursive)
            }
        lookup = _Lookup({p: tuple(ks) for p, ks in files.items()}, frozenset(dirs), tuple(globs))
        return lookup, want

    @staticmethod
    def _apply_plan_sync(watcher: Watcher, want: dict[str, bool]) -> set[str]:
        touched: set[str] = set()
        for path, recursive in watcher.watched.items():
            if want.get(path) != recursive:
                watcher.unschedule(path)
                touched.add(path)
        alive = watcher.alive_watches()
        for path, recursive in sorted(want.items()):
            if watcher.schedule(path, recursive=recursive, alive=alive) != "kept":
                touched.add(path)
        return touched

    def _keys_under(self, dirs: Iterable[str]) -> set[str]:
        dirs = set(dirs)
        if not dirs:
            return set()
        out = set()
        for key, t in self._targets.items():
            probe = t.glob.prefix if t.glob is not None else t.path
            for d in dirs:
                if fc.is_within(probe, d) or (t.glob is not None and fc.is_within(d, probe)):
                    out.add(key)
                    break
        for path, keys in self._lookup.files.items():  # symlink targets
            if any(fc.is_within(path, d) for d in dirs):
                out.update(keys)
        return out

    # ------------------------------------------------------------------ checking

    async def _check_and_emit(
        self, keys: set[str], *, new: set[str] | frozenset[str] = frozenset()
    ) -> None:
        ctx = self._require_ctx()
        keys = {k for k in keys if k in self._by_key}
        if not keys:
            return
        async with self._lock:
            work: list[tuple[str, str | None, list[tuple[_Bound, Mode]]]] = [
                (
                    key,
                    self._fp.get(key),
                    [
                        (b, "new" if b.id in new or b.id not in self._seen else "old")
                        for b in self._by_key[key]
                    ],
                )
                for key in sorted(keys)
            ]
            results = await asyncio.to_thread(self._check_sync, work)
            events: list[ValidationEvent] = []
            for key, fingerprint, verdicts in results:
                self._remember(key, fingerprint, [b.id for b in self._by_key.get(key, [])])
                events.extend(self._event(b, v) for b, v in verdicts)
        for event in events:
            await ctx.emit(event)

    def _remember(self, key: str, fingerprint: str, ids: Iterable[str]) -> None:
        if self._fp.get(key) != fingerprint:
            self._fp[key] = fingerprint
            self._dirty.set()
        before = len(self._seen)
        self._seen.update(ids)
        if len(self._seen) != before:
            self._dirty.set()

    def _check_sync(
        self, work: Sequence[tuple[str, str | None, Sequence[tuple[_Bound, Mode]]]]
    ) -> list[tuple[str, str, list[tuple[_Bound, fc.Verdict]]]]:
        """Worker thread: look at each target once, judge the bindings that need it."""
        out = []
        for key, old, bounds in work:
            target = bounds[0][0].target
            if target.glob is not None:
                look = fc.look_at_glob(target.glob, self.roots, self.config.max_file_bytes)
            else:
                look = fc.look_at(target.path, self.roots, self.config.max_file_bytes)
            changed = old is not None and look.fingerprint != old
            verdicts = []
            for b, mode in bounds:
                judge = (
                    changed
                    or mode == "force"
                    or (
                        mode == "new"
                        and (b.selector.assertion != "none" or look.problem is not None)
                    )
                )
                if judge:
                    try:
                        verdict = self._judge(b, look, changed=changed)
                    except Exception as err:  # noqa: BLE001 - one odd file must not stop the sensor
                        verdict = fc.Verdict("error", message=f"check failed: {err!r}"[:1000])
                    verdicts.append((b, verdict))
            out.append((key, look.fingerprint, verdicts))
        return out

    def _judge(self, b: _Bound, look: fc.Look, *, changed: bool) -> fc.Verdict:  # noqa: PLR0911 - a decision table
        sel = b.selector
        if look.problem is not None:
            return fc.Verdict("error", message=look.problem)
        kind = sel.assertion
        base = self.roots[0]
        if kind == "none":
            if changed:
                return fc.Verdict("changed", fc.observed_of(look, base=base), "the file changed")
            return fc.Verdict(
                "error",
                fc.observed_of(look, base=base),
                "nothing to check: the binding has no assertion and the file has not "
                "changed since it was last seen (add exists, sha256, regex or key/equals)",
            )
        if kind in ("exists", "absent"):
            found = "present" if look.exists else fc.MISSING
            ok = look.exists == (kind == "exists")
            observed: Any = found
            if look.matches:
                observed = fc.observed_of(look, base=base)
            message = "" if ok else f"expected {'present' if kind == 'exists' else 'absent'}"
            return fc.Verdict("confirmed" if ok else "refuted", observed, message)
        if not look.exists:
            return fc.Verdict("refuted", fc.MISSING, f"{sel.path}: file missing")
        if look.is_dir:
            return fc.Verdict("error", "directory", f"{sel.path} is a directory")
        if look.too_large or look.content is None:
            return fc.Verdict(
                "error",
                {"bytes": look.size},
                f"file too large: {sel.path} has {look.size} bytes "
                f"(max_file_bytes is {self.config.max_file_bytes})",
            )
        if kind == "sha256":
            want = (sel.sha256 or "").lower()
            ok = look.fingerprint == want
            return fc.Verdict(
                "confirmed" if ok else "refuted",
                look.fingerprint,
                "" if ok else f"sha256 is {look.fingerprint}, expected {want}",
            )
        if kind == "regex":
            return self._judge_regex(b, look.content)
        return self._judge_key(sel, look.content, b.target.path)

    @staticmethod
    def _judge_regex(b: _Bound, content: bytes) -> fc.Verdict:
        pattern = b.pattern
        if pattern is None:  # made with the binding when regex is set
            return fc.Verdict("error", message="the binding's regex was not compiled")
        try:
            found = pattern.search(content)
        except RegexTimeoutError as err:
            return fc.Verdict("error", message=str(err))
        ok = (found is not None) == b.selector.match
        observed = bounded(found) if found is not None else None
        if ok:
            return fc.Verdict("confirmed", observed)
        if b.selector.match:
            return fc.Verdict("refuted", observed, f"no match for /{b.selector.regex}/")
        return fc.Verdict("refuted", observed, f"/{b.selector.regex}/ matches {observed!r}")

    @staticmethod
    def _judge_key(sel: FsBinding, content: bytes, path: str) -> fc.Verdict:
        fmt = fc.format_of(path, sel.format)
        if fmt is None:
            return fc.Verdict(
                "error",
                message=f"cannot tell the format of {sel.path}: set format to json, toml or yaml",
            )
        try:
            doc = fc.parse_structured(content, fmt)
        except fc.PARSE_ERRORS as err:  # the check could not run
            return fc.Verdict("error", message=f"{sel.path}: not valid {fmt}: {err}"[:1000])
        pointer = sel.key or ""
        try:
            value = fc.to_json(resolve_pointer(doc, pointer))
        except PointerMissingError:
            return fc.Verdict("refuted", fc.MISSING, f"{sel.path}: no value at {pointer}")
        except fc.TooBigError as err:
            return fc.Verdict("error", message=f"{sel.path}: {pointer}: {err}")
        observed = bounded(value)
        if "equals" not in sel.model_fields_set or json_equal(value, sel.equals):
            return fc.Verdict("confirmed", observed)
        return fc.Verdict(
            "refuted",
            observed,
            f"{sel.path}: {pointer} is {fc.shorten(value)}, expected {fc.shorten(sel.equals)}",
        )

    def _event(self, b: _Bound, verdict: fc.Verdict) -> ValidationEvent:
        ctx = self._require_ctx()
        return ctx.event(
            b.subject,
            verdict.outcome,
            observed=verdict.observed,
            message=verdict.message,
            reliability=self.config.reliability,
            block_id=b.block_id,
        )

    # ------------------------------------------------------------------ state

    def _load_state(self) -> None:
        path = self._state_path
        if path is None:
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            self._require_ctx().log.warning("fs_state_unreadable", path=str(path), error=str(err))
            return
        if not isinstance(data, dict) or data.get("version") != _STATE_VERSION:
            return
        hashes = data.get("hashes")
        seen = data.get("seen")
        if isinstance(hashes, dict):
            self._fp = {str(k): str(v) for k, v in hashes.items()}
        if isinstance(seen, list):
            self._seen = {str(s) for s in seen}

    def _state_snapshot(self) -> dict[str, Any] | None:
        """What to persist now (None before the first reconcile: it would prune too much)."""
        self._dirty.clear()
        if self._state_path is None or not self._reconciled:
            return None
        keys = set(self._targets)
        ids = set(self._bound)
        return {
            "version": _STATE_VERSION,
            "hashes": {k: v for k, v in sorted(self._fp.items()) if k in keys},
            "seen": sorted(self._seen & ids),
        }

    def _write_state(self, data: dict[str, Any]) -> None:
        path = self._state_path
        if path is None:
            return
        try:  # 0600 whatever the umask, atomically; not fsync-ed: a crash only re-reports
            write_private(path, json.dumps(data, separators=(",", ":")).encode(), durable=False)
        except OSError as err:
            self._dirty.set()
            if self._ctx is not None:
                self._ctx.log.warning("fs_state_not_saved", path=str(path), error=str(err))

    def _save_state(self) -> None:
        if self._dirty.is_set():
            data = self._state_snapshot()
            if data is not None:
                self._write_state(data)

    async def _flush_state(self) -> None:
        """Persist hashes a little after they change (and always when the run ends).

        Saving later than the event rather than before means a crash re-reports a change
        on the next start instead of losing it.
        """
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.config.state_flush_ms / 1000)  # batch the writes
            async with self._lock:
                data = self._state_snapshot()
            if data is not None:
                await asyncio.to_thread(self._write_state, data)

    def _require_ctx(self) -> SensorContext[FsBinding]:
        if self._ctx is None:
            raise RuntimeError("fs sensor used before setup()")
        return self._ctx
