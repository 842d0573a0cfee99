"""The exception hierarchy.

One base, :class:`MemwardenError`, with a sub-base per area. Library errors are
translated into the most specific one at the boundary (``raise X(...) from err``).
Context travels in attributes (``.field``, ``.plugin``) so callers and the API can
render it without parsing messages.

This module is a leaf: it imports nothing of ours.
"""

from __future__ import annotations

__all__ = [
    "AddressInUseError",
    "AmbiguousIdError",
    "ConfigError",
    "EmbedderUnavailableError",
    "LeadershipLostError",
    "MemwardenError",
    "NotFoundError",
    "PluginError",
    "PluginLoadError",
    "StorageError",
    "TransportError",
    "ValidationInputError",
    "VersionConflictError",
]


class MemwardenError(Exception):
    """Base of every error memwarden raises on purpose."""


class ConfigError(MemwardenError):
    """The configuration is invalid; ``problems`` lists each as ``path: message``."""

    def __init__(self, message: str, *, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = problems if problems is not None else [message]


class EmbedderUnavailableError(MemwardenError):
    """An embedder's model could not be reached, or answered something that is not the
    vectors asked for (``memwarden.embedders.HttpEmbedder``): the texts are not at fault,
    so they stay queued and are embedded later."""


class PluginError(MemwardenError):
    """A sensor plugin misbehaved."""

    def __init__(self, message: str, *, plugin: str) -> None:
        super().__init__(message)
        self.plugin = plugin


class PluginLoadError(PluginError):
    """A sensor plugin could not be imported or failed validation at load."""


class StorageError(MemwardenError):
    """The store could not do what was asked (I/O, corruption, closed store)."""


class LeadershipLostError(StorageError):
    """A node's lease on a singleton job is no longer its own (``memwarden.cluster``): it
    expired, another node took it, or the database could not confirm it in time.
    ``name`` is the lease, ``epoch`` the term that ended."""

    def __init__(self, message: str, *, name: str, epoch: int | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.epoch = epoch


class NotFoundError(StorageError):
    """The thing asked for does not exist: ``no block with id '…'``.

    ``message`` replaces the sentence (a client passes on the daemon's own words).
    """

    def __init__(self, kind: str, ident: str, *, message: str | None = None) -> None:
        super().__init__(message or f"no {kind} with id {ident!r}")
        self.kind = kind
        self.ident = ident


class AmbiguousIdError(MemwardenError):
    """A short id matches more than one block; ``candidates`` are their ids."""

    def __init__(self, ref: str, candidates: list[str], *, message: str | None = None) -> None:
        shown = ", ".join(candidates)
        super().__init__(
            message or f"ambiguous id {ref!r}: matches {shown} (give more digits or the whole id)"
        )
        self.ref = ref
        self.candidates = candidates


class VersionConflictError(MemwardenError):
    """An edit named the version it was based on, and the block has moved past it."""

    def __init__(self, block_id: str, expected: int, current: int, *, message: str = "") -> None:
        super().__init__(
            message
            or f"block {block_id!r} was edited meanwhile: it is at version {current}, the edit "
            f"was based on version {expected}; read it again and re-apply the edit"
        )
        self.block_id = block_id
        self.expected = expected
        self.current = current


class TransportError(MemwardenError):
    """A network transport (HTTP, MQTT) failed."""


class AddressInUseError(TransportError):
    """The API's address is taken by another process: a temporary failure (retry later)."""


class ValidationInputError(MemwardenError):
    """Input was rejected; nothing of it was applied.

    ``errors`` holds one ``(field, message)`` pair per problem, the field as a dotted
    path (``bindings.0.sensor``), so an API can answer with the exact location;
    ``error_type`` is the answer's ``type`` (a subclass may name its own).
    """

    error_type = "value_error"

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {msg}" if field else msg for field, msg in errors))

    @property
    def field(self) -> str:
        """The first offending field (empty when the whole input was wrong)."""
        return self.errors[0][0] if self.errors else ""
