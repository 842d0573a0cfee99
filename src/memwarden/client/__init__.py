"""Clients for a running memwarden daemon."""

from __future__ import annotations

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
    "Client",
    "DaemonNotRunningError",
    "Endpoint",
    "Home",
    "find_home",
    "resolve_endpoint",
]
