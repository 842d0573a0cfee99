"""Detectors: where a text holds personal data or a secret.

Each detector finds *candidates* with one RE2 pattern (linear in the text, never
backtracking: the same engine the fs sensor's regexes use) and then checks each candidate
with the library that knows the format: ``ipaddress`` for addresses, ``phonenumbers`` for
phone numbers, ``python-stdnum`` for the Luhn check of card numbers, the IBAN checksum and
national ids. A candidate that fails its check is not a finding: a 16-digit number that
fails Luhn is kept, a 9-digit number is not a social security number.

Cheap work first: one pass of an RE2 set of short necessary conditions (an ``@`` between
word characters, a run of 12 digits, ``-----BEGIN``, a token prefix, ...) says which
detectors can have a candidate at all; only those run. A text of lowercase letters and
digits (a digest, a commit id, a word) cannot hold a finding and is not scanned.

Bounded work: a text longer than ``max_scan_chars`` is not scanned (the caller decides:
refused at the API, withheld from an event), and each detector checks at most
``max_checks`` candidates per text; past that it fails closed: every further candidate
counts as a finding, unchecked (hostile input of near-matches costs a bounded number of
library calls).

What is never a secret: the values bindings check and report. A SHA-256 or SHA-1 hex
digest, a git commit id and a UUID standing alone are data, not credentials; the secret
detector reports a value only by a known token prefix, a key block, a JWT, a URL's
password, or a random-looking value after a secret-naming key (``api_key = ...``).
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Literal, cast

import phonenumbers
import re2
from stdnum import iban as std_iban
from stdnum import luhn
from stdnum.es import dni as es_dni
from stdnum.es import nie as es_nie
from stdnum.fi import hetu as fi_hetu
from stdnum.fr import nir as fr_nir
from stdnum.it import codicefiscale as it_cf
from stdnum.nl import bsn as nl_bsn
from stdnum.pl import pesel as pl_pesel
from stdnum.se import personnummer as se_pnr
from stdnum.us import ssn as us_ssn

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "KINDS",
    "NATIONAL_IDS",
    "Detectors",
    "Finding",
    "Kind",
    "secret_key_name",
]

Kind = Literal["secret", "card", "iban", "national_id", "email", "phone", "ip"]
# Also the order in which overlapping findings win: a URL's password before the e-mail
# its "user:pass@host" looks like, a card number before the phone number it could be.
KINDS: Final[tuple[Kind, ...]] = (
    "secret",
    "card",
    "iban",
    "national_id",
    "email",
    "phone",
    "ip",
)
_RANK = {k: i for i, k in enumerate(KINDS)}


@dataclass(frozen=True, slots=True)
class Finding:
    """One detected value: ``text[start:end]``, its kind and its normal form (what the
    placeholder's HMAC is taken of, so one value written two ways gives one placeholder)."""

    kind: Kind
    start: int
    end: int
    normal: str
    checked: bool = True  # False: past the check budget, reported without its check


def _c(pattern: str) -> re2._Regexp[str]:
    opts = re2.Options()
    opts.max_mem = 64 << 20
    return re2.compile(pattern, opts)


# ---------------------------------------------------------- the patterns, all RE2

_EMAIL = _c(
    r"[A-Za-z0-9._%+-]{1,64}(?:@|%40)"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,8}\.[A-Za-z]{2,24}"
)
_IPV4 = _c(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
_IPV6 = _c(r"[0-9A-Fa-f.]{0,39}:[0-9A-Fa-f.]{0,39}:[0-9A-Fa-f:.]{0,39}")
_PHONE_INTL = _c(r"\+[1-9][0-9 ().\-/]{5,22}[0-9]")
_PHONE_LOCAL = _c(r"(?:\+[1-9]|\(?[0-9])[0-9 ().\-/]{5,22}[0-9]")
_CARD = _c(r"[0-9](?:[ -]?[0-9]){12,22}")
_IBAN = _c(r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,32}")

# Known token formats (the prefixes detect-secrets and gitleaks keep, written for RE2).
_TOKEN_FORMATS = (
    r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key id
    r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{22,255}",
    r"(?:glpat|gldt|glft|glsoat|glrt|gloas|glptt|glimt|glcbt|glagent)-[A-Za-z0-9_\-]{20,}",
    r"xox[abposr]-[0-9A-Za-z\-]{10,}",  # Slack
    r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
    r"[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",  # Stripe
    r"sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}",  # OpenAI, Anthropic
    r"pypi-AgE[A-Za-z0-9_\-]{50,}",
    r"npm_[A-Za-z0-9]{36}",
    r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",  # SendGrid
    r"AIza[0-9A-Za-z_\-]{35}",  # Google API key
    r"hf_[A-Za-z0-9]{34}",  # Hugging Face
    r"do[opr]_v1_[a-f0-9]{64}",  # DigitalOcean
    r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
    r"sq0(?:csp|atp)-[0-9A-Za-z_\-]{22,43}",  # Square
    r"[0-9]{8,10}:AA[0-9A-Za-z_\-]{33}",  # Telegram bot
    r"AccountKey=[A-Za-z0-9+/=]{88}",  # Azure storage
    r"[0-9a-f]{32}-us[0-9]{1,2}",  # Mailchimp
)
_TOKENS = _c("|".join(_TOKEN_FORMATS))
_PRIVATE_KEY = _c(
    r"(?s)-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:.*?-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,\-]*)"
)
_JWT = _c(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*")
_URL_PASSWORD = _c(
    r"[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/?#@\[\]]{1,256}:([^\s:/?#@\[\]]{1,256})@"
)
_BEARER = _c(r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{16,}=*)")
# Words that name secrets (not a secret itself, whatever its name says to S105).
_SECRET_WORDS = (
    r"pass(?:word|wd|phrase)|pwd|secret|token|api[_\-]?key|apikey|access[_\-]?key"  # noqa: S105
    r"|auth[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?"
)
_KEYED = _c(
    r"(?i)([A-Za-z0-9_.\-]{0,30}(?:" + _SECRET_WORDS + r"))[\"']?[ \t]{0,5}(?:=|:=|=>|:)[ \t]{0,5}"
    r"[\"']?([^\s\"'<>,;`]{1,512})"
)
# What each secret pattern above needs somewhere in the text (the scan's first pass).
_SECRET_TRIGGERS: Final[dict[str, str]] = {
    "key_block": r"-----BEGIN",
    "token": (
        r"A3T|ABIA|ACCA|AKIA|ASIA|gh[pousr]_|github_pat_|gl[a-z]{2,6}-|xox[abposr]-"
        r"|hooks\.slack\.com|[rs]k_(?:live|test)_|sk-|pypi-|npm_|SG\.|AIza|hf_|do[opr]_v1_"
        r"|shp(?:at|ca|pa|ss)_|sq0|:AA|AccountKey=|-us[0-9]"
    ),
    "jwt": r"eyJ",
    "url_password": r"://[^\s/?#@]*:[^\s/?#@]*@",
    "bearer": r"(?i)bearer",
    "keyed": r"(?i)(?:pass|pwd|secret|token|key|credential)[a-z]{0,6}[\"']?[ \t]{0,5}[=:]",
}
_KEY_NAME = _c(r"(?i)[A-Za-z0-9_.\-]{0,30}(?:" + _SECRET_WORDS + r")")
_PASSWORD_KEY = _c(r"(?i)(?:pass(?:word|wd|phrase)|pwd)$")
_SECRET_WORD = _c(r"(?i)passw|passphrase|secret|token|credential|api_?key")
_CAMEL = _c(r"(?:[A-Z][a-z0-9]+){2,}")  # a type's name: SecretStr, ApiTokenType
_PLACEHOLDER = _c(r"\[[a-z_]{2,12}:[0-9a-f]{16}\]")
_HELD = "\x00placeholder"  # the normal form of a placeholder already in a text

# Values after a secret-naming key that are references or stand-ins, not secrets.
_NOT_SECRET_VALUES = frozenset(
    {"none", "null", "nil", "true", "false", "changeme", "redacted", "required", "optional"}
)


@functools.lru_cache(maxsize=4096)
def secret_key_name(name: str) -> bool:
    """Whether a JSON key (``"api_key"``, ``"password"``) names a secret (cached: the
    same few keys come again and again)."""
    return len(name) <= 64 and _KEY_NAME.fullmatch(name) is not None


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _is_reference(value: str, key: str = "") -> bool:
    """A stand-in or a piece of code, not a secret: ``${VAR}``, ``<...>``, ``****``,
    ``none``, a call or an index (``secrets.token_urlsafe(32)``, ``USERS[``), the key's
    own name (``password=password``), or an attribute or type that names a secret
    (``settings.password``, ``SecretStr``). ``supersecret`` stays a password."""
    if (
        value[0] in "$%{<*[("
        or value.lower() in _NOT_SECRET_VALUES
        or len(set(value)) == 1  # ****, xxxx
        or "(" in value
        or "[" in value
        or _PLACEHOLDER.fullmatch(value) is not None
    ):
        return True
    if key and value.rstrip(")]},").lower() == key.rsplit(".", 1)[-1].lower():
        return True
    return _SECRET_WORD.search(value) is not None and (
        "." in value or _CAMEL.fullmatch(value) is not None
    )


def keyed_value_is_secret(key: str, value: str) -> bool:
    """A value written after a secret-naming key: a password of 4+ characters, or a
    token/key/secret that looks random: 16+ characters with 3+ bits of entropy each when
    letters and digits mix, 4+ when not (``"token": "FileNotFoundError"`` is a word)."""
    if not value or _is_reference(value, key):
        return False
    if _PASSWORD_KEY.search(key) is not None:
        return len(value) >= 4
    if len(value) < 16:
        return False
    entropy = _entropy(value)
    # Letters alone: only as random as a token (a CamelCase name stays under 4 bits).
    mixed = any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    return entropy >= 4.0 or (mixed and entropy >= 3.0)


# ------------------------------------------------------------------ card prefixes

_CARD_PREFIXES: Final = (
    ("4", (13, 16, 19)),  # Visa
    ("34", (15,)),  # Amex
    ("37", (15,)),
    ("36", (14,)),  # Diners
    ("38", (14,)),
    ("300", (14,)),
    ("301", (14,)),
    ("302", (14,)),
    ("303", (14,)),
    ("304", (14,)),
    ("305", (14,)),
    ("6011", (16, 19)),  # Discover
    ("65", (16, 19)),
    ("62", (16, 17, 18, 19)),  # UnionPay
    ("35", (16, 17, 18, 19)),  # JCB
    ("5018", (12, 13, 14, 15, 16, 17, 18, 19)),  # Maestro
    ("5020", (12, 13, 14, 15, 16, 17, 18, 19)),
    ("5038", (12, 13, 14, 15, 16, 17, 18, 19)),
    ("6304", (12, 13, 14, 15, 16, 17, 18, 19)),
    ("6759", (12, 13, 14, 15, 16, 17, 18, 19)),
    ("676", (12, 13, 14, 15, 16, 17, 18, 19)),
)


def _card_brand_fits(digits: str) -> bool:
    n = len(digits)
    if digits[0] == "5" and "51" <= digits[:2] <= "55" and n == 16:  # Mastercard
        return True
    if digits[0] == "2" and "2221" <= digits[:4] <= "2720" and n == 16:
        return True
    if digits[:3].isdigit() and "644" <= digits[:3] <= "649" and n in (16, 19):  # Discover
        return True
    return any(digits.startswith(p) and n in lengths for p, lengths in _CARD_PREFIXES)


def _is_card(digits: str) -> bool:
    return 12 <= len(digits) <= 19 and _card_brand_fits(digits) and luhn.is_valid(digits)


# ------------------------------------------------------------------ national ids


@dataclass(frozen=True, slots=True)
class _NationalId:
    pattern: str
    valid: Callable[[str], bool]
    compact: Callable[[str], str]


NATIONAL_IDS: Final[dict[str, _NationalId]] = {
    # us.ssn has no check digit: python-stdnum checks its area, group and serial ranges,
    # and only the written form with dashes is looked for.
    "us.ssn": _NationalId(r"[0-9]{3}-[0-9]{2}-[0-9]{4}", us_ssn.is_valid, us_ssn.compact),
    "es.dni": _NationalId(r"[0-9]{8}-?[A-Z]", es_dni.is_valid, es_dni.compact),
    "es.nie": _NationalId(r"[XYZ]-?[0-9]{7}-?[A-Z]", es_nie.is_valid, es_nie.compact),
    "it.codicefiscale": _NationalId(
        r"[A-Z]{6}[0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{3}[A-Z]",
        it_cf.is_valid,
        it_cf.compact,
    ),
    "fi.hetu": _NationalId(r"[0-9]{6}[-+A][0-9]{3}[0-9A-Y]", fi_hetu.is_valid, fi_hetu.compact),
    "se.personnummer": _NationalId(
        r"(?:[0-9]{2})?[0-9]{6}[-+][0-9]{4}", se_pnr.is_valid, se_pnr.compact
    ),
    "fr.nir": _NationalId(
        r"[12][0-9]{4}(?:2[AB]|[0-9]{2})[0-9]{8}", fr_nir.is_valid, fr_nir.compact
    ),
    # Bare digit runs with a weak check (1 in 11, 1 in 10): off unless configured.
    "nl.bsn": _NationalId(r"[0-9]{4}\.?[0-9]{2}\.?[0-9]{3}", nl_bsn.is_valid, nl_bsn.compact),
    "pl.pesel": _NationalId(r"[0-9]{11}", pl_pesel.is_valid, pl_pesel.compact),
}


# ------------------------------------------------------------------ the detectors


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


class Detectors:
    """The configured set of detectors; :meth:`scan` lists a text's findings."""

    def __init__(
        self,
        *,
        phone_regions: Sequence[str] = (),
        national_ids: Sequence[str] = (),
        ip_scope: Literal["global", "all"] = "global",
        max_checks: int = 2000,
    ) -> None:
        self.phone_regions = tuple(r.upper() for r in phone_regions)
        self.ip_scope = ip_scope
        self.max_checks = max_checks
        self._ids = [(n, NATIONAL_IDS[n]) for n in national_ids]
        self._id_pattern = (
            _c("|".join(f"({spec.pattern})" for _, spec in self._ids)) if self._ids else None
        )
        self._phone = _PHONE_LOCAL if self.phone_regions else _PHONE_INTL
        # One pass of an RE2 set over the text says which kinds may have a candidate: a
        # short necessary condition of each (a digest, a number or a word then costs that
        # pass and nothing more). Each detector's own pattern runs only after its trigger.
        triggers: dict[str, list[str]] = {
            **{f"secret.{name}": [t] for name, t in _SECRET_TRIGGERS.items()},
            "card": [r"\b[0-9](?:[ -]?[0-9]){11}"],
            "iban": [r"\b[A-Z]{2}[0-9]{2} ?[A-Z0-9]{4}"],
            "national_id": (
                [r"\b(?:" + "|".join(spec.pattern for _, spec in self._ids) + r")\b"]
                if self._ids
                else []
            ),
            "email": [r"[A-Za-z0-9._%+\-](?:@|%40)[A-Za-z0-9]"],
            "phone": [
                r"[0-9(][0-9 ().\-/]{5}" if self.phone_regions else r"\+[1-9][0-9 ().\-/]{5}"
            ],
            "ip": [
                r"\b[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\b",
                r"[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{0,4}",
            ],
        }
        opts = re2.Options()
        opts.max_mem = 64 << 20
        self._gate = re2.Set.SearchSet(opts)
        self._gate_scanners: list[str] = []
        for scanner, patterns in triggers.items():
            for pattern in patterns:
                self._gate.Add(pattern)
                self._gate_scanners.append(scanner)
        self._gate.Compile()

    def scan(self, text: str, kinds: frozenset[Kind]) -> list[Finding]:
        """The findings of ``kinds`` in ``text``: sorted, not overlapping (on overlap the
        kind earlier in :data:`KINDS` wins, then the longer match)."""
        # RE2::Set answers the indexes of the patterns that match (the stub says bool).
        hits = cast("list[int] | None", self._gate.Match(text))
        if not hits:
            return []
        found: list[Finding] = []
        for name in {self._gate_scanners[i] for i in hits}:
            kind, scanner = self._SCANNERS[name]
            if kind in kinds:
                found.extend(scanner(self, text))
        if not found:
            return found
        # Placeholders already in the text are taken first, so nothing in them is found
        # again (``[secret:5f1c…]`` reads like ``secret: <random value>``).
        held = (
            [Finding("secret", m.start(), m.end(), _HELD) for m in _PLACEHOLDER.finditer(text)]
            if "[" in text
            else []
        )
        if len(found) < 2 and not held:
            return found
        found.sort(key=lambda f: (_RANK[f.kind], f.start, -(f.end - f.start)))
        starts: list[int] = [f.start for f in held]  # of the findings taken: sorted, apart
        taken: list[Finding] = held
        for f in found:
            i = bisect.bisect_right(starts, f.start)
            if (i and taken[i - 1].end > f.start) or (i < len(taken) and taken[i].start < f.end):
                continue
            starts.insert(i, f.start)
            taken.insert(i, f)
        return [f for f in taken if f.normal is not _HELD] if held else taken

    # Each scanner yields its findings; ``budget`` counts library checks.

    def _checked(
        self, spans: Iterator[tuple[int, int, str]], check: Callable[[str], str | None]
    ) -> Iterator[tuple[int, int, str, bool]]:
        """(start, end, normal, checked) for the candidates ``check`` accepts (it returns
        the normal form or None); past ``max_checks`` every candidate is accepted."""
        n = 0
        for start, end, cand in spans:
            n += 1
            if n > self.max_checks:
                yield start, end, cand, False
                continue
            normal = check(cand)
            if normal is not None:
                yield start, end, normal, True

    def _emails(self, text: str) -> Iterator[Finding]:
        if "@" not in text and "%40" not in text:
            return
        for m in _EMAIL.finditer(text):
            value = m.group()
            lead = len(value) - len(value.lstrip("."))  # a sentence's dot is not the address
            if value[lead] in "@%":
                continue
            yield Finding(
                "email", m.start() + lead, m.end(), value[lead:].replace("%40", "@").lower()
            )

    def _ips(self, text: str) -> Iterator[Finding]:
        if "." in text:
            spans = (
                (m.start(), m.end(), m.group())
                for m in _IPV4.finditer(text)
                if not _around(text, m.start(), m.end(), ".")
            )
            for start, end, normal, checked in self._checked(spans, self._ip):
                yield Finding("ip", start, end, normal, checked)
        if text.count(":") >= 2:
            v6 = (_strip_ipv6(text, m.start(), m.end()) for m in _IPV6.finditer(text))
            for start, end, normal, checked in self._checked(
                (s for s in v6 if s is not None), self._ip
            ):
                yield Finding("ip", start, end, normal, checked)

    def _ip(self, cand: str) -> str | None:
        try:
            addr = ipaddress.ip_address(cand)
        except ValueError:
            return None
        if addr.is_unspecified or addr.is_loopback:
            return None
        if self.ip_scope == "global" and not addr.is_global:
            return None
        return addr.compressed

    def _phones(self, text: str) -> Iterator[Finding]:
        if not self.phone_regions and "+" not in text:
            return
        spans = (
            (m.start(), m.end(), m.group())
            for m in self._phone.finditer(text)
            if not _around(text, m.start(), m.end(), "")
        )
        for start, end, normal, checked in self._checked(spans, self._phone_number):
            yield Finding("phone", start, end, normal, checked)

    def _phone_number(self, cand: str) -> str | None:
        for region in self.phone_regions or (None,):
            try:
                number = phonenumbers.parse(cand, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number):
                return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
        return None

    def _cards(self, text: str) -> Iterator[Finding]:
        spans = (
            (m.start(), m.end(), m.group())
            for m in _CARD.finditer(text)
            if not _around(text, m.start(), m.end(), "")
        )
        for start, end, normal, checked in self._checked(spans, _card):
            # The number may be a prefix of the run ("4111 1111 1111 1111 2031").
            stop = _prefix_end(text, start, len(normal)) if checked else end
            yield Finding("card", start, stop, normal, checked)

    def _ibans(self, text: str) -> Iterator[Finding]:
        spans = (
            (m.start(), m.end(), m.group())
            for m in _IBAN.finditer(text)
            if not _around(text, m.start(), m.end(), "")
        )
        for start, end, normal, checked in self._checked(spans, _iban):
            stop = _prefix_end(text, start, len(normal), alnum=True) if checked else end
            yield Finding("iban", start, stop, normal, checked)

    def _national_ids(self, text: str) -> Iterator[Finding]:
        if self._id_pattern is None:
            return
        ids = self._ids
        spans = (
            # which id's pattern matched travels with the candidate: "<index>:<text>"
            (
                m.start(),
                m.end(),
                f"{next(i for i in range(len(ids)) if m.group(i + 1))}:{m.group()}",
            )
            for m in self._id_pattern.finditer(text)
            if not _around(text, m.start(), m.end(), "-.")
        )

        def check(tagged: str) -> str | None:
            index, cand = tagged.split(":", 1)
            name, spec = ids[int(index)]
            return f"{name}:{spec.compact(cand)}" if spec.valid(cand) else None

        for start, end, normal, checked in self._checked(spans, check):
            yield Finding("national_id", start, end, normal, checked)

    def _key_blocks(self, text: str) -> Iterator[Finding]:
        for m in _PRIVATE_KEY.finditer(text):
            yield Finding("secret", m.start(), m.end(), m.group())

    def _tokens(self, text: str) -> Iterator[Finding]:
        for m in _TOKENS.finditer(text):
            yield Finding("secret", m.start(), m.end(), m.group())

    def _jwts(self, text: str) -> Iterator[Finding]:
        for m in _JWT.finditer(text):
            yield Finding("secret", m.start(), m.end(), m.group())

    def _url_passwords(self, text: str) -> Iterator[Finding]:
        for m in _URL_PASSWORD.finditer(text):
            yield Finding("secret", m.start(1), m.end(1), m.group(1))

    def _bearers(self, text: str) -> Iterator[Finding]:
        for m in _BEARER.finditer(text):
            if _entropy(m.group(1)) >= 3.0:
                yield Finding("secret", m.start(1), m.end(1), m.group(1))

    def _keyed(self, text: str) -> Iterator[Finding]:
        for m in _KEYED.finditer(text):
            if keyed_value_is_secret(m.group(1), m.group(2)):
                yield Finding("secret", m.start(2), m.end(2), m.group(2))

    # Each scanner by the name its trigger has in the first pass, with the kind it finds.
    _SCANNERS: ClassVar[dict[str, tuple[Kind, Callable[[Detectors, str], Iterator[Finding]]]]] = {
        "secret.key_block": ("secret", _key_blocks),
        "secret.token": ("secret", _tokens),
        "secret.jwt": ("secret", _jwts),
        "secret.url_password": ("secret", _url_passwords),
        "secret.bearer": ("secret", _bearers),
        "secret.keyed": ("secret", _keyed),
        "card": ("card", _cards),
        "iban": ("iban", _ibans),
        "national_id": ("national_id", _national_ids),
        "email": ("email", _emails),
        "phone": ("phone", _phones),
        "ip": ("ip", _ips),
    }


def _around(text: str, start: int, end: int, also: str) -> bool:
    """Whether the match continues a word (or a run of ``also`` characters) on either side:
    ``v1.2.3.4.5`` holds no address and ``12345678901234567890123`` no card number."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    if _word(before) or before in also:
        return True
    if _word(after):
        return True
    # A trailing dot ends a sentence unless a digit follows it (1.2.3.4.5).
    return after in also and end + 1 < len(text) and text[end + 1].isalnum()


def _strip_ipv6(text: str, start: int, end: int) -> tuple[int, int, str] | None:
    while end > start and text[end - 1] == ".":
        end -= 1
    if end - start > 45 or end - start < 2:
        return None
    if (start and _word(text[start - 1])) or (end < len(text) and _word(text[end])):
        return None
    if sum(1 for g in text[start:end].split(":") if g) < 3:
        return None
    return start, end, text[start:end]


def _card(cand: str) -> str | None:
    groups = cand.replace("-", " ").split(" ")
    digits = "".join(groups)
    if _is_card(digits):
        return digits
    # "4111 1111 1111 1111 2031": the number, then more digits; try whole groups.
    for k in range(len(groups) - 1, 0, -1):
        prefix = "".join(groups[:k])
        if len(prefix) < 12:
            break
        if _is_card(prefix):
            return prefix
    return None


def _iban(cand: str) -> str | None:
    groups = cand.split(" ")
    for k in range(len(groups), 0, -1):
        compact = "".join(groups[:k])
        if len(compact) < 15:
            break
        if std_iban.is_valid(compact):
            return compact
    return None


def _prefix_end(text: str, start: int, length: int, *, alnum: bool = False) -> int:
    """Where the first ``length`` digits (or letters and digits) from ``start`` end."""
    seen = 0
    i = start
    while seen < length and i < len(text):
        if text[i].isdigit() or (alnum and text[i].isalnum()):
            seen += 1
        i += 1
    return i
