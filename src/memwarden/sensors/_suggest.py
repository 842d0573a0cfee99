"""Matching a fact's text to the values the fs index knows, without a language model.

From the title and content we take (:func:`extract`) numbers with their units (``30 s``
is 30 seconds, so it meets ``30``, ``"30s"`` and a ``timeout_ms`` of ``30000``), versions
(``1.2.3``), quoted strings, words (``timeout`` meets ``/http/timeout``; ``camelCase``
and ``snake_case`` are split) and file names. Each index entry is scored
(:func:`candidates`):

- **value**: the fact names the entry's value — 1.0 for a quoted string, a version or a
  number with a unit that agrees; 0.8 for a bare number; 0.6 for a single word equal to a
  string value. A secret entry is compared by keyed hash only.
- **key**: the share of the key's last segment's words found in the text (0..1), plus a
  little for words of the parent segments.
- **file**: the file's name or stem is in the text.

``confidence = 0.5 value + 0.4 key + 0.1 file``, cut to [0, 1]. An entry whose key
matches fully but whose value the text contradicts (the text says 45 s, the file 30)
becomes a *contradiction candidate*: its binding carries the text's value, so a dry run
refutes it and the caller can say "the file says 30".

Every binding is an fs binding in the sensor's own format (``path`` relative to the
first root, ``key`` + ``equals`` for JSON/YAML/TOML, an anchored ``regex`` for INI and
``.env``). The daemon's suggester runs each once (a dry run) before offering it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from memwarden.sensors._valueindex import Entry, Scalar, ValueIndex

__all__ = ["Candidate", "Extracted", "candidates", "extract", "words_of"]

# Seconds per unit; the names a text or a key may use for them.
_TIME_UNITS: dict[str, float] = {
    "ms": 0.001,
    "msec": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_SIZE_UNITS: dict[str, float] = {
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
}
_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*([a-zA-Z%]{1,12})?(?![\w.]*\d)", re.UNICODE)
_VERSION = re.compile(
    r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.-]+)?|\d+\.\d+)(?![\w.]*\d)"
)
_QUOTED = re.compile(r"\"([^\"\n]{1,200})\"|'([^'\n]{1,200})'|`([^`\n]{1,200})`")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_FILE = re.compile(r"[\w./-]*\w\.(?:json|ya?ml|toml|ini|cfg|env)\b|\.env\b")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "this",
        "that",
        "to",
        "was",
        "we",
        "were",
        "will",
        "with",
        "our",
        "uses",
        "use",
        "set",
        "should",
        "must",
        "value",
        "config",
        "file",
    ]
)
_BOOLS = {"true": True, "false": False, "enabled": True, "disabled": False}

W_VALUE = 0.5
W_KEY = 0.4
W_FILE = 0.1


def words_of(text: str) -> list[str]:
    """Lowercase words of identifiers and prose: ``maxRetries_ms`` -> max, retries, ms."""
    return [
        part.lower()
        for raw in _WORD.findall(text)
        for part in re.split(r"[_\-]+", _CAMEL.sub("_", raw))
        if part
    ]


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number from the text; ``seconds`` / ``size_bytes`` when it had such a unit."""

    number: float
    raw: str
    unit: str = ""
    seconds: float | None = None
    size_bytes: float | None = None


@dataclass(slots=True)
class Extracted:
    """What a fact's text offers to match."""

    quantities: list[Quantity] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    quoted: list[str] = field(default_factory=list)
    words: set[str] = field(default_factory=set)
    files: list[str] = field(default_factory=list)
    bools: list[bool] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)  # every token, for secrets' hashes


def extract(text: str) -> Extracted:
    """Numbers with units, versions, quoted strings, words and file names in ``text``."""
    out = Extracted()
    out.versions = [m.group(1) for m in _VERSION.finditer(text)]
    version_spans = [m.span() for m in _VERSION.finditer(text)]
    for m in _NUMBER.finditer(text):
        if any(a <= m.start() < b for a, b in version_spans) and "." in m.group(1):
            continue
        number = float(m.group(1))
        unit = (m.group(2) or "").lower()
        seconds = number * _TIME_UNITS[unit] if unit in _TIME_UNITS else None
        size = number * _SIZE_UNITS[unit] if unit in _SIZE_UNITS else None
        if unit and seconds is None and size is None:
            unit = ""  # "30 retries": the word is a word, not a unit
        out.quantities.append(Quantity(number, m.group(1), unit, seconds, size))
    for m in _QUOTED.finditer(text):
        out.quoted.append(next(g for g in m.groups() if g is not None))
    out.words = {w for w in words_of(text) if w not in _STOP and len(w) > 1}
    out.files = [f.lower() for f in _FILE.findall(text)]
    out.bools = [_BOOLS[w] for w in words_of(text) if w in _BOOLS]
    tokens = [t.strip(".,;:!?()[]{}\"'`") for t in text.split()]
    out.tokens = list(dict.fromkeys([*out.quoted, *(t for t in tokens if t)]))[:200]
    return out


@dataclass(frozen=True, slots=True)
class Candidate:
    """A scored (file, pointer) with the value a binding should expect."""

    entry: Entry
    equals: Scalar
    confidence: float
    why: str
    agrees: bool  # the text names the entry's value (False: a contradiction candidate)
    rank: float = 0.0  # the score before it is cut to [0, 1]: orders candidates

    def binding(self, sensor: str, base: str) -> dict[str, Any]:
        """The fs binding, its path relative to ``base`` (the first root) when below it."""
        e = self.entry
        path = (
            os.path.relpath(e.path, base) if e.path.startswith(base.rstrip("/") + "/") else e.path
        )
        if e.fmt in ("json", "yaml", "toml"):
            return {"sensor": sensor, "path": path, "key": e.pointer, "equals": self.equals}
        name = re.escape(e.pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~"))
        text = self.equals if isinstance(self.equals, str) else json.dumps(self.equals)
        value = re.escape(text)
        regex = rf"(?m)^\s*(?:export\s+)?{name}\s*[=:]\s*[\"']?{value}[\"']?\s*$"
        return {"sensor": sensor, "path": path, "regex": regex}


def _key_score(pointer: str, words: set[str]) -> tuple[float, float, list[str]]:
    """The share of the last segment's words in the text, 0.1 per parent word, the words."""
    segments = [s for s in pointer.split("/") if s and not s.isdigit()]
    if not segments:
        return 0.0, 0.0, []
    last = [w for w in words_of(segments[-1]) if w not in _STOP]
    named = [w for w in last if w not in _TIME_UNITS and w not in _SIZE_UNITS]
    last = named or last  # timeout_ms is about a timeout: the unit is the value's business
    if not last:
        return 0.0, 0.0, []
    hit = [w for w in last if w in words or w.rstrip("s") in words or w + "s" in words]
    parents = {w for s in segments[:-1] for w in words_of(s)} - _STOP - set(last)
    parent_hit = sorted(w for w in parents if w in words)
    return len(hit) / len(last), 0.1 * len(parent_hit), hit + parent_hit


def _key_unit(pointer: str) -> float | None:
    """The time unit a key's name implies (``timeout_ms`` -> 0.001); None: none named."""
    last = words_of(pointer.rsplit("/", 1)[-1])
    for w in reversed(last):
        if w in _TIME_UNITS and w not in ("m", "d"):
            return _TIME_UNITS[w]
    return None


def _parse_duration(text: str) -> float | None:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]{1,12})\s*", text)
    if m and m.group(2).lower() in _TIME_UNITS:
        return float(m.group(1)) * _TIME_UNITS[m.group(2).lower()]
    return None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _as_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


Match = tuple[float, "Scalar", str]  # (strength, the value to expect, what matched)
_NO_MATCH: Match = (0.0, None, "")


def _value_match(entry: Entry, ex: Extracted, index: ValueIndex) -> Match:
    """How strongly the text names the entry's value."""
    v = entry.value
    if entry.secret:
        for p in ex.tokens:
            if index.digest(p) == entry.secret_hash:
                return 1.0, p, "a secret, compared by hash"
        return _NO_MATCH
    if isinstance(v, bool):
        return (0.6, v, str(v).lower()) if v in ex.bools else _NO_MATCH
    if isinstance(v, int | float):
        return _number_match(entry.pointer, v, ex)
    if isinstance(v, str) and v.strip():
        return _string_match(v, ex)
    return _NO_MATCH


def _number_match(pointer: str, v: float, ex: Extracted) -> Match:
    unit = _key_unit(pointer)
    best = _NO_MATCH
    for q in ex.quantities:
        if q.seconds is not None:
            for scale in (unit,) if unit is not None else (1.0, 0.001):
                if _close(q.seconds / scale, v):
                    return 1.0, v, f"{q.raw} {q.unit} = {_as_number(v)}"
        elif q.size_bytes is None and _close(q.number, v):
            best = (0.8, v, q.raw)
    return best


def _string_match(v: str, ex: Extracted) -> Match:
    low = v.strip().lower()
    if any(low == s.strip().lower() for s in ex.quoted):
        return 1.0, v, f'"{v}"'
    for ver in ex.versions:
        bare = low.lstrip("v^~=<>! ")
        if bare == ver.lower() or (ver.count(".") >= 2 and bare.endswith(ver.lower())):
            return 1.0, v, f"version {ver}"
    seconds = _parse_duration(v)
    if seconds is not None:
        for q in ex.quantities:
            if q.seconds is not None and _close(q.seconds, seconds):
                return 1.0, v, f"{q.raw} {q.unit} = {v}"
    if any(low == t.lower() for t in ex.tokens):
        # Said verbatim: a host, an address, an email, 512Mi is specific; a word less so.
        return (0.6 if low.isalpha() else 1.0), v, v
    return _NO_MATCH


def _contradicting_value(entry: Entry, ex: Extracted) -> tuple[Scalar, str] | None:  # noqa: PLR0911 - one return per kind of value
    """The value the text gives for an entry whose key it names but whose value it does not."""
    v = entry.value
    if entry.secret or v is None:
        return None
    if isinstance(v, bool):
        return (ex.bools[0], str(ex.bools[0]).lower()) if ex.bools else None
    if isinstance(v, int | float):
        unit = _key_unit(entry.pointer) or 1.0
        for q in ex.quantities:
            if q.seconds is not None:
                return _as_number(q.seconds / unit), f"{q.raw} {q.unit}"
        for q in ex.quantities:
            if not q.unit:
                return _as_number(q.number), q.raw
        return None
    if isinstance(v, str):
        if _parse_duration(v) is not None:
            for q in ex.quantities:
                if q.seconds is not None:
                    return f"{q.raw}{q.unit}", f"{q.raw} {q.unit}"
        if any(c.isdigit() for c in v) and ex.versions:
            return ex.versions[0], f"version {ex.versions[0]}"
        if ex.quoted:
            return ex.quoted[0], f'"{ex.quoted[0]}"'
    return None


def candidates(text: str, index: ValueIndex, *, limit: int = 20) -> list[Candidate]:
    """The index entries the text most likely speaks of, best first."""
    ex = extract(text)
    if not (ex.words or ex.quantities or ex.quoted or ex.versions):
        return []
    out: list[Candidate] = []
    for entry in _entries(index):
        last, parents, key_words = _key_score(entry.pointer, ex.words)
        key = min(1.0, last + parents)
        strength, value, matched = _value_match(entry, ex, index)
        stem = os.path.basename(entry.path).lower()
        file_hit = any(
            stem == f.rsplit("/", 1)[-1] or entry.path.lower().endswith(f) for f in ex.files
        )
        if strength == 0.0:
            if last < 1.0:
                continue
            found = _contradicting_value(entry, ex)
            if found is None:
                continue
            value, said = found
            confidence = W_KEY * key + W_FILE * file_hit
            why = f"the key {entry.pointer} matches {', '.join(key_words)}; the text says {said}"
            rank = W_KEY * (last + parents) + W_FILE * file_hit
            out.append(Candidate(entry, value, round(confidence, 3), why, agrees=False, rank=rank))
            continue
        if key == 0.0 and not file_hit and strength < 1.0:
            continue  # a bare number or word alone is too common to mean this key
        confidence = min(1.0, W_VALUE * strength + W_KEY * key + W_FILE * file_hit)
        reasons = [f"the text names its value ({matched})"]
        if key_words:
            reasons.append(f"the key {entry.pointer} matches {', '.join(key_words)}")
        if file_hit:
            reasons.append(f"the text names the file {os.path.basename(entry.path)}")
        why = "; ".join(reasons)
        rank = W_VALUE * strength + W_KEY * (last + parents) + W_FILE * file_hit
        out.append(Candidate(entry, value, round(confidence, 3), why, agrees=True, rank=rank))
    # Ranked by the uncapped score: of two full key matches the one whose parents the text
    # also names (queue visibility timeout) is the more specific.
    out.sort(key=lambda c: (-c.rank, not c.agrees, c.entry.secret, c.entry.path, c.entry.pointer))
    return out[:limit]


def _entries(index: ValueIndex) -> Iterable[Entry]:
    return index.entries()
