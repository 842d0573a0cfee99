"""The CLI runs against a real daemon process (or a database file with --db)."""

from __future__ import annotations

from tests.api.conftest import live_daemon

__all__ = ["live_daemon"]
