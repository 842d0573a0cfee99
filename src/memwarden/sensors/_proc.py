"""Running a configured command safely: no shell, own process group, deadline, capped output.

The child starts in a new session (its own process group), so a timeout or a
cancellation kills the whole group — the test runner and anything it spawned — first
with SIGTERM, then SIGKILL after a grace period. Output is read as it comes (so the
child never blocks on a full pipe) and only the first ``max_output_bytes`` are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

__all__ = ["ProcResult", "run_command"]

_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class ProcResult:
    returncode: int | None
    output: bytes
    truncated: bool
    timed_out: bool
    pid: int

    def tail(self, chars: int = 2000) -> str:
        text = self.output.decode("utf-8", "replace")
        return text[-chars:]


async def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    max_output_bytes: int,
    kill_grace_s: float = 2.0,
    on_start: Callable[[int], None] | None = None,
) -> ProcResult:
    """Run ``argv`` (never through a shell) and wait for it, at most ``timeout_s``."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    if on_start is not None:
        on_start(proc.pid)
    chunks: list[bytes] = []
    kept = 0
    truncated = False

    async def read() -> None:
        nonlocal kept, truncated
        stdout = proc.stdout
        if stdout is None:  # stdout=PIPE makes one
            raise RuntimeError("the command's output has no pipe")
        while chunk := await stdout.read(_CHUNK):
            room = max_output_bytes - kept
            if room > 0:
                chunks.append(chunk[:room])
                kept += min(room, len(chunk))
            if len(chunk) > room:
                truncated = True

    reader = asyncio.get_running_loop().create_task(read(), name=f"output[{proc.pid}]")
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await proc.wait()
    except TimeoutError:
        timed_out = True
    finally:
        # Always: the child if it still runs, and anything it left behind in its group.
        await _kill_group(proc, kill_grace_s)
        try:
            async with asyncio.timeout(kill_grace_s):
                await reader  # EOF once every holder of the pipe is gone
        except TimeoutError:
            reader.cancel()
    return ProcResult(proc.returncode, b"".join(chunks), truncated, timed_out, proc.pid)


async def _kill_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """End the child's process group and reap the child.

    A child still running gets SIGTERM and ``grace_s`` to exit; then SIGKILL goes to
    the whole group. Runs to the end even when the caller is being cancelled: an
    orphan is worse than a late cancellation.
    """
    pgid = proc.pid  # start_new_session: the child leads its own group

    async def kill() -> None:
        if proc.returncode is None:
            _signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await proc.wait()
        _signal_group(pgid, signal.SIGKILL)
        await proc.wait()

    task = asyncio.get_running_loop().create_task(kill(), name=f"kill[{pgid}]")
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
