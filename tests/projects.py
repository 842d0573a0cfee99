"""Projects with their own `memwarden run`, as a user has them: a directory, a config
written by `memwarden init`, a daemon process started in it, the CLI run from it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

MEMWARDEN = Path(sys.executable).with_name("memwarden")


def user_env(tmp: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a user who set nothing memwarden-specific."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMWARDEN_")}
    env["XDG_STATE_HOME"] = str(tmp / "xdg-state")
    env["MEMWARDEN_LOG_LEVEL"] = "info"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env.update(extra or {})
    return env


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout_s: float,
    what: str,
    process: subprocess.Popen[bytes] | None = None,
) -> Any:
    """Poll ``predicate`` until truthy (deadline-bounded); fail early if ``process`` died."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            pytest.fail(f"{what}: the process exited with {process.returncode}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s}s")
        time.sleep(0.02)  # one poll step of a deadline-bounded wait on another process


@dataclass
class Project:
    """A directory with a memwarden.toml and, once started, its daemon."""

    root: Path
    env: dict[str, str]
    exe: Path = MEMWARDEN
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _log: Any = field(default=None, repr=False)

    def cli(
        self, *args: str, cwd: Path | None = None, timeout_s: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.exe), *args],
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    @property
    def api_file(self) -> Path:
        return self.root / ".memwarden" / "api.json"

    def start(self, *args: str, timeout_s: float = 60) -> str:
        """`memwarden run` in the project; returns its URL once it listens."""
        self.log_path = self.root.parent / f"{self.root.name}-daemon.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(self.exe), "run", *args],
            cwd=self.root,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_for(self.api_file.exists, timeout_s=timeout_s, what="api.json", process=self.process)
        return str(json.loads(self.api_file.read_text())["url"])

    def stop(self, timeout_s: float = 30) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""
