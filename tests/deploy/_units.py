"""Helpers for reading the unit files the way systemd does, for the deployment tests."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.deploy._sandbox import service_settings

__all__ = [
    "REPO",
    "SANDBOX",
    "SYSTEMD",
    "SYSTEM_UNIT",
    "USER_UNIT",
    "exec_start",
    "need_tool",
    "service_env",
    "service_settings",
    "time_span_s",
]

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "systemd"
SYSTEM_UNIT = SYSTEMD / "memwarden.service"
USER_UNIT = SYSTEMD / "memwarden-user.service"
SANDBOX = Path(__file__).with_name("_sandbox.py")

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|sec|s|min|m|h)?")
_SPAN_S = {"ms": 0.001, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "": 1.0}


def need_tool(name: str) -> str:
    """The tool's path; skips without it, or fails on CI, where system-deps installs it."""
    found = shutil.which(name) or shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if found:
        return found
    reason = f"{name} is not installed (Debian package systemd; scripts/system-deps.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def time_span_s(value: str) -> float:
    """A systemd time span (``30s``, ``1min 30s``, ``500ms``, ``90``) in seconds."""
    return sum(float(n) * _SPAN_S[unit] for n, unit in _SPAN.findall(value))


def exec_start(unit: Path, *, binary: Path, config: Path) -> list[str]:
    """The unit's ``ExecStart=`` as argv, with our binary and config file substituted."""
    (line,) = service_settings(unit)["ExecStart"]
    argv = shlex.split(line)
    assert argv[0].endswith("/memwarden"), argv
    assert "--config" in argv, argv
    at = argv.index("--config") + 1
    return [str(binary), *argv[1:at], str(config), *argv[at + 1 :]]


def service_env(unit: Path, **extra: str) -> dict[str, str]:
    """The environment systemd would give the service: PATH, LANG, the unit's
    ``Environment=`` lines and ``extra``. Nothing else is inherited (no ``MEMWARDEN_*``)
    but coverage's own variables, so that the daemon is measured too."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")})
    for line in service_settings(unit).get("Environment", []):
        for item in shlex.split(line):
            key, _, value = item.partition("=")
            env[key] = value
    env.update(extra)
    return env
