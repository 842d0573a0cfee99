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

import functools
import heapq
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwarden.jsonpointer import parse_pointer
from memwarden.sensors._textmatch import stem, words_of

if TYPE_CHECKING:
    from memwarden.sensors._valueindex import Entry, Scalar, ValueIndex

__all__ = ["Candidate", "Extracted", "candidates", "extract", "match_keys", "words_of"]

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
_FILE = re.compile(r"[\w./-]*\w\.(?:json|ya?ml|toml|ini|cfg|env)\b|\.env\b")
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
_ON_OFF = re.compile(r"\b(?:is|are|switched|turned|set|stays?)\s+(on|off)\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(not|no|never|without|n't)\b|n't\b", re.IGNORECASE)
_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s<>\"'`]+", re.IGNORECASE)
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_-][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*")
_CAMEL_HUMP = re.compile(r"[a-z][A-Z]")
# "at most 12" names a max_ key, "at least 3" a min_ one.
_BOUNDS = (
    (
        re.compile(r"\b(at most|up to|maximum|no more than|limited to|capped at)\b", re.IGNORECASE),
        "max",
    ),
    (re.compile(r"\b(at least|minimum|no less than|no fewer than)\b", re.IGNORECASE), "min"),
)
_COPULA = r"\s+(?:is|are|was|=|:)\s+(?:set to\s+|now\s+|still\s+)?[\"'`]?([\w.:/@+-]+)"

MAX_WORD_ENTRIES = 500
AMBIGUITY_PENALTY = 0.1
W_VALUE = 0.5
W_KEY = 0.4
W_FILE = 0.1
SPECIFIC = 0.01
EXACT_KEY = 0.2


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
    stems: set[str] = field(default_factory=set)  # the words' Snowball stems
    identifiers: set[str] = field(default_factory=set)  # snake_case/camelCase words as written
    negated: bool = False  # "not", "no", "never", "without": a named boolean is false
    text: str = ""  # the text itself (the value after "is" for a contradiction)


def extract(text: str) -> Extracted:
    """Numbers with units, versions, quoted strings, words and file names in ``text``."""
    out = Extracted()
    urls = [m.span() for m in _URL.finditer(text)]

    def in_url(at: int) -> bool:
        return any(a <= at < b for a, b in urls)

    versions = [m for m in _VERSION.finditer(text) if not in_url(m.start())]
    out.versions = [m.group(1) for m in versions]
    # A version of three parts or more is not a number; 0.35 is both.
    version_spans = [m.span() for m in versions if m.group(1).count(".") >= 2]
    for m in _NUMBER.finditer(text):
        if in_url(m.start()):
            continue
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
    out.text = text
    prose = _URL.sub(" ", text)  # a URL's words are the http sensor's business, not keys
    out.words = {w for w in words_of(prose) if w not in _STOP and len(w) > 1}
    out.stems = {stem(w) for w in out.words}
    out.stems |= {bound for pattern, bound in _BOUNDS if pattern.search(prose)}
    out.identifiers = {
        w for w in _IDENTIFIER.findall(text) if "_" in w or "-" in w or _CAMEL_HUMP.search(w)
    }
    out.files = [f.lower() for f in _FILE.findall(text)]
    out.bools = [_BOOLS[w] for w in words_of(text) if w in _BOOLS]
    out.bools += [m.group(1).lower() == "on" for m in _ON_OFF.finditer(text)]
    out.negated = _NEGATION.search(text) is not None
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
        return {"sensor": sensor, **self.selector(base)}

    def selector(self, base: str) -> dict[str, Any]:
        """The fs binding's keys without ``sensor``."""
        e = self.entry
        path = (
            os.path.relpath(e.path, base) if e.path.startswith(base.rstrip("/") + "/") else e.path
        )
        if e.fmt in ("json", "yaml", "toml"):
            return {"path": path, "key": e.pointer, "equals": self.equals}
        name = re.escape(parse_pointer(e.pointer)[-1])
        text = self.equals if isinstance(self.equals, str) else json.dumps(self.equals)
        value = re.escape(text)
        regex = rf"(?m)^\s*(?:export\s+)?{name}\s*[=:]\s*[\"']?{value}[\"']?\s*$"
        return {"path": path, "regex": regex}


@functools.lru_cache(maxsize=65_536)
def _pointer_words(pointer: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """A key path's last segment's word stems (unit words dropped) and its parents'."""
    segments = [s for s in pointer.split("/") if s and not s.isdigit()]
    if not segments:
        return (), frozenset()
    last = [w for w in words_of(segments[-1]) if w not in _STOP]
    if len(last) > 1 and (last[-1] in _TIME_UNITS or last[-1] in _SIZE_UNITS):
        last = last[:-1]  # timeout_ms is about a timeout: the unit is the value's business
    stems = tuple(dict.fromkeys(stem(w) for w in last))
    parents = frozenset(stem(w) for s in segments[:-1] for w in words_of(s) if w not in _STOP)
    return stems, parents - set(stems)


@functools.lru_cache(maxsize=32_768)
def _file_words(path: str) -> frozenset[str]:
    """The stems of a file's name and the two directories above it (``payments.json`` ->
    payment; ``web/package.json`` -> web, packag): weak context, like a parent key."""
    parts = path.split("/")
    name = parts[-1].split(".")[0] or parts[-1]
    words = [w for part in [*parts[-3:-1], name] for w in words_of(part)]
    return frozenset(stem(w) for w in words if w not in _STOP and len(w) > 1)


def _key_score(entry: Entry, ex: Extracted) -> tuple[float, float, list[str]]:
    """The share of the last segment's words in the text, 0.1 per parent (or file name)
    word, and the words; a key the text writes out (``min_length``) counts in full."""
    last, parents = _pointer_words(entry.pointer)
    if not last:
        return 0.0, 0.0, []
    words = ex.stems
    hit = [w for w in last if w in words]
    parent_hit = sorted(w for w in parents | (_file_words(entry.path) - set(last)) if w in words)
    segment = entry.pointer.rsplit("/", 1)[-1]
    if segment in ex.identifiers:  # the text writes the key out: (minReplicas)
        return 1.0, 0.1 * len(parent_hit) + EXACT_KEY, [segment, *parent_hit]
    return len(hit) / len(last), 0.1 * len(parent_hit), hit + parent_hit


def _key_unit(pointer: str) -> float | None:
    """The time unit a key's name implies (``timeout_ms`` -> 0.001); None: none named."""
    last = words_of(pointer.rsplit("/", 1)[-1])
    for w in reversed(last):
        if w in _TIME_UNITS and w not in ("m", "d"):
            return _TIME_UNITS[w]
    return None


def _key_size(pointer: str) -> float | None:
    """The size unit a key's name implies (``max_upload_mb`` -> 1e6); None: none named."""
    for w in reversed(words_of(pointer.rsplit("/", 1)[-1])):
        if w in _SIZE_UNITS:
            return _SIZE_UNITS[w]
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


def _value_match(entry: Entry, ex: Extracted, index: ValueIndex) -> Match:  # noqa: PLR0911 - one return per kind of value
    """How strongly the text names the entry's value."""
    v = entry.value
    if entry.secret:
        for p in ex.tokens:
            if index.digest(p) == entry.secret_hash:
                # As for any value: a word ("json") is less telling than s3cr3t-42.
                return (0.6 if p.isalpha() else 1.0), p, "a secret, compared by hash"
        return _NO_MATCH
    if isinstance(v, bool):
        if ex.bools:
            return (0.6, v, str(v).lower()) if v in ex.bools else _NO_MATCH
        # "SMTP uses TLS", "not in maintenance mode": a boolean key named in full says
        # true, or false with a negation.
        last, _, _ = _key_score(entry, ex)
        if last >= 1.0 and v != ex.negated:
            return 0.6, v, "named " + ("with a negation" if ex.negated else "as true")
        return _NO_MATCH
    if isinstance(v, int | float):
        return _number_match(entry.pointer, v, ex)
    if isinstance(v, str) and v.strip():
        return _string_match(v, ex)
    return _NO_MATCH


def _number_match(pointer: str, v: float, ex: Extracted) -> Match:
    unit = _key_unit(pointer)
    size = _key_size(pointer)
    best = _NO_MATCH
    for q in ex.quantities:
        if q.size_bytes is not None and size is not None and _close(q.size_bytes / size, v):
            return 1.0, v, f"{q.raw} {q.unit} = {_as_number(v)}"
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
    if low.isalpha() and stem(low) in ex.stems:
        return 0.5, v, v  # "captured manually" for manual
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
        said = _said_after_key(entry.pointer, ex.text)
        if said is not None:
            return said, said
    return None


def _said_after_key(pointer: str, text: str) -> str | None:
    """The word after the key's name and "is" ("the log level is debug" -> debug)."""
    words = words_of(pointer.rsplit("/", 1)[-1])
    if not words:
        return None
    m = re.search(rf"\b{re.escape(stem(words[-1]))}\w*{_COPULA}", text, re.IGNORECASE)
    if m is None or m.group(1).lower() in {*_STOP, "not", "no", "never"}:
        return None
    return m.group(1).rstrip(".,;:!?")


_TRAILING_VERSION = re.compile(r"(\d+(?:\.\d+)+(?:[-+][0-9a-z.-]+)?)$")
_SCALES = (0.001, 1.0, 60.0, 3600.0, 86400.0)


def _num(value: float) -> str:
    return f"{float(value):.12g}"


def match_keys(entry: Entry) -> list[str]:
    """The lookup keys of an index entry (the index keeps them: a text finds its entries
    by :func:`_text_keys` without scanning the whole index). Runs in the index's thread."""
    _file_words(entry.path)  # computed here, in the index's thread, not while matching
    if entry.secret_hash is not None:
        return ["h:" + entry.secret_hash]
    keys = ["w:" + w for w in _pointer_words(entry.pointer)[0]]
    keys += ["w:" + stem(w) for w in words_of(entry.pointer.rsplit("/", 1)[-1])]
    v = entry.value
    if isinstance(v, bool):
        keys.append(f"b:{v}")
    elif isinstance(v, int | float):
        keys.append("n:" + _num(v))
    elif isinstance(v, str) and v.strip():
        low = v.strip().lower()
        keys.append("s:" + low)
        bare = low.lstrip("v^~=<>! ")
        keys.append("v:" + bare)
        tail = _TRAILING_VERSION.search(bare)
        if tail and tail.group(1) != bare:
            keys.append("v:" + tail.group(1))
        seconds = _parse_duration(v)
        if seconds is not None:
            keys.append("d:" + _num(seconds))
    return keys


def _text_keys(ex: Extracted, index: ValueIndex) -> set[str]:
    """The lookup keys of the text's values, and of its words when they are not common."""
    keys: set[str] = set()
    for w in ex.stems | {stem(p) for i in ex.identifiers for p in words_of(i)}:
        # A key word in very many entries (timeout in every service's config) is left
        # to the value keys: alone it would only propose ambiguous contradictions.
        if len(index.lookup.get("w:" + w, ())) <= MAX_WORD_ENTRIES:
            keys.add("w:" + w)
    for q in ex.quantities:
        keys.add("n:" + _num(q.number))
        if q.size_bytes is not None:
            keys.update("n:" + _num(q.size_bytes / scale) for scale in _SIZE_UNITS.values())
        if q.seconds is not None:
            keys.add("d:" + _num(q.seconds))
            keys.update("n:" + _num(q.seconds / scale) for scale in _SCALES)
    keys.update("s:" + s.strip().lower() for s in ex.quoted)
    keys.update("s:" + t.lower() for t in ex.tokens)
    keys.update("v:" + v.lower() for v in ex.versions)
    keys.update(f"b:{b}" for b in ex.bools)
    keys.update("h:" + index.digest(t) for t in ex.tokens)
    return keys


def candidates(text: str, index: ValueIndex, *, limit: int = 20) -> list[Candidate]:
    """The index entries the text most likely speaks of, best first.

    With the index's lookup keys (``keys_of=match_keys``, as the fs sensor builds it) only
    the entries sharing a key with the text are scored; without, every entry is. Entries
    with the same pointer and value in several files are scored once; unless the text
    names the file, such a suggestion is ambiguous and loses ``AMBIGUITY_PENALTY``.
    """
    ex = extract(text)
    if not (ex.words or ex.quantities or ex.quoted or ex.versions):
        return []
    pool = index.find(_text_keys(ex, index)) if index.keys_of is not None else index.entries()
    groups: dict[tuple[str, str, str, str | None], list[Entry]] = {}
    for entry in pool:
        group = (entry.pointer, entry.fmt, repr(entry.value), entry.secret_hash)
        groups.setdefault(group, []).append(entry)
    out: list[Candidate] = []
    contra: list[Candidate] = []
    named_in_full = False
    for entries in groups.values():
        shared = len(entries)
        first = entries[0]
        strength, value, matched = _value_match(first, ex, index)
        pick = entries
        if len(entries) > limit:
            # One key and value in many files (log level debug in 5 000): only the files
            # whose names the text speaks of can rank apart; score the best few alone.
            pick = heapq.nsmallest(limit, entries, key=lambda e: _file_order(e, ex))
        hits = {e: _file_hit(e, ex) for e in pick} if ex.files else dict.fromkeys(pick, False)
        scored = [(e, _key_score(e, ex)) for e in pick]
        scored.sort(key=lambda t: (not hits[t[0]], -(t[1][0] + t[1][1]), t[0].path))
        for entry, (last, parents, key_words) in scored[:limit]:
            file_hit = hits[entry]
            key = last + parents
            said = ""
            if strength == 0.0:
                # A contradiction needs the key named in full and placed: a parent or the
                # file named too (port alone is in every service's config).
                named = len(key_words) - round(parents * 10)  # the last segment's words named
                placed = (
                    parents > 0
                    or file_hit
                    or entry.pointer.count("/") == 1
                    or named >= 2
                    or _unique_key(entry, index)
                )
                full = last >= 1.0 or (named >= 2 and last >= 0.6)
                found = _contradicting_value(entry, ex) if full and placed else None
                if found is None:
                    continue
                value, said = found
            elif key == 0.0 and not file_hit and strength < 1.0:
                continue  # a bare number or word alone is too common to mean this key
            penalty = AMBIGUITY_PENALTY if shared > 1 and not file_hit else 0.0
            # Of two keys that match alike, the one with more of its words named is the
            # more specific (minReplicas over replicas): a small bonus in the ranking only.
            rank = (
                W_VALUE * strength
                + W_KEY * key
                + W_FILE * file_hit
                - penalty
                + SPECIFIC * len(key_words)
            )
            confidence = round(max(0.0, min(1.0, rank - SPECIFIC * len(key_words))), 3)
            why = _why(entry, matched, said, key_words, file_hit=file_hit, shared=shared)
            cand = Candidate(entry, value, confidence, why, agrees=bool(strength), rank=rank)
            if strength:
                out.append(cand)
                if last >= 1.0:
                    named_in_full = True
            else:
                contra.append(cand)
    # A contradiction only where no value the text names sits under a key it names in
    # full: "port 8000" with /server/port = 8000 found contradicts no other port.
    if not named_in_full:
        out += contra
    # Ranked by the uncapped score: of two full key matches the one whose parents the text
    # also names (queue visibility timeout) is the more specific.
    out.sort(key=lambda c: (-c.rank, not c.agrees, c.entry.secret, c.entry.path, c.entry.pointer))
    return out[:limit]


def _file_order(entry: Entry, ex: Extracted) -> tuple[bool, int, str]:
    """Files the text names first, then those whose names share its words."""
    named = bool(ex.files) and _file_hit(entry, ex)
    return (not named, -len(_file_words(entry.path) & ex.stems), entry.path)


def _unique_key(entry: Entry, index: ValueIndex) -> bool:
    """Whether no other entry has a key named like this one's (the only timeout)."""
    words = _pointer_words(entry.pointer)[0]
    return bool(words) and all(len(index.lookup.get("w:" + w, ())) <= 1 for w in words)


def _file_hit(entry: Entry, ex: Extracted) -> bool:
    name = os.path.basename(entry.path).lower()
    low = entry.path.lower()
    return any(name == f.rsplit("/", 1)[-1] or low.endswith(f) for f in ex.files)


def _why(
    entry: Entry, matched: str, said: str, key_words: list[str], *, file_hit: bool, shared: int
) -> str:
    reasons = [f"the text names its value ({matched})"] if matched else []
    if key_words:
        reasons.append(f"the key {entry.pointer} matches {', '.join(key_words)}")
    if file_hit:
        reasons.append(f"the text names the file {os.path.basename(entry.path)}")
    elif shared > 1:
        reasons.append(f"{shared} files have this key and value")
    if said:
        reasons.append(f"the text says {said}")
    return "; ".join(reasons)
