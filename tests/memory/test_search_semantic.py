"""Search by meaning: vectors queued by triggers, embedded off the write path, searched
exactly, fused with BM25 (the deterministic stub embedder; the quality set uses WordLlama)."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from datetime import UTC, datetime

import pytest
from structlog.testing import capture_logs

from memwarden.embedders import StubEmbedder, load_embedder
from memwarden.errors import ConfigError, ValidationInputError
from memwarden.memory import Store, ValidationEvent


async def _drain(store: Store) -> None:
    assert store.vectors is not None
    while await store.vectors.drain_once():
        pass


async def test_adding_a_block_queues_it_and_the_task_embeds_it(make_store):
    """An added block waits in embed_queue (no embedding on the write path) until drained."""
    store = await make_store(embedder=StubEmbedder())
    await store.add({"content": "The API timeout is 30 s"})
    assert store.vectors is not None
    assert await store.vectors.pending() == 1
    assert len(store.vectors) == 0
    await _drain(store)
    assert await store.vectors.pending() == 0
    assert len(store.vectors) == 1


async def test_vector_mode_finds_by_shared_pieces_and_explains(make_store):
    """Vector mode ranks by cosine and each hit says its vector rank and similarity."""
    store = await make_store(embedder=StubEmbedder())
    await store.add({"content": "The API timeout is 30 s"})
    await store.add({"content": "The database lives in Frankfurt"})
    await _drain(store)
    hits = await store.search("timeouts of the API", mode="vector")
    assert hits[0].record.content == "The API timeout is 30 s"
    assert hits[0].parts["vector_rank"] == 1.0
    assert 0 < hits[0].parts["similarity"] <= 1.0


async def test_hybrid_fuses_both_ranks(make_store):
    """A block first in both lists is first in hybrid, with keyword_rank, vector_rank, rrf."""
    store = await make_store(embedder=StubEmbedder())
    await store.add({"content": "The API timeout is 30 s"})
    await store.add({"content": "The database lives in Frankfurt"})
    await _drain(store)
    [hit, *_] = await store.search("API timeout")
    assert hit.record.content == "The API timeout is 30 s"
    assert hit.parts["keyword_rank"] == 1.0
    assert hit.parts["vector_rank"] == 1.0
    assert hit.parts["rrf"] == pytest.approx(2 / 61, abs=1e-6)


async def test_editing_content_re_embeds(make_store):
    """A content edit queues the block again and its vector follows the new text."""
    store = await make_store(embedder=StubEmbedder())
    block = await store.add({"content": "The API timeout is 30 s"})
    await store.add({"content": "zebra crossing"})
    await _drain(store)
    await store.update(block.id, {"content": "zebra stripes are black and white"})
    assert store.vectors is not None
    assert await store.vectors.pending() == 1
    await _drain(store)
    hits = await store.search("zebra stripes", mode="vector", limit=1)
    assert hits[0].id == block.id


async def test_an_edit_while_embedding_is_not_lost(make_store):
    """A block edited while its batch is being embedded stays queued for its new text."""
    store = await make_store(embedder=StubEmbedder())
    block = await store.add({"content": "first text"})
    assert store.vectors is not None
    real_embed = store.vectors.embedder.embed

    def embed_then_edit(texts):
        out = real_embed(texts)
        conn = sqlite3.connect(store.path, timeout=10)  # another writer, meanwhile
        conn.execute("UPDATE blocks SET content = 'second text' WHERE id = ?", (block.id,))
        conn.commit()
        conn.close()
        return out

    store.vectors.embedder.embed = embed_then_edit  # type: ignore[method-assign]
    await store.vectors.drain_once()
    assert await store.vectors.pending() == 1  # the first text's vector did not clear it
    store.vectors.embedder.embed = real_embed  # type: ignore[method-assign]
    await _drain(store)
    assert await store.vectors.pending() == 0


async def test_vectors_survive_a_restart_and_a_model_change_requeues(tmp_path, clock):
    """Vectors are loaded at open; another model's vectors are queued again."""
    path = tmp_path / "m.db"
    async with Store(path, clock=clock, embedder=StubEmbedder(64)) as store:
        await store.add({"content": "The API timeout is 30 s"})
        await _drain(store)
    async with Store(path, clock=clock, embedder=StubEmbedder(64)) as store:
        assert store.vectors is not None
        assert len(store.vectors) == 1
        assert await store.vectors.pending() == 0
    async with Store(path, clock=clock, embedder=StubEmbedder(32)) as store:
        assert store.vectors is not None
        assert len(store.vectors) == 0
        assert await store.vectors.pending() == 1
        await _drain(store)
        assert len(store.vectors) == 1


async def test_reembed_queues_every_block(make_store):
    """``reembed`` queues every block again."""
    store = await make_store(embedder=StubEmbedder())
    for i in range(3):
        await store.add({"content": f"fact number {i}"})
    await _drain(store)
    assert await store.reembed() == 3
    assert store.vectors is not None
    assert await store.vectors.pending() == 3


async def test_deleted_and_archived_blocks_are_not_found(make_store):
    """An archived block is not a vector hit (the state filter), nor a deleted one."""
    store = await make_store(embedder=StubEmbedder())
    a = await store.add({"content": "The API timeout is 30 s"})
    await _drain(store)
    await store.archive(a.id, reason="gone")
    assert await store.search("API timeout", mode="vector") == []


async def test_modes_are_checked(make_store):
    """An unknown mode, or vector search with no embedder, is refused naming ``mode``."""
    plain = await make_store()
    await plain.add({"content": "The API timeout is 30 s"})
    assert plain.default_search_mode == "keyword"
    with pytest.raises(ValidationInputError, match="mode"):
        await plain.search("API", mode="vector")
    with pytest.raises(ValidationInputError, match="mode"):
        await plain.search("API", mode="bogus")  # type: ignore[arg-type]
    semantic = await make_store(embedder=StubEmbedder())
    assert semantic.default_search_mode == "hybrid"


def test_stub_is_deterministic_and_unit_length():
    """The stub gives the same unit vector for the same text on every run."""
    a, b = StubEmbedder().embed(["The API timeout is 30 s", "The API timeout is 30 s"])
    assert a == b
    assert sum(x * x for x in a) == pytest.approx(1.0)


def test_embedders_are_found_by_entry_point_and_unknown_ones_refused():
    """``stub`` and ``wordllama`` load by name; an unknown name is a ConfigError."""
    assert load_embedder("stub").model_id == "stub-hash/64"
    assert load_embedder("wordllama").dim == 256
    with pytest.raises(ConfigError, match=r"search\.embedder"):
        load_embedder("no-such-embedder")


async def test_a_large_scan_in_a_thread_finds_what_the_inline_scan_finds(make_store, monkeypatch):
    """Past the inline size the scan runs in a worker thread on a snapshot of the rids:
    the same nearest blocks, the same order."""
    from memwarden.memory import _vectors  # noqa: PLC0415 - the threshold under test

    store = await make_store(embedder=StubEmbedder())
    for text in ("The API timeout is 30 s", "The database lives in Frankfurt", "zebras"):
        await store.add({"content": text})
    await _drain(store)
    inline = [h.id for h in await store.search("API timeout", mode="vector")]
    monkeypatch.setattr(_vectors, "_INLINE_ROWS", 1)
    threaded = [h.id for h in await store.search("API timeout", mode="vector")]
    assert threaded == inline
    assert len(inline) == 3


async def test_erasing_a_block_removes_its_vector_from_disk_and_memory(make_store):
    """``erase`` takes the block's vector row (cascade) and its row of the matrix."""
    store = await make_store(embedder=StubEmbedder())
    a = await store.add({"content": "The API timeout is 30 s"})
    z = await store.add({"content": "zebras"})
    await _drain(store)
    assert store.vectors is not None
    assert len(store.vectors) == 2
    await store.erase([a.id], actor="test")
    assert len(store.vectors) == 1
    # the last row moved into the erased one's place and still names its block
    assert [h.id for h in await store.search("zebras", mode="vector")] == [z.id]
    # and no copy of the erased vector stays in the matrix's spare rows
    index = store.vectors
    spare = index._matrix[len(index) :]
    assert not spare.any(), "a dropped vector's bytes stay in memory"
    assert not index._codes[:, len(index) :].any()
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("SELECT count(*) FROM block_vectors").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM embed_queue").fetchone() == (0,)
    finally:
        conn.close()


async def test_a_text_the_embedder_refuses_is_skipped_not_retried_forever(make_store):
    """One text that makes the embedder raise is logged and taken off the queue; the rest
    of its batch gets vectors, and the skipped block is still found by its words."""
    store = await make_store(embedder=StubEmbedder())
    assert store.vectors is not None
    real_embed = store.vectors.embedder.embed

    def picky(texts):
        if any("poison" in t for t in texts):
            raise ValueError("cannot embed this")
        return real_embed(texts)

    store.vectors.embedder.embed = picky  # type: ignore[method-assign]
    bad = await store.add({"content": "poison pill text"})
    good = await store.add({"content": "The API timeout is 30 s"})
    with capture_logs() as logs:
        await _drain(store)
    assert await store.vectors.pending() == 0
    assert len(store.vectors) == 1
    assert [h.id for h in await store.search("API timeout", mode="vector")] == [good.id]
    assert [h.id for h in await store.search("poison pill", mode="keyword")] == [bad.id]
    assert any(e["event"] == "embedding_skipped" for e in logs)


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_vector_and_hybrid_search_keep_to_the_callers_namespaces(make_store, mode):
    """The nearest vectors are every namespace's: a caller limited to its namespaces
    gets none of another's, however close, and its own still come back."""
    store = await make_store(embedder=StubEmbedder())
    await store.add({"content": "The API timeout is 30 s", "namespace": "alpha"})
    await store.add({"content": "The API timeout is 45 s", "namespace": "beta"})
    await _drain(store)
    alpha = await store.search("API timeout", mode=mode, namespaces=["alpha"])
    assert [h.record.content for h in alpha] == ["The API timeout is 30 s"]
    both = await store.search("API timeout", mode=mode)
    assert len(both) == 2


async def test_a_namespaces_weak_keyword_match_survives_the_candidate_cut(make_store):
    """Only the best 50 fused candidates go on to the ranking statement; when those are
    all another namespace's (the nearest vectors are everyone's), every candidate is
    ranked again, so the caller's own weak keyword match still comes back."""
    store = await make_store(embedder=StubEmbedder())
    for i in range(60):  # nearer the query than anything of beta's, all in alpha
        await store.add({"content": f"apple zebra note {i}", "namespace": "alpha"})
    await store.add({"content": "zebra crossing", "namespace": "beta"})
    await _drain(store)
    # beta has no block with both words: its keyword list falls back to any word (weight
    # 0.2), below the 50 nearest alpha vectors' 1 / (60 + rank).
    hits = await store.search("apple zebra", mode="hybrid", namespaces=["beta"])
    assert [h.record.content for h in hits] == ["zebra crossing"]
    assert hits[0].parts["keyword_rank"] == 1.0


def test_the_sampled_shortlist_keeps_about_as_many_rows_as_asked():
    """Past 65 536 vectors the shortlist's cut is estimated on every 8th distance: it
    keeps every row at or below the cut, no fewer than half and no more than twice the
    rows asked for, and those are the nearest (no row beyond the cut is kept while a
    nearer one is left out)."""
    import numpy as np  # noqa: PLC0415 - the semantic extra

    from memwarden.memory._vectors import VectorIndex  # noqa: PLC0415 - the unit under test

    index = VectorIndex.__new__(VectorIndex)
    index.np, index.dim = np, 256
    rng = np.random.default_rng(7)
    for dist in (
        rng.binomial(256, 0.5, 100_000).astype(np.uint8),  # a model's spread
        np.full(100_000, 90, dtype=np.uint8),  # every distance equal: the fallback
        np.r_[np.zeros(10, np.uint8), np.full(99_990, 200, np.uint8)],  # a few very near
    ):
        cand = index._shortlist(dist, 2048)
        assert len(cand) >= 1024 or len(cand) == len(dist)
        assert len(cand) <= 4096
        assert np.all(np.diff(cand) > 0)  # row order, no duplicates
        assert dist[cand].max() <= np.delete(dist, cand).min()


class _OldNumpy:
    """numpy without ``bitwise_count`` (as before numpy 2)."""

    def __getattr__(self, name: str) -> object:
        import numpy as np  # noqa: PLC0415 - the semantic extra

        if name == "bitwise_count":
            raise AttributeError(name)
        return getattr(np, name)


def test_the_byte_table_popcount_counts_as_numpy_does():
    """Without ``np.bitwise_count`` (numpy < 2) the sign-bit pass counts bits by a byte
    table: the same counts, edge words included."""
    import numpy as np  # noqa: PLC0415 - the semantic extra

    from memwarden.memory import _vecmatrix  # noqa: PLC0415 - the fallback under test

    words = np.array([0, 1, 2**64 - 1, 2**63, 0x0F0F_0F0F_0F0F_0F0F, 12345], dtype=np.uint64)
    table = _vecmatrix._popcount(_OldNumpy())
    assert table is not np.bitwise_count
    assert table(words).tolist() == [0, 1, 64, 1, 32, 6]
    assert table(words).tolist() == np.bitwise_count(words).tolist()


def test_quantising_gives_the_bytes_of_numpys_norm_and_clip():
    """``quantise`` computes numpy's ``linalg.norm`` and ``clip`` without their wrappers:
    the same int8 rows, byte for byte (stored vectors and queries must not change),
    zero rows and large values included; and a query's sign bits by the short path are
    ``signs``'s, at 256 dimensions and at 100 (padded words)."""
    import numpy as np  # noqa: PLC0415 - the semantic extra

    from memwarden.memory._vectors import VectorIndex  # noqa: PLC0415 - the unit under test

    rng = np.random.default_rng(11)
    for dim in (256, 100):
        index = VectorIndex.__new__(VectorIndex)
        index.np, index.dim, index._words = np, dim, (dim + 63) // 64
        for scale in (1e-3, 1.0, 50.0):
            arr = (rng.standard_normal((300, dim)) * scale).astype(np.float32)
            arr[:2] = 0.0
            arr[5] /= np.linalg.norm(arr[5])
            norms = np.linalg.norm(arr, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            expected = np.clip(np.rint(arr / norms * 127.0), -127, 127).astype(np.int8)
            assert np.array_equal(index.quantise(arr), expected)
            assert np.array_equal(index.quantise(arr[7]), expected[7:8])
        rows = index.quantise(rng.standard_normal((50, dim)))
        index._centre = rows.mean(axis=0).astype(np.float32)
        index._floor = index._floor_of(index._centre)
        for row in rows:
            assert np.array_equal(index._query_code(row, index._floor), index.signs(row)[0])


async def test_the_two_stage_search_finds_what_the_exact_scan_finds(make_store):
    """Forced on a small store, the sign-bit shortlist re-scored exactly gives the exact
    scan's nearest blocks, before and after an erase moved a row (its sign bits move
    with it), with the byte-table popcount too."""
    from memwarden.memory import _vecmatrix  # noqa: PLC0415 - the fallback under test

    store = await make_store(embedder=StubEmbedder())
    texts = [f"fact {i} about {w}" for i, w in enumerate(["api", "timeouts", "zebras"] * 20)]
    added = await store.add_many([{"content": t} for t in texts])
    await _drain(store)
    vectors = store.vectors
    assert vectors is not None
    vectors.two_stage_rows = 0
    vectors.shortlist = 30  # half of them: the first pass has to choose
    [qvec] = vectors.quantise(StubEmbedder().embed(["timeouts"]))

    def top(found: list[tuple[int, float]]) -> list[float]:
        # similarities, not rids: facts differing by a digit tie, in either order
        return [round(sim, 5) for _, sim in found]

    exact = vectors.nearest_exact(qvec, 5)
    assert top(vectors.nearest(qvec, 5)) == top(exact)
    await store.erase([added[1]], actor="test")  # the last row moves into its place
    exact = vectors.nearest_exact(qvec, 5)
    assert top(vectors.nearest(qvec, 5)) == top(exact)
    vectors.shortlist = 5  # the moved block, asked for by its own text, must be kept
    [moved] = vectors.quantise(StubEmbedder().embed([texts[-1]]))
    assert vectors.nearest(moved, 1) == vectors.nearest_exact(moved, 1)
    vectors.shortlist = 30
    vectors._popcount = _vecmatrix._popcount(_OldNumpy())  # no bitwise_count: the byte table
    assert top(vectors.nearest(qvec, 5)) == top(exact)


async def test_vectors_loaded_at_start_are_searched_in_two_stages_alike(make_store):
    """Reopened, the store loads the vectors and makes their sign bits once: the
    two-stage search finds what the exact scan finds, as before the restart."""
    first = await make_store(embedder=StubEmbedder())
    texts = [f"note {i} on {w}" for i, w in enumerate(["api", "timeouts", "zebras"] * 20)]
    await first.add_many([{"content": t} for t in texts])
    await _drain(first)
    await first.close()
    store = await make_store(first.path, embedder=StubEmbedder())
    vectors = store.vectors
    assert vectors is not None
    assert len(vectors) == len(texts)
    vectors.two_stage_rows = 0
    vectors.shortlist = 5
    for text in (texts[0], texts[31], texts[-1]):
        [qvec] = vectors.quantise(StubEmbedder().embed([text]))
        assert vectors.nearest(qvec, 1) == vectors.nearest_exact(qvec, 1)


async def _refute(store: Store, clock, subject: str) -> None:
    for _ in range(3):  # soft, soft, hard: refuted
        clock.advance(1)
        at = datetime.fromtimestamp(clock.time(), tz=UTC)
        await store.apply_events(
            [ValidationEvent(sensor="fs", subject=subject, outcome="refuted", observed_at=at)]
        )


async def test_hidden_refuted_counts_what_each_mode_hid(make_store, clock):
    """The count of refuted facts a search left out follows its mode: keyword counts
    those with every word, vector those among its nearest vectors, hybrid either; a
    caller's namespaces bound it."""
    store = await make_store(embedder=StubEmbedder())
    await store.add({"content": "The API timeout is 30 s"})
    await store.add(  # shares the words: found by keyword (and near)
        {"content": "The API timeout is 10 s", "bindings": [{"sensor": "fs", "path": "a"}]}
    )
    await store.add(  # near by its pieces, without the word "API": vector only
        {"content": "timeouts of the APIs", "bindings": [{"sensor": "fs", "path": "b"}]}
    )
    await store.add(  # another namespace's refuted fact
        {
            "content": "The API timeout is 60 s",
            "namespace": "other",
            "bindings": [{"sensor": "fs", "path": "c"}],
        }
    )
    for subject in ("a", "b", "c"):
        await _refute(store, clock, subject)
    await _drain(store)
    count = store.count_refuted_matches
    assert await count("API timeout", mode="keyword") == 2
    assert await count("API timeout", mode="vector") == 3
    assert await count("API timeout", mode="hybrid") == 3
    assert await count("API timeout", mode="hybrid", namespaces=["default"]) == 2
    assert await count("API timeout", mode="vector", namespaces=["nobody"]) == 0
    # After a search of the same text its nearest list is reused, not searched again.
    hits = await store.search("API timeout", mode="vector")
    assert len(hits) == 1
    assert await count("API timeout", mode="vector") == 3


async def test_the_embedding_backlog_and_vectors_count_per_namespace(make_store):
    """A namespaced caller's health counts its own blocks waiting for a vector and its
    own vectors, not every namespace's."""
    store = await make_store(embedder=StubEmbedder())
    await store.add({"content": "a fact of ours", "namespace": "ours"})
    await store.add({"content": "a fact of theirs", "namespace": "theirs"})
    await store.add({"content": "another fact of theirs", "namespace": "theirs"})
    vectors = store.vectors
    assert vectors is not None
    assert await vectors.pending() == 3
    assert await vectors.pending(namespaces=["ours"]) == 1
    assert await vectors.pending(namespaces=[]) == 0
    await _drain(store)
    await store.add({"content": "a new fact of theirs", "namespace": "theirs"})
    assert await vectors.pending(namespaces=["ours"]) == 0
    assert await vectors.pending(namespaces=["theirs"]) == 1
    assert await vectors.count() == 3
    assert await vectors.count(namespaces=["ours"]) == 1
    assert await vectors.count(namespaces=["theirs", "ours"]) == 3


@pytest.mark.parametrize("encoding", ["UTF-8", "UTF-16le"])
async def test_loading_reads_every_stored_vector_byte_for_byte(
    tmp_path, clock, monkeypatch, encoding
):
    """Vectors are read in slices joined by SQLite: every byte value (NUL, bytes that are
    no UTF-8) comes back as stored, past gaps in the rids and another model's rows, in
    a UTF-16 database too (read row by row there); the other model's block is queued."""
    from memwarden.memory import _vectors  # noqa: PLC0415 - this test only

    monkeypatch.setattr(_vectors, "_LOAD_ROWS", 7)  # several slices
    path = tmp_path / "m.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA encoding = '{encoding}'")
        conn.execute("CREATE TABLE t (x)")
        conn.execute("DROP TABLE t")
    async with Store(path, clock=clock, embedder=StubEmbedder(64)) as store:
        blocks = await store.add_many([{"content": f"note {i}"} for i in range(40)])
        await _drain(store)
        for block in blocks[10:25]:  # a gap of 15 rids, wider than a slice
            await store.delete(block)
    rng = random.Random(7)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA encoding").fetchone()[0] == encoding
        rids = [r for (r,) in conn.execute("SELECT block_rid FROM block_vectors ORDER BY 1")]
        stored = {}
        for rid in rids:
            blob = bytes([0, 0xFF, 0x80, 0xC3, 0x28]) + rng.randbytes(59)
            stored[rid] = blob
            conn.execute("UPDATE block_vectors SET vector = ? WHERE block_rid = ?", (blob, rid))
        other = rids[3]
        conn.execute("UPDATE block_vectors SET model = 'another' WHERE block_rid = ?", (other,))
        del stored[other]
        conn.commit()
    async with Store(path, clock=clock, embedder=StubEmbedder(64)) as store:
        vectors = store.vectors
        assert vectors is not None
        assert len(vectors) == len(stored) == 24
        n = len(vectors)
        assert vectors._rids[:n].tolist() == sorted(stored)
        for row, rid in enumerate(sorted(stored)):
            assert vectors._matrix[row].tobytes() == stored[rid]
        assert await vectors.pending() == 1  # the other model's block, queued again
