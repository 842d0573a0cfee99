"""A TaskGroup whose single failure surfaces as itself, not as an ExceptionGroup.

The supervisor reports ``run: <type>: <message>``; "unhandled errors in a TaskGroup (1
sub-exception)" would hide what went wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["task_group"]


@contextlib.asynccontextmanager
async def task_group() -> AsyncIterator[asyncio.TaskGroup]:
    try:
        async with asyncio.TaskGroup() as tg:
            yield tg
    except BaseExceptionGroup as group:
        errors = [e for e in group.exceptions if not isinstance(e, asyncio.CancelledError)]
        if len(errors) == 1 and isinstance(errors[0], Exception):
            raise errors[0] from None
        raise
