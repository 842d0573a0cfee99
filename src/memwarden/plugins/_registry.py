"""Finding sensor plugins: entry points in the group ``memwarden.sensors``.

A plugin that fails to import or to validate is reported with its name and the others
still load. Built-in sensors are registered through the same group by our own
distribution, so they are found exactly like third-party ones.

The entry-point name is the sensor's kind (what ``[sensors.<name>] kind = ...`` names).
A class may repeat it as ``kind``; one that states another kind is refused at load, so a
plugin has one name, not two that drift apart (a subclass registered under its own name
need not restate ``kind``: only a ``kind`` in the class's own body is checked).

A class declares the plugin API version it was written for (``api_version``); one
without it is a version-1 plugin and runs through the shim
(:mod:`memwarden.plugins._shim`) with a ``DeprecationWarning``.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel

from memwarden.errors import PluginLoadError
from memwarden.plugins._contract import PLUGIN_API
from memwarden.plugins._guard import Crash, guarded_sync
from memwarden.plugins._shim import adapt_v1

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ENTRY_POINT_GROUP", "PluginInfo", "Registry"]

ENTRY_POINT_GROUP = "memwarden.sensors"
log = structlog.get_logger("memwarden.plugins")

_METHODS = ("setup", "run", "revalidate", "teardown")


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """A loaded sensor kind and where it came from."""

    kind: str
    cls: type[Any]
    distribution: str = ""
    version: str = ""
    entry_point: str = ""


@dataclass(slots=True)
class Registry:
    """The sensor kinds available to the daemon, and the ones that failed to load."""

    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    failures: dict[str, PluginLoadError] = field(default_factory=dict)
    # Where each failed plugin came from (its class is missing), to list it like the rest.
    failed_origins: dict[str, PluginInfo] = field(default_factory=dict)

    @classmethod
    def from_entry_points(
        cls, *, allow: Iterable[str] | None = None, group: str = ENTRY_POINT_GROUP
    ) -> Registry:
        """Load every plugin in ``group`` (only those named in ``allow``, if given)."""
        allowed = None if allow is None else {a.strip() for a in allow if a.strip()}
        reg = cls()
        for ep in sorted(entry_points(group=group), key=lambda e: e.name):
            if allowed is not None and ep.name not in allowed:
                continue
            reg._load_entry_point(ep)
        return reg

    @classmethod
    def from_classes(cls, classes: Mapping[str, type[Any]]) -> Registry:
        """A registry of given classes (tests register throwaway sensors this way)."""
        reg = cls()
        for kind, sensor_cls in classes.items():
            try:
                reg.plugins[kind] = PluginInfo(kind, validate_sensor_class(kind, sensor_cls))
            except PluginLoadError as err:
                reg.failures[kind] = err
        return reg

    def _load_entry_point(self, ep: EntryPoint) -> None:
        dist = ep.dist
        if ep.name in self.plugins:
            kept = self.plugins[ep.name]
            if kept.entry_point != ep.value:
                log.error(
                    "plugin_conflict",
                    plugin=ep.name,
                    kept=f"{kept.distribution} ({kept.entry_point})",
                    ignored=f"{dist.metadata['Name'] if dist is not None else '?'} ({ep.value})",
                )
            return
        origin = PluginInfo(
            kind=ep.name,
            cls=type(None),
            distribution=dist.metadata["Name"] if dist is not None else "",
            version=dist.version if dist is not None else "",
            entry_point=ep.value,
        )
        # Importing a plugin runs its code: any failure is reported, never fatal.
        sensor_cls = guarded_sync(lambda: validate_sensor_class(ep.name, ep.load()))
        if isinstance(sensor_cls, Crash):
            err = sensor_cls.error
            failure = (
                err
                if isinstance(err, PluginLoadError)
                else PluginLoadError(
                    f"sensor plugin {ep.name!r} ({ep.value}) failed to import: "
                    f"{type(err).__name__}: {err}",
                    plugin=ep.name,
                )
            )
            self.failures[ep.name] = failure
            self.failed_origins[ep.name] = origin
            log.error("plugin_load_failed", plugin=ep.name, error=str(failure))
            return
        self.plugins[ep.name] = dataclasses.replace(origin, cls=sensor_cls)

    def get(self, kind: str) -> PluginInfo:
        if kind in self.plugins:
            return self.plugins[kind]
        if kind in self.failures:
            raise self.failures[kind]
        known = ", ".join(sorted(self.plugins)) or "none"
        raise PluginLoadError(f"no sensor plugin named {kind!r} (known: {known})", plugin=kind)


def validate_sensor_class(kind: str, obj: Any) -> type[Any]:
    """Check that ``obj`` is a sensor class honouring the contract for ``kind``.

    Returns the class to run: ``obj`` itself, or for a version-1 plugin the shim's
    version-2 adapter (with a ``DeprecationWarning``). Raises :class:`PluginLoadError`
    naming every problem.
    """
    if not inspect.isclass(obj):
        raise PluginLoadError(f"sensor plugin {kind!r} is not a class: {obj!r}", plugin=kind)
    problems = []
    for attr in ("Config", "Binding"):
        model = getattr(obj, attr, None)
        if not (inspect.isclass(model) and issubclass(model, BaseModel)):
            problems.append(f"{attr} must be a pydantic model class")
    for method in _METHODS:
        fn = getattr(obj, method, None)
        if fn is None or not inspect.iscoroutinefunction(fn):
            problems.append(f"{method}() must be an async method")
    api = getattr(obj, "api_version", None)
    # Only a kind the class itself states is held to its entry-point name: a subclass
    # registered under a name of its own need not restate it.
    declared_kind = vars(obj).get("kind")
    wrong_kind = declared_kind is not None and declared_kind != kind
    notes = []
    if api is not None and (not isinstance(api, int) or isinstance(api, bool) or api < 1):
        problems.append(f"api_version must be a plugin API version (1 to {PLUGIN_API}): {api!r}")
    elif api is not None and api > PLUGIN_API:
        problems.append(
            f"it is written for plugin API {api}, this memwarden implements {PLUGIN_API} "
            "(upgrade memwarden)"
        )
    elif api == PLUGIN_API:
        if wrong_kind:
            problems.append(
                f"kind = {declared_kind!r} disagrees with its entry-point name {kind!r} "
                "(the entry-point name is the kind: rename one of them, or drop kind)"
            )
        fn = getattr(obj, "revalidate", None)
        if fn is not None and not _takes_request_and_ctx(fn):
            problems.append(f"revalidate() must take (request, ctx) under plugin API {api}")
    elif wrong_kind:
        notes.append(f"its kind {declared_kind!r} must equal its entry-point name {kind!r}")
    if problems:
        raise PluginLoadError(
            f"sensor plugin {kind!r} ({obj.__module__}.{obj.__qualname__}) breaks the contract: "
            + "; ".join(problems),
            plugin=kind,
        )
    if api is None or api < PLUGIN_API:
        return adapt_v1(kind, obj, notes=notes)
    return obj


def _takes_request_and_ctx(fn: Any) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]  # after self
    except (TypeError, ValueError):
        return True  # cannot tell: let the call say
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)
