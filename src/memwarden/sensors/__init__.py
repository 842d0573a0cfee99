"""The built-in sensors, registered through the ``memwarden.sensors`` entry points like
any third-party plugin: ``fs``, ``code_test``, ``runtime``, ``http``, ``review`` and ``git``. See
``docs/SENSORS.md``.

Each sensor lives in its own module and is imported only when asked for, so one that
cannot load (a missing optional library) never stops the others.
"""

from __future__ import annotations

from memwarden._lazy import lazy_getattr

__all__ = [
    "CodeTestBinding",
    "CodeTestConfig",
    "CodeTestSensor",
    "FsBinding",
    "FsConfig",
    "FsSensor",
    "GitSensor",
    "HttpSensor",
    "ReviewSensor",
    "RuntimeSensor",
]

_WHERE = {
    "CodeTestBinding": "code_test",
    "CodeTestConfig": "code_test",
    "CodeTestSensor": "code_test",
    "FsBinding": "fs",
    "FsConfig": "fs",
    "FsSensor": "fs",
    "GitSensor": "git",
    "HttpSensor": "http",
    "ReviewSensor": "review",
    "RuntimeSensor": "runtime",
}


__getattr__ = lazy_getattr(__name__, _WHERE)
