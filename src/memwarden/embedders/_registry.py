"""Finding embedders: entry points in the group ``memwarden.embedders``."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from memwarden.embedders._contract import Embedder
from memwarden.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ENTRY_POINT_GROUP", "available", "load_embedder"]

ENTRY_POINT_GROUP = "memwarden.embedders"


def available() -> dict[str, str]:
    """Each embedder name found, with its entry point (``module:Class``)."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_embedder(name: str, options: Mapping[str, Any] | None = None) -> Embedder:
    """The embedder ``name`` (an entry-point name), loaded and checked.

    ``options`` (``[search.embedders.<name>]``) are passed to its class as keyword
    arguments. Raises :class:`ConfigError` naming ``search.embedder`` when it is unknown,
    fails to import (its extra is not installed) or its model is missing, and naming
    ``search.embedders.<name>`` when it does not take those options.
    """
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = ", ".join(sorted(available())) or "none"
        raise ConfigError(
            f"search.embedder: {name!r} is not an installed embedder (installed: {known})"
        )
    ep = found[0]
    try:
        cls = ep.load()
    except Exception as err:
        raise ConfigError(
            f"search.embedder: {name!r} ({ep.value}) could not be loaded: "
            f"{type(err).__name__}: {err} (for wordllama: pip install 'memwarden[semantic]')"
        ) from err
    try:
        emb = cls(**dict(options)) if options else cls()
    except ConfigError:
        raise
    except TypeError as err:
        raise ConfigError(
            f"search.embedders.{name}: {name!r} does not take these options"
            f" ({', '.join(sorted(options or {}))}): {err}"
        ) from err
    except Exception as err:
        raise ConfigError(
            f"search.embedder: {name!r} ({ep.value}) could not be loaded: "
            f"{type(err).__name__}: {err} (for wordllama: pip install 'memwarden[semantic]')"
        ) from err
    if not isinstance(emb, Embedder) or not isinstance(emb.dim, int) or emb.dim < 1:
        raise ConfigError(
            f"search.embedder: {name!r} ({ep.value}) is not an embedder"
            " (it needs model_id, dim and embed(texts))"
        )
    return emb
