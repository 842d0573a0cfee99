"""Running the code_test command inside bubblewrap (``bwrap``).

The tests under check are code that an agent may have written, so their run sees only
what it needs: a new mount namespace built from nothing but

- the system directories, read-only (``/usr``, ``/bin``, ``/lib*``, ``/sbin``, ``/etc``);
- the interpreter's prefixes, read-only (the venv of the command and the Python it
  links to), and the ``read_paths`` the config lists;
- the project root, read-only (read-write with ``project_writable``), and the sensor's
  private report directory, read-write;
- a fresh ``/tmp`` (also ``HOME``), ``/dev`` and ``/proc``;

with the daemon's state directory (token, database, sockets) and every ``hide`` path
covered by an empty tmpfs even when they lie under a bound directory. All namespaces are
new (``--unshare-all``): no network unless the config grants it, its own PID namespace
(it cannot see, signal or trace the daemon; ``/proc`` shows only the sandbox), and it
dies with the sensor (``--die-with-parent``). No capabilities are kept.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["SYSTEM_DIRS", "SandboxSpec", "bwrap_argv", "find_bwrap", "interpreter_paths"]

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SANDBOX_HOME = "/tmp"  # noqa: S108 - the sandbox's own fresh tmpfs, nobody else's /tmp


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What the sandboxed run may see; paths are absolute."""

    project_root: Path
    project_writable: bool = False
    read_paths: tuple[Path, ...] = ()
    write_paths: tuple[Path, ...] = ()
    hide: tuple[Path, ...] = ()
    network: bool = False
    system_dirs: tuple[str, ...] = field(default=SYSTEM_DIRS)


def find_bwrap(path: str | None = None) -> str | None:
    """The bwrap executable on ``path`` (default: the daemon's PATH), if any."""
    return shutil.which("bwrap", path=path)


def interpreter_paths(command: Sequence[str], path_env: str | None) -> list[Path]:
    """What the command's executable needs to run: its venv and the Python behind it.

    For ``/x/.venv/bin/python`` that is ``/x/.venv`` and, through the symlink, the base
    installation (``/usr``, ``~/.pyenv/versions/3.12.1`` ...). A directory is returned only
    when it is a Python installation (``pyvenv.cfg`` or ``lib/python3.*`` in it), so that
    ``~/bin/pytest`` never exposes the whole home directory: then only the executable
    itself (and what it links to) is returned.
    """
    exe = command[0]
    found = exe if os.sep in exe else shutil.which(exe, path=path_env)
    if found is None:
        return []
    candidates = [Path(found).absolute(), Path(found).resolve()]
    if exe == sys.executable:
        candidates += [Path(p) / "bin" / "python" for p in (sys.prefix, sys.base_prefix)]
    out: list[Path] = []
    for candidate in candidates:
        prefix = candidate.parent.parent
        keep = prefix if _is_python_prefix(prefix) else candidate
        if keep != Path(keep.anchor) and keep not in out:
            out.append(keep)
    return out


def _is_python_prefix(path: Path) -> bool:
    if path == Path(path.anchor):
        return False
    return (path / "pyvenv.cfg").is_file() or any((path / "lib").glob("python3*"))


def _binds(spec: SandboxSpec) -> list[tuple[Path, str]]:
    """(path, mode) for every bind, parents before children so none hides another."""
    wanted: dict[Path, str] = {}
    for p in spec.read_paths:
        wanted.setdefault(p, "--ro-bind-try")
    wanted[spec.project_root] = "--bind" if spec.project_writable else "--ro-bind"
    for p in spec.write_paths:
        wanted[p] = "--bind"
    return sorted(wanted.items(), key=lambda item: len(item[0].parts))


def _under_any(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def bwrap_argv(bwrap: str, spec: SandboxSpec, argv: Sequence[str]) -> list[str]:
    """``bwrap <options> -- argv``: the command line that runs ``argv`` sandboxed."""
    out = [bwrap, "--die-with-parent", "--unshare-all", "--cap-drop", "ALL"]
    if spec.network:
        out.append("--share-net")
    visible: list[Path] = []
    for d in spec.system_dirs:
        p = Path(d)
        if p.is_symlink():
            out += ["--symlink", str(p.readlink()), d]
        elif p.is_dir():
            out += ["--ro-bind", d, d]
            visible.append(p)
    out += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]  # noqa: S108 - new tmpfs mounts inside the sandbox
    for path, mode in _binds(spec):
        out += [mode, str(path), str(path)]
        visible.append(path)
    covered: list[Path] = []
    for hidden in sorted(set(spec.hide), key=lambda p: len(p.parts)):
        if not _under_any(hidden, visible) or _under_any(hidden, covered):
            continue  # not visible anyway, or inside what is already covered
        if hidden.is_dir():
            out += ["--tmpfs", str(hidden)]
            covered.append(hidden)
        elif hidden.exists():
            out += ["--ro-bind", "/dev/null", str(hidden)]
    out += ["--setenv", "HOME", SANDBOX_HOME, "--chdir", str(spec.project_root), "--", *argv]
    return out
