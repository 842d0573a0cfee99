"""``/v1/privacy``: the privacy policy in force (and what it did), and changing it.

``PUT`` takes a whole policy, checked in full before anything changes: an invalid one is
a 422 naming the field and the running policy stays. The change holds until the next
restart or ``SIGHUP``, which apply ``[privacy]`` from the configuration file again.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from memwarden.daemon._routes._deps import Auth, DaemonDep
from memwarden.privacy import PrivacySettings

__all__ = ["PrivacyAnswer", "PrivacyPolicy", "router"]

router = APIRouter(tags=["privacy"])


class PrivacyAnswer(BaseModel):
    """The policy in force, who set it, and what it did since the daemon started."""

    policy: PrivacySettings
    set_by: Literal["config", "api"] = Field(
        description="config: [privacy] of the configuration file; api: a PUT since."
    )
    redacted: dict[str, int] = Field(description="Values redacted, by kind.")
    rejected: dict[str, int] = Field(description="Inputs refused, by the kind that refused.")
    unchecked: int = Field(description="Findings past a detector's check budget (max_checks).")


class PrivacyPolicy(PrivacySettings):
    """A whole policy, as ``PUT /v1/privacy`` takes it: JSON types exactly (``true``, not
    ``1``; numbers, not strings), where the configuration file's environment variables
    are read as text."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@router.get("/v1/privacy")
async def get_privacy(_: Auth, daemon: DaemonDep) -> PrivacyAnswer:
    """The privacy policy: per kind and source, redact, reject or allow (docs/PRIVACY.md)."""
    return PrivacyAnswer.model_validate(daemon.privacy.describe())


@router.put("/v1/privacy")
async def put_privacy(body: PrivacyPolicy, _: Auth, daemon: DaemonDep) -> PrivacyAnswer:
    """Replace the policy (whole); it applies to what arrives from now on, until the
    next restart or SIGHUP re-reads the configuration file."""
    daemon.privacy.set_policy(PrivacySettings.model_validate(body.model_dump()), by="api")
    return PrivacyAnswer.model_validate(daemon.privacy.describe())
