"""Telling readers: a session that read a fact is told when it is refuted or goes stale.

Reads with a ``session`` id record which blocks the session saw. When one of those
blocks turns ``stale`` or ``refuted`` (an event, the sweep, a dependency), the session
gets a notice, numbered per session: ``GET /v1/events?session=…&after=N&wait=10s``
long-polls for them, and the MCP server turns them into
``notifications/resources/updated`` on the session's context resource. Bounded in
memory: the most recent sessions and reads, the last notices of each session.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwarden.memory import from_ts

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["SessionWatch"]

_FALLEN = frozenset({"stale", "refuted"})


@dataclass(slots=True)
class _Session:
    read: OrderedDict[str, None] = field(default_factory=OrderedDict)  # block ids, oldest first
    notices: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=1000))
    seq: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: int = 0  # long-polls held open right now


class SessionWatch:
    """Which session read which block, and the notices each is owed."""

    def __init__(self, *, max_sessions: int = 10_000, max_reads: int = 5_000) -> None:
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._readers: dict[str, set[str]] = {}  # block id -> sessions that read it
        self._max_sessions = max_sessions
        self._max_reads = max_reads
        self._closed = False
        # (block, event) changes already told: a change this node applied is also read
        # from the effects log on PostgreSQL (daemon/_cluster.py), and told once.
        self._told: OrderedDict[tuple[str, str], None] = OrderedDict()

    def _session(self, name: str) -> _Session:
        s = self._sessions.get(name)
        if s is None:
            if len(self._sessions) >= self._max_sessions:  # forget the least recent
                old, gone = self._sessions.popitem(last=False)
                for block_id in gone.read:
                    self._forget(block_id, old)
            s = self._sessions[name] = _Session()
        else:
            self._sessions.move_to_end(name)
        return s

    def _forget(self, block_id: str, session: str) -> None:
        readers = self._readers.get(block_id)
        if readers is not None:
            readers.discard(session)
            if not readers:
                del self._readers[block_id]

    def read(self, session: str, block_ids: Iterable[str]) -> None:
        """``session`` was shown these blocks."""
        s = self._session(session)
        for block_id in block_ids:
            s.read[block_id] = None
            s.read.move_to_end(block_id)
            self._readers.setdefault(block_id, set()).add(session)
        while len(s.read) > self._max_reads:
            old, _ = s.read.popitem(last=False)
            self._forget(old, session)

    def changed(
        self,
        block_id: str,
        *,
        before: str,
        after: str,
        at: float,
        reliability: float | None = None,
        event_id: str | None = None,
        reason: str = "",
    ) -> int:
        """A block changed state; sessions that read it are told if it fell. Returns how
        many sessions were told."""
        if after not in _FALLEN or before == after:
            return 0
        if event_id is not None:
            key = (block_id, event_id)
            if key in self._told:
                return 0
            self._told[key] = None
            while len(self._told) > 10_000:
                self._told.popitem(last=False)
        told = 0
        for name in sorted(self._readers.get(block_id, ())):
            s = self._sessions.get(name)
            if s is None:
                continue
            s.seq += 1
            notice: dict[str, Any] = {
                "seq": s.seq,
                "session": name,
                "block_id": block_id,
                "state": [before, after],
                "at": from_ts(at).isoformat(),
                "reason": reason or after,
            }
            if reliability is not None:
                notice["reliability"] = round(reliability, 4)
            if event_id is not None:
                notice["event_id"] = event_id
            s.notices.append(notice)
            s.changed.set()
            told += 1
        return told

    def after(self, session: str, seq: int, *, limit: int = 100) -> list[dict[str, Any]]:
        """The session's notices after ``seq`` (oldest first)."""
        s = self._sessions.get(session)
        if s is None:
            return []
        return [n for n in s.notices if n["seq"] > seq][:limit]

    def close(self) -> None:
        """The daemon is stopping: every long-poll answers now with what it has."""
        self._closed = True
        for s in self._sessions.values():
            s.changed.set()

    async def wait(self, session: str, seq: int, timeout_s: float) -> None:
        """Until the session has a notice after ``seq``, the timeout, or :meth:`close`."""
        s = self._session(session)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        s.waiting += 1
        try:
            while not self._closed and not any(n["seq"] > seq for n in s.notices):
                s.changed.clear()
                try:
                    async with asyncio.timeout_at(deadline):
                        await s.changed.wait()
                except TimeoutError:
                    return
        finally:
            s.waiting -= 1

    def waiting(self, session: str) -> int:
        """How many long-polls are waiting on the session's notices now."""
        s = self._sessions.get(session)
        return s.waiting if s is not None else 0
