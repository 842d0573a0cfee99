"""The built-in sensors, registered through the ``memwarden.sensors`` entry points like
any third-party plugin: ``fs`` (files, and assertions about them) and ``code_test`` (a
project's test suite). See ``docs/SENSORS.md``.
"""

from __future__ import annotations

from memwarden.sensors.code_test import CodeTestBinding, CodeTestConfig, CodeTestSensor
from memwarden.sensors.fs import FsBinding, FsConfig, FsSensor

__all__ = [
    "CodeTestBinding",
    "CodeTestConfig",
    "CodeTestSensor",
    "FsBinding",
    "FsConfig",
    "FsSensor",
]
