"""The built-in sensors, registered through the ``memwarden.sensors`` entry points like
any third-party plugin: ``fs``, ``code_test``, ``runtime``, ``http``, ``review`` and ``git``. See
``docs/SENSORS.md``.

Each sensor lives in its own module and is imported only when asked for, so one that
cannot load (a missing optional library) never stops the others.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
