"""A watchdog observer in its own thread behind an async API, debounced at the source.

The observer's dispatcher thread runs a cheap ``accept`` filter on every event (a set
lookup, no I/O) and adds what it keeps to a pending set; the loop is woken with
``call_soon_threadsafe`` once per batch, not once per event. :meth:`Watcher.next_batch`
waits until ``debounce_ms`` pass without a new change (at most ``max_delay_ms``) and
returns the coalesced keys. A kernel queue overflow (inotify drops events) is reported
in the batch, so the consumer rescans instead of trusting the queue. Leaving the
``async with`` block (or cancelling the consumer) stops and joins the observer thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType

    from watchdog.observers.api import BaseObserver, ObservedWatch

__all__ = ["WATCHED_EVENTS", "Batch", "Change", "Watcher", "event_paths"]

# Writes are seen when the writer closes the file (IN_CLOSE_WRITE), not on every
# IN_MODIFY: measured here, a burst of 10 000 writes with watchdog's default mask
# overflowed the kernel queue (16 384 events) and lost 59 % of the paths, while
# close-after-write events alone lost none. Creates, deletes and moves complete the set.
WATCHED_EVENTS: list[type[FileSystemEvent]] = [
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]

# (kind, key): what the consumer must look at again. The kinds are the consumer's own.
Change = tuple[str, str]


def event_paths(event: FileSystemEvent) -> list[str]:
    """The paths an event touches, as str (a move touches its source and destination)."""
    out = [os.fsdecode(event.src_path)] if event.src_path else []
    if event.dest_path:
        out.append(os.fsdecode(event.dest_path))
    return out


@dataclass(slots=True)
class Batch:
    """Coalesced changes since the last batch; ``overflow`` means events were lost."""

    changes: set[Change] = field(default_factory=set)
    overflow: bool = False

    def __bool__(self) -> bool:
        return bool(self.changes) or self.overflow


class _OverflowHook(logging.Handler):
    """watchdog reports an inotify queue overflow only in its log: listen for it there.

    One handler per process, on the ``watchdog.observers`` logger; it tells every live
    :class:`Watcher` (an overflow of one inotify instance is not attributed, and a
    rescan too many costs little).
    """

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.watchers: weakref.WeakSet[Watcher] = weakref.WeakSet()
        self.installed = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a log record we cannot format is not an overflow
            return
        if "overflow" in message.lower():
            for watcher in list(self.watchers):
                watcher.report_overflow()


_hook_lock = threading.Lock()
_HOOK = _OverflowHook()  # one process-wide log handler, installed with the first watcher
WATCHDOG_LOGGER = "watchdog.observers"


def _overflow_hook() -> _OverflowHook:
    with _hook_lock:
        if not _HOOK.installed:
            logger = logging.getLogger(WATCHDOG_LOGGER)
            logger.addHandler(_HOOK)
            if logger.getEffectiveLevel() > logging.WARNING:
                logger.setLevel(logging.WARNING)  # the overflow warning must reach us
            _HOOK.installed = True
        return _HOOK


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self._watcher = watcher

    def dispatch(self, event: FileSystemEvent) -> None:
        self._watcher.on_event(event)


class Watcher:
    """Owns one watchdog observer; hands filtered, debounced changes to the event loop.

    ``accept(event)`` runs in the observer thread for every event and returns the
    changes to report (usually none): keep it to set lookups and string tests.
    """

    def __init__(
        self,
        accept: Callable[[FileSystemEvent], Iterable[Change]],
        *,
        debounce_ms: int = 50,
        max_delay_ms: int | None = None,
        name: str = "watcher",
        observer_factory: Callable[[], BaseObserver] = Observer,
    ) -> None:
        self._accept = accept
        self.debounce_ms = debounce_ms
        self.max_delay_ms = max_delay_ms if max_delay_ms is not None else max(500, 10 * debounce_ms)
        self.name = name
        self._observer_factory = observer_factory
        self._observer: BaseObserver | None = None
        self._handler = _Handler(self)
        self._watches: dict[str, tuple[ObservedWatch, bool, tuple[int, int]]] = {}
        self._lock = threading.Lock()
        self._pending: set[Change] = set()
        self._overflow = False
        self._armed = False
        self._seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self.events_seen = 0
        self.events_accepted = 0
        self.overflows = 0

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def start(self) -> None:
        """Start the observer thread (the loop must be running)."""
        if self._observer is not None:
            return
        self._loop = asyncio.get_running_loop()
        observer = self._observer_factory()
        observer.name = f"{self.name}.observer"
        observer.start()
        self._observer = observer
        _overflow_hook().watchers.add(self)

    async def stop(self) -> None:
        """Stop and join the observer thread; idempotent."""
        observer, self._observer = self._observer, None
        self._watches.clear()
        _HOOK.watchers.discard(self)
        if observer is None:
            return
        observer.stop()
        # The join is quick (the inotify reader is woken through a pipe) but it blocks.
        await asyncio.shield(asyncio.to_thread(observer.join, 10.0))

    @property
    def running(self) -> bool:
        return self._observer is not None

    def alive(self) -> bool:
        """Whether the observer thread is running."""
        return self._observer is not None and self._observer.is_alive()

    # ------------------------------------------------------------------ watches

    @property
    def watched(self) -> dict[str, bool]:
        """The directories watched now, and whether each is recursive."""
        return {path: rec for path, (_, rec, _) in self._watches.items()}

    def schedule(
        self, path: str, *, recursive: bool = False, alive: set[ObservedWatch] | None = None
    ) -> Literal["kept", "added", "missing"]:
        """Watch a directory (blocking: run it in a thread for recursive trees).

        Watching the same path again in the same mode keeps the watch (``kept``) unless
        the directory was replaced (moved away and created anew, told by its inode) or
        its emitter thread stopped; then it is watched anew (``added``). ``missing``:
        the directory is gone (and no longer watched). ``alive`` is
        :meth:`alive_watches`, when the caller schedules many paths at once.
        """
        observer = self._observer
        if observer is None:
            return "missing"
        try:
            st = os.stat(path)
        except OSError:
            self.unschedule(path)
            return "missing"
        ident = (st.st_dev, st.st_ino)
        current = self._watches.get(path)
        if current is not None:
            live = alive if alive is not None else self.alive_watches()
            if current[1] == recursive and current[2] == ident and current[0] in live:
                return "kept"
            self.unschedule(path)
        try:
            watch = observer.schedule(
                self._handler, path, recursive=recursive, event_filter=WATCHED_EVENTS
            )
        except OSError:
            return "missing"
        self._watches[path] = (watch, recursive, ident)
        return "added"

    def unschedule(self, path: str) -> None:
        current = self._watches.pop(path, None)
        if current is None or self._observer is None:
            return
        with contextlib.suppress(KeyError, OSError):
            self._observer.unschedule(current[0])

    def dead_watches(self) -> list[str]:
        """Watched directories whose emitter thread stopped (deleted, or an error)."""
        alive = self.alive_watches()
        return [p for p, (w, _, _) in self._watches.items() if w not in alive]

    def alive_watches(self) -> set[ObservedWatch]:
        """The watches whose emitter thread is running."""
        observer = self._observer
        if observer is None:
            return set()
        return {e.watch for e in list(observer.emitters) if e.is_alive()}

    # ------------------------------------------------------------------ thread side

    def on_event(self, event: FileSystemEvent) -> None:
        """Observer thread: filter, coalesce, wake the loop once per batch."""
        self.events_seen += 1
        try:
            changes = list(self._accept(event))
        except Exception:
            logging.getLogger("memwarden.sensors").exception("watch_filter_failed")
            self.report_overflow()  # we may have dropped something: make the consumer rescan
            return
        if not changes:
            return
        self.events_accepted += 1
        with self._lock:
            self._pending.update(changes)
            self._seq += 1
            wake = not self._armed
            self._armed = True
        if wake:
            self._wake_loop()

    def report_overflow(self) -> None:
        """Any thread: events were lost; the next batch says so."""
        with self._lock:
            self._overflow = True
            self.overflows += 1
            self._seq += 1
            wake = not self._armed
            self._armed = True
        if wake:
            self._wake_loop()

    def _wake_loop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing: nobody to tell
            loop.call_soon_threadsafe(self._wake.set)

    # ------------------------------------------------------------------ loop side

    async def next_batch(self, timeout_s: float | None = None) -> Batch:
        """Wait for changes, then for ``debounce_ms`` of quiet; returns them coalesced.

        With ``timeout_s``, returns an empty batch if nothing arrived in time.
        """
        if timeout_s is None:
            await self._wake.wait()
        else:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._wake.wait()
            except TimeoutError:
                return Batch()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_delay_ms / 1000
        quiet_s = self.debounce_ms / 1000
        while quiet_s > 0:
            seen = self._seq
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.sleep(min(quiet_s, remaining))  # the debounce itself, not a wait
            if self._seq == seen:
                break
        with self._lock:
            batch = Batch(self._pending, self._overflow)
            self._pending = set()
            self._overflow = False
            self._armed = False
            self._wake.clear()
        return batch

    def stats(self) -> dict[str, Any]:
        return {
            "events_seen": self.events_seen,
            "events_accepted": self.events_accepted,
            "overflows": self.overflows,
            "watches": len(self._watches),
        }
