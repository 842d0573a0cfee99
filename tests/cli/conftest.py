"""The CLI runs against a real daemon process (or a database file with --db)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typer.testing import CliRunner

from memwarden.cli import app
from tests.api.conftest import live_daemon

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

__all__ = ["cli_for", "invoker", "live_daemon"]


def cli_for(home: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``run(*args, code=0)``: the CLI as a user runs it against the daemon whose state
    dir is ``home`` (``MEMWARDEN_HOME``; no URL or token overrides), asserting its exit
    code and returning the result."""
    monkeypatch.setenv("MEMWARDEN_HOME", str(home))
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    return invoker()


def invoker() -> Callable[..., Any]:
    """``run(*args, code=0)``: the CLI run in this process with the environment as it
    is, asserting its exit code and returning the result."""
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, result.output
        return result

    return run
