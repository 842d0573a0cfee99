"""PostgreSQL connection URLs: checked before anything connects, shown without secrets.

A URL comes from a person or a config file: it is checked for its scheme and shape here
(one clear error), and every message that names it shows :func:`redact_dsn`'s form, with
the password (in the URL or its query) replaced by ``***``.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

from memwarden.errors import ConfigError

__all__ = ["check_dsn", "redact_dsn"]

_SCHEMES = ("postgresql", "postgres")
_SECRET_PARAMS = frozenset({"password", "sslpassword"})
_MAX_CHARS = 4096


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (safe to log and print)."""
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            user, colon, _password = userinfo.partition(":")
            netloc = f"{user}{':***' if colon else ''}@{hosts}"
        query = urlencode(
            [
                (k, "***" if k.lower() in _SECRET_PARAMS else v)
                for k, v in parse_qsl(parts.query, keep_blank_values=True)
            ],
            safe="*/:",
        )
        shown = f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
    except ValueError:
        return "<an unreadable URL>"
    return shown.encode("ascii", "backslashreplace").decode("ascii")


def check_dsn(dsn: str) -> str:
    """``dsn`` if it is a ``postgresql://`` URL memwarden will hand to the driver; else a
    :class:`ConfigError` saying what is wrong (without the password)."""
    if len(dsn) > _MAX_CHARS:
        raise ConfigError(
            f"the PostgreSQL URL is {len(dsn)} characters long (at most {_MAX_CHARS})"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in dsn):
        raise ConfigError(f"the PostgreSQL URL {redact_dsn(dsn)} holds control characters")
    try:
        # Not parts.port: a multi-host URL (host1:5432,host2:5432, failover) is valid;
        # the driver checks hosts and ports when it connects.
        parts = urlsplit(dsn)
    except ValueError as err:
        raise ConfigError(f"{redact_dsn(dsn)} is not a valid PostgreSQL URL: {err}") from None
    if parts.scheme.lower() not in _SCHEMES:
        raise ConfigError(
            f"{redact_dsn(dsn)} is not a PostgreSQL URL "
            "(expected postgresql://user:password@host:port/database)"
        )
    if parts.fragment:
        raise ConfigError(f"{redact_dsn(dsn)}: a PostgreSQL URL has no #fragment")
    return dsn
