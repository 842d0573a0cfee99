"""User text never runs as FTS5 syntax."""

from __future__ import annotations

import re
import sqlite3
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.memory._fts import MAX_QUERY_TERMS, fts_query, query_terms

INJECTIONS = [
    '"',
    "NEAR(a b)",
    "*",
    "title:foo",
    "(((",
    "a AND OR NOT b",
    "^foo",
    'foo"bar',
    "-x",
    "{a b}",
    "",
    string.punctuation * 400,  # ~13k characters of punctuation
    "a OR b",
    "foo*",
    "content: x",
    "NOT",
    "'; DROP TABLE blocks; --",
    "\x00\x01",
]
_SHAPE = re.compile(r'"[^"\s]+"(?: "[^"\s]+")*')


@pytest.fixture
def fts() -> sqlite3.Connection:
    """An FTS5 table with the store's columns and tokenizer, holding a few known rows."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(title, content, tags,"
        " tokenize='unicode61 remove_diacritics 2')"
    )
    rows = {
        1: ("foo", "bar", ""),  # "foo" only as a title
        2: ("", "title foo", ""),  # the words "title" and "foo"
        3: ("", "a b", ""),
        4: ("", "near a b", ""),
        5: ("", "bar foo", ""),
        6: ("", "a and or not b", ""),
        7: ("", "x y", ""),
    }
    conn.executemany(
        "INSERT INTO t(rowid, title, content, tags) VALUES (?, ?, ?, ?)",
        [(rid, *cols) for rid, cols in rows.items()],
    )
    yield conn
    conn.close()


def _match(conn: sqlite3.Connection, text: str) -> set[int]:
    query = fts_query(text)
    if query is None:
        return set()
    return {r[0] for r in conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (query,))}


@pytest.mark.parametrize("text", INJECTIONS, ids=lambda t: repr(t[:20]))
def test_injection_never_raises(fts, text):
    """Each hostile query yields None or a quoted-words expression that FTS5 accepts."""
    query = fts_query(text)
    assert query is None or _SHAPE.fullmatch(query), query
    _match(fts, text)  # must not raise sqlite3.OperationalError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("title:foo", {2}),  # as syntax it would be "foo in the title column": row 1
        ("NEAR(a b)", {4}),  # as syntax it would match rows 3, 4 and 6
        ("^foo", {1, 2, 5}),  # as syntax "^" anchors to the first token: rows 1 and 2 only
        ("a AND OR NOT b", {6}),  # every word is required, including "and", "or", "not"
        ("-x", {7}),
        ("{a b}", {3, 4, 6}),
        ('foo"bar', {1, 5}),
        ("*", set()),
        ("(((", set()),
        ('"', set()),
        ("", set()),
    ],
)
def test_operators_are_matched_as_words(fts, text, expected):
    """Operators and column filters are plain words: the matches prove no syntax ran."""
    assert _match(fts, text) == expected


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("Hello, World!", '"hello" "world"'),
        ("NEAR(a b)", '"near" "a" "b"'),
        ("title:foo", '"title" "foo"'),
        ("foo foo FOO", '"foo"'),
        ("Zürich naïve 東京", '"zürich" "naïve" "東京"'),
        ("snake_case", '"snake_case"'),
        ("___ __", None),
        ("!!! ??? ...", None),
    ],
)
def test_fts_query_shape(text, query):
    """Words are lowercased, deduplicated, each double-quoted, joined by spaces (AND)."""
    assert fts_query(text) == query


def test_any_term_joins_with_or():
    """any_term=True asks for any of the words."""
    assert fts_query("a b c", any_term=True) == '"a" OR "b" OR "c"'


def test_terms_are_bounded():
    """At most MAX_QUERY_TERMS words of at most 64 characters each reach FTS5."""
    words = [f"w{i}" for i in range(100)]
    assert query_terms(" ".join(words)) == words[:MAX_QUERY_TERMS]
    (term,) = query_terms("x" * 1000)
    assert term == "x" * 64


@given(st.text(max_size=300))
def test_any_text_is_safe(text):
    """For any text at all, the query is None or quoted words only, and FTS5 accepts it."""
    query = fts_query(text)
    if query is None:
        assert query_terms(text) == []
        return
    assert _SHAPE.fullmatch(query)
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(content)")
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (query,)).fetchall()
    finally:
        conn.close()


# ------------------------------------------------------------------ through the store


@pytest.mark.parametrize("text", INJECTIONS, ids=lambda t: repr(t[:20]))
async def test_store_search_never_raises(store, text):
    """The store answers every hostile query with a (possibly empty) result list."""
    await store.add({"content": "near and or not title foo bar"})
    hits = await store.search(text)
    assert isinstance(hits, list)


@pytest.mark.parametrize("word", ["near", "NEAR", "and", "AND", "or", "not"])
async def test_store_finds_operator_words(store, word):
    """A block containing the literal word "near" or "and" is found by searching for it."""
    wanted = await store.add({"content": "the cache is near the database and the queue"})
    await store.add({"content": "something else entirely"})
    hits = await store.search(word if word not in ("or", "not") else f"{word} cache")
    # "or"/"not" are not in the text: as words (never operators) they match nothing, and the
    # any-word fallback finds the block by "cache" alone.
    assert [h.block.id for h in hits] == [wanted.id]


@pytest.mark.parametrize(
    ("content", "query"),
    [
        ("the office is in Zürich", "Zürich"),
        ("the office is in Zürich", "zurich"),  # diacritics folded
        ("a naïve approach", "naïve"),
        ("a naïve approach", "NAIVE"),
        ("本社は 東京 にある", "東京"),
        ("Ωmega is the last letter", "ωmega"),
    ],
)
async def test_store_unicode_words(store, content, query):
    """Unicode words are found, case- and diacritic-insensitively."""
    block = await store.add({"content": content})
    await store.add({"content": "unrelated text"})
    assert [h.block.id for h in await store.search(query)] == [block.id]


async def test_store_title_filter_is_not_syntax(store):
    """'title:foo' finds a block with both words, not a block whose title is foo."""
    titled = await store.add({"title": "foo", "content": "bar"})
    worded = await store.add({"content": "the title says foo"})
    ids = [h.block.id for h in await store.search("title:foo")]
    assert ids == [worded.id]
    assert titled.id not in ids
