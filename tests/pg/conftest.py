"""PostgreSQL tests start their own server (tests/pgserver.py), never the machine's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.pgserver import pg_server

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support import DaemonProcess

__all__ = ["nodes", "pg_server"]


@pytest.fixture
def nodes() -> Iterator[list[DaemonProcess]]:
    """Daemons a test starts (it appends them); every one still running is killed at the end."""
    started: list[DaemonProcess] = []
    yield started
    for d in started:
        if d.alive():
            d.process.kill()
            d.process.wait()
