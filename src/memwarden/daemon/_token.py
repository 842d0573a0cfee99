"""The API token file: made once, checked at every start.

``<home>/token`` is created on first start only (when it does not exist): 43 random
URL-safe characters, written to a temp file, fsync-ed, linked into place (never over an
existing token) and the directory fsync-ed, so a crash or a full disk leaves either no
token or a whole one. A token file that exists but cannot be trusted is never replaced
silently (clients may hold it): the daemon refuses to start, naming the problem, and
exits 78 (EX_CONFIG). Refused: not a regular file (a symlink included), not owned by the
daemon's user, readable or writable by group or others (not 0600 or 0400), empty,
shorter than :data:`MIN_TOKEN_CHARS`, or characters other than printable ASCII.
"""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

from memwarden._files import private_dir, read_private, write_private
from memwarden.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["MIN_TOKEN_CHARS", "TOKEN_FILE", "ensure_token", "read_token", "refusal"]

TOKEN_FILE = "token"  # noqa: S105 - a file name, not a secret
MIN_TOKEN_CHARS = 32
MAX_TOKEN_BYTES = 4096


def refusal(what: str, fix: str) -> Callable[[str], ConfigError]:
    """How a private file (``what``) that is unfit is refused: a :class:`ConfigError`
    ``"<what>: <problem>. <fix>"``."""

    def refuse(problem: str) -> ConfigError:
        message = f"{what}: {problem}. {fix}"
        return ConfigError(message, problems=[message])

    return refuse


def ensure_token(home: Path) -> str:
    """The API token in ``home/token``: created (0600, durably) only when it does not
    exist; otherwise checked, and a :class:`ConfigError` naming the problem if it is unfit.
    """
    path = home / TOKEN_FILE
    if not os.path.lexists(path):  # a dangling symlink counts as existing (and is refused)
        private_dir(home)
        token = secrets.token_urlsafe(32)
        if write_private(path, (token + "\n").encode(), replace=False):
            return token
        # another process made it first: check theirs like any existing token
    return read_token(path)


def read_token(path: Path) -> str:
    """Read and check an existing token file (see the module's rules)."""

    refuse = refusal(
        f"token file {path}",
        "Fix it, or delete it to have a new token made at the next start (clients then need "
        "the new one)",
    )
    raw = read_private(path, MAX_TOKEN_BYTES, refuse)
    token = raw.strip()
    if not token:
        raise refuse("is empty")
    if not all(0x21 <= b <= 0x7E for b in token):
        raise refuse("holds characters other than printable ASCII (or spaces)")
    if len(token) < MIN_TOKEN_CHARS:
        raise refuse(f"holds {len(token)} characters; at least {MIN_TOKEN_CHARS} are needed")
    return token.decode("ascii")
