"""The keyword search's one statement: the tsquery it makes from the words in SQL has the
lexemes ``_tsquery`` makes from them in Python, and ranks every block as that one does
(``memory/pg/_search.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg
import pytest

from memwarden.memory import FakeClock, NewBlock, Store
from memwarden.memory._codec import BLOCK_COLUMNS
from memwarden.memory._fts import query_terms
from memwarden.memory.pg._search import _EVERY_WORD, CONFIG, RANK_WEIGHTS, PgSearch, _tsquery

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
    "Café cafe CAFÉ",
    "timeout api timeout",
]
MATCHING = {"it's", "日本語 テキスト", "Café cafe CAFÉ", "timeout api timeout"}
# Blocks the queries above match, some with a lexeme more than once.
CORPUS = [
    "it s a b the été naïve quoted curly don t",
    "café cafe timeout api timeout api the the a",
    "日本語 テキスト back slash quote zzz yyy",
    "o neil x y ÆØÅ ß ﬁ a b c d",
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
        python = _tsquery(lexemes, any_term=False) if lexemes else ""
        sql = await conn.fetchval(f"SELECT q::text FROM {_EVERY_WORD} AS q", words)
        # The same lexemes (in the words' order, not sorted) ...
        assert set(sql.split(" & ")) == set(python.split(" & ")) if lexemes else sql == ""
        # ... so the same blocks, ranked the same (the ranks computed both ways).
        ranks = await conn.fetch(
            f"SELECT d, ts_rank_cd('{RANK_WEIGHTS}', v, CAST($2 AS tsquery), 32),"
            f" ts_rank_cd('{RANK_WEIGHTS}', v, q, 32), v @@ CAST($2 AS tsquery), v @@ q"
            f" FROM unnest($3::text[]) AS d, to_tsvector('{CONFIG}', d) AS v, {_EVERY_WORD} AS q",
            words,
            python,
            CORPUS,
        )
    finally:
        await conn.close()
    for doc, by_python, by_sql, matched_python, matched_sql in ranks:
        assert (by_sql, matched_sql) == (by_python, matched_python), doc
    if text in MATCHING:  # the comparison above is of real ranks, not of zeros
        assert any(r[3] for r in ranks)


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


def test_ranking_factors_follow_the_policy() -> None:
    """The freshness factors are made once per policy, and a new policy's are used."""
    from memwarden.memory._codec import new_record, record_to_row  # noqa: PLC0415
    from memwarden.memory.policy import PolicyConfig, RankingConfig  # noqa: PLC0415

    now = 1_767_225_600.0
    first = PolicyConfig()
    rec = new_record(NewBlock(content="x"), block_id="b1", now=now, cfg=first)
    row = ("[]", [], record_to_row(rec))
    search = PgSearch(None, FakeClock(now), first)  # type: ignore[arg-type]
    (hit,) = search._ranked([(1.0, *row)], now, 10)
    assert (hit.state, hit.freshness) == ("unverified", 0.85)
    search.policy = PolicyConfig(ranking=RankingConfig(unverified=0.25))
    (hit,) = search._ranked([(1.0, *row)], now, 10)
    assert hit.freshness == 0.25
    assert hit.score == pytest.approx(0.25 * hit.reliability * hit.retention)
