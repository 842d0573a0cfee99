"""The daemon: config, wiring, bus, scheduler, systemd notify and signals."""

from __future__ import annotations

from memwarden.daemon._app import Daemon
from memwarden.daemon._bus import Bus
from memwarden.daemon._config import (
    MqttSettings,
    SensorSettings,
    Settings,
    config_problems,
    default_home,
    load_settings,
)
from memwarden.daemon._logging import configure_logging
from memwarden.daemon._notify import Notifier
from memwarden.daemon._privacy import PrivacyDoors, privacy_for_database
from memwarden.daemon._scheduler import Scheduler

__all__ = [
    "Bus",
    "Daemon",
    "MqttSettings",
    "Notifier",
    "PrivacyDoors",
    "Scheduler",
    "SensorSettings",
    "Settings",
    "config_problems",
    "configure_logging",
    "default_home",
    "load_settings",
    "privacy_for_database",
]
