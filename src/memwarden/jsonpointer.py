"""JSON pointers (RFC 6901) and JSON equality: one rule for every part of memwarden.

A binding that looks at a value inside a document (the ``fs`` sensor's ``key`` into a
JSON, TOML or YAML file, the ``http`` sensor's ``key`` into a JSON answer) names it with
a JSON pointer and may compare it with ``equals``. Both go through this module, so a
pointer and an equality mean the same everywhere (binding suggestions included).

Pointers, exactly as RFC 6901 has them:

- ``""`` is the whole document; otherwise a pointer is ``/`` followed by reference
  tokens separated by ``/``. In a token ``~1`` stands for ``/`` and ``~0`` for ``~``
  (decoded in that order, so ``~01`` is the key ``~1``); a ``~`` followed by anything
  else makes the text no pointer at all (:class:`PointerSyntaxError`).
- On an object a token is a member name, compared exactly (no Unicode normalization).
- On an array a token is an index written in ASCII decimal digits without leading zeros
  (``0``, ``7``, ``12``; never ``07``, ``+1``, ``1.0``, `` 1`` or ``²`` — ``str.isdigit``
  accepts that last one and ``int`` then refuses it). ``-`` names the element after the
  last one, which never exists. Anything else on an array finds no value.

A pointer that is well formed but finds nothing raises :class:`PointerMissingError` (a
``LookupError``): that is an answer about the document (a sensor refutes), never a crash.

JSON equality (:func:`json_equal`): values of the same JSON type that are equal.

- Numbers are equal when their values are: ``30 == 30.0`` (JSON has one number type,
  and YAML or TOML may write the same setting either way). The comparison is exact:
  ``2**53 + 1`` is not ``9007199254740992.0``. ``NaN`` equals nothing.
- ``true``/``false`` are not numbers: ``true`` is not ``1``, ``false`` is not ``0``.
- ``null`` equals only ``null``; a string is never a number (``"1"`` is not ``1``).
- Arrays: the same length and equal elements in the same order.
- Objects: the same member names and equal values, in any order.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PointerMissingError",
    "PointerSyntaxError",
    "check_pointer",
    "json_equal",
    "parse_pointer",
    "pointer_of",
    "resolve_pointer",
]

_ASCII_DIGITS = frozenset("0123456789")


class PointerSyntaxError(ValueError):
    """The text is not a JSON pointer (the message says why)."""


class PointerMissingError(LookupError):
    """A well-formed pointer that finds no value in this document."""

    def __init__(self, pointer: str, token: str) -> None:
        super().__init__(f"no value at {pointer!r} (at the token {token!r})")
        self.pointer = pointer
        self.token = token


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """The decoded reference tokens of ``pointer``; :class:`PointerSyntaxError` if it is
    not one (``""`` gives ``()``, the whole document)."""
    if not isinstance(pointer, str):
        raise PointerSyntaxError(f"{pointer!r} is not a JSON pointer (not a string)")
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise PointerSyntaxError(
            f"{pointer!r} is not a JSON pointer: it starts with / (like /http/timeout or /a/0)"
        )
    tokens = []
    for raw in pointer[1:].split("/"):
        tilde = raw.find("~")
        while tilde != -1:
            if raw[tilde + 1 : tilde + 2] not in ("0", "1"):
                raise PointerSyntaxError(
                    f"{pointer!r} is not a JSON pointer: '~' must be followed by 0 (for ~) "
                    "or 1 (for /)"
                )
            tilde = raw.find("~", tilde + 2)
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


def check_pointer(pointer: str) -> str:
    """``pointer`` itself if it is a JSON pointer (for a model's field validator)."""
    parse_pointer(pointer)
    return pointer


def pointer_of(tokens: tuple[str, ...] | list[str]) -> str:
    """The pointer naming ``tokens`` (escaped): the inverse of :func:`parse_pointer`."""
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def _index(token: str, length: int) -> int | None:
    """The array index a token names, or None (not an index, ``-``, or past the end)."""
    if not token or not set(token) <= _ASCII_DIGITS or (len(token) > 1 and token[0] == "0"):
        return None
    index = int(token)
    return index if index < length else None


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """The value ``pointer`` names in ``doc`` (parsed JSON: dicts, lists and scalars).

    :class:`PointerSyntaxError` (a ``ValueError``) when ``pointer`` is not a pointer;
    :class:`PointerMissingError` (a ``LookupError``) when it finds no value.
    """
    node = doc
    for token in parse_pointer(pointer):
        if isinstance(node, dict):
            if token not in node:
                raise PointerMissingError(pointer, token)
            node = node[token]
        elif isinstance(node, list):
            index = _index(token, len(node))
            if index is None:
                raise PointerMissingError(pointer, token)
            node = node[index]
        else:
            raise PointerMissingError(pointer, token)
    return node


def json_equal(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are equal by the rule in the module docstring."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b  # exact in Python (int against float too); NaN equals nothing
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if a is None or b is None:
        return a is None and b is None
    return type(a) is type(b) and bool(a == b)
