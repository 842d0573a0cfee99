"""``/v1/privacy``: the privacy policy in force (and what it did), and changing it.

``PUT`` takes a whole policy, checked in full before anything changes: an invalid one is
a 422 naming the field and the running policy stays. The policy is kept in the state dir
(``privacy.policy.json``) before it applies: it stays in force across restarts and
``SIGHUP`` over ``[privacy]`` of the configuration until ``DELETE`` removes it.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from memwarden.daemon._routes._deps import Admin, Auth, DaemonDep
from memwarden.privacy import PrivacySettings

__all__ = ["PrivacyAnswer", "PrivacyPolicy", "router"]

router = APIRouter(tags=["privacy"])


class PrivacyAnswer(BaseModel):
    """The policy in force, who set it, and what it did since the daemon started."""

    policy: PrivacySettings
    set_by: Literal["config", "api"] = Field(
        description="config: [privacy] of the configuration; api: set by PUT /v1/privacy "
        "(kept in the state dir: it overrides the configuration until DELETE /v1/privacy)."
    )
    source: str = Field(
        default="",
        description="Where the policy in force comes from: the kept file "
        "(privacy.policy.json in the state dir) when set by the API, else the "
        "configuration file ('' when the daemon runs without one: defaults and MEMWARDEN_ "
        "variables).",
    )
    set_at: str | None = Field(default=None, description="When PUT set it (ISO 8601).")
    set_by_agent: str | None = Field(default=None, description="Whose token PUT it.")
    config_differs: bool = Field(
        default=False,
        description="The configuration's [privacy] differs from the policy PUT keeps in "
        "force (what a DELETE would bring back).",
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
async def put_privacy(body: PrivacyPolicy, caller: Admin, daemon: DaemonDep) -> PrivacyAnswer:
    """Replace the policy (whole); it applies to what arrives from now on. It is kept in
    the state dir first (503 if it cannot be, and nothing changes), so it stays in force
    across restarts and SIGHUP, over [privacy] of the configuration, until DELETE. The
    policy spans every agent: the token's agent needs the ``admin`` operation."""
    policy = PrivacySettings.model_validate(body.model_dump())
    await daemon.privacy.put(policy, by=caller.name, at=daemon.clock.time())
    return PrivacyAnswer.model_validate(daemon.privacy.describe())


@router.delete("/v1/privacy")
async def reset_privacy(_: Admin, daemon: DaemonDep) -> PrivacyAnswer:
    """Forget the policy PUT kept: [privacy] of the configuration applies again (at
    once, and after a restart or SIGHUP). Without a kept policy, nothing changes. Needs
    the ``admin`` operation, as PUT does."""
    await daemon.privacy.reset()
    return PrivacyAnswer.model_validate(daemon.privacy.describe())
