"""Injected time. Rules never read the wall clock; they are handed ``now``."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock", "from_ts", "sleep_on", "to_ts"]


@runtime_checkable
class Clock(Protocol):
    """Where time comes from: ``time()`` is POSIX seconds (UTC)."""

    def time(self) -> float: ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to; for tests and simulations."""

    def __init__(self, start: datetime | float = 1_767_225_600.0) -> None:  # 2026-01-01Z
        self._now = to_ts(start) if isinstance(start, datetime) else float(start)

    def time(self) -> float:
        return self._now

    def advance(self, delta: timedelta | float) -> float:
        self._now += delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        return self._now

    def set(self, when: datetime | float) -> None:
        self._now = to_ts(when) if isinstance(when, datetime) else float(when)


async def sleep_on(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock``: its own ``sleep`` if it has one (a test clock that
    wakes sleepers when it is advanced, ``memwarden.plugins.testing.FakeClock``), else
    ``asyncio.sleep``. Everything that waits for a time to pass (the scheduler's passes,
    the polling base through ``SensorContext.sleep``) waits on the same clock."""
    sleeper = getattr(clock, "sleep", None)
    if callable(sleeper):
        await sleeper(seconds)
    else:
        await asyncio.sleep(max(0.0, seconds))


def to_ts(when: datetime) -> float:
    """POSIX seconds from an aware datetime (naive is taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def from_ts(ts: float) -> datetime:
    """An aware UTC datetime from POSIX seconds."""
    return datetime.fromtimestamp(ts, tz=UTC)
