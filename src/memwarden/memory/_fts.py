"""Turning what a user typed into a safe FTS5 query.

Whatever arrives (quotes, ``NEAR``, ``*``, ``col:``, unbalanced parentheses, ``AND OR
NOT``) is matched as words: each word becomes a quoted FTS5 string, so no user text is
ever parsed as FTS syntax and no query is an error.
"""

from __future__ import annotations

import re

__all__ = ["MAX_QUERY_TERMS", "fts_query", "query_terms"]

MAX_QUERY_TERMS = 16
_MAX_TERM_CHARS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """The words of ``text`` (deduplicated, in order), at most :data:`MAX_QUERY_TERMS`."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text):
        word = match.group(0)[:_MAX_TERM_CHARS].lower()
        if word.strip("_"):
            seen.setdefault(word, None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


def fts_query(text: str, *, any_term: bool = False) -> str | None:
    """An FTS5 MATCH expression for ``text``: all words (or any), each quoted.

    Returns None when the text holds no word at all.
    """
    terms = query_terms(text)
    if not terms:
        return None
    joiner = " OR " if any_term else " "
    return joiner.join(f'"{t}"' for t in terms)
