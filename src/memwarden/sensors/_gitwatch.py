"""Seeing a repository's HEAD, refs and index change at once, through the fs watcher.

The git sensor polls; this makes a branch switch, a commit, a new tag, a fetch or a
``git add`` reach it within about a second instead of at the next interval. For every
bound work tree the git directory (``HEAD``, ``index``) and the common directory
(``packed-refs``, the ``refs/`` tree) are watched with
:class:`~memwarden.sensors._watch.Watcher`; what changed there names the repositories
whose bindings are then checked at once (``PollingSensor.check_soon``). A linked work tree
(``.git`` is a file saying ``gitdir: ...``) is followed to its git and common
directories.

Edits in the work tree itself (what ``clean`` looks at) are not watched — that would mean
watching whole trees — polling sees them. Only git directories that resolve inside the
sensor's roots are watched; the others are polled only. Nothing here runs git or reads
more than the small ``.git`` and ``commondir`` files.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

from memwarden.sensors._watch import Change, Watcher, event_paths

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import TracebackType

    from watchdog.events import FileSystemEvent

__all__ = ["GitDirs", "RepoWatch", "git_dirs"]

#: Files of the git directory whose change can change an answer (a switch rewrites HEAD,
#: ``git add``/``commit`` the index); refs are watched as a tree.
_GITDIR_FILES = ("HEAD", "index")
_POINTER_BYTES = 4096


@dataclass(frozen=True, slots=True)
class GitDirs:
    """Where a work tree's git data lives (both resolved)."""

    gitdir: str  # HEAD and index
    common: str  # refs/ and packed-refs (the main repository's, for a linked work tree)


def _pointed(base: Path, text: str) -> Path:
    target = Path(text.strip())
    return target if target.is_absolute() else base / target


def git_dirs(work_tree: Path) -> GitDirs | None:
    """The git and common directories of ``work_tree``, or None if it has none."""
    dot = work_tree / ".git"
    try:
        if dot.is_dir():
            gitdir = dot
        elif dot.is_file():
            with dot.open("r", errors="replace") as f:
                text = f.read(_POINTER_BYTES)
            if not text.startswith("gitdir:"):
                return None
            gitdir = _pointed(work_tree, text.removeprefix("gitdir:"))
        else:
            return None
        common = gitdir
        pointer = gitdir / "commondir"
        if pointer.is_file():
            with pointer.open("r", errors="replace") as f:
                common = _pointed(gitdir, f.read(_POINTER_BYTES))
        return GitDirs(os.path.realpath(gitdir), os.path.realpath(common))
    except OSError:
        return None


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@dataclass(frozen=True, slots=True)
class _Plan:
    files: Mapping[str, frozenset[str]]  # a watched file's path -> the subjects it concerns
    trees: tuple[tuple[str, frozenset[str]], ...]  # refs/ prefix -> subjects
    dirs: Mapping[str, bool]  # directory -> recursive


class RepoWatch:
    """Watches the git data of bound work trees; :meth:`next_changes` names the subjects
    (the bindings' ``repo``) to check again. An async context manager (the observer
    thread stops when it is left)."""

    def __init__(self, roots: Sequence[Path], *, debounce_ms: int, name: str) -> None:
        self.roots = [os.path.realpath(r) for r in roots]
        self._watcher = Watcher(self._accept, debounce_ms=debounce_ms, name=name)
        self._plan = _Plan({}, (), {})
        self._repos: dict[str, Path] = {}
        self._watching = 0

    async def __aenter__(self) -> Self:
        self._watcher.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._watcher.stop()

    @property
    def watching(self) -> int:
        """How many of the work trees are watched, their watches in place (the rest are
        only polled)."""
        return self._watching

    def alive(self) -> bool:
        return self._watcher.alive()

    async def plan(self, repos: Mapping[str, Path] | None = None) -> None:
        """Watch the git data of ``repos`` (subject -> resolved work tree); without an
        argument, plan the last ones again (a ``.git`` that appeared or was replaced)."""
        if repos is not None:
            self._repos = dict(repos)
        plan = await asyncio.to_thread(self._plan_sync, dict(self._repos))
        self._plan = plan  # before the watches: an event from a new watch finds its repo
        await asyncio.to_thread(self._apply_sync, plan.dirs)
        self._watching = len({s for subjects in plan.files.values() for s in subjects})

    def _plan_sync(self, repos: Mapping[str, Path]) -> _Plan:
        files: dict[str, set[str]] = defaultdict(set)
        trees: dict[str, set[str]] = defaultdict(set)
        dirs: dict[str, bool] = {}
        for subject, work_tree in repos.items():
            found = git_dirs(work_tree)
            if found is None or not all(
                _within(d, self.roots) for d in (found.gitdir, found.common)
            ):
                continue
            for name in _GITDIR_FILES:
                files[f"{found.gitdir}/{name}"].add(subject)
            files[f"{found.common}/packed-refs"].add(subject)
            refs = f"{found.common}/refs"
            trees[refs].add(subject)
            dirs.setdefault(found.gitdir, False)
            dirs.setdefault(found.common, False)
            dirs[refs] = True
        return _Plan(
            {p: frozenset(s) for p, s in files.items()},
            tuple((p, frozenset(s)) for p, s in trees.items()),
            dirs,
        )

    def _apply_sync(self, want: Mapping[str, bool]) -> None:
        watcher = self._watcher
        for path, recursive in watcher.watched.items():
            if want.get(path) != recursive:
                watcher.unschedule(path)
        alive = watcher.alive_watches()
        for path, recursive in sorted(want.items()):
            watcher.schedule(path, recursive=recursive, alive=alive)

    def _accept(self, event: FileSystemEvent) -> list[Change]:
        """Observer thread: the subjects an event concerns (dict lookups, string tests)."""
        plan = self._plan
        out: list[Change] = []
        for path in event_paths(event):
            if path.endswith(".lock"):
                continue  # git writes X.lock, then renames it to X: the rename counts
            out.extend(("repo", s) for s in plan.files.get(path, ()))
            for prefix, subjects in plan.trees:
                if path.startswith(prefix + "/"):
                    out.extend(("repo", s) for s in subjects)
        return out

    async def next_changes(self, timeout_s: float) -> set[str] | None:
        """The subjects whose git data changed (empty after ``timeout_s`` of quiet);
        None when events were lost (check every repository)."""
        batch = await self._watcher.next_batch(timeout_s=timeout_s)
        if batch.overflow:
            return None
        return {subject for kind, subject in batch.changes if kind == "repo"}
