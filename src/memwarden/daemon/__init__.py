"""The daemon: config, wiring, bus, scheduler, systemd notify and signals.

The names below load on first use (PEP 562): a CLI command that only needs
:func:`configure_logging` or :func:`load_settings` does not import the HTTP API, the
console and their web framework (about a second of a short command's start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwarden._lazy import lazy_getattr

if TYPE_CHECKING:
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

# Each public name and the private module that defines it.
_HOMES = {
    "Bus": "_bus",
    "Daemon": "_app",
    "MqttSettings": "_config",
    "Notifier": "_notify",
    "PrivacyDoors": "_privacy",
    "Scheduler": "_scheduler",
    "SensorSettings": "_config",
    "Settings": "_config",
    "config_problems": "_config",
    "configure_logging": "_logging",
    "default_home": "_config",
    "load_settings": "_config",
    "privacy_for_database": "_privacy",
}


__getattr__ = lazy_getattr(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
