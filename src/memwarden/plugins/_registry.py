"""Finding sensor plugins: entry points in the group ``memwarden.sensors``.

A plugin that fails to import or to validate is reported with its name and the others
still load. Built-in sensors are registered through the same group by our own
distribution, so they are found exactly like third-party ones.
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
        try:
            loaded = ep.load()
            sensor_cls = validate_sensor_class(ep.name, loaded)
        except PluginLoadError as err:
            self.failures[ep.name] = err
            self.failed_origins[ep.name] = origin
            log.error("plugin_load_failed", plugin=ep.name, error=str(err))
            return
        except Exception as err:  # noqa: BLE001 - any import failure is reported, not fatal
            failure = PluginLoadError(
                f"sensor plugin {ep.name!r} ({ep.value}) failed to import: "
                f"{type(err).__name__}: {err}",
                plugin=ep.name,
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
    """Check that ``obj`` is a sensor class honouring the contract."""
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
    if problems:
        raise PluginLoadError(
            f"sensor plugin {kind!r} ({obj.__module__}.{obj.__qualname__}) breaks the contract: "
            + "; ".join(problems),
            plugin=kind,
        )
    return obj
