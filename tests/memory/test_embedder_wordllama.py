"""The ``wordllama`` embedder: WordLlama's own vectors from the wheel's files, the token
table memory-mapped, fewer dimensions on request, broken files refused at load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memwarden.embedders import _wordllama as wl_module
from memwarden.embedders import load_embedder
from memwarden.errors import ConfigError

TEXTS = [
    "The API timeout is 30 s",
    "how long do calls wait before giving up?",
    "Deploys go out from the release branch every Tuesday at 14:00 UTC",
    "é中文 naïve — ümlaut \x00 control",
    "x",
]


@pytest.mark.parametrize("dim", [256, 128, 64])
def test_vectors_equal_wordllamas_own(dim: int):
    """The loader gives what ``WordLlama.load(...).embed(norm=True)`` gives (table in
    half precision, the first ``dim`` columns), batch and single texts alike."""
    import wordllama  # noqa: PLC0415 - the reference implementation, only here

    ref = wordllama.WordLlama.load(
        config="l2_supercat",
        dim=256,
        trunc_dim=None if dim == 256 else dim,
        cache_dir=Path(wordllama.__file__).parent,
        disable_download=True,
    )
    ref.embedding = ref.embedding.astype("float16")
    expected = ref.embed(TEXTS, norm=True)
    emb = load_embedder("wordllama", {"dim": dim} if dim != 256 else None)
    assert emb.dim == dim
    assert emb.model_id == f"wordllama/l2_supercat/{dim}/f16"
    got = np.asarray(emb.embed(TEXTS))
    assert got.shape == (len(TEXTS), dim)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    single = np.stack([np.asarray(emb.embed([t]))[0] for t in TEXTS])
    np.testing.assert_allclose(single, got, atol=1e-6)


def test_the_token_table_is_mapped_not_copied():
    """The table stays a read-only map of the wheel's file (no 33 MB float32 copy): a
    plain array over the map's pages (np.memmap's own indexing is slow)."""
    emb = load_embedder("wordllama")
    table = emb._table
    assert type(table) is np.ndarray
    assert isinstance(table.base, np.memmap)
    assert not table.flags.owndata
    assert table.dtype == np.float16
    assert not table.flags.writeable


def test_a_text_without_tokens_is_a_zero_vector_not_nan():
    """An empty text (WordLlama's own embed divides by zero there) gives zeros."""
    emb = load_embedder("wordllama")
    got = np.asarray(emb.embed(["", "The API timeout is 30 s"]))
    assert not np.isnan(got).any()
    assert not got[0].any()
    assert float(np.linalg.norm(got[1])) == pytest.approx(1.0, abs=1e-5)
    assert not np.asarray(emb.embed([])).size


def test_an_unsupported_dimension_is_a_config_error():
    """Only 256, 128 and 64 exist; anything else is refused naming the option."""
    with pytest.raises(ConfigError, match=r"search\.embedders\.wordllama\.dim"):
        load_embedder("wordllama", {"dim": 100})


def _safetensors(path: Path, header: object, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    return path


@pytest.mark.parametrize(
    ("header", "data"),
    [
        ({"other": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}}, b"\0" * 8),
        ({"embedding.weight": {"dtype": "I8", "shape": [2, 2], "data_offsets": [0, 4]}}, b"\0" * 4),
        ({"embedding.weight": {"dtype": "F16", "shape": [4, 256], "data_offsets": [0, 2048]}}, b""),
        ({"embedding.weight": {"dtype": "F16", "shape": [4, 256], "data_offsets": [0, 16]}}, b""),
        ([1, 2, 3], b""),
    ],
    ids=["no-table", "wrong-dtype", "truncated", "size-mismatch", "not-an-object"],
)
def test_a_broken_weights_file_is_refused_before_mapping(tmp_path: Path, header, data):
    """A foreign, truncated or inconsistent safetensors file is a ConfigError at load."""
    path = _safetensors(tmp_path / "w.safetensors", header, data)
    with pytest.raises(ConfigError, match=r"search\.embedder"):
        wl_module._table(np, path)


def test_a_huge_header_length_is_refused(tmp_path: Path):
    """A header length past 1 MiB (a hostile or foreign file) is refused unread."""
    path = tmp_path / "w.safetensors"
    path.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    with pytest.raises(ConfigError, match="not a safetensors file"):
        wl_module._table(np, path)


def test_a_long_text_is_pooled_in_slices_with_the_same_vector(monkeypatch: pytest.MonkeyPatch):
    """Texts past the row budget are summed a slice at a time (a 256 KiB block of CJK
    text would be 250 MiB of float32 rows at once): the vectors do not change."""
    emb = load_embedder("wordllama")
    texts = ["The API timeout is 30 s " * 40, "how long do calls wait", "中文 " * 300]
    whole = np.asarray(emb.embed(texts))
    monkeypatch.setattr(wl_module, "_MAX_ROWS", 7)
    sliced = np.asarray(emb.embed(texts))
    np.testing.assert_allclose(sliced, whole, atol=1e-5)
    single = np.asarray(emb.embed(texts[:1]))
    np.testing.assert_allclose(single[0], whole[0], atol=1e-5)


def _package_copy(tmp_path: Path, tokenizer: bytes | None) -> Path:
    """A wordllama package directory with the real weights and ``tokenizer`` as its
    tokenizer file (``None``: no tokenizer file)."""
    real = wl_module._package_dir()
    (tmp_path / "weights").mkdir(parents=True)
    (tmp_path / "tokenizers").mkdir()
    name = "l2_supercat_256.safetensors"
    (tmp_path / "weights" / name).symlink_to(real / "weights" / name)
    if tokenizer is not None:
        (tmp_path / "tokenizers" / "l2_supercat_tokenizer_config.json").write_bytes(tokenizer)
    return tmp_path


def test_the_tokenizer_parsed_in_a_thread_gives_the_same_vectors():
    """The tokenizer is parsed beside the caller; embedding waits for it, and
    wait_ready() returns once it is there."""
    emb = load_embedder("wordllama")
    got = np.asarray(emb.embed(TEXTS))
    emb.wait_ready()
    again = load_embedder("wordllama")
    again.wait_ready()
    np.testing.assert_array_equal(np.asarray(again.embed(TEXTS)), got)


@pytest.mark.parametrize(
    "tokenizer",
    [b"{not json", b"\xff\xfe\x00garbage", b'{"model": 3}'],
    ids=["json", "bytes", "shape"],
)
async def test_a_broken_tokenizer_is_a_config_error_before_the_store_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokenizer: bytes
):
    """A tokenizer file that does not parse (it is parsed in a thread) is a ConfigError
    from wait_ready(), from embed(), and so from opening a store with it: still at start."""
    from memwarden.memory import Store  # noqa: PLC0415 - this test only

    package = _package_copy(tmp_path / "pkg", tokenizer)
    monkeypatch.setattr(wl_module, "_package_dir", lambda: package)
    emb = wl_module.WordLlamaEmbedder()
    with pytest.raises(ConfigError, match=r"search\.embedder: the wordllama model"):
        emb.wait_ready()
    with pytest.raises(ConfigError, match=r"search\.embedder"):
        emb.embed(["x"])
    store = Store(tmp_path / "m.db", embedder=emb)
    with pytest.raises(ConfigError, match=r"search\.embedder"):
        await store.open()
    assert not store.db.is_open  # closed again, no writer or reader thread left


def test_a_missing_tokenizer_is_a_config_error_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """No tokenizer file: refused at construction, nothing started."""
    package = _package_copy(tmp_path / "pkg", None)
    monkeypatch.setattr(wl_module, "_package_dir", lambda: package)
    with pytest.raises(ConfigError, match=r"search\.embedder: .* not usable .*no "):
        wl_module.WordLlamaEmbedder()
