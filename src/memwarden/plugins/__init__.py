"""The contract for sensor authors — the only module a third-party sensor imports.

A sensor is a class with ``kind``, a ``Config`` model, a ``Binding`` model and four
async methods (``setup``, ``run``, ``revalidate``, ``teardown``), published through the
entry-point group ``memwarden.sensors``. See ``docs/PLUGINS.md``.
"""

from __future__ import annotations

from memwarden.errors import ConfigError, PluginError, ValidationInputError
from memwarden.memory import (
    Binding,
    Outcome,
    RevalidationReason,
    RevalidationRequest,
    ValidationEvent,
)
from memwarden.plugins._contract import (
    BaseBinding,
    BaseSensorConfig,
    BoundSubject,
    Sensor,
    SensorContext,
    StartupPolicy,
)
from memwarden.plugins._polling import (
    Observation,
    PollCounters,
    PollingBinding,
    PollingConfig,
    PollingSensor,
)
from memwarden.plugins._registry import ENTRY_POINT_GROUP, PluginInfo, Registry
from memwarden.plugins._supervisor import Backoff, SensorCounters, SensorRunner

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backoff",
    "BaseBinding",
    "BaseSensorConfig",
    "Binding",
    "BoundSubject",
    "ConfigError",
    "Observation",
    "Outcome",
    "PluginError",
    "PluginInfo",
    "PollCounters",
    "PollingBinding",
    "PollingConfig",
    "PollingSensor",
    "Registry",
    "RevalidationReason",
    "RevalidationRequest",
    "Sensor",
    "SensorContext",
    "SensorCounters",
    "SensorRunner",
    "StartupPolicy",
    "ValidationEvent",
    "ValidationInputError",
]
