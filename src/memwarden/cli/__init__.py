"""The ``memwarden`` command."""

from __future__ import annotations

from memwarden.cli._app import app, main

__all__ = ["app", "main"]
