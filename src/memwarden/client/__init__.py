"""Clients for a running memwarden daemon."""

from __future__ import annotations

from memwarden.client._answers import (
    BelievedAt,
    BlockPage,
    EventsAccepted,
    ForgetAnswer,
    HealthAnswer,
    Liveness,
    RevalidateAnswer,
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
    "AsyncClient",
    "BelievedAt",
    "BlockPage",
    "Client",
    "DaemonNotRunningError",
    "Endpoint",
    "EventsAccepted",
    "ForgetAnswer",
    "HealthAnswer",
    "Home",
    "Liveness",
    "RevalidateAnswer",
    "Tombstone",
    "find_home",
    "resolve_endpoint",
]
