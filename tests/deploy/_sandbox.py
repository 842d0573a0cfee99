"""Run a command under a unit's process-level sandbox, without systemd.

``python _sandbox.py UNIT_FILE -- COMMAND [ARG...]`` applies what systemd would apply to
the service's own process for these settings of ``[Service]`` in ``UNIT_FILE``, then
``execv``s the command:

- ``SystemCallFilter=`` (resolved with ``systemd-analyze syscall-filter``, in order, ``~``
  removing) with ``SystemCallErrorNumber=`` as the action for everything else, and
  ``SystemCallArchitectures=native`` (libseccomp filters the native ABI only);
- ``MemoryDenyWriteExecute=yes``: no ``mmap`` writable and executable, no ``mprotect`` or
  ``pkey_mprotect`` adding ``PROT_EXEC``, no ``shmat`` with ``SHM_EXEC`` (as systemd's
  ``seccomp_memory_deny_write_execute``);
- ``RestrictAddressFamilies=``: ``socket()`` of any other family fails ``EAFNOSUPPORT``;
- ``RestrictNamespaces=yes``: no namespace flags for ``clone``/``unshare``, no ``setns``,
  and ``clone3`` fails ``ENOSYS`` so the C library falls back to ``clone``;
- ``NoNewPrivileges=yes``, ``CapabilityBoundingSet=`` (empty, when we are root) and
  ``UMask=``.

It does not emulate the mount, user or network namespaces (``ProtectSystem=``,
``PrivateUsers=``, ``IPAddressDeny=``, ...): those need privileges a test run may lack.
The seccomp rules are the ones that can break a working program, and they are the ones
checked here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import subprocess
import sys
from pathlib import Path

# libseccomp's ABI (seccomp.h): actions, comparison operators, the argument comparison.
_ACT_KILL_PROCESS = 0x80000000
_ACT_ALLOW = 0x7FFF0000
_CMP_EQ = 4
_CMP_GE = 5
_CMP_MASKED_EQ = 7

_PROT_WRITE = 0x2
_PROT_EXEC = 0x4
_SHM_EXEC = 0o100000
_NAMESPACE_FLAGS = (
    0x00000080,  # CLONE_NEWTIME
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
_AF_MAX = 46
_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}
_PR_CAPBSET_DROP = 24
# systemd allows these whatever the filter says (systemd.exec(5), SystemCallFilter=).
_ALWAYS = frozenset(
    {
        "execve",
        "exit",
        "exit_group",
        "getrlimit",
        "rt_sigreturn",
        "sigreturn",
        "clock_gettime",
        "clock_getres",
        "clock_nanosleep",
        "gettimeofday",
        "nanosleep",
        "time",
    }
)


class _ArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


def service_settings(unit: Path) -> dict[str, list[str]]:
    """Every ``Key=value`` of the unit's ``[Service]`` section, values in file order."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in unit.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def syscall_groups() -> dict[str, list[str]]:
    """systemd's syscall groups, as this system's ``systemd-analyze`` defines them."""
    text = subprocess.run(
        ["systemd-analyze", "syscall-filter"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    groups: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if re.match(r"^@[\w-]+$", line):
            current = groups.setdefault(line, [])
        elif line.startswith("    ") and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def _expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for name in names:
        if name.startswith("@"):
            out |= _expand(groups.get(name, []), groups)
        else:
            out.add(name)
    return out


def allowed_syscalls(filters: list[str], groups: dict[str, list[str]]) -> set[str]:
    """The allow list ``SystemCallFilter=`` lines build (the first line must allow)."""
    allowed: set[str] = set()
    for value in filters:
        if value.startswith("~"):
            allowed -= _expand(value[1:].split(), groups)
        else:
            allowed |= _expand(value.split(), groups)
    return allowed | _ALWAYS


class _Filter:
    def __init__(self, lib: ctypes.CDLL, default_action: int) -> None:
        self.lib = lib
        self.ctx = lib.seccomp_init(ctypes.c_uint32(default_action))
        if not self.ctx:
            raise OSError("seccomp_init failed")

    def rule(self, action: int, name: str, *cmps: tuple[int, int, int, int]) -> bool:
        nr = self.lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # not a syscall of this architecture (or unknown to libseccomp)
            return False
        array = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(*c) for c in cmps])
        rc = self.lib.seccomp_rule_add_array(
            self.ctx, ctypes.c_uint32(action), nr, ctypes.c_uint(len(cmps)), array
        )
        return rc == 0

    def load(self) -> None:
        rc = self.lib.seccomp_load(self.ctx)
        self.lib.seccomp_release(self.ctx)
        if rc != 0:
            raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")


def _libseccomp() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    )
    lib.seccomp_load.argtypes = (ctypes.c_void_p,)
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    return lib


def _yes(settings: dict[str, list[str]], key: str) -> bool:
    return settings.get(key, ["no"])[-1].lower() in {"yes", "true", "1", "on"}


def apply(unit: Path) -> None:
    """Apply the unit's process sandbox to this process (and what it executes)."""
    settings = service_settings(unit)
    lib = _libseccomp()
    filters = settings.get("SystemCallFilter", [])
    allowed = allowed_syscalls(filters, syscall_groups()) if filters else set()
    if (umask := settings.get("UMask")) is not None:
        os.umask(int(umask[-1], 8))
    if settings.get("CapabilityBoundingSet") == [""] and os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        cap = 0
        while libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
            cap += 1

    # First, argument checks on calls the allow list lets through.
    deny = _Filter(lib, _ACT_ALLOW)
    eperm = _errno_action(errno.EPERM)
    if _yes(settings, "MemoryDenyWriteExecute"):
        wx = _PROT_WRITE | _PROT_EXEC
        deny.rule(eperm, "mmap", (2, _CMP_MASKED_EQ, wx, wx))
        deny.rule(eperm, "mprotect", (2, _CMP_MASKED_EQ, _PROT_EXEC, _PROT_EXEC))
        deny.rule(eperm, "pkey_mprotect", (2, _CMP_MASKED_EQ, _PROT_EXEC, _PROT_EXEC))
        deny.rule(eperm, "shmat", (2, _CMP_MASKED_EQ, _SHM_EXEC, _SHM_EXEC))
    if families := settings.get("RestrictAddressFamilies"):
        ok = {_FAMILIES[f] for f in " ".join(families).split()}
        refuse = _errno_action(errno.EAFNOSUPPORT)
        for family in sorted(set(range(_AF_MAX)) - ok):
            deny.rule(refuse, "socket", (0, _CMP_EQ, family, 0))
        deny.rule(refuse, "socket", (0, _CMP_GE, _AF_MAX, 0))
    if _yes(settings, "RestrictNamespaces"):
        deny.rule(_errno_action(errno.ENOSYS), "clone3")
        deny.rule(eperm, "setns")
        for flag in _NAMESPACE_FLAGS:
            deny.rule(eperm, "clone", (0, _CMP_MASKED_EQ, flag, flag))
            deny.rule(eperm, "unshare", (0, _CMP_MASKED_EQ, flag, flag))
    deny.load()  # libseccomp sets no_new_privs first (NoNewPrivileges=yes)

    # Then the allow list (last: it forbids seccomp() itself). Everything else fails with
    # SystemCallErrorNumber=.
    if filters:
        err = settings.get("SystemCallErrorNumber", [""])[-1]
        default = _errno_action(getattr(errno, err)) if err else _ACT_KILL_PROCESS
        allow = _Filter(lib, default)
        for name in sorted(allowed):
            allow.rule(_ACT_ALLOW, name)
        allow.load()


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: _sandbox.py UNIT_FILE -- COMMAND [ARG...]")
    apply(Path(argv[0]))
    os.execv(argv[2], argv[2:])  # noqa: S606 - exec is the point


if __name__ == "__main__":
    main(sys.argv[1:])
