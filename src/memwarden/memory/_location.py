"""Where a store is: a SQLite file or a PostgreSQL server, from what a person wrote.

:func:`store_location` reads a path, a ``sqlite:///path`` URL or a ``postgresql://``
(``postgres://``) URL, and answers a :class:`~pathlib.Path` (SQLite) or the URL itself
(PostgreSQL, checked by :func:`~memwarden.memory.pg._dsn.check_dsn`); anything else
is a :class:`~memwarden.errors.ConfigError` that never shows a password.

The PostgreSQL package is imported only for a ``postgresql://`` URL: its driver, asyncpg,
is the ``postgres`` extra, which a SQLite store does not need.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from memwarden.errors import ConfigError

__all__ = ["is_url", "shown_location", "store_location"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_PG_SCHEMES = ("postgresql", "postgres")


def is_url(value: str | Path) -> bool:
    """Whether ``value`` is written as a URL (``scheme://…``), not a path."""
    return isinstance(value, str) and _SCHEME.match(value) is not None


def store_location(value: str | Path) -> Path | str:
    """A SQLite file's :class:`Path`, or a PostgreSQL URL (a ``str``), from a path or a
    ``sqlite:///path`` / ``postgresql://`` URL."""
    if isinstance(value, Path):
        return value
    match = _SCHEME.match(value)
    if match is None:
        if not value:
            raise ConfigError("the store's location is empty")
        return Path(value)
    scheme = match.group(1).lower()
    if scheme in _PG_SCHEMES:
        return str(_pg_dsn().check_dsn(value))
    # The messages below never repeat the URL: it might hold a password.
    if scheme != "sqlite":
        raise ConfigError(
            f"a store URL starts with sqlite:// or postgresql://, not {scheme[:20]!r}://"
        )
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if parts is None or parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
        raise ConfigError("write a SQLite store URL as sqlite:///path/to/file.db")
    path = unquote(parts.path)
    if not path or path.endswith("/") or "\x00" in path:
        raise ConfigError("a SQLite store URL needs a file path: sqlite:///path/to/file.db")
    return Path(path)


def shown_location(value: str | Path) -> str:
    """``value`` safe to show: a path as is, a URL without its password."""
    if not is_url(value):
        return str(value)
    try:
        return str(_pg_dsn().redact_dsn(str(value)))
    except ConfigError:
        return str(value).split("://", 1)[0] + "://…"


def _pg_dsn() -> Any:  # the module memwarden.memory.pg._dsn
    try:
        from memwarden.memory.pg import _dsn  # noqa: PLC0415 - needs the postgres extra
    except ImportError as err:
        raise ConfigError(
            f"a postgresql:// store needs the postgres extra (pip install 'memwarden[postgres]'):"
            f" {err}"
        ) from None
    return _dsn
