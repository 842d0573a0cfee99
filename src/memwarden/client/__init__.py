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
    ForgetAnswer,
    HealthAnswer,
    Liveness,
    RevalidateAnswer,
    SearchHealth,
    StoreInfo,
    SuggestAnswer,
    Suggestion,
    Tombstone,
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
    "ForgetAnswer",
    "HealthAnswer",
    "Home",
    "Liveness",
    "RevalidateAnswer",
    "SearchHealth",
    "StoreInfo",
    "SuggestAnswer",
    "Suggestion",
    "Tombstone",
    "find_home",
    "resolve_endpoint",
]
