"""``/v1/privacy``: the privacy policy in force (and what it did), and changing it.

``PUT`` takes a whole policy, checked in full before anything changes: an invalid one is
a 422 naming the field and the running policy stays. The change holds until the next
restart or ``SIGHUP``, which apply ``[privacy]`` from the configuration file again.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from memwarden.daemon._routes._deps import Auth, DaemonDep
from memwarden.privacy import PrivacySettings

__all__ = ["PrivacyAnswer", "router"]

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


@router.get("/v1/privacy")
async def get_privacy(_: Auth, daemon: DaemonDep) -> PrivacyAnswer:
    """The privacy policy: per kind and source, redact, reject or allow (docs/PRIVACY.md)."""
    return PrivacyAnswer.model_validate(daemon.privacy.describe())


@router.put("/v1/privacy")
async def put_privacy(body: PrivacySettings, _: Auth, daemon: DaemonDep) -> PrivacyAnswer:
    """Replace the policy (whole); it applies to what arrives from now on, until the
    next restart or SIGHUP re-reads the configuration file."""
    daemon.privacy.set_policy(body, by="api")
    return PrivacyAnswer.model_validate(daemon.privacy.describe())
