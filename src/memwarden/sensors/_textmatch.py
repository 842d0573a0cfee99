"""Words of a fact matched to the names of things a sensor can check, without a model.

The fs sensor matches values (:mod:`memwarden.sensors._suggest`); the other sensors
match *names*: a test called ``test_login_rejects_expired_token``, a runtime check
called ``db-port``, a URL. Both sides are cut into words (``camelCase``, ``snake_case``
and ``kebab-case`` split), common words dropped, and each word reduced to its Snowball
stem, so "rejects", "rejected" and "reject" meet, and "listening" meets "listens".

:func:`overlap` is the share of a name's words that the text has; :func:`negated` finds
a text that says the thing fails ("the worker is down", "the login test fails"), from a
short, conservative list per kind of check.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["NEGATIONS", "negated", "overlap", "stem", "stems", "words_of"]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def words_of(text: str) -> list[str]:
    """Lowercase words of identifiers and prose: ``maxRetries_ms`` -> max, retries, ms."""
    return [
        part.lower()
        for raw in _WORD.findall(text)
        for part in re.split(r"[_\-]+", _CAMEL.sub("_", raw))
        if part
    ]


# Words that name nothing a check could tell apart (prose glue and test boilerplate).
STOP = frozenset(
    """a an and are as at be been by can could did do does for from has have how i if in
    into is it its itself of on or our should so than that the their them then there these
    they this those to too was we were what when which while who will with would you your
    test tests testing check checks case cases verify verifies ensure ensures make makes
    always also just only one all any some each every still now""".split()  # noqa: SIM905 - a word list reads better as prose
)

# Phrases that say a check fails, per kind of sensor (short on purpose: a text that
# merely mentions failure — "retries 3 times before it fails" — must not flip a fact).
NEGATIONS: dict[str, re.Pattern[str]] = {
    "test": re.compile(
        r"\b(fail(s|ing)?|is broken|are broken|(does ?n[o']t|do ?n[o']t|no longer) (work|pass))\b",
        re.IGNORECASE,
    ),
    "runtime": re.compile(
        r"\b(is down|are down|went down|not running|is n[o']t running|stopped|is dead|crashed|"
        r"not listening|is n[o']t listening|is closed|is offline|unreachable|nothing listens)\b",
        re.IGNORECASE,
    ),
    "http": re.compile(
        r"\b(is down|went down|is offline|unreachable|not responding|does ?n[o']t respond|"
        r"is n[o']t (up|reachable|available))\b",
        re.IGNORECASE,
    ),
}


@functools.cache
def _stemmer() -> Any:
    """Snowball's English stemmer, made at the first stem: importing snowballstemmer
    imports every language's (about 60 ms), which a daemon start need not pay."""
    import snowballstemmer  # noqa: PLC0415 - see the docstring

    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The Snowball (English) stem of a lowercase word."""
    return str(_stemmer().stemWord(word))


def stems(text: str, *, drop: Iterable[str] = ()) -> list[str]:
    """The text's words (identifiers split), common ones and ``drop`` left out, stemmed;
    in order, without repeats."""
    dropped = STOP | frozenset(drop)
    out = [stem(w) for w in words_of(text) if w not in dropped and len(w) > 1]
    return list(dict.fromkeys(out))


def overlap(name: Iterable[str], text: set[str]) -> tuple[float, list[str]]:
    """The share of ``name``'s stems the text has, and those stems."""
    words = list(dict.fromkeys(name))
    if not words:
        return 0.0, []
    hit = [w for w in words if w in text]
    return len(hit) / len(words), hit


def negated(text: str, kind: str) -> bool:
    """Whether the text says a ``kind`` (test, runtime, http) check fails."""
    pattern = NEGATIONS.get(kind)
    return pattern is not None and pattern.search(text) is not None
