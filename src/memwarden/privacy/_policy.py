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
    "PROFILE_PREFIX",
    "SOURCES",
    "Action",
    "PrivacySettings",
    "RuleTable",
    "Scope",
    "Source",
    "SourceRules",
    "profile_scope",
]

Action = Literal["redact", "reject", "allow"]
Source = Literal["agent", "sensor", "review", "import"]
SOURCES: Final[tuple[Source, ...]] = ("agent", "sensor", "review", "import")
Scope = str
"""What a text is judged as: a :data:`Source`, or ``profile:<name>`` (what an agent with
that ``privacy_profile`` writes: the profile's rules over the ``agent`` source's)."""
PROFILE_PREFIX: Final = "profile:"
_PROFILE_NAME = r"^[a-z][a-z0-9_.-]{0,63}$"


def profile_scope(name: str) -> Scope:
    """The scope an agent's writes are judged in: its profile's, or ``agent``."""
    return "agent" if name == "default" else PROFILE_PREFIX + name


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
    profiles: dict[Annotated[str, Field(pattern=_PROFILE_NAME)], SourceRules] = Field(
        default_factory=dict,
        max_length=100,
        description="Named profiles for agents (`[agents.<name>] privacy_profile`): "
        "overrides of the `agent` source's rules for what that agent writes.",
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

    def scopes(self) -> tuple[Scope, ...]:
        """Every scope a text can be judged in: the sources, then each profile's."""
        return (*SOURCES, *(PROFILE_PREFIX + name for name in sorted(self.profiles)))

    def action(self, kind: Kind, source: Scope) -> Action:
        """What happens to a finding of ``kind`` that came from ``source`` (a source, or
        a profile: its rule, else the ``agent`` source's; a profile that is not defined
        is the ``agent`` source)."""
        if source.startswith(PROFILE_PREFIX):
            profile = self.profiles.get(source.removeprefix(PROFILE_PREFIX))
            mine = getattr(profile, kind) if profile is not None else None
            return mine if mine is not None else self.action(kind, "agent")
        override = next((r for name, r in self.sources.items() if name == source), None)
        chosen = getattr(override, kind) if override is not None else None
        return chosen if chosen is not None else getattr(self.rules, kind)  # type: ignore[no-any-return]

    def watched(self, source: Scope) -> frozenset[Kind]:
        """The kinds that are not simply allowed for ``source`` (what a scan looks for)."""
        if not self.enabled:
            return frozenset()
        return frozenset(k for k in KINDS if self.action(k, source) != "allow")
