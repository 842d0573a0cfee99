"""Keeping a connection up: one session after another, capped full-jitter backoff between."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import aiomqtt
import structlog

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from memwarden.plugins import Backoff

__all__ = ["describe_error", "keep_connected"]

log = structlog.get_logger("memwarden.mqtt")


def describe_error(err: BaseException) -> str:
    """``"<type>: <message>"``, looking through exception groups of one."""
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"


def _is_mqtt_error(err: BaseException) -> bool:
    if isinstance(err, BaseExceptionGroup):
        return all(_is_mqtt_error(e) for e in err.exceptions)
    return isinstance(err, aiomqtt.MqttError | OSError)


async def keep_connected(
    session: Callable[[], Awaitable[None]],
    *,
    stopping: asyncio.Event,
    backoff: Backoff,
    healthy_after_s: float = 30.0,
    what: str = "mqtt",
) -> None:
    """Run ``session`` (one connection) again and again until ``stopping`` is set.

    Between attempts: capped full-jitter backoff, reset after a session that lasted
    ``healthy_after_s``. A lost connection is a warning; anything else an error with
    its traceback. Either way we try again; cancellation always propagates.
    """
    loop = asyncio.get_running_loop()
    attempt = 0
    while not stopping.is_set():
        began = loop.time()
        try:
            await session()
        except Exception as err:  # a broken connection never stops the process
            if _is_mqtt_error(err):
                log.warning("mqtt_disconnected", client=what, error=describe_error(err))
            else:
                log.error(
                    "mqtt_session_failed", client=what, error=describe_error(err), exc_info=err
                )
        if stopping.is_set():
            return
        if loop.time() - began >= healthy_after_s:
            attempt = 0
        attempt += 1
        delay = backoff.delay(attempt)
        log.info("mqtt_reconnecting", client=what, attempt=attempt, delay_s=round(delay, 3))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=delay)
