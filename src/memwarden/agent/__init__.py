"""Remote mode: ``memwarden agent`` runs sensors on a host without a store, over MQTT."""

from __future__ import annotations

from memwarden.agent._agent import Agent
from memwarden.agent._queue import AgentQueue, QueuedEvent

__all__ = ["Agent", "AgentQueue", "QueuedEvent"]
