"""The one place the daemon calls sensor code without trusting it.

A sensor is plugin code: its ``setup``, ``check``, ``revalidate``, ``teardown``,
``describe``, binding matchers and dry runs may raise anything, and a crashing plugin
never stops the daemon. Each boundary runs the call through :func:`guarded` (or
:func:`guarded_sync`) and gets the call's value or a :class:`Crash` holding what it
raised; what that means (an ``error`` outcome, a failed start, a line in a listing) is
the boundary's own business. Cancellation and other ``BaseException`` pass through.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["Crash", "describe", "guarded", "guarded_sync"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Crash:
    """What a call of plugin code raised."""

    error: Exception

    @property
    def timed_out(self) -> bool:
        """Whether the call ran out of its time (or raised TimeoutError itself)."""
        return isinstance(self.error, TimeoutError)

    def describe(self) -> str:
        """The error as :func:`describe` says it."""
        return describe(self.error)


def describe(err: BaseException) -> str:
    """``OSError: no device``; just the type when the error says nothing more."""
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


async def guarded(call: Awaitable[T], *, timeout_s: float | None = None) -> T | Crash:
    """``await call`` (within ``timeout_s`` if given): its value, or what it raised."""
    try:
        if timeout_s is None:
            return await call
        async with asyncio.timeout(timeout_s):
            return await call
    except Exception as err:  # noqa: BLE001 - plugin code may raise anything (module doc)
        return Crash(err)


def guarded_sync(call: Callable[[], T]) -> T | Crash:
    """``call()``: its value, or what it raised."""
    try:
        return call()
    except Exception as err:  # noqa: BLE001 - plugin code may raise anything (module doc)
        return Crash(err)
