"""Topic names under one prefix, and the identities they carry (agent ids, runs)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Topics", "is_agent_id", "split_agent"]

_AGENT_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class Topics:
    """The topic names under one prefix (the same on the daemon's and the agent's side)."""

    prefix: str

    def events(self, sensor: str = "+") -> str:
        return f"{self.prefix}/events/{sensor}"

    def agent_events(self, agent_id: str = "+", sensor: str = "+") -> str:
        """Where an agent publishes its sensors' events: its own topics (broker ACL)."""
        return f"{self.prefix}/agents/{agent_id}/events/{sensor}"

    def revalidate(self, sensor: str = "+") -> str:
        return f"{self.prefix}/revalidate/{sensor}"

    def bindings(self, sensor: str = "+") -> str:
        return f"{self.prefix}/bindings/{sensor}"

    def block_state(self, block_id: str = "+") -> str:
        return f"{self.prefix}/blocks/{block_id}/state"

    @property
    def status(self) -> str:
        return f"{self.prefix}/status"

    def agent_status(self, agent_id: str = "+") -> str:
        return f"{self.prefix}/agents/{agent_id}/status"

    def agent_heartbeat(self, agent_id: str = "+") -> str:
        return f"{self.prefix}/agents/{agent_id}/heartbeat"

    def agent_resend(self, agent_id: str = "+") -> str:
        return f"{self.prefix}/agents/{agent_id}/resend"

    def relative(self, topic: str) -> list[str] | None:
        """The levels after the prefix (None for a topic outside it)."""
        head = self.prefix + "/"
        return topic[len(head) :].split("/") if topic.startswith(head) else None


def is_agent_id(value: str) -> bool:
    """Whether ``value`` may name an agent: one topic level of ``[A-Za-z0-9_.-]``, 1-64 long."""
    return _AGENT_ID.fullmatch(value) is not None


def split_agent(agent: str) -> tuple[str, str]:
    """``"<agent id>/<run>"`` -> ``(agent id, run)``; a bare id has an empty run."""
    agent_id, sep, run = agent.rpartition("/")
    return (agent_id, run) if sep else (agent, "")
