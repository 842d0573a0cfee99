"""Regular expressions that come from users (bindings), compiled and run with RE2.

Python's ``re`` backtracks: ``^(a+)+$`` against ``aaaa…!`` takes time exponential in the
length of the text, and holds the GIL while it does. RE2 (google-re2) runs in time
linear in the text, releases the GIL while it matches, and refuses what it cannot do
in linear time (backreferences, lookaround) — so such a pattern is refused when the
block is added, never found out when a file changes. Every user-supplied pattern in
the built-in sensors goes through :func:`compile_user_regex`.

Linear is not cheap for every pattern: RE2 falls back from its DFA to an NFA whose cost
per byte grows with the pattern (``(a|b)*a(a|b){200}c`` needs ~100 s for 10 MB). So a
search whose worst case (program size x text length) is above a small budget does not
run in the daemon: it runs in a helper process (one, started on first need, kept) and is
abandoned, the process killed, after :data:`TIMEOUT_S` — :class:`RegexTimeoutError`,
which the sensors report as an ``error`` ("not judged"). Below the budget (every common
check: a few dozen instructions on a config file) it runs in the calling thread.

Syntax: RE2's (https://github.com/google/re2/wiki/Syntax) — Python's minus
backreferences, lookahead/lookbehind, possessive/atomic groups and ``\\Z`` (use
``\\z``). Texts are matched as UTF-8; bytes that are not valid UTF-8 match nothing
but themselves in a literal.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import IO, Final

import re2

__all__ = [
    "INLINE_BUDGET",
    "MAX_PATTERN_CHARS",
    "TIMEOUT_S",
    "RegexTimeoutError",
    "UserRegex",
    "compile_user_regex",
    "regex_field",
]

MAX_PATTERN_CHARS: Final = 4096
_MAX_MEM: Final = 8 << 20  # RE2's default program + DFA budget; a bigger program is refused
# Measured worst case ~21 ns per (program instruction x text byte) when RE2's DFA gives up:
# 2e7 keeps a search in the calling thread under ~0.5 s.
INLINE_BUDGET: Final = 20_000_000
TIMEOUT_S: Final = 5.0
_SHOWN_BYTES: Final = 4096  # of a match found in the helper process (observed values are cut)
# Searches (pattern, sha256 of the text) that overran: answered at once next time, so an
# unchanged file or answer re-checked every interval does not pin a CPU.
_REMEMBERED_TIMEOUTS: Final = 1024
_TIMED_OUT: OrderedDict[tuple[str, bytes], None] = OrderedDict()
_TIMED_OUT_LOCK = threading.Lock()
_AGAIN: Final = f"took longer than {TIMEOUT_S:g}s on this same text before and was not run again"


class RegexTimeoutError(TimeoutError):
    """A search took longer than :data:`TIMEOUT_S`; it was stopped (nothing was judged)."""

    def __init__(self, pattern: str, size: int, why: str = "") -> None:
        why = why or f"took longer than {TIMEOUT_S:g}s on {size} bytes and was stopped"
        super().__init__(
            f"the regex {pattern!r} {why}; not judged "
            "(a simpler pattern, or a smaller text, checks in time)"
        )


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

        Linear in ``len(text)``, GIL released; above :data:`INLINE_BUDGET` it runs in the
        helper process, at most :data:`TIMEOUT_S` (:class:`RegexTimeoutError`). Call it
        from a worker thread when the text can be large: it blocks until answered.
        """
        data = _utf8(text)
        if self._compiled.programsize * len(data) <= INLINE_BUDGET:
            found = self._compiled.search(data)
            return None if found is None else found.group(0).decode("utf-8", "replace")
        key = (self.pattern, hashlib.sha256(data).digest())
        with _TIMED_OUT_LOCK:
            again = key in _TIMED_OUT
        if again:  # the same search overran before: do not burn 5 s on it again
            raise RegexTimeoutError(self.pattern, len(data), _AGAIN)
        try:
            shown = _HELPER.search(self.pattern, data)
        except RegexTimeoutError:
            with _TIMED_OUT_LOCK:
                _TIMED_OUT[key] = None
                while len(_TIMED_OUT) > _REMEMBERED_TIMEOUTS:
                    _TIMED_OUT.popitem(last=False)
            raise
        return None if shown is None else shown.decode("utf-8", "replace")

    def match(self, text: str | bytes) -> str | None:
        """Like :meth:`search`, anchored at the start of ``text``."""
        found = self._compiled.match(_utf8(text))
        return None if found is None else found.group(0).decode("utf-8", "replace")

    def matches(self, text: str | bytes) -> bool:
        """Whether ``text`` contains a match (bounded like :meth:`search`)."""
        return self.search(text) is not None

    def fullmatch(self, text: str | bytes) -> bool:
        return self._compiled.fullmatch(_utf8(text)) is not None

    def __repr__(self) -> str:
        return f"UserRegex({self.pattern!r})"


class _Helper:
    """One helper process for the expensive searches: started when first needed (``python
    -I`` running ``_regex_worker.py``, which imports only RE2), asked one search at a
    time, killed (and started again next time) when it overruns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def search(self, pattern: str, data: bytes) -> bytes | None:
        if not self._lock.acquire(timeout=TIMEOUT_S):  # bounded: never a queue of waiters
            raise RegexTimeoutError(pattern, len(data), "found the regex helper busy")
        try:
            return self._search(pattern, data)
        finally:
            self._lock.release()

    def _search(self, pattern: str, data: bytes) -> bytes | None:
        deadline = time.monotonic() + TIMEOUT_S
        try:
            stdin, stdout = self._running()
        except OSError as err:
            why = f"could not be run: the regex helper did not start ({err})"
            raise RegexTimeoutError(pattern, len(data), why) from None
        raw = pattern.encode("utf-8")
        try:
            stdin.write(struct.pack(">I", len(raw)) + raw)
            stdin.write(struct.pack(">Q", len(data)))
            stdin.write(data)
            stdin.flush()
            (size,) = struct.unpack(">q", _read_by(stdout, 8, deadline))
            return None if size < 0 else _read_by(stdout, size, deadline)
        except (OSError, EOFError, TimeoutError):
            self._stop()
            raise RegexTimeoutError(pattern, len(data)) from None

    def _running(self) -> tuple[IO[bytes], IO[bytes]]:
        """The running helper's stdin and stdout (started if need be)."""
        process = self._process
        if process is None or process.poll() is not None:
            self._stop()
            # A fixed command: this interpreter, isolated (-I), running our worker file.
            process = subprocess.Popen(  # noqa: S603
                [sys.executable, "-I", str(Path(__file__).with_name("_regex_worker.py"))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={},
                close_fds=True,
            )
            self._process = process
        stdin, stdout = process.stdin, process.stdout
        if stdin is None or stdout is None:  # Popen(stdin=PIPE, stdout=PIPE) makes both
            raise OSError("no pipes to the regex helper")
        return stdin, stdout

    def close(self) -> None:
        """End the helper (at exit): it would end by itself when its stdin closes."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(timeout=5)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()


def _read_by(stream: IO[bytes], size: int, deadline: float) -> bytes:
    """Exactly ``size`` bytes from a pipe, or ``TimeoutError`` at ``deadline``."""
    fd = stream.fileno()
    chunks: list[bytes] = []
    left = size
    while left > 0:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


_HELPER = _Helper()
atexit.register(_HELPER.close)


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
