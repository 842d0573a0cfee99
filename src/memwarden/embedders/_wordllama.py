"""WordLlama's static embeddings, read from the files inside the ``wordllama`` wheel.

WordLlama is a token table (32 000 tokens x 256 dimensions, half precision, 16 MB in
``wordllama/weights/l2_supercat_256.safetensors``) and a tokenizer
(``wordllama/tokenizers/l2_supercat_tokenizer_config.json``); a text's vector is the
mean of its tokens' rows, normalised. That is all this module does, with the package's
files and without importing the package itself:

- **Nothing is downloaded**: ``WordLlama.load()`` would look on a model hub for files it
  does not find; here a missing file is a :class:`ConfigError`.
- **The table is memory-mapped** from the wheel's file instead of read into memory:
  ``WordLlama.load()`` makes a float32 copy (33 MB, the model's whole RSS was about
  48 MiB anonymous); mapped, its pages are the file's, shared and read only as tokens
  are looked up, and the kernel can drop them. Loading takes about 0.1 s instead of
  0.6.
- **The vectors are WordLlama's**: the same tokens (no special tokens, no truncation),
  the same mean over them (the half-precision rows summed in float32), the same
  normalisation: equal to ``WordLlama.load(...).embed(texts, norm=True)`` (tested).
- **Fewer dimensions** (``dim = 128`` or ``64``): the model was trained Matryoshka-style,
  so the first ``dim`` columns of the table are a smaller model of their own (what
  ``WordLlama.load(trunc_dim=...)`` does); measured in docs/SEARCH.md.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwarden.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["WordLlamaEmbedder"]

_CONFIG = "l2_supercat"
_FULL_DIM = 256
_DIMS = (64, 128, 256)
_TENSOR = "embedding.weight"
# Texts pooled at a time: their tokens' float32 rows are 1 KiB each (about 4 MiB for 64
# texts of 60 tokens), so a batch of 256 never holds them all at once.
_POOL_TEXTS = 64
# At most this many token rows (1 KiB each as float32) are gathered at once: 16 MiB.
_MAX_ROWS = 16_384


def _package_dir() -> Path:
    """The installed ``wordllama`` package's directory, found without importing it
    (its ``__init__`` imports training code and configures the root logger)."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "search.embedder: 'wordllama' needs the wordllama package (its weights ship"
            " inside its wheel): pip install 'memwarden[semantic]'"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _table(np: Any, path: Path) -> Any:
    """The token table of a safetensors file, memory-mapped (read only).

    The format: an 8-byte little-endian header length, a JSON header naming each
    tensor's dtype, shape and byte range, then the data. Everything is checked before
    mapping: a truncated or foreign file is a ConfigError, never a crash later."""
    dtypes = {"F16": np.float16, "F32": np.float32}
    with path.open("rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        if not 2 <= size <= 1 << 20:
            raise ConfigError(f"search.embedder: {path} is not a safetensors file")
        header = json.loads(fh.read(size))
    meta = header.get(_TENSOR) if isinstance(header, dict) else None
    if not isinstance(meta, dict) or meta.get("dtype") not in dtypes:
        raise ConfigError(f"search.embedder: {path} has no {_TENSOR} in F16 or F32")
    dtype = np.dtype(dtypes[meta["dtype"]])
    rows, cols = (int(x) for x in meta["shape"])
    start, stop = (int(x) for x in meta["data_offsets"])
    offset = 8 + size + start
    if stop - start != rows * cols * dtype.itemsize or offset + stop - start > path.stat().st_size:
        raise ConfigError(f"search.embedder: {path} is truncated or inconsistent")
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(rows, cols))


class WordLlamaEmbedder:
    """``wordllama`` ``l2_supercat``: 256 dimensions, or its first 128 or 64."""

    def __init__(self, dim: int = _FULL_DIM) -> None:
        if dim not in _DIMS:
            raise ConfigError(
                f"search.embedders.wordllama.dim: {dim!r} is not one of"
                f" {', '.join(map(str, _DIMS))}"
            )
        try:
            import numpy as np  # noqa: PLC0415 - optional extra
            from tokenizers import Tokenizer  # noqa: PLC0415 - optional extra
        except ImportError as err:
            raise ConfigError(
                "search.embedder: 'wordllama' needs numpy and tokenizers:"
                " pip install 'memwarden[semantic]'"
            ) from err
        package = _package_dir()
        weights = package / "weights" / f"{_CONFIG}_{_FULL_DIM}.safetensors"
        tokenizer = package / "tokenizers" / f"{_CONFIG}_tokenizer_config.json"
        self._where = f"the wordllama model {_CONFIG}/{_FULL_DIM} in {package}"
        try:
            # A plain array over the mapped pages: a np.memmap's own indexing and
            # reductions run Python code for every result (a query's rows: 70-120 us
            # where this takes 20).
            self._table: Any = np.asarray(_table(np, weights))
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(
                f"search.embedder: {self._where} is not usable (nothing is downloaded):"
                f" {type(err).__name__}: {err}"
            ) from err
        if not tokenizer.is_file():
            raise ConfigError(
                f"search.embedder: {self._where} is not usable (nothing is downloaded):"
                f" no {tokenizer}"
            )
        if self._table.shape[1] != _FULL_DIM:
            raise ConfigError(f"search.embedder: {weights} is not {_FULL_DIM}-dimensional")
        # Parsing the tokenizer's 1.8 MB JSON takes 0.1-0.2 s, and tokenizers lets go
        # of the GIL meanwhile: it runs in a thread, so a daemon reads its stored
        # vectors at the same time; the first embed, or wait_ready() (which the store
        # calls before it is open), waits for it and raises what it raised.
        self._tokenizer: Any = None
        self._tokenizer_error: BaseException | None = None
        self._parsing = threading.Thread(
            target=self._parse, args=(Tokenizer, tokenizer), name="wordllama-tokenizer"
        )
        self._parsing.start()
        self._np = np
        self.dim = dim
        # The same vectors as before this loader (WordLlama's own, with the table in
        # half precision): the id, and so the stored vectors, stay valid.
        self.model_id = f"wordllama/{_CONFIG}/{dim}/f16"

    def _parse(self, tokenizer_class: Any, path: Path) -> None:
        try:
            tokenizer = tokenizer_class.from_file(str(path))
            tokenizer.no_padding()
            tokenizer.no_truncation()
        except BaseException as err:  # noqa: BLE001 - raised again by wait_ready()
            self._tokenizer_error = err
        else:
            self._tokenizer = tokenizer

    def wait_ready(self) -> None:
        """Wait until the tokenizer is parsed; a ConfigError if it could not be."""
        if self._tokenizer is not None:
            return
        self._parsing.join()
        err = self._tokenizer_error
        if err is not None:
            raise ConfigError(
                f"search.embedder: {self._where} is not usable (nothing is downloaded):"
                f" {type(err).__name__}: {err}"
            ) from err

    def embed(self, texts: Sequence[str]) -> Any:
        """Unit vectors (float32, one row per text); a text with no token: zeros."""
        np = self._np
        self.wait_ready()
        texts = list(texts)
        if len(texts) == 1:  # a query: the fewest numpy calls
            ids = self._tokenizer.encode(texts[0], add_special_tokens=False).ids
            vec = np.zeros(self.dim, dtype=np.float32)
            if ids:
                vec = self._mean(ids)
                norm = float(np.sqrt(vec.dot(vec)))  # np.linalg.norm's own sum, unwrapped
                vec = vec / norm if norm else vec
            return vec.reshape(1, self.dim)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for first in range(0, len(texts), _POOL_TEXTS):
            chunk = texts[first : first + _POOL_TEXTS]
            if len(chunk) == 1:
                encoded = [self._tokenizer.encode(chunk[0], add_special_tokens=False)]
            else:
                encoded = self._tokenizer.encode_batch(chunk, add_special_tokens=False)
            ids = [enc.ids for enc in encoded]
            counts = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
            have = np.flatnonzero(counts)
            if not len(have):
                continue
            if int(counts.sum()) > _MAX_ROWS:  # long texts: each summed in slices
                for i in have:
                    out[first + i] = self._mean(ids[i])
                continue
            flat = np.fromiter((t for i in ids for t in i), dtype=np.int64, count=int(counts.sum()))
            np.clip(flat, 0, self._table.shape[0] - 1, out=flat)
            rows = self._table[flat, : self.dim].astype(np.float32)
            starts = np.concatenate(([0], np.cumsum(counts[have])[:-1]))
            sums = np.add.reduceat(rows, starts, axis=0)
            out[first + have] = sums / counts[have, None].astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out /= norms
        return out

    def _mean(self, ids: list[int]) -> Any:
        """The mean of the table's rows for ``ids``, ``_MAX_ROWS`` rows at a time (a
        256 KiB block of CJK text is about 256 000 tokens: 250 MiB as float32 rows)."""
        np = self._np
        top = self._table.shape[0] - 1
        total = np.zeros(self.dim, dtype=np.float32)
        for start in range(0, len(ids), _MAX_ROWS):
            part = np.array(ids[start : start + _MAX_ROWS], dtype=np.intp)
            np.minimum(part, top, out=part)  # np.clip(part, 0, top), unwrapped
            np.maximum(part, 0, out=part)
            total += self._table[part, : self.dim].sum(axis=0, dtype=np.float32)
        return total / np.float32(len(ids))
