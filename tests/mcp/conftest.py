"""Fixtures for the MCP tests."""

from __future__ import annotations

from tests.support import daemon

__all__ = ["daemon"]
