"""The code-test sensor (``code_test``): runs a project's tests and reports per test id.

The command comes only from the config (default ``python -m pytest``) and runs without
a shell, in its own process group, under a timeout that kills the whole group, with an
explicit environment and captured, capped output, inside bubblewrap where it works
(:mod:`memwarden.sensors._sandbox`: no state dir, no network). The sensor adds
``--junitxml`` (into a private temp dir), the project's own ini (``-c``), ``--rootdir``,
``--confcutdir`` and a selection checked by :mod:`memwarden.sensors._selection` — when
the binding is added and again before every run — and nothing else; the JUnit report
is parsed with defusedxml. A passing test is ``confirmed`` (reliability 1.0), a failing
or erroring one ``refuted`` with the failure message; a skipped one changes nothing.

Runs are triggered by revalidation requests (only the tests asked for, batched into one
run when several arrive together), by changes under ``source_dirs`` (debounced) and by
an optional schedule. At most one run at a time; what arrives during a run queues
exactly one more.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import functools
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from memwarden.errors import ConfigError, ValidationInputError
from memwarden.memory import Binding, Outcome, RevalidationReason, RevalidationRequest
from memwarden.plugins import PLUGIN_API, BaseBinding, BaseSensorConfig, BindingCandidate, DryRun
from memwarden.sensors import _fscheck as fc
from memwarden.sensors import _sandbox as sb
from memwarden.sensors import _selection as picks
from memwarden.sensors._junit import JUnitError, Report, TestResult, parse_junit
from memwarden.sensors._proc import ProcResult, run_command
from memwarden.sensors._tasks import task_group
from memwarden.sensors._testcatalog import TestCatalog
from memwarden.sensors._textmatch import negated, overlap, stems
from memwarden.sensors._watch import Change, Watcher, event_paths

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from watchdog.events import FileSystemEvent

    from memwarden.memory import ValidationEvent
    from memwarden.plugins import SensorContext

__all__ = ["DEFAULT_IGNORE", "CodeTestBinding", "CodeTestConfig", "CodeTestSensor"]

DEFAULT_IGNORE = (
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".venv",
    "node_modules",
    "*.pyc",
    ".coverage*",
)
PASSED_THROUGH_ENV = ("PATH", "HOME", "LANG")
#: Hidden inside the sandbox besides the state dir: root-only secrets under /etc, a config dir.
DEFAULT_HIDE = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/memwarden",
)
_MIN_TEST_CONFIDENCE = 0.4
_NOT_FOUND = re.compile(r"^ERROR: not found: (.+?)\s*$", re.MULTILINE)
_SHOWN_FAILURES = 5


class CodeTestConfig(BaseSensorConfig):
    """The ``[sensors.<name>]`` table of a code_test sensor."""

    project_root: Path = Field(description="Where the command runs; test ids are relative to it.")
    command: list[str] = Field(
        default_factory=lambda: [sys.executable, "-m", "pytest"],
        min_length=1,
        description="The test command and its fixed arguments (pytest-compatible).",
    )
    source_dirs: list[str] = Field(
        default_factory=list, description="Directories (under project_root) whose changes rerun."
    )
    ignore: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE))
    debounce_ms: int = Field(default=200, ge=0, le=600_000)
    schedule_interval_s: float | None = Field(default=None, gt=0.0)
    timeout_s: float = Field(default=600.0, gt=0.0)
    kill_grace_s: float = Field(default=2.0, ge=0.0, le=60.0)
    max_output_bytes: int = Field(default=1_000_000, ge=1024)
    env: dict[str, str] = Field(default_factory=dict)
    batch_window_ms: int = Field(default=20, ge=0, le=10_000)
    reliability: float = Field(default=1.0, ge=0.0, le=1.0)
    pytest_ini: Path | None = Field(
        default=None,
        description="The project's pytest config file (relative to project_root or absolute). "
        "Default: the one pytest would find in project_root itself, else none.",
    )
    sandbox: Literal["auto", "bwrap", "none"] = Field(
        default="auto",
        description="auto: bubblewrap if it works here, else run unsandboxed with a warning; "
        "bwrap: required (the sensor does not start without it); none: never.",
    )
    sandbox_network: bool = Field(default=False, description="Let sandboxed tests use the network.")
    sandbox_project_writable: bool = Field(
        default=False, description="Bind project_root read-write (default read-only)."
    )
    sandbox_read_paths: list[Path] = Field(
        default_factory=list,
        description="More absolute paths the sandboxed run may read (a PYTHONPATH entry ...).",
    )
    sandbox_hide: list[Path] = Field(
        default_factory=lambda: [Path(p) for p in DEFAULT_HIDE],
        description="Absolute paths covered (empty) inside the sandbox; the daemon's state "
        "directory always is.",
    )

    @field_validator("project_root")
    @classmethod
    def _absolute(cls, root: Path) -> Path:
        return root.expanduser().resolve()

    @field_validator("pytest_ini")
    @classmethod
    def _ini_path(cls, ini: Path | None, info: ValidationInfo) -> Path | None:
        root: Path | None = info.data.get("project_root")
        if ini is None or root is None:
            return ini
        return (root / ini.expanduser()).resolve()

    @field_validator("sandbox_read_paths", "sandbox_hide")
    @classmethod
    def _absolute_paths(cls, paths: list[Path]) -> list[Path]:
        for p in paths:
            if not p.is_absolute():
                raise ValueError(f"{str(p)!r} must be an absolute path")
        return [Path(os.path.normpath(p)) for p in paths]

    @field_validator("source_dirs")
    @classmethod
    def _relative(cls, dirs: list[str]) -> list[str]:
        for d in dirs:
            if Path(d).is_absolute() or ".." in Path(d).parts:
                raise ValueError(f"{d!r} must be a directory under project_root (relative)")
        return dirs


def _syntax(value: str | None, field: str) -> str | None:
    """The checks that need no project: see :mod:`memwarden.sensors._selection`."""
    if value is None:
        return None
    try:
        if field == "keyword":
            return picks.check_keyword(value, field)
        picks.check_path_syntax(value, field)
    except ValidationInputError as err:
        raise ValueError(err.errors[0][1]) from None
    return value


class CodeTestBinding(BaseBinding):
    """Exactly one of: ``test`` (an exact id), ``prefix`` (a file, class or directory),
    ``keyword`` (a pytest ``-k`` expression). A selection, never an option."""

    test: str | None = Field(default=None, max_length=2048)
    prefix: str | None = Field(default=None, max_length=2048)
    keyword: str | None = Field(default=None, max_length=1024)

    @field_validator("test", "prefix", "keyword")
    @classmethod
    def _plain(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.field_name == "test" and value is not None and "::" not in value:
            raise ValueError(f"{value!r} is not a test id (path::name); use prefix for a file")
        return _syntax(value, str(info.field_name))

    @model_validator(mode="after")
    def _exactly_one(self) -> CodeTestBinding:
        given = [n for n in ("test", "prefix", "keyword") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of test (an id such as tests/test_api.py::test_timeout), "
                f"prefix (a file or class) or keyword (a -k expression); got {given or 'none'}"
            )
        return self

    @property
    def field(self) -> str:
        """The binding key that holds the selection."""
        return (
            "test" if self.test is not None else "prefix" if self.prefix is not None else "keyword"
        )

    def subject_of(self) -> str | None:
        if self.test is not None:
            return self.test
        if self.prefix is not None:
            return self.prefix
        return f"k:{self.keyword}"

    @property
    def selection(self) -> str:
        return self.subject_of() or ""


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    observed: Any = None
    message: str = ""


@dataclass(slots=True)
class _Request:
    request: RevalidationRequest
    selector: CodeTestBinding
    future: asyncio.Future[ValidationEvent | None]
    abandoned: bool = False  # the caller stopped waiting (deadline): emit the answer instead
    dry: bool = False  # a dry run: answered, never emitted (not even when abandoned)


class CodeTestSensor:
    """Runs the configured test command; see the module docstring."""

    api_version: ClassVar[int] = PLUGIN_API
    kind: ClassVar[str] = "code_test"
    Config: ClassVar[type[BaseSensorConfig]] = CodeTestConfig
    Binding: ClassVar[type[BaseBinding]] = CodeTestBinding
    # A read never waits for this check (a test run, a person) until it is measured.
    quick_check: ClassVar[bool] = False

    def __init__(self, config: CodeTestConfig) -> None:
        self.config = config
        self.root = config.project_root
        self._ctx: SensorContext[CodeTestBinding] | None = None
        self._env: dict[str, str] = {}
        self._requests: list[_Request] = []
        self._full_pending = False
        self._wake = asyncio.Event()
        self._running = False
        self._accepting = False
        self.runs = 0  # invocations of the command
        self.last_pid: int | None = None
        self.last_result: ProcResult | None = None
        self.last_argv: list[str] = []  # the test command's own argv (inside any sandbox)
        self.layout = picks.PytestLayout(self.root, None)
        self.sandboxed = False
        self._bwrap: str | None = None
        self._interpreter: list[Path] | None = None  # what the command needs to run
        self.catalog = TestCatalog(self.root, tuple(config.ignore))
        self._catalog_lock = asyncio.Lock()

    # ------------------------------------------------------------------ contract

    def describe(self) -> dict[str, Any]:
        """What a binding may name (the project's test files) and examples to adapt."""
        files = _test_files(self.root, self.config.ignore, limit=50)
        first = files[0] if files else "tests/test_example.py"
        name = _first_test_name(self.root / first) or "test_name"
        return {
            "summary": "A test, a test file or class, or a -k keyword of the project's pytest "
            "suite: passing confirms, failing refutes.",
            "binds": {"project_root": str(self.root), "test_files": files},
            "keys": {
                "test": "an exact test id, path::name (relative to project_root)",
                "prefix": "a test file, directory or path::Class",
                "keyword": "a pytest -k expression",
            },
            "examples": [
                {"test": f"{first}::{name}"},
                {"prefix": first},
                {"keyword": name.removeprefix("test_") or "timeout"},
            ],
        }

    async def setup(self, ctx: SensorContext[CodeTestBinding]) -> None:
        self._ctx = ctx
        self._env = self._build_env()
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"code_test: project_root {str(self.root)!r} is not a directory"
            )
        exe = self.config.command[0]
        found = await asyncio.to_thread(self._find_command, exe)
        if found is None:
            raise FileNotFoundError(
                f"code_test: test command {exe!r} not found or not executable "
                f"(command = {self.config.command!r})"
            )
        for d in self.config.source_dirs:
            if not (self.root / d).is_dir():
                raise FileNotFoundError(f"code_test: source dir {str(self.root / d)!r} is missing")
        ini = self.config.pytest_ini
        if ini is not None and not ini.is_file():
            raise FileNotFoundError(f"code_test: pytest_ini {str(ini)!r} is not a file")
        self.layout = await asyncio.to_thread(picks.PytestLayout.load, self.root, ini)
        await self._setup_sandbox(ctx)

    async def _setup_sandbox(self, ctx: SensorContext[CodeTestBinding]) -> None:
        mode = self.config.sandbox
        self.sandboxed, self._bwrap = False, None
        self._interpreter = await asyncio.to_thread(
            sb.interpreter_paths, self.config.command, self._env.get("PATH")
        )
        if mode == "none":
            ctx.log.info("code_test_sandbox", sandbox="none")
            return
        covering = [
            h for h in self._sandbox_spec(ctx, self.root).hide if self.root.is_relative_to(h)
        ]
        if covering:
            raise ConfigError(
                f"sensors.{ctx.name}.project_root: {str(self.root)!r} lies inside "
                f"{str(covering[0])!r}, which the sandbox hides (the daemon's state directory "
                "or sandbox_hide); move the project or set sandbox = 'none'"
            )
        bwrap = sb.find_bwrap(self._env.get("PATH", os.defpath))
        problem = "bwrap (Debian package bubblewrap) is not installed" if bwrap is None else ""
        if bwrap is not None:
            tmp = Path(tempfile.mkdtemp(prefix="memwarden-probe-"))
            try:
                true = shutil.which("true", path=os.defpath) or "/bin/true"
                probe = sb.bwrap_argv(bwrap, self._sandbox_spec(ctx, tmp), [true])
                result = await run_command(
                    probe, cwd=self.root, env=self._env, timeout_s=30.0, max_output_bytes=4096
                )
            finally:
                await asyncio.to_thread(shutil.rmtree, tmp, ignore_errors=True)
            if result.returncode != 0:
                problem = f"bwrap does not work here (exit {result.returncode}): {result.tail(300)}"
        if not problem:
            self.sandboxed, self._bwrap = True, bwrap
            ctx.log.info("code_test_sandbox", sandbox="bwrap", network=self.config.sandbox_network)
            return
        if mode == "bwrap":
            raise ConfigError(f"sensors.{ctx.name}.sandbox = 'bwrap', but {problem}")
        ctx.log.warning("code_test_sandbox_unavailable", sandbox="none", reason=problem)

    def _sandbox_spec(
        self, ctx: SensorContext[CodeTestBinding], report_dir: Path
    ) -> sb.SandboxSpec:
        state = ctx.state_dir.resolve()
        # The daemon's home holds sensors/<name>: hide all of it (token, database, sockets).
        home = state.parents[1] if state.parent.name == "sensors" else state
        if self._interpreter is None:
            self._interpreter = sb.interpreter_paths(self.config.command, self._env.get("PATH"))
        interpreter = self._interpreter
        return sb.SandboxSpec(
            project_root=self.root,
            project_writable=self.config.sandbox_project_writable,
            read_paths=(
                *interpreter,
                *self.config.sandbox_read_paths,
                *([self.layout.ini] if self.layout.ini is not None else []),
            ),
            write_paths=(report_dir,),
            hide=(home, state, *self.config.sandbox_hide),
            network=self.config.sandbox_network,
        )

    async def run(self, ctx: SensorContext[CodeTestBinding]) -> None:
        self._ctx = ctx
        self._accepting = True
        try:
            async with contextlib.AsyncExitStack() as stack:
                watcher = None
                if self.config.source_dirs:
                    watcher = await stack.enter_async_context(
                        Watcher(self._accept, debounce_ms=self.config.debounce_ms, name=ctx.name)
                    )
                    for d in self.config.source_dirs:
                        await asyncio.to_thread(
                            watcher.schedule, str(self.root / d), recursive=True
                        )
                async with task_group() as tg:
                    tg.create_task(self._runner(), name=f"sensor[{ctx.name}].runner")
                    tg.create_task(self._follow_bindings(ctx), name=f"sensor[{ctx.name}].bindings")
                    if watcher is not None:
                        tg.create_task(
                            self._follow_sources(watcher), name=f"sensor[{ctx.name}].src"
                        )
                    if self.config.schedule_interval_s is not None:
                        tg.create_task(self._schedule(), name=f"sensor[{ctx.name}].schedule")
                    ctx.ready()
        finally:
            self._accepting = False
            for req in self._requests:
                if not req.future.done():
                    req.future.set_result(
                        self._event_for_request(req, _error("the sensor stopped"))
                    )
            self._requests = []

    async def revalidate(
        self, request: RevalidationRequest, ctx: SensorContext[CodeTestBinding]
    ) -> ValidationEvent | None:
        try:
            selector = ctx.parse_binding(request.binding)
        except ValidationInputError as err:
            return ctx.event(
                request.subject, Outcome.ERROR, message=str(err)[:1000], block_id=request.block_id
            )
        if not self._accepting:
            return ctx.event(
                request.subject,
                Outcome.ERROR,
                message="the code_test sensor is not running",
                block_id=request.block_id,
            )
        future: asyncio.Future[ValidationEvent | None] = asyncio.get_running_loop().create_future()
        req = _Request(request, selector, future)
        self._requests.append(req)
        self._wake.set()
        try:
            return await asyncio.shield(future)  # a caller that gives up leaves the run alone
        except asyncio.CancelledError:
            req.abandoned = True
            raise

    async def binding_candidates(self, text: str, *, limit: int) -> list[BindingCandidate]:
        """Tests whose names (and docstrings) say what the text says (see
        :mod:`._testcatalog`: found by parsing the test files, never by running them)."""
        async with self._catalog_lock:  # one refresh at a time: it updates the catalog
            tests = await asyncio.to_thread(self.catalog.refresh, self.layout)
        said = set(stems(text))
        if not said:
            return []
        fails = negated(text, "test")
        scored: list[BindingCandidate] = []
        for t in tests:
            share, hit = overlap(t.name_stems, said)
            if not hit:
                continue
            doc_share, doc_hit = overlap(t.doc_stems, said)
            known = {*t.name_stems, *t.doc_stems, *t.file_stems}
            cover = len(said & known) / len(said)
            exact = t.name in text or (bool(t.cls) and f"{t.cls}.{t.name}" in text)
            confidence = 0.95 if exact else 0.5 * share + 0.2 * doc_share + 0.3 * cover
            if confidence < _MIN_TEST_CONFIDENCE:
                continue
            why = f"the test {t.id} is named for {', '.join(hit)}"
            if doc_hit:
                why += f"; its docstring says {', '.join(doc_hit[:6])}"
            if fails:
                why += "; the text says it fails"
            scored.append(
                BindingCandidate(
                    {"test": t.id},
                    round(min(1.0, confidence), 3),
                    why,
                    agrees=None,
                    negated=fails,
                    found="the test run says",
                )
            )
        scored.sort(key=lambda c: (-c.confidence, str(c.selector["test"])))
        return scored[:limit]

    async def dry_run(self, selector: CodeTestBinding) -> DryRun:
        """Run the selection once, with the other requests of the moment (one batch, one
        run at a time as always); nothing is emitted."""
        ctx = self._require_ctx()
        problem = self._selection_problem(selector)
        if problem is not None:
            return DryRun("error", message=str(problem))
        now = ctx.now()
        request = RevalidationRequest(
            block_id="dry-run",
            sensor=ctx.name,
            subject=selector.selection,
            binding=Binding.model_validate(
                {"sensor": ctx.name, **selector.model_dump(mode="json", exclude_unset=True)}
            ),
            reason=RevalidationReason.MANUAL,
            created_at=now,
            deadline=now + timedelta(seconds=self.config.timeout_s),
        )
        if not self._accepting:
            return DryRun("error", message="the code_test sensor is not running")
        future: asyncio.Future[ValidationEvent | None] = asyncio.get_running_loop().create_future()
        req = _Request(request, selector, future, dry=True)
        self._requests.append(req)
        self._wake.set()
        try:
            event = await asyncio.shield(future)
        except asyncio.CancelledError:
            req.abandoned = True
            raise
        if event is None:
            return DryRun("changed", message="skipped: a skipped test tells nothing")
        return DryRun(str(event.outcome), event.observed, event.message)

    async def teardown(self) -> None:
        # Runs (and their process groups) end with ``run``'s cancellation; nothing is held.
        self._accepting = False

    async def prepare_validation(self) -> None:
        """Load the project's pytest config (``python_files``), which selections are
        judged by, before the daemon re-checks stored bindings at start."""
        self.layout = await asyncio.to_thread(
            picks.PytestLayout.load, self.root, self.config.pytest_ini
        )

    def validate_binding(self, selector: CodeTestBinding) -> None:
        """A selection names tests of this project, never an option or another file.

        Raises :class:`ValidationInputError` naming the binding key (``prefix`` ...).
        """
        problem = self._selection_problem(selector)
        if problem is not None:
            raise problem

    def _selection_problem(
        self, selector: CodeTestBinding, *, must_exist: bool = False
    ) -> ValidationInputError | None:
        try:
            if selector.keyword is not None:
                picks.check_keyword(selector.keyword)
            else:
                picks.check_selection(
                    self.layout,
                    selector.selection,
                    selector.field,
                    file_only=selector.test is not None,
                    must_exist=must_exist,
                )
        except ValidationInputError as err:
            return err
        return None

    # ------------------------------------------------------------------ triggers

    def request_run(self) -> None:
        """Run every bound selection soon (a source change, the schedule)."""
        self._full_pending = True
        self._wake.set()

    async def _follow_bindings(self, ctx: SensorContext[CodeTestBinding]) -> None:
        # New bindings are not run at once: the first check comes from a revalidation
        # request, a source change or the schedule.
        while True:
            await ctx.wait_bindings_changed()

    def _accept(self, event: FileSystemEvent) -> list[Change]:
        """Observer thread: a change under a source dir that no ignore pattern covers."""
        for path in event_paths(event):
            parts = Path(os.path.relpath(path, self.root)).parts
            if not any(_ignored(part, self.config.ignore) for part in parts):
                return [("s", "")]
        return []

    async def _follow_sources(self, watcher: Watcher) -> None:
        while True:
            batch = await watcher.next_batch()
            if batch:
                self._require_ctx().log.debug("code_test_sources_changed", overflow=batch.overflow)
                self.request_run()

    async def _schedule(self) -> None:
        interval = self.config.schedule_interval_s or 0.0
        while True:
            await asyncio.sleep(interval)
            self.request_run()

    # ------------------------------------------------------------------ running

    async def _runner(self) -> None:
        """The only place that runs the command: one run at a time."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            full, self._full_pending = self._full_pending, False
            if not full and self.config.batch_window_ms:
                # Requests dispatched together arrive within a few loop turns: gather them.
                await asyncio.sleep(self.config.batch_window_ms / 1000)
            requests, self._requests = self._requests, []
            if not full and not requests:
                continue
            await self._run_batch(requests, full=full)
            if self._full_pending or self._requests:
                self._wake.set()

    async def _run_batch(self, requests: list[_Request], *, full: bool) -> None:
        ctx = self._require_ctx()
        bound = ctx.bindings
        selectors: dict[str, CodeTestBinding] = {}
        if full:
            for bs in bound:
                selectors.setdefault(bs.selector.selection, bs.selector)
        for req in requests:
            selectors.setdefault(req.selector.selection, req.selector)
        if not selectors:
            return
        self._running = True
        try:
            verdicts = await self._execute(list(selectors.values()))
        finally:
            self._running = False
        answered: set[tuple[str, str]] = set()
        for req in requests:
            verdict = verdicts.get(req.selector.selection)
            event = self._event_for_request(req, verdict) if verdict is not None else None
            answered.add((req.request.block_id, req.request.subject))
            if req.abandoned:
                if event is not None and not req.dry:
                    await ctx.emit(event)  # the caller gave up; the result still counts
            elif not req.future.done():
                req.future.set_result(event)
        if not full:
            return
        for bs in bound:
            verdict = verdicts.get(bs.selector.selection)
            if verdict is None or (bs.block_id, bs.subject) in answered:
                continue
            await ctx.emit(self._event(bs.subject, bs.block_id, verdict))

    async def _execute(self, selectors: Sequence[CodeTestBinding]) -> dict[str, Verdict | None]:
        """Run the command for these selections; a verdict per selection (None: skipped)."""
        out: dict[str, Verdict | None] = {}
        # The project's config (python_files) and files may have changed since the last run.
        self.layout = await asyncio.to_thread(
            picks.PytestLayout.load, self.root, self.config.pytest_ini
        )
        checked = []
        for s in selectors:  # again, right before the run: the files may have changed
            problem = await asyncio.to_thread(
                functools.partial(self._selection_problem, s, must_exist=True)
            )
            if problem is None:
                checked.append(s)
            else:
                self._require_ctx().log.warning("code_test_selection_refused", error=str(problem))
                out[s.selection] = _error(f"selection refused, nothing ran: {problem}")
        selectors = checked
        paths = [s for s in selectors if s.keyword is None]
        if paths:
            out.update(await self._run_paths(paths))
        for sel in selectors:
            if sel.keyword is not None:
                report = await self._invoke([f"-k{sel.keyword}"])
                if isinstance(report, Verdict):
                    out[sel.selection] = report
                elif isinstance(report, _NotFound):
                    out[sel.selection] = _error("pytest found nothing to run")
                else:
                    out[sel.selection] = _aggregate(list(report.tests.items()), report, None)
        return out

    async def _run_paths(self, selectors: Sequence[CodeTestBinding]) -> dict[str, Verdict | None]:
        out: dict[str, Verdict | None] = {}
        remaining = list(selectors)
        for _ in range(2):  # a second time without the ids pytest could not find
            args = sorted({s.selection for s in remaining})
            report = await self._invoke(["--", *args])
            if isinstance(report, _NotFound):
                missing = report.missing
                for s in remaining:
                    if s.selection in missing:
                        out[s.selection] = _error(f"not found: {s.selection} (no such test)")
                remaining = [s for s in remaining if s.selection not in missing]
                if not remaining:
                    return out
                continue
            if isinstance(report, Verdict):
                out.update((s.selection, report) for s in remaining)
                return out
            for s in remaining:
                out[s.selection] = _judge(s, report)
            return out
        out.update((s.selection, _error("tests not found")) for s in remaining)
        return out

    async def _invoke(self, selection: list[str]) -> Report | Verdict | _NotFound:
        """One run of the command; its report, or the error verdict for all it covered."""
        ctx = self._require_ctx()
        tmp = Path(tempfile.mkdtemp(prefix="memwarden-junit-"))  # 0700, ours alone
        report_path = tmp / "report.xml"
        empty_ini = tmp / "pytest.ini"  # "no configuration" when the project has none
        empty_ini.touch()
        argv = picks.pytest_argv(
            self.config.command,
            layout=self.layout,
            report=report_path,
            empty_ini=empty_ini,
            selection=selection,
        )
        self.last_argv = argv
        if self._bwrap is not None:
            argv = sb.bwrap_argv(self._bwrap, self._sandbox_spec(ctx, tmp), argv)
        self.runs += 1
        ctx.log.info("code_test_run_started", selection=selection[:20], run=self.runs)
        try:
            result = await run_command(
                argv,
                cwd=self.root,
                env=self._env,
                timeout_s=self.config.timeout_s,
                max_output_bytes=self.config.max_output_bytes,
                kill_grace_s=self.config.kill_grace_s,
                on_start=self._started,
            )
            self.last_result = result
            if result.timed_out:
                ctx.log.warning("code_test_timed_out", timeout_s=self.config.timeout_s)
                return _error(
                    f"the test run timed out after {self.config.timeout_s:g}s "
                    "(its process group was killed)"
                )
            try:
                report = await asyncio.to_thread(parse_junit, report_path, self.root)
            except JUnitError as err:
                missing = self._not_found(result)
                if missing:
                    return _NotFound(missing)
                ctx.log.warning("code_test_report_unusable", error=str(err), rc=result.returncode)
                return _error(
                    f"{err} (exit code {result.returncode}); output ends:\n{result.tail(800)}"
                )
            if not report.tests and not report.file_errors:
                missing = self._not_found(result)
                if missing:
                    return _NotFound(missing)
            ctx.log.info(
                "code_test_run_finished",
                rc=result.returncode,
                tests=len(report.tests),
                file_errors=len(report.file_errors),
            )
            return report
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, ignore_errors=True)

    def _find_command(self, exe: str) -> str | None:
        if os.sep in exe:
            path = Path(exe)
            return exe if path.is_file() and os.access(path, os.X_OK) else None
        return shutil.which(exe, path=self._env.get("PATH", os.defpath))

    def _started(self, pid: int) -> None:
        self.last_pid = pid

    def _not_found(self, result: ProcResult) -> set[str]:
        text = result.output.decode("utf-8", "replace")
        out = set()
        for raw in _NOT_FOUND.findall(text):
            path, sep, rest = raw.partition("::")
            rel = os.path.relpath(path, self.root) if Path(path).is_absolute() else path
            out.add(rel.replace(os.sep, "/") + sep + rest)
        return out

    def _build_env(self) -> dict[str, str]:
        """Only PATH, HOME and LANG pass through from the daemon; the rest is the config's."""
        env = {k: v for k in PASSED_THROUGH_ENV if (v := os.environ.get(k)) is not None}
        env.update(self.config.env)
        return env

    # ------------------------------------------------------------------ events

    def _event(self, subject: str, block_id: str, verdict: Verdict) -> ValidationEvent:
        return self._require_ctx().event(
            subject,
            verdict.outcome,
            observed=verdict.observed,
            message=verdict.message,
            reliability=self.config.reliability,
            block_id=block_id,
        )

    def _event_for_request(self, req: _Request, verdict: Verdict | None) -> ValidationEvent | None:
        if verdict is None:
            return None
        return self._event(req.request.subject, req.request.block_id, verdict)

    def _require_ctx(self) -> SensorContext[CodeTestBinding]:
        if self._ctx is None:
            raise RuntimeError("code_test sensor used before setup()")
        return self._ctx


@dataclass(frozen=True, slots=True)
class _NotFound:
    missing: set[str]


def _error(message: str) -> Verdict:
    return Verdict(Outcome.ERROR, message=message[:4000])


def _ignored(name: str, ignore: Iterable[str]) -> bool:
    return any(
        name == pat or (fc.is_glob(pat) and fc.glob_regex(pat).match(name) is not None)
        for pat in ignore
    )


def _covers(selection: str, test_id: str) -> bool:
    if test_id == selection:
        return True
    return test_id.startswith((selection + "::", selection + "[", selection.rstrip("/") + "/"))


def _judge(sel: CodeTestBinding, report: Report) -> Verdict | None:
    selection = sel.selection
    matched = [(tid, r) for tid, r in report.tests.items() if _covers(selection, tid)]
    file_error = next(
        (
            (path, msg)
            for path, msg in report.file_errors.items()
            if _covers(path, selection) or _covers(selection, path)
        ),
        None,
    )
    return _aggregate(matched, report, file_error, exact=sel.test is not None)


def _aggregate(  # noqa: PLR0911 - one return per outcome
    matched: list[tuple[str, TestResult]],
    report: Report,
    file_error: tuple[str, str] | None,
    *,
    exact: bool = False,
) -> Verdict | None:
    """One verdict for a selection: any failure refutes; a pass confirms; skips say nothing."""
    failed = [(tid, r) for tid, r in matched if r.outcome in ("failed", "error")]
    passed = sum(1 for _, r in matched if r.outcome == "passed")
    skipped = sum(1 for _, r in matched if r.outcome == "skipped")
    counts = {"passed": passed, "failed": len(failed), "skipped": skipped}
    if file_error is not None and not matched:
        path, message = file_error
        return Verdict(
            Outcome.REFUTED, {"collection_error": path}, f"{path}: collection failed: {message}"
        )
    if failed:
        if exact and len(matched) == 1:
            tid, r = failed[0]
            return Verdict(Outcome.REFUTED, r.outcome, r.message or f"{tid} {r.outcome}")
        lines = [
            f"{tid}: {r.message.splitlines()[0] if r.message else r.outcome}" for tid, r in failed
        ]
        shown = "\n".join(lines[:_SHOWN_FAILURES])
        more = (
            f"\n… and {len(lines) - _SHOWN_FAILURES} more" if len(lines) > _SHOWN_FAILURES else ""
        )
        return Verdict(
            Outcome.REFUTED, counts, f"{len(failed)} of {len(matched)} failed:\n{shown}{more}"
        )
    if passed:
        if exact and len(matched) == 1:
            return Verdict(Outcome.CONFIRMED, "passed")
        return Verdict(Outcome.CONFIRMED, counts)
    if skipped:
        return None  # a skipped test tells nothing about the fact
    if not report.tests and report.file_errors:
        path, message = next(iter(report.file_errors.items()))
        return Verdict(Outcome.ERROR, None, f"{path}: collection failed: {message}")
    return _error("no test matched this selection (not collected?)")


_TEST_DEF = re.compile(r"^(?:async )?def (test_\w+)", re.MULTILINE)


def _test_files(root: Path, ignore: list[str], *, limit: int) -> list[str]:
    """Up to ``limit`` pytest files under ``root`` (relative, sorted; ignored names skipped)."""
    found: list[str] = []
    stack = [root]
    seen = 0
    while stack and len(found) < limit and seen < 5000:  # bounded: a describe, not a crawl
        here = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if any(fnmatch.fnmatch(entry.name, pat) for pat in ignore):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.name.startswith("test_") and entry.name.endswith(".py"):
                found.append(Path(entry.path).relative_to(root).as_posix())
    return sorted(found)[:limit]


def _first_test_name(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            match = _TEST_DEF.search(fh.read(200_000))
    except OSError:
        return None
    return match.group(1) if match else None
