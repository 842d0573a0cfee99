"""A search runs on the loop when it fits its budget, and on a reader when it does not."""

from __future__ import annotations


async def _three_blocks(store):
    for i in range(3):
        await store.add({"title": f"gateway {i}", "content": f"the gateway listens on port {i}"})


async def test_a_small_search_is_answered_on_the_loop(make_store):
    """Within the budget the rows come from the loop's own connection: no reader used."""
    store = await make_store()
    await _three_blocks(store)
    hits = await store.search("gateway port")
    assert len(hits) == 3
    assert (store.db.inline_reads, store.db.inline_overruns) == (1, 0)


async def test_a_search_past_its_budget_goes_to_a_reader_with_the_same_answer(make_store):
    """An interrupted inline read is run again on a reader: same hits, same order."""
    roomy = await make_store()
    # Enough matches that the statement runs past the progress handler's first look.
    await roomy.add_many(
        [{"title": f"gateway {i}", "content": f"gateway port {i}"} for i in range(300)]
    )
    tight = await make_store(roomy.path, inline_read_ms=1e-9)  # spent before it starts
    expected = [(h.id, h.score) for h in await roomy.search("gateway port", limit=50)]
    got = [(h.id, h.score) for h in await tight.search("gateway port", limit=50)]
    assert len(got) == 50
    assert got == expected
    assert (tight.db.inline_reads, tight.db.inline_overruns) == (0, 1)


async def test_no_budget_means_every_search_uses_a_reader(make_store):
    """``inline_read_ms=0`` turns the loop's connection off."""
    store = await make_store(inline_read_ms=0)
    await _three_blocks(store)
    assert len(await store.search("gateway")) == 3
    assert (store.db.inline_reads, store.db.inline_overruns) == (0, 0)


async def test_an_inline_search_sees_every_committed_write(make_store):
    """The loop's connection holds no snapshot between reads: each search sees the
    latest commit."""
    store = await make_store()
    await _three_blocks(store)
    assert len(await store.search("gateway")) == 3
    await store.add({"title": "gateway 4", "content": "a fourth gateway"})
    assert len(await store.search("gateway")) == 4
    assert store.db.inline_reads == 2
