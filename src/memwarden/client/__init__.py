"""Clients for a running memwarden daemon."""

from __future__ import annotations

from memwarden.client._answers import (
    AddedBlock,
    BelievedAt,
    BindAnswer,
    BlockPage,
    Coverage,
    CoverageShare,
    DryRun,
    EventsAccepted,
    HealthAnswer,
    Liveness,
    RevalidateAnswer,
    SuggestAnswer,
    Suggestion,
)
from memwarden.client._client import (
    AsyncClient,
    Client,
    DaemonNotRunningError,
    Endpoint,
    Home,
    find_home,
    resolve_endpoint,
)

__all__ = [
    "AddedBlock",
    "AsyncClient",
    "BelievedAt",
    "BindAnswer",
    "BlockPage",
    "Client",
    "Coverage",
    "CoverageShare",
    "DaemonNotRunningError",
    "DryRun",
    "Endpoint",
    "EventsAccepted",
    "HealthAnswer",
    "Home",
    "Liveness",
    "RevalidateAnswer",
    "SuggestAnswer",
    "Suggestion",
    "find_home",
    "resolve_endpoint",
]
