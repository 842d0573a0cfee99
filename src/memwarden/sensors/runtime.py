"""The runtime sensor: is the process running, the port listening, the disk not full?

Every check is *named in the config*; a binding only names it::

    [sensors.runtime.checks.db-port]
    type = "tcp_port"
    host = "127.0.0.1"
    port = 5432

    [sensors.runtime.checks.db-nagios]
    type = "nagios"
    command = ["/usr/lib/nagios/plugins/check_tcp", "-H", "127.0.0.1", "-p", "5432"]

and a block binds ``{"sensor": "runtime", "check": "db-port"}`` (the subject is the
check's name; an unknown name is refused when the block is added). Built-in types:
``process`` (by ``name``, ``cmdline`` substring or ``pid_file``), ``tcp_port``
(``connect`` to it, or look for a ``listening`` socket), ``disk_free``, ``memory``,
``load``, ``file_age`` and ``nagios`` — any Nagios/Icinga/Monitoring Plugins command
(a list, never a shell): exit 0 confirms, 1 (WARNING) is ``warning`` (a refutation by
default, soft by construction since the rules harden only repeated ones), 2 refutes,
3 and anything else is an error; the perfdata after ``|`` becomes the observed value.
A check that outlives its ``timeout_s`` is an error, and a command's whole process
group is killed. A plugin's environment is explicit: ``PATH`` and ``LANG`` from the
daemon, then the sensor's ``env``, then the check's; nothing else of the daemon's.

It runs on :class:`memwarden.plugins.PollingSensor`: each bound check runs every
``interval`` (the check's own, else the sensor's; with jitter; never below
``min_interval``, 1s unless the config lowers it, 10ms at the very least), after errors
with backoff, and a result is emitted when it differs from the last one (outcome or
observed value; confirmations at reliability 0.9), plus a confirmation of an unchanged
one every ``confirm_every``. A run of a check never overlaps another run or a
revalidation of the same check: it waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal

import psutil
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from memwarden.memory import Duration, Outcome, format_duration
from memwarden.plugins import (
    HARD_MIN_INTERVAL,
    BaseBinding,
    BindingCandidate,
    Observation,
    PollingConfig,
    PollingSensor,
)
from memwarden.sensors._textmatch import negated, overlap, stems

if TYPE_CHECKING:
    from collections.abc import Mapping

    from memwarden.plugins import BoundSubject

__all__ = [
    "DiskFreeCheck",
    "FileAgeCheck",
    "LoadCheck",
    "MemoryCheck",
    "NagiosCheck",
    "ProcessCheck",
    "RuntimeBinding",
    "RuntimeConfig",
    "RuntimeSensor",
    "TcpPortCheck",
    "parse_perfdata",
]

CheckName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
Seconds = Annotated[float, Field(gt=0.0, le=3600.0, allow_inf_nan=False)]
Percent = Annotated[float, Field(ge=0.0, le=100.0, allow_inf_nan=False)]
NAGIOS_STATUS = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
#: What Nagios plugins get of the daemon's own environment; the config's ``env`` adds to it.
PASSED_THROUGH_ENV = ("PATH", "LANG")
DEFAULT_MIN_INTERVAL: Final = timedelta(seconds=1)
#: The base's deadline for one check is the check's ``timeout_s`` plus this: the check's
#: own deadline answers first, with the precise message (and a killed process group).
_TIMEOUT_GRACE: Final = timedelta(seconds=2)
_ANY_ADDRESS = ("0.0.0.0", "::", "*", "")  # noqa: S104 - compared against, never bound


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: Duration | None = Field(default=None, description="Default: the sensor's.")
    timeout_s: Seconds | None = Field(default=None, description="Default: the sensor's.")

    @field_validator("interval")
    @classmethod
    def _not_zero(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < HARD_MIN_INTERVAL:
            raise ValueError(
                f"{format_duration(value)} is too short: a check runs at most every "
                f"{format_duration(HARD_MIN_INTERVAL)} (min_interval, default "
                f"{format_duration(DEFAULT_MIN_INTERVAL)}, may ask more)"
            )
        return value


class ProcessCheck(_Check):
    """A process is running: by exact ``name``, a ``cmdline`` substring or a ``pid_file``."""

    type: Literal["process"]
    name: str | None = None
    cmdline: str | None = None
    pid_file: Path | None = None
    min_count: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _one_selector(self) -> ProcessCheck:
        given = [k for k in ("name", "cmdline", "pid_file") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("set exactly one of name, cmdline, pid_file")
        return self


class TcpPortCheck(_Check):
    """A TCP port is listening: ``connect`` to it, or find a ``listening`` socket."""

    type: Literal["tcp_port"]
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)]
    method: Literal["connect", "listening"] = "connect"


class DiskFreeCheck(_Check):
    """The filesystem holding ``path`` has at least this much free space."""

    type: Literal["disk_free"]
    path: Path
    min_free_bytes: Annotated[int, Field(ge=0)] | None = None
    min_free_percent: Percent | None = None

    @model_validator(mode="after")
    def _a_bound(self) -> DiskFreeCheck:
        if self.min_free_bytes is None and self.min_free_percent is None:
            raise ValueError("set min_free_bytes or min_free_percent")
        return self


class MemoryCheck(_Check):
    """Memory use is below a bound."""

    type: Literal["memory"]
    max_used_percent: Percent | None = None
    min_available_bytes: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _a_bound(self) -> MemoryCheck:
        if self.max_used_percent is None and self.min_available_bytes is None:
            raise ValueError("set max_used_percent or min_available_bytes")
        return self


class LoadCheck(_Check):
    """The load average is below a bound (per CPU with ``per_cpu``)."""

    type: Literal["load"]
    max_load1: Annotated[float, Field(ge=0.0)] | None = None
    max_load5: Annotated[float, Field(ge=0.0)] | None = None
    max_load15: Annotated[float, Field(ge=0.0)] | None = None
    per_cpu: bool = False

    @model_validator(mode="after")
    def _a_bound(self) -> LoadCheck:
        if self.max_load1 is None and self.max_load5 is None and self.max_load15 is None:
            raise ValueError("set max_load1, max_load5 or max_load15")
        return self


class FileAgeCheck(_Check):
    """A file exists and was modified within ``max_age``."""

    type: Literal["file_age"]
    path: Path
    max_age: Duration


class NagiosCheck(_Check):
    """A Nagios-compatible plugin: a command line (a list, never a shell)."""

    type: Literal["nagios"]
    command: Annotated[
        list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1, max_length=256)
    ]
    warning: Literal["soft_refute", "confirm", "error"] = Field(
        default="soft_refute", description="What exit code 1 (WARNING) means."
    )
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="Passed to the plugin (over the sensor's env)."
    )


Check = Annotated[
    ProcessCheck
    | TcpPortCheck
    | DiskFreeCheck
    | MemoryCheck
    | LoadCheck
    | FileAgeCheck
    | NagiosCheck,
    Field(discriminator="type"),
]


class RuntimeConfig(PollingConfig):
    """``[sensors.runtime]``: the checks by name, and their defaults (the polling keys
    ``interval``, ``min_interval``, ``jitter``, ``backoff_max``, ``confirm_every`` are
    the polling base's)."""

    checks: dict[CheckName, Check] = Field(default_factory=dict)
    env: dict[EnvName, str] = Field(
        default_factory=dict,
        description="Passed to Nagios plugins, with PATH and LANG; nothing else of the "
        "daemon's environment is.",
    )
    timeout_s: Seconds = 10.0
    deadline_key: ClassVar[str | None] = "timeout_s"
    reliability: Annotated[float, Field(ge=0.0, le=1.0)] = 0.9
    max_output_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 64 * 1024

    @model_validator(mode="after")
    def _check_intervals(self) -> RuntimeConfig:
        for name, check in self.checks.items():
            if check.interval is not None and check.interval < self.min_interval:
                raise ValueError(
                    f"checks.{name}.interval: {format_duration(check.interval)} is below "
                    f"min_interval ({format_duration(self.min_interval)})"
                )
        return self


class RuntimeBinding(BaseBinding):
    """``{"sensor": "runtime", "check": "db-port"}``: a check named in the config."""

    check: CheckName

    def subject_of(self) -> str:
        return self.check


class RuntimeSensor(PollingSensor[RuntimeConfig, RuntimeBinding]):
    """Runs the configured checks for the blocks bound to them."""

    quick_check: ClassVar[bool] = True  # answers in milliseconds: read-through may wait

    kind: ClassVar[str] = "runtime"
    Config: ClassVar[type[RuntimeConfig]] = RuntimeConfig
    Binding: ClassVar[type[RuntimeBinding]] = RuntimeBinding

    def validate_binding(self, selector: RuntimeBinding) -> None:
        """Refuse a binding to a check the config does not name."""
        if selector.check not in self.config.checks:
            known = ", ".join(sorted(self.config.checks)) or "none configured"
            raise ValueError(f"check: no runtime check named {selector.check!r} (known: {known})")

    def describe(self) -> dict[str, Any]:
        """What a binding may name (the configured checks) and an example for each."""
        checks = {name: check.type for name, check in sorted(self.config.checks.items())}
        return {
            "summary": "A named check from the config (process, port, disk, memory, load, "
            "file age, Nagios plugin): OK confirms, a failure refutes.",
            "binds": {"checks": checks},
            "keys": {"check": "the name of a configured check"},
            "examples": [{"check": name} for name in list(checks)[:5]],
        }

    async def binding_candidates(self, text: str, *, limit: int) -> list[BindingCandidate]:
        """The configured checks the text speaks of: by the check's name, and by what it
        checks (a process's name or program, a port number, a path); see
        docs/SUGGESTIONS.md. Nothing is run here."""
        text = _URL_IN_TEXT.sub(" ", text)  # a URL names an endpoint: the http sensor's
        said = set(stems(text))
        tokens = {w.lower() for w in re.findall(r"[\w./-]+", text)}
        numbers = {int(n) for n in re.findall(r"(?<![\w.])(\d{1,5})(?![\w.]*\d)", text)}
        ports = {n for n in numbers if 100 <= n <= 65535}
        down = negated(text, "runtime")
        out: list[BindingCandidate] = []
        for name, check in sorted(self.config.checks.items()):
            name_share, name_hit = overlap(stems(name), said)
            thing, subject, kind = _what_it_checks(check)
            thing_share, thing_hit = overlap(thing, said)
            named = next((s for s in subject if str(s) in tokens or s in numbers), None)
            if isinstance(check, TcpPortCheck) and named is None and ports & numbers:
                continue  # the text names another port: it speaks of something else
            kind_hit = [k for k in kind if k in said]
            share = max(name_share, thing_share)
            if named is None and (share < _MIN_NAME_SHARE or not (kind_hit or share == 1.0)):
                continue
            identity = 1.0 if named is not None else share
            confidence = 0.5 * identity + 0.3 * bool(kind_hit) + 0.2 * (named is not None)
            if confidence < _MIN_CHECK_CONFIDENCE:
                continue
            reasons = []
            if named is not None:
                reasons.append(f"the text names what {name!r} checks ({named})")
            if name_hit:
                reasons.append(f"the check's name matches {', '.join(name_hit)}")
            elif thing_hit:
                reasons.append(f"what it checks matches {', '.join(thing_hit)}")
            if kind_hit:
                reasons.append(f"a {check.type} check ({', '.join(kind_hit)})")
            if down:
                reasons.append("the text says it is down")
            out.append(
                BindingCandidate(
                    {"check": name},
                    round(confidence, 3),
                    "; ".join(reasons),
                    agrees=None,
                    negated=down,
                )
            )
        out.sort(key=lambda c: -c.confidence)
        return out[:limit]

    # ------------------------------------------------------------------ polling

    def interval_of(self, bound: BoundSubject[RuntimeBinding]) -> timedelta:
        check = self.config.checks.get(bound.selector.check)
        own = check.interval if check is not None else None
        return own if own is not None else self.config.interval

    def timeout_of(self, bound: BoundSubject[RuntimeBinding]) -> timedelta:
        check = self.config.checks.get(bound.selector.check)
        own = check.timeout_s if check is not None else None
        return timedelta(seconds=own or self.config.timeout_s) + _TIMEOUT_GRACE

    async def check(self, bound: BoundSubject[RuntimeBinding]) -> Observation:
        name = bound.selector.check
        check = self.config.checks.get(name)
        if check is None:  # bound before the config dropped the check: say so, never guess
            return Observation.error(f"no runtime check named {name!r}")
        timeout_s = check.timeout_s or self.config.timeout_s
        if isinstance(check, NagiosCheck):
            obs = await run_nagios(
                check.command,
                env=plugin_env(self.config.env, check.env),
                timeout_s=timeout_s,
                warning=check.warning,
                max_output_bytes=self.config.max_output_bytes,
            )
        else:
            try:
                async with asyncio.timeout(timeout_s):
                    obs = await _builtin(check)
            except TimeoutError:
                return Observation.error(f"check timed out after {timeout_s:g}s")
        if Outcome(obs.outcome) == Outcome.CONFIRMED:
            return dataclasses.replace(obs, reliability=self.config.reliability)
        return obs


# ---------------------------------------------------------------------- suggestions

_MIN_NAME_SHARE = 0.5
_URL_IN_TEXT = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_MIN_CHECK_CONFIDENCE = 0.3
# Program words that say nothing about which service a process is.
_GENERIC_PROGRAMS = frozenset(
    """python python3 node java ruby perl sh bash env bin usr local opt app main run server
    worker m c exec""".split()  # noqa: SIM905 - a word list reads better as prose
)
_KIND_WORDS: dict[str, tuple[str, ...]] = {
    "process": ("process", "run", "alive", "up", "daemon", "start", "down", "stop", "crash"),
    "tcp_port": ("port", "listen", "accept", "open", "connect", "reachabl", "up", "down"),
    "disk_free": ("disk", "space", "free", "storag", "full"),
    "memory": ("memori", "ram", "swap"),
    "load": ("load", "cpu"),
    "file_age": ("updat", "modifi", "fresh", "age", "written", "touch", "recent", "old"),
    "nagios": ("healthi", "ok", "up", "status"),
}


def _what_it_checks(check: _Check) -> tuple[list[str], list[str | int], tuple[str, ...]]:
    """A check's words (stemmed), the things that name it exactly (a program, a port, a
    path, lowercase), and its kind's words."""
    thing: list[str] = []
    subject: list[str | int] = []
    kind = _KIND_WORDS.get(getattr(check, "type", ""), ())
    if isinstance(check, ProcessCheck):
        text = check.name or check.cmdline or (check.pid_file.stem if check.pid_file else "")
        thing = stems(text)
        words = [w.lower() for w in re.findall(r"[A-Za-z][\w.-]+", text)]
        subject = [w for w in words if w not in _GENERIC_PROGRAMS and len(w) > 2]
        subject += [w.rsplit("/", 1)[-1] for w in words if "/" in w]
    elif isinstance(check, TcpPortCheck):
        subject = [check.port]
    elif isinstance(check, DiskFreeCheck | FileAgeCheck):
        thing = stems(str(check.path))
        subject = [str(check.path).lower()]
        if isinstance(check, FileAgeCheck):
            subject.append(check.path.name.lower())
    elif isinstance(check, NagiosCheck):
        program = Path(check.command[0]).name.removeprefix("check_")
        thing = stems(program)
        subject = [program.lower()] if program not in _GENERIC_PROGRAMS else []
    return thing, subject, kind


# ---------------------------------------------------------------------- built-in checks


async def _builtin(check: _Check) -> Observation:
    if isinstance(check, TcpPortCheck) and check.method == "connect":
        return await _tcp_connect(check)
    return await asyncio.to_thread(_blocking_check, check)


def _blocking_check(check: _Check) -> Observation:
    """The psutil checks (they may block on /proc or a slow filesystem: run in a thread)."""
    if isinstance(check, ProcessCheck):
        return _process(check)
    if isinstance(check, TcpPortCheck):
        return _tcp_listening(check)
    if isinstance(check, DiskFreeCheck):
        return _disk_free(check)
    if isinstance(check, MemoryCheck):
        return _memory(check)
    if isinstance(check, LoadCheck):
        return _load(check)
    if isinstance(check, FileAgeCheck):
        return _file_age(check)
    raise TypeError(f"not a built-in check: {type(check).__name__}")


def _verdict(message: str, observed: dict[str, Any], *, ok: bool) -> Observation:
    return Observation(Outcome.CONFIRMED if ok else Outcome.REFUTED, message, observed)


def _process(check: ProcessCheck) -> Observation:
    if check.pid_file is not None:
        return _process_by_pid_file(check.pid_file)
    me = os.getpid()
    pids = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        info = proc.info
        if proc.pid == me or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        by_name = check.name is not None and info.get("name") == check.name
        by_cmdline = check.cmdline is not None and check.cmdline in " ".join(
            info.get("cmdline") or ()
        )
        if by_name or by_cmdline:
            pids.append(proc.pid)
    what = f"name {check.name!r}" if check.name is not None else f"cmdline {check.cmdline!r}"
    n = len(pids)
    return _verdict(
        f"{n} process{'es' if n != 1 else ''} with {what} (at least {check.min_count} expected)",
        {"count": n, "pids": sorted(pids)[:32]},
        ok=n >= check.min_count,
    )


def _process_by_pid_file(path: Path) -> Observation:
    try:
        text = path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return Observation(Outcome.REFUTED, f"pid file {path} does not exist", {"running": False})
    try:
        pid = int(text.split()[0])
    except (ValueError, IndexError):
        return Observation(Outcome.ERROR, f"pid file {path} holds no pid: {text[:40]!r}")
    try:
        proc = psutil.Process(pid)
        running = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        running = False
    except psutil.AccessDenied:
        running = True  # it exists; we may just not look at it
    return _verdict(
        f"process {pid} (from {path}) is {'running' if running else 'not running'}",
        {"pid": pid, "running": running},
        ok=running,
    )


async def _tcp_connect(check: TcpPortCheck) -> Observation:
    where = f"{check.host}:{check.port}"
    try:
        _, writer = await asyncio.open_connection(check.host, check.port)
    except ConnectionRefusedError:
        return Observation(
            Outcome.REFUTED, f"nothing listens on {where} (refused)", {"open": False}
        )
    except OSError as err:
        return Observation(Outcome.ERROR, f"could not reach {where}: {err}")
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Observation(Outcome.CONFIRMED, f"{where} accepts connections", {"open": True})


def _tcp_listening(check: TcpPortCheck) -> Observation:
    where = f"{check.host}:{check.port}"
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied as err:
        return Observation(Outcome.ERROR, f"cannot list sockets: {err}")
    found = any(
        c.status == psutil.CONN_LISTEN
        and c.laddr
        and c.laddr.port == check.port
        and (check.host in _ANY_ADDRESS or c.laddr.ip in (check.host, *_ANY_ADDRESS))
        for c in conns
    )
    message = f"{'a' if found else 'no'} socket listens on {where}"
    return _verdict(message, {"listening": found}, ok=found)


def _disk_free(check: DiskFreeCheck) -> Observation:
    usage = psutil.disk_usage(str(check.path))
    free_percent = 100.0 * usage.free / usage.total if usage.total else 0.0
    ok = (check.min_free_bytes is None or usage.free >= check.min_free_bytes) and (
        check.min_free_percent is None or free_percent >= check.min_free_percent
    )
    wanted = " and ".join(
        w
        for w in (
            f"{check.min_free_bytes} bytes" if check.min_free_bytes is not None else "",
            f"{check.min_free_percent:g}%" if check.min_free_percent is not None else "",
        )
        if w
    )
    return _verdict(
        f"{usage.free} bytes ({free_percent:.1f}%) free on {check.path}; at least {wanted} wanted",
        {"free_bytes": usage.free, "free_percent": round(free_percent, 2), "total": usage.total},
        ok=ok,
    )


def _memory(check: MemoryCheck) -> Observation:
    vm = psutil.virtual_memory()
    ok = (check.max_used_percent is None or vm.percent <= check.max_used_percent) and (
        check.min_available_bytes is None or vm.available >= check.min_available_bytes
    )
    return _verdict(
        f"memory {vm.percent:.1f}% used, {vm.available} bytes available",
        {"used_percent": vm.percent, "available_bytes": vm.available},
        ok=ok,
    )


def _load(check: LoadCheck) -> Observation:
    loads = psutil.getloadavg()
    cpus = (psutil.cpu_count() or 1) if check.per_cpu else 1
    values = [round(x / cpus, 3) for x in loads]
    bounds = (check.max_load1, check.max_load5, check.max_load15)
    over = [
        f"load{m} {v:g} > {b:g}"
        for m, v, b in zip((1, 5, 15), values, bounds, strict=True)
        if b is not None and v > b
    ]
    observed: dict[str, Any] = {
        "load1": values[0],
        "load5": values[1],
        "load15": values[2],
        "cpus": cpus,
    }
    if over:
        return Observation(Outcome.REFUTED, "; ".join(over), observed)
    return Observation(Outcome.CONFIRMED, "load " + " ".join(f"{v:g}" for v in values), observed)


def _file_age(check: FileAgeCheck) -> Observation:
    try:
        mtime = check.path.stat().st_mtime
    except FileNotFoundError:
        return Observation(Outcome.REFUTED, f"{check.path} does not exist", {"exists": False})
    age_s = max(0.0, time.time() - mtime)  # file times are the OS's: compare with its clock
    limit_s = check.max_age.total_seconds()
    return _verdict(
        f"{check.path} was modified {age_s:.0f}s ago (at most {limit_s:g}s allowed)",
        {"exists": True, "age_s": round(age_s, 3)},
        ok=age_s <= limit_s,
    )


# ---------------------------------------------------------------------- Nagios plugins

_PERF_ITEM = re.compile(r"""(?:'((?:[^']|'')+)'|([^\s'=]+))=(\S*)""")
_PERF_VALUE = re.compile(r"(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|U)(\D*)")


def _number(text: str) -> int | float | str:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text  # a range such as 1:10 or @~:5


def parse_perfdata(text: str) -> dict[str, dict[str, Any]]:
    """Nagios perfdata (``'label'=value[UOM];[warn];[crit];[min];[max]`` ...) as a dict.

    ``{"label": {"value": 1.5, "uom": "s", "warn": ..., "crit": ..., "min": ..., "max":
    ...}}``; absent fields are left out, ``U`` (unknown) becomes ``None``, thresholds that
    are ranges stay strings. Malformed items are skipped.
    """
    out: dict[str, dict[str, Any]] = {}
    for m in _PERF_ITEM.finditer(text):
        label = m.group(1).replace("''", "'") if m.group(1) is not None else m.group(2)
        parts = m.group(3).split(";")
        value = _PERF_VALUE.fullmatch(parts[0])
        if value is None:
            continue
        raw, uom = value.groups()
        entry: dict[str, Any] = {"value": None if raw == "U" else _number(raw), "uom": uom}
        for key, part in zip(("warn", "crit", "min", "max"), parts[1:5], strict=False):
            if part:
                entry[key] = _number(part)
        out[label] = entry
    return out


def parse_plugin_output(text: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """The status line and the perfdata of a plugin's output (long output included)."""
    lines = text.splitlines()
    if not lines:
        return "", {}
    status, _, perf = lines[0].partition("|")
    rest = "\n".join(lines[1:])
    if "|" in rest:
        perf += " " + rest.split("|", 1)[1]
    return status.strip(), parse_perfdata(perf)


async def _read_capped(stream: asyncio.StreamReader | None, cap: int) -> bytes:
    """Read to EOF, keeping only the first ``cap`` bytes (a chatty plugin costs nothing)."""
    if stream is None:
        return b""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group id is its pid


def plugin_env(*layers: Mapping[str, str]) -> dict[str, str]:
    """PATH and LANG from the daemon, then each layer of configured variables in turn."""
    env = {k: v for k in PASSED_THROUGH_ENV if (v := os.environ.get(k)) is not None}
    for layer in layers:
        env.update(layer)
    return env


async def run_nagios(
    command: list[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float,
    warning: str = "soft_refute",
    max_output_bytes: int = 64 * 1024,
) -> Observation:
    """Run a Nagios-compatible plugin in its own session and map its exit code.

    The plugin's environment is ``env`` (default: :func:`plugin_env`), never the daemon's.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            env=dict(env) if env is not None else plugin_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as err:
        return Observation(
            Outcome.ERROR, f"could not start {command[0]}: {err}", {"exit_code": None}
        )
    try:
        async with asyncio.timeout(timeout_s):
            out, err_out = await asyncio.gather(
                _read_capped(proc.stdout, max_output_bytes),
                _read_capped(proc.stderr, max_output_bytes),
            )
            code = await proc.wait()
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        return Observation(
            Outcome.ERROR,
            f"{Path(command[0]).name} timed out after {timeout_s:g}s (process group killed)",
            {"exit_code": None, "timed_out": True},
        )
    finally:
        if proc.returncode is None:  # cancelled: leave nothing running behind us
            _kill_group(proc)
    status, perfdata = parse_plugin_output(out.decode("utf-8", "replace"))
    if not status:
        status = err_out.decode("utf-8", "replace").strip().split("\n", 1)[0]
    name = NAGIOS_STATUS.get(code, "UNKNOWN")
    observed: dict[str, Any] = {"exit_code": code, "status": name, "perfdata": perfdata}
    message = status or f"{Path(command[0]).name} exited with {code}"
    if code == 0:
        outcome = Outcome.CONFIRMED
    elif code == 1:
        outcome = {"confirm": Outcome.CONFIRMED, "error": Outcome.ERROR}.get(
            warning, Outcome.REFUTED
        )
    elif code == 2:
        outcome = Outcome.REFUTED
    else:
        outcome = Outcome.ERROR
        if code < 0:
            message = f"{Path(command[0]).name} was killed by signal {-code}"
    return Observation(outcome, message[:1000], observed)
