"""Package attributes loaded on first use (PEP 562), for packages whose names live in
submodules that are costly to import or may fail to: ``memwarden.daemon`` (its web stack
is a second of a short command's start) and ``memwarden.sensors`` (one sensor that cannot
load never stops the others). Imports nothing of memwarden."""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: a name in ``homes`` comes from the
    submodule named there, imported when the name is first asked for and then kept on the
    package (the next lookup is a plain attribute); any other name is an AttributeError."""

    def lookup(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return lookup
