"""Running a version-1 plugin (one that declares no ``api_version``) for one release.

Version 2 of the plugin contract changed three things a version-1 sensor relies on:
``revalidate(request)`` became ``revalidate(request, ctx)``, binding models became
strict (``BaseBinding`` refuses ``"clean": "yes"`` for a ``bool``), and the sensor
declares ``api_version``. :func:`adapt_v1` turns such a class into a version-2 one — a
subclass whose ``revalidate`` drops the context and whose ``Binding`` validates as
loosely as before — and says, as a ``DeprecationWarning`` and a log line, what to
change. The shim goes in the release after next (see docs/COMPATIBILITY.md).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ConfigDict

from memwarden.plugins._contract import PLUGIN_API

if TYPE_CHECKING:
    from memwarden.memory import RevalidationRequest

__all__ = ["MIGRATION", "adapt_v1"]

log = structlog.get_logger("memwarden.plugins")

MIGRATION = (
    "set `api_version: ClassVar[int] = 2` on the class, take `revalidate(self, request, "
    "ctx)`, and check that stored selectors pass the now strict Binding model (no "
    'coercion: `"clean": "yes"` is no longer a bool); see docs/PLUGINS.md, '
    '"The plugin API version"'
)


def adapt_v1(kind: str, cls: type[Any], *, notes: list[str] | None = None) -> type[Any]:
    """A version-2 class running version-1 ``cls``; warns once per load."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    extra = "".join(f"; {n}" for n in notes or ())
    message = (
        f"sensor plugin {kind!r} ({where}) is written for plugin API 1, which runs through "
        f"a compatibility shim for one release; to move to API {PLUGIN_API}: {MIGRATION}"
        f"{extra}"
    )
    log.warning("plugin_api_deprecated", plugin=kind, plugin_class=where, change=MIGRATION)
    warnings.warn(message, DeprecationWarning, stacklevel=3)

    base_binding = cls.Binding
    loose = type(
        base_binding.__name__,
        (base_binding,),
        {
            "__module__": base_binding.__module__,
            "__qualname__": base_binding.__qualname__,
            "__doc__": base_binding.__doc__,
            "model_config": ConfigDict(strict=False),
        },
    )
    revalidate_v1 = cls.revalidate

    async def revalidate(self: Any, request: RevalidationRequest, ctx: Any = None) -> Any:
        del ctx  # version 1 kept the context from setup
        return await revalidate_v1(self, request)

    return type(
        cls.__name__,
        (cls,),
        {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "api_version": PLUGIN_API,
            "shimmed_from_api": 1,
            "Binding": loose,
            "revalidate": revalidate,
        },
    )
