"""Clients for a running memwarden daemon."""

from __future__ import annotations

from memwarden.client._client import AsyncClient, Client, DaemonNotRunningError, resolve_endpoint

__all__ = ["AsyncClient", "Client", "DaemonNotRunningError", "resolve_endpoint"]
