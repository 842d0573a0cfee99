"""Embedders: turn texts into vectors for search by meaning (docs/SEARCH.md).

An embedder is a plugin found through the entry-point group ``memwarden.embedders``,
like sensors: the entry-point name is what ``[search] embedder = ...`` names, and it
points at a class that takes no arguments and satisfies :class:`Embedder`. Built in:

- ``stub``: a deterministic hashing embedder with no dependencies (tests, and a
  fallback that matches shared words and word pieces, not meaning);
- ``wordllama``: WordLlama's static 256-dimension embeddings, shipped inside the
  ``wordllama`` wheel and loaded from there with downloads disabled
  (``pip install memwarden[semantic]``).

No embedder may download anything at run time: a missing model is a
:class:`~memwarden.errors.ConfigError` at start.
"""

from __future__ import annotations

from memwarden.embedders._contract import Embedder
from memwarden.embedders._registry import ENTRY_POINT_GROUP, available, load_embedder
from memwarden.embedders._stub import StubEmbedder

__all__ = ["ENTRY_POINT_GROUP", "Embedder", "StubEmbedder", "available", "load_embedder"]
