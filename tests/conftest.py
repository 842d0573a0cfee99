"""Settings shared by the whole suite (nothing daemon-related lives here)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import pytest
import structlog
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from collections.abc import Iterator

# Property tests run on loaded 2-core CI machines: no per-example deadline (the per-test
# timeout still bounds them), and no flakiness from a slow first example. Under CI the
# examples are derandomized (the same every run), so a run fails on a change, never on a
# draw; local runs keep exploring, and what they find is pinned with @example.
settings.register_profile(
    "memwarden",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=os.environ.get("CI", "").lower() in ("1", "true", "yes"),
)
settings.load_profile("memwarden")


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """Each test starts from structlog's defaults and the root logger as they were, whatever
    an earlier test (an in-process ``memwarden`` command) configured: log levels filter
    before ``capture_logs`` sees anything."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
