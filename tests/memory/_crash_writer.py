"""Child process for test_crash.py: applies batches of events forever, acknowledging each.

Usage: ``python _crash_writer.py DB BATCH_SIZE``. After ``apply_events`` returns (the
batch committed), prints ``ACK <batch> <event ids...>`` and flushes; the parent kills
this process with SIGKILL at some point and checks what survived.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import UTC, datetime

import structlog

from memwarden.memory import Store, ValidationEvent


def say(line: str) -> None:
    """One line to the parent, flushed at once (it may be killed right after)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def event_ids(batch: int, size: int) -> list[str]:
    return [f"b{batch}-e{i}" for i in range(size)]


async def main(path: str, size: int) -> None:
    async with Store(path) as store:
        await store.add({"content": "crash target", "bindings": [{"sensor": "fs", "path": "a"}]})
        say("READY")
        batch = 0
        while True:
            now = datetime.now(UTC)
            events = [
                ValidationEvent(
                    event_id=eid,
                    sensor="fs",
                    subject="a" if i % 2 else f"unbound-{i}",
                    outcome="confirmed" if batch % 2 else "changed",
                    observed_at=now,
                )
                for i, eid in enumerate(event_ids(batch, size))
            ]
            result = await store.apply_events(events)
            if result.accepted != size:
                say(f"ERROR accepted {result.accepted} of {size}")
                return
            say(" ".join(["ACK", str(batch), *event_ids(batch, size)]))
            batch += 1


if __name__ == "__main__":
    # Logs go to stderr: stdout carries only the acknowledgements.
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
