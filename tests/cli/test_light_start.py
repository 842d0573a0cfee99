"""A short command starts light: talking to the daemon, or reading a database file, never
imports the daemon's HTTP API, console and web framework (about a second of CPU each time
an agent or a script runs `memwarden search`)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from memwarden import daemon
from tests.projects import user_env

if TYPE_CHECKING:
    from pathlib import Path

HEAVY = ("fastapi", "uvicorn", "memwarden.daemon._app", "memwarden.daemon._api")

# Runs one command in-process and prints which heavy modules it loaded, after it exits.
PROBE = """
import json, sys
from memwarden.cli import main
sys.argv[0] = "memwarden"
try:
    main()
except SystemExit:
    pass
print(json.dumps([m for m in {heavy!r} if m in sys.modules]))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "x"],  # no daemon here: the error says how to start one
        ["search", "x", "--db", "{dir}/m.db"],
        ["add", "a fact", "--db", "{dir}/m.db"],
        ["stale", "--db", "{dir}/m.db"],
        ["migrate", "--to", "mysql://u@h/x", "--db", "{dir}/m.db"],
    ],
)
def test_a_short_command_never_imports_the_daemons_web_stack(tmp_path: Path, argv: list[str]):
    args = [a.replace("{dir}", str(tmp_path)) for a in argv]
    probe = PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        cwd=tmp_path,
        env=user_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [], f"{args[0]} imported {loaded}"


def test_the_daemon_package_still_offers_every_name():
    """The lazy package: every name in ``__all__`` resolves, an unknown one is an
    AttributeError."""
    for name in daemon.__all__:
        assert getattr(daemon, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        daemon.Nope  # noqa: B018
