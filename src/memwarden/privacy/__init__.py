"""Privacy: personal data and secrets found in what memwarden stores, and what then happens.

Detectors (:class:`Detectors`) find e-mail addresses, IP addresses, phone numbers,
payment card numbers, IBANs, national id numbers and secrets; a policy
(:class:`PrivacySettings`, ``[privacy]``) says per kind and per source (agent, sensor,
review, import) whether to redact, reject or allow; a :class:`Redactor` applies both.
Imports nothing of memwarden but its errors: the daemon applies it at its doors
(docs/PRIVACY.md).
"""

from memwarden.privacy._detect import KINDS, NATIONAL_IDS, Detectors, Finding, Kind
from memwarden.privacy._policy import (
    DEFAULT_NATIONAL_IDS,
    SOURCES,
    Action,
    PrivacySettings,
    RuleTable,
    Scope,
    Source,
    SourceRules,
    profile_scope,
)
from memwarden.privacy._redact import (
    PLACEHOLDER_HEX,
    PrivacyRejectedError,
    Redactor,
    Stats,
    TooLongError,
    json_chars,
)

__all__ = [
    "DEFAULT_NATIONAL_IDS",
    "KINDS",
    "NATIONAL_IDS",
    "PLACEHOLDER_HEX",
    "SOURCES",
    "Action",
    "Detectors",
    "Finding",
    "Kind",
    "PrivacyRejectedError",
    "PrivacySettings",
    "Redactor",
    "RuleTable",
    "Scope",
    "Source",
    "SourceRules",
    "Stats",
    "TooLongError",
    "json_chars",
    "profile_scope",
]
