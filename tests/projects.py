"""Projects with their own `memwarden run`, as a user has them: a directory, a config
written by `memwarden init`, a daemon process started in it, the CLI run from it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support import MEMWARDEN, DaemonProcess, start_memwarden

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MEMWARDEN", "Project", "user_env"]


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


@dataclass
class Project:
    """A directory with a memwarden.toml and, once started, its daemon."""

    root: Path
    env: dict[str, str]
    exe: Path = MEMWARDEN
    daemon: DaemonProcess | None = None
    log_path: Path | None = None

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
        self.daemon = start_memwarden(
            self.root / ".memwarden",
            *args,
            env=self.env,
            cwd=self.root,
            log_path=self.log_path,
            timeout_s=timeout_s,
            exe=self.exe,
        )
        return self.daemon.url

    def stop(self, timeout_s: float = 30) -> int:
        assert self.daemon is not None
        return self.daemon.stop(timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""
