"""Short ids: the end of a UUIDv7's random part, as long as it must be to be unique.

A UUIDv7 begins with a millisecond timestamp, so the blocks of one burst (an import, an
auto-bind run) share their first twelve hex digits: prefixes do not tell them apart.
The last digits are random. A block's short id is its last :data:`MIN_LENGTH` hex
digits, lengthened (like git's abbreviations) until no other block in the store ends
the same way. The store indexes those digits reversed (SQLite: an index on the
expression :data:`ID_KEY_SQL`; PostgreSQL: a generated ``id_key`` column), so "which
ids end in these digits" is one index range scan.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "ID_KEY_SQL",
    "KEY_LENGTH",
    "MIN_LENGTH",
    "common_prefix",
    "from_neighbours",
    "id_key",
    "keyed",
    "parse_ref",
    "short_form",
]

MIN_LENGTH = 8
# The random part covered by the key: the last 19 hex digits (the version digit and the
# 48-bit timestamp are left out).
KEY_LENGTH = 19
# SQLite: the key of ``blocks.id``, the expression the ``blocks_id_key`` index is on (SQLite
# uses that index only for this same expression). A UUID's last 19 hex digits reversed:
# characters 36 to 25, 23 to 20 and 18 to 16 (the dashes and the version digit left out).
ID_KEY_SQL = (
    "("
    + " || ".join(f"substr(id, {i}, 1)" for i in (*range(36, 24, -1), 23, 22, 21, 20, 18, 17, 16))
    + ")"
)
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_HEX = re.compile(r"[0-9a-f]+")


def _hex(block_id: str) -> str | None:
    """The 32 hex digits of a UUID-shaped id, or None for any other id."""
    text = block_id.lower()
    return text.replace("-", "") if _UUID.fullmatch(text) else None


def id_key(block_id: str) -> str | None:
    """The id's key, as ``ID_KEY_SQL`` computes it (None when it is no UUID)."""
    digits = _hex(block_id)
    return None if digits is None else digits[-KEY_LENGTH:][::-1]


def short_form(block_id: str, length: int) -> str:
    """The last ``length`` hex digits of the id (the whole id when that is not enough)."""
    digits = _hex(block_id)
    if digits is None or length > KEY_LENGTH:
        return block_id
    return digits[-max(length, MIN_LENGTH) :]


def keyed(block_ids: Iterable[str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``block_ids`` (once each) split into those with no key (their short id is the whole
    id) and ``(id, key)`` pairs whose short ids the keys' neighbours decide."""
    whole: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    for block_id in dict.fromkeys(block_ids):
        key = id_key(block_id)
        if key is None:
            whole[block_id] = block_id
        else:
            pairs.append((block_id, key))
    return whole, pairs


def from_neighbours(block_id: str, key: str, below: object, above: object) -> str:
    """The short id of ``block_id`` given the keys just below and above its own (None
    where there is none): one digit more than it shares with the closer of them."""
    shared = max(
        (common_prefix(key, str(n)) for n in (below, above) if n is not None),
        default=0,
    )
    return short_form(block_id, shared + 1)


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
