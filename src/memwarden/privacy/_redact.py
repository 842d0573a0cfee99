"""Apply a policy to a text or a JSON value: redact, reject or let through.

A redacted value becomes a typed placeholder, ``[email:5f1c2a9b0d3e4f51]``: the kind and
the first 64 bits of an HMAC-SHA256, keyed with the daemon's own key, of the value's
normal form. The same value (written ``Bob@Example.com`` or ``bob@example.com``) gives
the same placeholder, so facts about it stay comparable; without the key a placeholder
cannot be reversed by hashing guesses.
"""

from __future__ import annotations

import hmac
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwarden.errors import ValidationInputError
from memwarden.privacy._detect import Detectors, Finding, Kind, keyed_value_is_secret
from memwarden.privacy._detect import secret_key_name as _secret_key_name

if TYPE_CHECKING:
    from memwarden.privacy._policy import PrivacySettings, Scope

__all__ = [
    "PLACEHOLDER_HEX",
    "PrivacyRejectedError",
    "Redactor",
    "Stats",
    "TooLongError",
    "json_chars",
]

PLACEHOLDER_HEX = 16  # 64 bits of the HMAC
CLEAN_CACHE_SIZE = 4096  # texts remembered clean per source (then forgotten all at once)
CLEAN_CACHE_CHARS = 256  # only texts this short are remembered: at most 1 MiB a source
_DESCRIBE: dict[Kind, str] = {
    "secret": "a secret (token, key or password)",
    "card": "a payment card number",
    "iban": "an IBAN",
    "national_id": "a national id number",
    "email": "an e-mail address",
    "phone": "a phone number",
    "ip": "an IP address",
}


class PrivacyRejectedError(ValidationInputError):
    """A privacy rule says ``reject``: nothing of the input is stored (422 at the API)."""

    error_type = "privacy_rejected"

    def __init__(self, field: str, rule: Kind, source: str) -> None:
        super().__init__(
            [
                (
                    field,
                    (
                        f"holds {_DESCRIBE[rule]}: privacy rule {rule!r} is 'reject' for "
                        f"{source} input ([privacy] rules.{rule} / sources.{source}.{rule}); "
                        "nothing was stored"
                    ),
                )
            ]
        )
        self.rule = rule
        self.source = source


class TooLongError(ValidationInputError):
    """A text longer than ``max_scan_chars``: not scanned, so not stored."""

    error_type = "too_long_to_scan"

    def __init__(self, field: str, size: int, limit: int) -> None:
        super().__init__(
            [
                (
                    field,
                    (
                        f"is {size} characters, longer than [privacy] max_scan_chars = "
                        f"{limit}: too long to check for private data; nothing was stored"
                    ),
                )
            ]
        )
        self.size = size
        self.limit = limit


@dataclass(slots=True)
class Stats:
    """What the redactor did since start, by kind (the policy's ``GET`` shows these)."""

    redacted: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    unchecked: int = 0  # findings past the check budget


class Redactor:
    """A policy with its detectors and key, applied to texts and JSON values."""

    def __init__(self, policy: PrivacySettings, key: bytes, *, stats: Stats | None = None) -> None:
        if len(key) < 16:
            raise ValueError("the redaction key must be at least 16 bytes")
        self.policy = policy
        self._key = key
        self.stats = stats if stats is not None else Stats()
        self.detectors = Detectors(
            phone_regions=policy.phone_regions,
            national_ids=policy.national_ids,
            ip_scope=policy.ip_scope,
            max_checks=policy.max_checks,
        )
        self._watched = {s: policy.watched(s) for s in policy.scopes()}
        # Texts found clean, per source: sensors report the same values again and again
        # (a config value, a URL, a message), and a clean text needs no second scan.
        self._clean: dict[str, set[str]] = {s: set() for s in self._watched}

    def with_policy(self, policy: PrivacySettings) -> Redactor:
        """The same key and counters under another policy."""
        return Redactor(policy, self._key, stats=self.stats)

    def placeholder(self, kind: str, normal: str) -> str:
        mac = hmac.digest(self._key, f"{kind}\x00{normal}".encode(), "sha256")
        return f"[{kind}:{mac.hex()[:PLACEHOLDER_HEX]}]"

    def _kinds(self, source: Scope) -> frozenset[Kind]:
        """What ``source`` is scanned for (a profile no longer defined: as ``agent``)."""
        kinds = self._watched.get(source)
        return kinds if kinds is not None else self._watched["agent"]

    def active(self, source: Scope) -> bool:
        return bool(self._kinds(source))

    # ------------------------------------------------------------------ texts

    def text(self, value: str, *, source: Scope, field: str) -> str:
        """``value`` with every finding redacted; :class:`PrivacyRejectedError` if a
        finding's rule is ``reject``, :class:`TooLongError` past ``max_scan_chars``."""
        kinds = self._kinds(source)
        if not kinds or len(value) < 6:
            return value
        if len(value) > self.policy.max_scan_chars:
            raise TooLongError(field, len(value), self.policy.max_scan_chars)
        if value.isalnum() and value.islower():
            # Lowercase letters and digits only, with a letter (a digest, a commit id, a
            # word): every pattern needs an upper-case letter, a separator or a digit run
            # bounded by non-letters, so nothing can be found here.
            return value
        findings = self._scan_once(value, kinds, source)
        # A placeholder starts and ends with a bracket, so a neighbour glued to the value
        # it replaced may now stand apart and be found: scan again until nothing is.
        for _ in range(4):
            if not findings:
                return value
            value = self._apply(value, findings, source=source, field=field)
            findings = self.detectors.scan(value, kinds)
        return value

    def _scan_once(self, value: str, kinds: frozenset[Kind], source: Scope) -> list[Finding]:
        """The findings in ``value``; a clean short text is remembered as clean."""
        clean = self._clean.setdefault(source, set())
        if value in clean:
            return []
        findings = self.detectors.scan(value, kinds)
        if not findings and len(value) <= CLEAN_CACHE_CHARS:
            if len(clean) >= CLEAN_CACHE_SIZE:
                clean.clear()
            clean.add(value)
        return findings

    def mask(self, value: str, *, source: Scope) -> str:
        """``value`` with every finding of a kind not allowed for ``source`` replaced by
        its placeholder, ``reject`` rules included (what a search query is looked up as);
        never raises, not counted. A value past ``max_scan_chars`` is returned as it is."""
        kinds = self._kinds(source)
        if not kinds or len(value) < 6 or len(value) > self.policy.max_scan_chars:
            return value
        for _ in range(4):  # as in text(): until nothing is found
            findings = self.detectors.scan(value, kinds)
            if not findings:
                break
            value = self._replace(value, findings, count=False)
        return value

    def _apply(self, value: str, findings: list[Finding], *, source: Scope, field: str) -> str:
        for f in findings:
            if self.policy.action(f.kind, source) == "reject":
                self.stats.rejected[f.kind] += 1
                raise PrivacyRejectedError(field, f.kind, source)
        return self._replace(value, findings, count=True)

    def _replace(self, value: str, findings: list[Finding], *, count: bool) -> str:
        out: list[str] = []
        at = 0
        for f in findings:
            out.append(value[at : f.start])
            out.append(self.placeholder(f.kind, f.normal))
            at = f.end
            if count:
                self.stats.redacted[f.kind] += 1
                self.stats.unchecked += not f.checked
        out.append(value[at:])
        return "".join(out)

    def secret_value(self, key: str, value: str, *, source: Scope, field: str) -> str:
        """A JSON value under a secret-naming key (``"password": "hunter2"``)."""
        if "secret" not in self._kinds(source) or not keyed_value_is_secret(key, value):
            return self.text(value, source=source, field=field)
        return self._apply(
            value, [Finding("secret", 0, len(value), value)], source=source, field=field
        )

    # ------------------------------------------------------------------ JSON

    def json(self, value: Any, *, source: Scope, field: str, depth: int = 0) -> Any:
        """A JSON value with every string in it redacted (object keys kept); a string
        under a secret-naming key is judged as a secret's value."""
        if isinstance(value, str):
            return self.text(value, source=source, field=field)
        if depth > 64:
            return value
        if isinstance(value, list):
            return [
                self.json(v, source=source, field=f"{field}.{i}", depth=depth + 1)
                for i, v in enumerate(value)
            ]
        if isinstance(value, dict):
            return {
                k: (
                    self.secret_value(k, v, source=source, field=f"{field}.{k}")
                    if isinstance(v, str) and _secret_key_name(k)
                    else self.json(v, source=source, field=f"{field}.{k}", depth=depth + 1)
                )
                for k, v in value.items()
            }
        return value


def json_chars(value: Any, limit: int) -> int:
    """The characters of the strings in a JSON value, counted up to ``limit``."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
            total += sum(len(str(k)) for k in v)
    return total
