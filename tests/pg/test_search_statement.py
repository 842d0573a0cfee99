"""The keyword search's one statement: the tsquery it makes from the words in SQL is the
one ``_tsquery`` makes from the lexemes in Python (``memory/pg/_search.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg
import pytest

from memwarden.memory import FakeClock, NewBlock, Store
from memwarden.memory._codec import BLOCK_COLUMNS
from memwarden.memory._fts import query_terms
from memwarden.memory.pg._search import _EVERY_WORD, PgSearch, _tsquery

if TYPE_CHECKING:
    from tests.pgserver import PgServer

_TITLE = BLOCK_COLUMNS.index("title")
HOSTILE = [
    "it's",
    "a\\b",
    "l'été naïve",
    "o''neil x\\\\y",
    "\u00abquoted\u00bb \u2018curly\u2019 don\u2019t",
    "日本語 テキスト",
    "a & b | !c <-> d:*",
    "",
    "   ",
    "the the a",
    "zzz yyy zzz",
    "back\\slash' quote",
    "ÆØÅ ß ﬁ",
    "x\u0000y",
]


@pytest.mark.parametrize("text", HOSTILE)
async def test_sql_tsquery_is_the_python_one(pg_server: PgServer, text: str) -> None:
    dsn = pg_server.create_database()
    async with Store(dsn, clock=FakeClock(1_767_225_600.0)):
        pass  # migrated
    conn = await asyncpg.connect(dsn)
    try:
        words = " ".join(query_terms(text))
        lexemes = await PgSearch._lexemes(conn, words)
        expected = (
            await conn.fetchval(
                "SELECT CAST($1 AS tsquery)::text", _tsquery(lexemes, any_term=False)
            )
            if lexemes
            else None
        )
        got = await conn.fetchval(f"SELECT q::text FROM {_EVERY_WORD} AS q", words)
    finally:
        await conn.close()
    assert got == expected


async def test_every_word_then_any_word_then_none(pg_server: PgServer) -> None:
    async with Store(pg_server.create_database(), clock=FakeClock(1_767_225_600.0)) as store:
        await store.add_many(
            [
                NewBlock(title="alpha beta", content="gamma"),
                NewBlock(title="alpha", content="delta"),
            ]
        )
        both = await store.search("alpha beta")
        assert [h.columns[_TITLE] for h in both] == ["alpha beta"]
        either = await store.search("beta delta")  # no block has both: any word
        assert sorted(h.columns[_TITLE] for h in either) == ["alpha", "alpha beta"]
        assert await store.search("omega") == []
        assert await store.search("'' \\ --") == []
