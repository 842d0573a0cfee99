"""The ``git`` sensor: facts about a repository's work tree, checked by polling.

A binding names a repository (a work tree inside one of the configured ``roots``) and one
assertion about it::

    {"sensor": "git", "repo": "shop", "branch": "main"}
    {"sensor": "git", "repo": "shop", "clean": true}
    {"sensor": "git", "repo": "shop", "head_contains": "4f2a9c1"}
    {"sensor": "git", "repo": "shop", "tag_at_head": "v1.4.0"}
    {"sensor": "git", "repo": "shop", "ahead_of": "origin/main", "by": 2}
    {"sensor": "git", "repo": "shop", "behind": "origin/main"}

It runs on :class:`memwarden.plugins.PollingSensor`: every ``interval`` (and on a
revalidation request) it runs ``git`` and emits only when what it saw changed. With
``watch`` (the default) the repository's ``HEAD``, index and refs are also watched
through the fs watcher (``sensors/_gitwatch.py``): a switch, a commit or a new tag is
checked within about a second, polling staying the safety net. Nothing is fetched:
``ahead_of``/``behind`` compare with the ref as the repository has it.

``git`` is run with an argument vector (never a shell), an explicit environment (no
inherited ``GIT_*``, no pager, no optional locks, a ceiling directory so it never looks
above the repository), ``core.fsmonitor`` and hooks off, a deadline and capped output. A
ref or commit in a binding is checked before it reaches ``git``: it can never be read as
an option. A repository that resolves (symlinks followed) outside the roots is refused
when added and answered with ``error`` if it moves there later; a repository that is gone
is an ``error``, never a refutation.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from pydantic import Field, field_validator, model_validator

from memwarden.plugins import Observation, PollingBinding, PollingConfig, PollingSensor
from memwarden.sensors._gitwatch import RepoWatch
from memwarden.sensors._proc import run_command
from memwarden.sensors._tasks import task_group

if TYPE_CHECKING:
    from memwarden.plugins import BoundSubject, SensorContext

__all__ = ["GitBinding", "GitConfig", "GitSensor"]

#: A ref name as a binding may give it: git's own rules (``git check-ref-format``) and
#: never something git could read as an option.
_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*@\{)(?!.*//)[A-Za-z0-9._/+-]{1,200}(?<![./])$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{4,64}$")
_ASSERTIONS = ("branch", "clean", "head_contains", "tag_at_head", "ahead_of", "behind")
#: Without events for this long the watches are planned again (a ``.git`` that appeared
#: or was replaced) and the observer thread is checked.
_WATCH_HEALTH_S: Final = 30.0


def _check_ref(value: str | None) -> str | None:
    if value is not None and (not _REF.match(value) or value.endswith(".lock")):
        raise ValueError(
            f"{value!r} is not a ref name (letters, digits, . _ / + -; not starting with '-')"
        )
    return value


class GitConfig(PollingConfig):
    """``[sensors.git]``: where repositories may be, and how git is run."""

    roots: list[Path] = Field(
        min_length=1,
        description="Repositories must lie inside these (relative: to the config file's "
        "directory, like fs roots; resolved once).",
    )
    git: str = Field(default="git", description="The git executable (a name on PATH or a path).")
    command_timeout: float = Field(default=10.0, gt=0, le=300, description="Seconds per git run.")
    max_output_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)
    env: dict[str, str] = Field(default_factory=dict, description="Added to git's environment.")
    watch: bool = Field(
        default=True,
        description="Check at once when HEAD, the index or a ref changes (fs watcher).",
    )
    debounce_ms: int = Field(default=50, ge=0, le=10_000, description="Coalesce git's writes.")

    @field_validator("roots")
    @classmethod
    def _resolve_roots(cls, roots: list[Path]) -> list[Path]:
        return [Path(os.path.realpath(r.expanduser())) for r in roots]


class GitBinding(PollingBinding):
    """A repository and exactly one assertion about it (strict, as every binding)."""

    repo: str = Field(description="The work tree: relative to the first root, or absolute.")
    branch: str | None = None
    clean: bool | None = None
    head_contains: str | None = None
    tag_at_head: str | None = None
    ahead_of: str | None = None
    behind: str | None = None
    by: int | None = Field(default=None, ge=0, le=1_000_000)

    @field_validator("branch", "tag_at_head", "ahead_of", "behind")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        return _check_ref(value)

    @field_validator("head_contains")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and not _COMMIT.match(value):
            raise ValueError(f"{value!r} is not a commit id (4 to 64 hex digits)")
        return value

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not value or "\x00" in value or value.startswith("-"):
            raise ValueError(f"{value!r} is not a repository path")
        return value

    @model_validator(mode="after")
    def _one_assertion(self) -> GitBinding:
        given = [name for name in _ASSERTIONS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"exactly one of {', '.join(_ASSERTIONS)} is needed (given: {given or 'none'})"
            )
        if self.by is not None and given[0] not in {"ahead_of", "behind"}:
            raise ValueError("by: only with ahead_of or behind")
        return self

    def subject_of(self) -> str:
        return self.repo


class GitSensor(PollingSensor[GitConfig, GitBinding]):
    """Checks branch, cleanliness, ancestry, tags and distance of a work tree."""

    kind: ClassVar[str] = "git"
    Config: ClassVar[type[GitConfig]] = GitConfig
    Binding: ClassVar[type[GitBinding]] = GitBinding

    def __init__(self, config: GitConfig) -> None:
        super().__init__(config)
        self._watch: RepoWatch | None = None

    # ------------------------------------------------------------------ watching

    @property
    def watching(self) -> int:
        """How many bound work trees are watched now (the others are only polled)."""
        return self._watch.watching if self._watch is not None else 0

    async def run(self, ctx: SensorContext[GitBinding]) -> None:
        if not self.config.watch:
            await super().run(ctx)
            return
        async with RepoWatch(
            self.config.roots, debounce_ms=self.config.debounce_ms, name=ctx.name
        ) as watch:
            self._watch = watch
            try:
                async with task_group() as tg:
                    tg.create_task(self._follow(watch), name=f"sensor[{ctx.name}].watch")
                    await super().run(ctx)
            finally:
                self._watch = None

    async def on_bindings(self, bindings: list[BoundSubject[GitBinding]]) -> None:
        if self._watch is not None:
            await self._watch.plan(self._work_trees(bindings))

    def _work_trees(self, bindings: list[BoundSubject[GitBinding]]) -> dict[str, Path]:
        out = {}
        for bound in bindings:
            try:
                out[bound.subject] = self.resolve_repo(bound.selector.repo)
            except ValueError:
                continue  # refused when checked: an error event says why
        return out

    async def _follow(self, watch: RepoWatch) -> None:
        while True:
            subjects = await watch.next_changes(timeout_s=_WATCH_HEALTH_S)
            if not watch.alive():
                raise RuntimeError("the watchdog observer thread stopped")
            if subjects is None:  # events were lost: look at every repository
                subjects = {b.subject for b in self.ctx.bindings}
            elif not subjects:
                await watch.plan()
            for subject in sorted(subjects):
                self.check_soon(subject)

    # ------------------------------------------------------------------ rules

    def resolve_repo(self, repo: str) -> Path:
        """The work tree a binding names, resolved; ``ValueError`` outside the roots."""
        roots = [Path(os.path.realpath(r)) for r in self.config.roots]
        given = Path(repo)
        candidate = given if given.is_absolute() else roots[0] / given
        real = Path(os.path.realpath(candidate))
        if not any(real == root or real.is_relative_to(root) for root in roots):
            raise ValueError(f"repo: {repo!r} resolves outside the sensor's roots")
        return real

    def validate_binding(self, selector: GitBinding) -> None:
        self.resolve_repo(selector.repo)

    def describe(self) -> dict[str, Any]:
        return {
            "summary": "A git work tree inside the roots: its branch, clean or not, whether "
            "HEAD contains a commit, the tag at HEAD, how far ahead of or behind a ref.",
            "binds": {"roots": [str(r) for r in self.config.roots]},
            "keys": {
                "repo": "the work tree, relative to the first root or absolute",
                "branch": "HEAD is on this branch",
                "clean": "true: no changes (untracked files count); false: some",
                "head_contains": "this commit is HEAD or one of its ancestors",
                "tag_at_head": "this tag points at HEAD",
                "ahead_of / behind": "HEAD is ahead of / behind this ref (by: exactly N)",
            },
            "examples": [
                {"repo": ".", "branch": "main"},
                {"repo": ".", "clean": True},
            ],
        }

    # ------------------------------------------------------------------ checking

    async def check(self, bound: BoundSubject[GitBinding]) -> Observation:
        sel = bound.selector
        try:
            repo = self.resolve_repo(sel.repo)
        except ValueError as err:
            return Observation.error(str(err))
        if not (repo / ".git").exists():
            return Observation.error(f"{sel.repo}: not a git work tree (moved or removed?)")
        return await self._assertion(repo, sel)

    async def _assertion(self, repo: Path, sel: GitBinding) -> Observation:
        if sel.branch is not None:
            return await self._branch(repo, sel.branch)
        if sel.clean is not None:
            return await self._clean(repo, expect=sel.clean)
        if sel.head_contains is not None:
            return await self._contains(repo, sel.head_contains)
        if sel.tag_at_head is not None:
            return await self._tag(repo, sel.tag_at_head)
        if sel.ahead_of is not None:
            ref, ahead = sel.ahead_of, True
        elif sel.behind is not None:
            ref, ahead = sel.behind, False
        else:  # the model's validator demands exactly one assertion
            raise ValueError(f"the binding names none of {', '.join(_ASSERTIONS)}")
        return await self._distance(repo, ref, ahead=ahead, by=sel.by)

    async def _git(self, repo: Path, *args: str) -> tuple[int | None, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C",
            "LC_ALL": "C",
            "HOME": "/nonexistent",  # no user config: only what the repository says
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "GIT_CEILING_DIRECTORIES": str(repo.parent),
            **self.config.env,
        }
        argv = [
            self.config.git,
            "-c",
            "core.fsmonitor=false",
            "-c",
            f"core.hooksPath={os.devnull}",
            "-c",
            "core.untrackedCache=false",
            "--no-pager",
            *args,
        ]
        result = await run_command(
            argv,
            cwd=repo,
            env=env,
            timeout_s=self.config.command_timeout,
            max_output_bytes=self.config.max_output_bytes,
        )
        if result.timed_out:
            return None, f"git {args[0]} timed out after {self.config.command_timeout:g}s"
        return result.returncode, result.output.decode("utf-8", "replace").strip()

    async def _branch(self, repo: Path, want: str) -> Observation:
        code, out = await self._git(repo, "symbolic-ref", "--quiet", "--short", "HEAD")
        if code is None:
            return Observation.error(out)
        if code != 0:
            return Observation.refuted("HEAD is detached", observed=None)
        if out == want:
            return Observation.confirmed(f"on branch {out}", observed=out)
        return Observation.refuted(f"on branch {out}, not {want}", observed=out)

    async def _clean(self, repo: Path, *, expect: bool) -> Observation:
        code, out = await self._git(repo, "status", "--porcelain", "--untracked-files=normal")
        if code != 0:
            return Observation.error(f"git status failed: {out[-200:]}")
        changed = len(out.splitlines())
        clean = changed == 0
        text = "work tree clean" if clean else f"{changed} changed or untracked paths"
        if clean == expect:
            return Observation.confirmed(text, observed=clean)
        return Observation.refuted(text, observed=clean)

    async def _head(self, repo: Path) -> str | None:
        code, out = await self._git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        return out if code == 0 else None

    async def _contains(self, repo: Path, commit: str) -> Observation:
        head = await self._head(repo)
        if head is None:
            return Observation.refuted("HEAD has no commit", observed=None)
        code, out = await self._git(
            repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"
        )
        if code != 0:
            return Observation.refuted(f"{commit} is not in this repository", observed=head)
        code, _ = await self._git(repo, "merge-base", "--is-ancestor", out, head)
        if code == 0:
            return Observation.confirmed(f"HEAD {head[:12]} contains {commit}", observed=head)
        if code == 1:
            return Observation.refuted(f"HEAD {head[:12]} does not contain {commit}", observed=head)
        return Observation.error("git merge-base failed")

    async def _tag(self, repo: Path, tag: str) -> Observation:
        code, out = await self._git(repo, "tag", "--points-at", "HEAD")
        if code != 0:
            return Observation.error(f"git tag failed: {out[-200:]}")
        tags = sorted(out.split())
        if tag in tags:
            return Observation.confirmed(f"{tag} points at HEAD", observed=tags)
        return Observation.refuted(f"{tag} does not point at HEAD", observed=tags)

    async def _distance(self, repo: Path, ref: str, *, ahead: bool, by: int | None) -> Observation:
        code, out = await self._git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if code != 0:
            return Observation.error(f"no ref {ref!r} in this repository")
        counted = f"{out}...HEAD"
        code, counts = await self._git(repo, "rev-list", "--left-right", "--count", counted)
        if code != 0:
            return Observation.error(f"git rev-list failed: {counts[-200:]}")
        behind_n, ahead_n = (int(n) for n in counts.split())
        n = ahead_n if ahead else behind_n
        word = "ahead of" if ahead else "behind"
        observed = {"ahead": ahead_n, "behind": behind_n}
        holds = n == by if by is not None else n > 0
        text = f"HEAD is {n} commits {word} {ref}"
        return (
            Observation.confirmed(text, observed=observed)
            if holds
            else Observation.refuted(text, observed=observed)
        )
