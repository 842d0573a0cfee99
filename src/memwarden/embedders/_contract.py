"""What an embedder is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Embedder"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of ``dim`` numbers.

    ``model_id`` names the model and everything that changes its vectors (a stored
    vector made by another ``model_id`` is re-embedded: ``memwarden reembed``).
    ``embed`` is called from a worker thread, never on the event loop; it returns one
    row per text: a 2-D numpy array or a sequence of sequences of floats.
    """

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Any: ...
