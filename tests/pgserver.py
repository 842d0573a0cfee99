"""A PostgreSQL server of the test's own: ``initdb`` + ``pg_ctl`` in a temp dir.

Never the machine's running service: each :class:`PgServer` makes a fresh cluster in its
own directory, listens on a free port on 127.0.0.1 only (and a socket in that directory),
trusts connections from loopback, and is stopped (``pg_ctl stop -m immediate``) and
removed at the end. ``initdb`` refuses to run as root, so under root the cluster belongs
to an unprivileged user (``postgres`` if it exists, else ``nobody``) and every
``initdb`` / ``pg_ctl`` runs as that user (``runuser``).

The binaries come from Debian's ``postgresql`` package (``/usr/lib/postgresql/<v>/bin``),
installed by ``scripts/system-deps.sh`` under ``CI=true``. Without them a test that needs a
server skips with the reason, except under ``CI=true``, where it fails.

Use the ``pg_server`` fixture (one server per test session; each test asks it for a fresh
database with :meth:`PgServer.create_database`) or the class directly when a test must kill
and restart its server.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Self

import psutil
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["PgServer", "pg_bin", "pg_server", "require_pg"]

_SUPERUSER = "memwarden"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pg_bin() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: on PATH, or the
    newest ``/usr/lib/postgresql/<version>/bin``; None when there is none."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def require_pg() -> Path:
    """``pg_bin()``, or skip (fail under ``CI=true``) naming what is missing."""
    found = pg_bin()
    if found is None:
        reason = (
            "PostgreSQL server binaries (initdb, pg_ctl) are not installed: "
            "run scripts/system-deps.sh with CI=true"
        )
        if _in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _owner() -> pwd.struct_passwd | None:
    """The user the cluster runs as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    msg = "running as root and neither a 'postgres' nor a 'nobody' user exists for initdb"
    raise RuntimeError(msg)


@dataclass
class PgServer:
    """One throw-away PostgreSQL cluster. ``start()`` it (or use it as a context manager)."""

    bindir: Path
    port: int = 0
    root: Path = field(init=False)
    _owner: pwd.struct_passwd | None = field(init=False, default=None)
    _log: Path = field(init=False)

    def __post_init__(self) -> None:
        self._owner = _owner()
        # Not pytest's tmp_path: that is 0700 under root's own directory, which the
        # unprivileged owner could not enter.
        self.root = Path(tempfile.mkdtemp(prefix="memwarden-pg-"))
        self._log = self.root / "server.log"
        if self._owner is not None:
            os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
        if not self.port:
            self.port = _free_port()

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def user(self) -> str:
        return _SUPERUSER

    def dsn(self, database: str = "postgres") -> str:
        """``postgresql://memwarden@127.0.0.1:<port>/<database>`` (trust on loopback)."""
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self._owner is not None:
            command = ["runuser", "-u", self._owner.pw_name, "--", *command]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
        return subprocess.run(
            command,
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def _check(self, done: subprocess.CompletedProcess[str], what: str) -> None:
        if done.returncode != 0:
            log = self._log.read_text(errors="replace")[-2000:] if self._log.exists() else ""
            msg = f"{what} failed ({done.returncode}): {done.stderr.strip()}\n{log}"
            raise RuntimeError(msg)

    def init(self) -> None:
        done = self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            _SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        self._check(done, "initdb")
        # Loopback only, our own socket directory, and the settings of a test server
        # (nothing here needs to survive a power cut; the crash tests kill the daemon,
        # not the database).
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                "\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                "max_connections = 100\nshared_buffers = 64MB\n"
            )

    def start(self, timeout_s: float = 60.0) -> Self:
        """initdb (once) and start; returns when the server accepts connections. A port
        taken in the meantime by someone else is replaced by another free one."""
        if not self.data.exists():
            self.init()
        for _attempt in range(3):
            done = self._run(
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self._log),
                "-o",
                f"-p {self.port}",
                "-w",
                "-t",
                str(int(timeout_s)),
                "start",
                timeout_s=timeout_s + 10,
            )
            if done.returncode == 0:
                return self
            if "could not bind" in self._log.read_text(errors="replace"):
                self.port = _free_port()
                continue
            self._check(done, "pg_ctl start")
        msg = f"PostgreSQL did not start: {self._log.read_text(errors='replace')[-2000:]}"
        raise RuntimeError(msg)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no checkpoint)."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def processes(self) -> list[psutil.Process]:
        """The running server's processes: the postmaster (from ``postmaster.pid``) and
        the processes it started."""
        main = psutil.Process(int((self.data / "postmaster.pid").read_text().split()[0]))
        return [main, *main.children(recursive=True)]

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with the server's own psql (no driver needed); its output."""
        psql = self.bindir / "psql"
        binary = str(psql) if psql.exists() else (shutil.which("psql") or "psql")
        done = subprocess.run(
            [binary, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql, self.dsn(database)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        self._check(done, f"psql {sql[:60]!r}")
        return done.stdout

    def create_database(self, prefix: str = "t") -> str:
        """A fresh, empty database on this server; its DSN."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.psql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.remove()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the test session (skips without the binaries, fails
    under CI=true). Tests take a fresh database each: ``pg_server.create_database()``."""
    bindir = require_pg()
    server = PgServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.remove()
