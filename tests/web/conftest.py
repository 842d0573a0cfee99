"""Fixtures for the review page: the in-process daemon."""

from __future__ import annotations

from tests.support import daemon

__all__ = ["daemon"]
