"""WordLlama's static embeddings, from the weights inside the ``wordllama`` wheel.

``WordLlama.load()`` would look on a model hub for files it does not find; here it is
pointed at the package's own directory (``cache_dir``) with ``disable_download=True``,
so it reads the shipped 256-dimension weights or fails: nothing is ever downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwarden.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["WordLlamaEmbedder"]

_CONFIG = "l2_supercat"
_DIM = 256


class WordLlamaEmbedder:
    """``wordllama`` ``l2_supercat`` at 256 dimensions, normalised vectors."""

    dim = _DIM
    model_id = f"wordllama/{_CONFIG}/{_DIM}/f16"

    def __init__(self) -> None:
        try:
            import wordllama  # type: ignore[import-untyped]  # noqa: PLC0415 - optional extra
        except ImportError as err:
            raise ConfigError(
                "search.embedder: 'wordllama' needs the wordllama package:"
                " pip install 'memwarden[semantic]'"
            ) from err
        package_dir = Path(wordllama.__file__).parent
        try:
            self._model: Any = wordllama.WordLlama.load(
                config=_CONFIG,
                dim=_DIM,
                cache_dir=package_dir,
                disable_download=True,
            )
        except Exception as err:
            raise ConfigError(
                f"search.embedder: the wordllama model {_CONFIG}/{_DIM} is not in"
                f" {package_dir} (nothing is downloaded): {type(err).__name__}: {err}"
            ) from err
        # The token table (32 000 x 256) is float32 once loaded: 33 MB. Half precision
        # halves it; the pooled vectors differ by rounding only, far below the int8 step
        # they are stored at (hence the "/f16" in the model id).
        table = getattr(self._model, "embedding", None)
        if table is not None and getattr(table, "dtype", None) is not None:
            self._model.embedding = table.astype("float16")

    def embed(self, texts: Sequence[str]) -> Any:
        return self._model.embed(list(texts), norm=True).astype("float32", copy=False)
