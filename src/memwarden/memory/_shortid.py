"""Short ids: the end of a UUIDv7's random part, as long as it must be to be unique.

A UUIDv7 begins with a millisecond timestamp, so the blocks of one burst (an import, an
auto-bind run) share their first twelve hex digits: prefixes do not tell them apart.
The last digits are random. A block's short id is its last :data:`MIN_LENGTH` hex
digits, lengthened (like git's abbreviations) until no other block in the store ends
the same way. The store keeps those digits reversed in an indexed generated column
(``id_key``), so "which ids end in these digits" is one index range scan.
"""

from __future__ import annotations

import re

__all__ = [
    "KEY_LENGTH",
    "MIN_LENGTH",
    "common_prefix",
    "id_key",
    "parse_ref",
    "short_form",
]

MIN_LENGTH = 8
# The random part covered by the key: the last 19 hex digits (the version digit and the
# 48-bit timestamp are left out).
KEY_LENGTH = 19
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_HEX = re.compile(r"[0-9a-f]+")


def _hex(block_id: str) -> str | None:
    """The 32 hex digits of a UUID-shaped id, or None for any other id."""
    text = block_id.lower()
    return text.replace("-", "") if _UUID.fullmatch(text) else None


def id_key(block_id: str) -> str | None:
    """What the ``id_key`` column holds for this id (None when it is no UUID)."""
    digits = _hex(block_id)
    return None if digits is None else digits[-KEY_LENGTH:][::-1]


def short_form(block_id: str, length: int) -> str:
    """The last ``length`` hex digits of the id (the whole id when that is not enough)."""
    digits = _hex(block_id)
    if digits is None or length > KEY_LENGTH:
        return block_id
    return digits[-max(length, MIN_LENGTH) :]


def common_prefix(a: str, b: str) -> int:
    """How many leading characters two keys share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def parse_ref(ref: str) -> tuple[str, str]:
    """What a caller's id means: ``("full", canonical id)``, ``("short", key prefix)``
    or ``("other", ref)`` for text that is neither (looked up as it is).

    Raises ValueError for hex too short to be a short id.
    """
    text = ref.strip().lower()
    if _UUID.fullmatch(text):
        d = text.replace("-", "")
        return "full", f"{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:]}"
    digits = text.replace("-", "")
    if _HEX.fullmatch(digits) and len(digits) <= KEY_LENGTH:
        if len(digits) < MIN_LENGTH:
            msg = (
                f"id {ref!r} is too short: give a short id (at least {MIN_LENGTH} hex "
                "digits, as listed) or the whole id"
            )
            raise ValueError(msg)
        return "short", digits[::-1]
    return "other", ref
