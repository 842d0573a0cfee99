"""A deterministic hashing embedder: zero dependencies, for tests and as a fallback.

Each lower-cased word and each of its character trigrams (with word boundaries) is
hashed (BLAKE2b, so the same on every run and machine) to a signed bucket; the vector
is the L2-normalised sum. Texts sharing words or word pieces are close; it knows
nothing of meaning, so paraphrases with other words are not found by it.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["StubEmbedder"]

_WORD = re.compile(r"\w+", re.UNICODE)


class StubEmbedder:
    """Signed feature hashing of words and trigrams into ``dim`` buckets."""

    def __init__(self, dim: int = 64) -> None:
        if not 8 <= dim <= 4096:
            raise ValueError(f"dim: {dim} is not between 8 and 4096")
        self.dim = dim
        self.model_id = f"stub-hash/{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            padded = f"<{word}>"
            feats = [word] + [padded[i : i + 3] for i in range(len(padded) - 2)]
            for j, feat in enumerate(feats):
                digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
                h = int.from_bytes(digest, "little")
                weight = 1.0 if j == 0 else 0.5  # the whole word counts more than a piece
                vec[h % self.dim] += weight if (h >> 63) & 1 else -weight
        norm = math.sqrt(sum(x * x for x in vec))
        return [x / norm for x in vec] if norm > 0 else vec
