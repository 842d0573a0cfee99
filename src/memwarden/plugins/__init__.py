"""The contract for sensor authors — the only module a third-party sensor imports.

A sensor is a class with ``api_version`` (:data:`PLUGIN_API`), a ``Config`` model, a
``Binding`` model and four async methods (``setup``, ``run``, ``revalidate``,
``teardown``), published through the entry-point group ``memwarden.sensors`` under its
kind. Optional capabilities are Protocols (``QuickCheck``, ``BindingValidator``,
``Describes``, ``PreparesValidation``, ``NeedsReviews``, ``SuggestsBindings``). See
``docs/PLUGINS.md``.
"""

from __future__ import annotations

from memwarden.errors import ConfigError, PluginError, PluginLoadError, ValidationInputError
from memwarden.memory import (
    Binding,
    Outcome,
    RevalidationReason,
    RevalidationRequest,
    ValidationEvent,
)
from memwarden.plugins._bindings import check_binding
from memwarden.plugins._capabilities import (
    BindingCandidate,
    BindingValidator,
    Describes,
    DryRun,
    NeedsReviews,
    PreparesValidation,
    QueuedReview,
    QuickCheck,
    ReviewQueue,
    SuggestsBindings,
)
from memwarden.plugins._contract import (
    PLUGIN_API,
    BaseBinding,
    BaseSensorConfig,
    BoundSubject,
    Sensor,
    SensorContext,
    StartupPolicy,
)
from memwarden.plugins._polling import (
    HARD_MIN_INTERVAL,
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
    "HARD_MIN_INTERVAL",
    "PLUGIN_API",
    "Backoff",
    "BaseBinding",
    "BaseSensorConfig",
    "Binding",
    "BindingCandidate",
    "BindingValidator",
    "BoundSubject",
    "ConfigError",
    "Describes",
    "DryRun",
    "NeedsReviews",
    "Observation",
    "Outcome",
    "PluginError",
    "PluginInfo",
    "PluginLoadError",
    "PollCounters",
    "PollingBinding",
    "PollingConfig",
    "PollingSensor",
    "PreparesValidation",
    "QueuedReview",
    "QuickCheck",
    "Registry",
    "RevalidationReason",
    "RevalidationRequest",
    "ReviewQueue",
    "Sensor",
    "SensorContext",
    "SensorCounters",
    "SensorRunner",
    "StartupPolicy",
    "SuggestsBindings",
    "ValidationEvent",
    "ValidationInputError",
    "check_binding",
]
