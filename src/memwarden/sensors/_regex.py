"""Regular expressions that come from users (bindings), compiled and run with RE2.

Python's ``re`` backtracks: ``^(a+)+$`` against ``aaaa…!`` takes time exponential in the
length of the text, and holds the GIL while it does. RE2 (google-re2) runs in time
linear in the text, releases the GIL while it matches, and refuses what it cannot do
in linear time (backreferences, lookaround) — so such a pattern is refused when the
block is added, never found out when a file changes. Every user-supplied pattern in
the built-in sensors goes through :func:`compile_user_regex`.

Syntax: RE2's (https://github.com/google/re2/wiki/Syntax) — Python's minus
backreferences, lookahead/lookbehind, possessive/atomic groups and ``\\Z`` (use
``\\z``). Texts are matched as UTF-8; bytes that are not valid UTF-8 match nothing
but themselves in a literal.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

import re2

__all__ = ["MAX_PATTERN_CHARS", "UserRegex", "compile_user_regex", "regex_field"]

MAX_PATTERN_CHARS: Final = 4096
_MAX_MEM: Final = 8 << 20  # RE2's default program + DFA budget; a bigger program is refused


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the refusal goes to the user, not to stderr
    options.max_mem = _MAX_MEM
    return options


class UserRegex:
    """A compiled user pattern: ``search`` returns the matched text, or None."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: re2._Regexp[bytes]) -> None:
        self.pattern = pattern
        self._compiled = compiled

    def search(self, text: str | bytes) -> str | None:
        """The first match in ``text`` (bytes are taken as UTF-8), or None.

        Linear in ``len(text)``; the GIL is released while RE2 matches, so a worker
        thread matching a large text does not stall the event loop.
        """
        found = self._compiled.search(_utf8(text))
        return None if found is None else found.group(0).decode("utf-8", "replace")

    def match(self, text: str | bytes) -> str | None:
        """Like :meth:`search`, anchored at the start of ``text``."""
        found = self._compiled.match(_utf8(text))
        return None if found is None else found.group(0).decode("utf-8", "replace")

    def matches(self, text: str | bytes) -> bool:
        return self._compiled.search(_utf8(text)) is not None

    def fullmatch(self, text: str | bytes) -> bool:
        return self._compiled.fullmatch(_utf8(text)) is not None

    def __repr__(self) -> str:
        return f"UserRegex({self.pattern!r})"


def _utf8(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


@lru_cache(maxsize=1024)
def compile_user_regex(pattern: str) -> UserRegex:
    """Compile ``pattern`` with RE2; ``ValueError`` saying why RE2 refuses it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"is longer than {MAX_PATTERN_CHARS} characters")
    try:
        raw = pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{pattern!r} is not valid text (a lone surrogate)") from None
    try:
        compiled = re2.compile(raw, _options())
    except re2.error as err:
        detail = err.args[0] if err.args else "refused"
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ValueError(
            f"{pattern!r} does not compile with RE2, the linear-time engine user regexes "
            f"run on: {detail} (RE2 has no backreferences or lookaround)"
        ) from None
    return UserRegex(pattern, compiled)


def regex_field(value: str | None) -> str | None:
    """A pydantic field validator: the pattern compiles with RE2, or the field is refused."""
    if value is not None:
        compile_user_regex(value)
    return value
