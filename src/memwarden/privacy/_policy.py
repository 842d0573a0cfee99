"""The privacy policy: what to do with each kind of finding, per source.

``[privacy]`` in ``memwarden.toml``, ``GET``/``PUT /v1/privacy``. Every field is checked
when the policy is loaded: an unknown kind, action, source, region or national id is an
error naming the field, and nothing of the policy is applied.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import phonenumbers
from pydantic import BaseModel, ConfigDict, Field, field_validator

from memwarden.privacy._detect import KINDS, NATIONAL_IDS, Kind

__all__ = [
    "DEFAULT_NATIONAL_IDS",
    "SOURCES",
    "Action",
    "PrivacySettings",
    "RuleTable",
    "Source",
    "SourceRules",
]

Action = Literal["redact", "reject", "allow"]
Source = Literal["agent", "sensor", "review", "import"]
SOURCES: Final[tuple[Source, ...]] = ("agent", "sensor", "review", "import")
DEFAULT_NATIONAL_IDS: Final = (
    "us.ssn",
    "es.dni",
    "es.nie",
    "it.codicefiscale",
    "fi.hetu",
    "se.personnummer",
    "fr.nir",
)


class RuleTable(BaseModel):
    """The action for each kind of finding (the defaults, for every source)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: Action = "redact"  # noqa: S105 - the rule's name, not a password
    email: Action = "redact"
    phone: Action = "redact"
    card: Action = "redact"
    iban: Action = "redact"
    national_id: Action = "redact"
    # Addresses are facts about systems more often than about people in an agent's
    # memory (which host serves what); turn this on where agents see users' traffic.
    ip: Action = "allow"


class SourceRules(BaseModel):
    """One source's overrides: only the kinds named differ from ``rules``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: Action | None = None
    email: Action | None = None
    phone: Action | None = None
    card: Action | None = None
    iban: Action | None = None
    national_id: Action | None = None
    ip: Action | None = None


class PrivacySettings(BaseModel):
    """``[privacy]``: what is looked for in what memwarden stores, and what then happens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="false: store everything verbatim.")
    rules: RuleTable = Field(default_factory=RuleTable)
    sources: dict[Source, SourceRules] = Field(
        default_factory=dict,
        description="Per source (agent, sensor, review, import): overrides of `rules`.",
    )
    phone_regions: list[Annotated[str, Field(min_length=2, max_length=3)]] = Field(
        default_factory=list,
        max_length=50,
        description="Regions (ISO 3166: US, DE) whose numbers written without +country "
        "are phone numbers; empty: only numbers in international form (+49 ...).",
    )
    national_ids: list[str] = Field(
        default_factory=lambda: list(DEFAULT_NATIONAL_IDS),
        description="python-stdnum formats looked for (checked by their check digits).",
    )
    ip_scope: Literal["global", "all"] = Field(
        default="global",
        description="global: public addresses only; all: private and link-local too.",
    )
    max_scan_chars: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Longer texts are not scanned: refused at the API, withheld from events.",
    )
    max_checks: int = Field(
        default=2000,
        ge=10,
        le=1_000_000,
        description="Candidates each detector checks per text; past that each counts as found.",
    )

    @field_validator("phone_regions")
    @classmethod
    def _regions(cls, value: list[str]) -> list[str]:
        out = [v.upper() for v in value]
        unknown = [v for v in out if v not in phonenumbers.SUPPORTED_REGIONS]
        if unknown:
            raise ValueError(f"unknown region {unknown[0]!r} (ISO 3166 codes such as US, DE)")
        return out

    @field_validator("national_ids")
    @classmethod
    def _ids(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in NATIONAL_IDS]
        if unknown:
            raise ValueError(
                f"unknown national id {unknown[0]!r} (one of {', '.join(sorted(NATIONAL_IDS))})"
            )
        return list(dict.fromkeys(value))

    def action(self, kind: Kind, source: Source) -> Action:
        """What happens to a finding of ``kind`` that came from ``source``."""
        override = self.sources.get(source)
        chosen = getattr(override, kind) if override is not None else None
        return chosen if chosen is not None else getattr(self.rules, kind)  # type: ignore[no-any-return]

    def watched(self, source: Source) -> frozenset[Kind]:
        """The kinds that are not simply allowed for ``source`` (what a scan looks for)."""
        if not self.enabled:
            return frozenset()
        return frozenset(k for k in KINDS if self.action(k, source) != "allow")
