"""Search falls back from all words to any word when no block has them all."""

from __future__ import annotations


async def test_all_words_first_then_any_word(store):
    """A query whose words never meet in one block still finds the blocks with some."""
    await store.add({"content": "The API timeout is 30 s"})
    await store.add({"content": "The retry logic retries 3 times"})
    both = await store.add({"content": "timeout and retry both live here"})
    hits = await store.search("timeout retry")
    assert [h.block.id for h in hits] == [both.id]  # all words: only the block with both
    hits = await store.search("timeout retries version")
    assert {h.block.content for h in hits} == {
        "The API timeout is 30 s",
        "The retry logic retries 3 times",
        "timeout and retry both live here",
    }
