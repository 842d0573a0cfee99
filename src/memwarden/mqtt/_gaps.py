"""Gap detection: per agent run, which sequence numbers never arrived.

Every agent numbers its events (``agent`` = ``<agent id>/<run>``, ``seq`` = 1, 2, ...);
a jump, or a heartbeat announcing a higher number than we have, is a gap. This module
only keeps the books; the daemon's bridge decides what it hears and asks for re-sends.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwarden.mqtt._topics import split_agent

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["AgentGaps", "GapTracker"]


@dataclass(slots=True)
class _Run:
    high: int = 0  # the highest sequence number seen (or announced) so far
    missing: list[list[int]] = field(default_factory=list)  # sorted [from, to], inclusive


@dataclass(slots=True)
class AgentGaps:
    """What gap detection knows about one agent (all its runs)."""

    run: str = ""
    last_seq: int = 0
    gaps: int = 0  # events found missing (ever)
    recovered: int = 0  # of those, arrived later (a re-send, a late redelivery)
    resends: int = 0  # re-send requests sent
    missing: int = 0  # missing now

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "last_seq": self.last_seq,
            "gaps": self.gaps,
            "recovered": self.recovered,
            "missing": self.missing,
            "resends": self.resends,
        }


class GapTracker:
    """Per agent run, which sequence numbers never arrived.

    Pure bookkeeping (no I/O): the bridge tells it what it saw and what an agent
    announced; it answers with the new gaps to ask for. Bounded: at most ``max_agents``
    agents (the least recently heard is forgotten first, with its runs), an agent not
    heard from for ``idle_s`` is forgotten, at most ``max_runs`` runs and ``max_ranges``
    missing ranges per run. Only called with identities the bridge validated.
    """

    def __init__(
        self,
        *,
        max_runs: int = 1024,
        max_ranges: int = 1024,
        max_agents: int = 1000,
        idle_s: float = 86_400.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._runs: collections.OrderedDict[str, _Run] = collections.OrderedDict()
        self.agents: collections.OrderedDict[str, AgentGaps] = collections.OrderedDict()
        self._heard: dict[str, float] = {}
        self._max_runs = max_runs
        self._max_ranges = max_ranges
        self._max_agents = max_agents
        self._idle_s = idle_s
        self._now = clock or (lambda: 0.0)
        self.evicted = 0  # agents forgotten (too many, or idle)

    def forget_idle(self) -> int:
        """Forget the agents not heard from for ``idle_s``; how many."""
        limit = self._now() - self._idle_s
        gone = 0
        while self.agents:
            oldest = next(iter(self.agents))
            if self._heard.get(oldest, 0.0) > limit:
                break
            self._forget(oldest)
            gone += 1
        return gone

    def _forget(self, agent_id: str) -> None:
        self.agents.pop(agent_id, None)
        self._heard.pop(agent_id, None)
        for key in [k for k in self._runs if split_agent(k)[0] == agent_id]:
            del self._runs[key]
        self.evicted += 1

    def known(self, agent: str) -> bool:
        return agent in self._runs

    def begin(self, agent: str, high_water: int = 0) -> None:
        """Start following a run whose events up to ``high_water`` are already stored."""
        if agent in self._runs:
            return
        stats = self._stats(agent)
        self._runs[agent] = _Run(high=high_water)
        while len(self._runs) > self._max_runs:
            old, run = self._runs.popitem(last=False)
            old_stats = self.agents.get(split_agent(old)[0])
            if old_stats is not None:
                old_stats.missing -= sum(b - a + 1 for a, b in run.missing)
        stats.run = split_agent(agent)[1]
        stats.last_seq = high_water

    def seen(self, agent: str, seq: int) -> tuple[int, int] | None:
        """An event numbered ``seq`` arrived; returns the gap it reveals, if any."""
        run = self._run(agent)
        stats = self._stats(agent)
        if seq > run.high:
            gap = (run.high + 1, seq - 1) if seq > run.high + 1 else None
            if gap is not None:
                self._add(agent, run, gap)
            run.high = seq
            stats.last_seq = seq
            return gap
        if self._remove(run, seq):
            stats.recovered += 1
            stats.missing -= 1
        return None

    def announced(self, agent: str, seq: int) -> tuple[int, int] | None:
        """The agent says it published up to ``seq``; what we lack up to there is a gap."""
        run = self._run(agent)
        self._stats(agent)
        if seq <= run.high:
            return None
        gap = (run.high + 1, seq)
        self._add(agent, run, gap)
        run.high = seq
        return gap

    def missing_ranges(self, agent: str) -> list[tuple[int, int]]:
        run = self._runs.get(agent)
        return [] if run is None else [(a, b) for a, b in run.missing]

    def _run(self, agent: str) -> _Run:
        run = self._runs.get(agent)
        if run is None:
            self.begin(agent)
            return self._runs[agent]
        self._runs.move_to_end(agent)  # least recently used goes first
        return run

    def _stats(self, agent: str) -> AgentGaps:
        """The agent's figures; it counts as heard now (most recently used)."""
        agent_id = split_agent(agent)[0]
        self._heard[agent_id] = self._now()
        stats = self.agents.get(agent_id)
        if stats is None:
            stats = self.agents[agent_id] = AgentGaps()
            while len(self.agents) > self._max_agents:
                self._forget(next(iter(self.agents)))
        else:
            self.agents.move_to_end(agent_id)
        self.forget_idle()
        return stats

    def _add(self, agent: str, run: _Run, gap: tuple[int, int]) -> None:
        n = gap[1] - gap[0] + 1
        stats = self._stats(agent)
        stats.gaps += n
        stats.missing += n
        run.missing.append([gap[0], gap[1]])
        if len(run.missing) > self._max_ranges:  # give up on the oldest (still counted)
            a, b = run.missing.pop(0)
            stats.missing -= b - a + 1

    @staticmethod
    def _remove(run: _Run, seq: int) -> bool:
        for i, (a, b) in enumerate(run.missing):
            if a <= seq <= b:
                pieces = [[a, seq - 1]] if a < seq else []
                if seq < b:
                    pieces.append([seq + 1, b])
                run.missing[i : i + 1] = pieces
                return True
        return False
