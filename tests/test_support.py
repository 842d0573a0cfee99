"""tests/support: the one way to wait fails loudly instead of hanging or passing falsely."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import assert_responsive, eventually, eventually_blocking


async def test_an_awaitable_that_never_finishes_fails_at_the_deadline():
    """A condition that returns a wait which never ends (here an Event nobody sets)
    fails the test at its deadline, naming it, instead of hanging it."""
    never = asyncio.Event()
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(pytest.fail.Exception, match=r"did not finish within 0\.2s"):
        await eventually(never.wait, timeout_s=0.2, what="the event")
    assert loop.time() - began < 5


async def test_a_task_that_never_finishes_fails_and_is_cancelled():
    never = asyncio.Event()
    task = asyncio.create_task(never.wait())
    with pytest.raises(pytest.fail.Exception, match="did not finish"):
        await eventually(lambda: task, timeout_s=0.2)
    assert task.cancelled()


async def test_an_awaitable_returning_an_awaitable_fails_at_once():
    """``async def cond(): return other()`` would be truthy at once without checking."""
    ran: list[bool] = []

    async def inner() -> bool:
        ran.append(True)
        return False

    async def cond() -> object:
        return inner()

    with pytest.raises(pytest.fail.Exception, match="returned an awaitable"):
        await eventually(cond, timeout_s=5)
    assert ran == []  # closed, never run (and no "never awaited" warning: warnings are errors)


async def test_async_conditions_still_work():
    calls: list[int] = []

    async def cond() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert await eventually(cond, timeout_s=5) == 3


def test_the_blocking_form_refuses_an_awaitable_instead_of_passing():
    """A coroutine is truthy: eventually_blocking used to return it as if the condition
    held. Now it fails at once and closes it."""

    async def cond() -> bool:
        return False

    with pytest.raises(pytest.fail.Exception, match="returned an awaitable"):
        eventually_blocking(cond, timeout_s=5)
    assert eventually_blocking(lambda: 7, timeout_s=1) == 7


def test_assert_responsive_judges_the_daemon_not_one_slow_answer():
    """One answer of a short run may wait for a CPU; a slow daemon shows in most answers,
    and a stall past ``worst_ms`` fails whatever the count."""
    assert_responsive([10.0] * 6 + [498.0])
    assert_responsive([10.0] * 95 + [400.0] * 5)
    for slow in ([350.0] * 7, [10.0] * 5 + [350.0] * 2, [10.0] * 94 + [400.0] * 6):
        with pytest.raises(AssertionError, match="too slow"):
            assert_responsive(slow)
    with pytest.raises(AssertionError, match="stalled"):
        assert_responsive([10.0] * 6 + [1200.0])
