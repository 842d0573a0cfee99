"""memwarden.jsonpointer: RFC 6901 pointers and JSON equality, the one rule fs and http use.

The RFC's own examples are a table; the rest are properties checked against independent
statements of the rule (walking a document by hand, comparing canonical forms).
"""

from __future__ import annotations

import contextlib
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.jsonpointer import (
    PointerMissingError,
    PointerSyntaxError,
    check_pointer,
    json_equal,
    parse_pointer,
    pointer_of,
    resolve_pointer,
)

# RFC 6901, section 5.
RFC_DOC: dict[str, Any] = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        ("", RFC_DOC),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ('/k"l', 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ],
)
def test_rfc_6901_section_5_examples(pointer, value):
    """Every example of RFC 6901 section 5 resolves to the value the RFC gives."""
    assert resolve_pointer(RFC_DOC, pointer) == value


@pytest.mark.parametrize(
    "token",
    ["2", "-", "01", "00", "+1", "-0", "1.0", " 1", "1 ", "", "\u00b2", "\u0661", "\uff11", "x"],
)
def test_an_array_index_is_ascii_decimal_without_leading_zeros(token):
    """Past the end, ``-``, leading zeros, signs, spaces and non-ASCII digits (superscript
    two, Arabic-Indic one, fullwidth one) name no element: missing, never another error."""
    with pytest.raises(PointerMissingError) as err:
        resolve_pointer({"a": ["x", "y"]}, f"/a/{token}")
    assert err.value.token == token


@pytest.mark.parametrize(
    ("pointer", "tokens"),
    [("", ()), ("/", ("",)), ("//", ("", "")), ("/~01", ("~1",)), ("/~10", ("/0",))],
)
def test_tokens_decode_tilde_one_before_tilde_zero(pointer, tokens):
    """``~01`` is ``~1`` (not ``/``): ~1 is decoded first, then ~0."""
    assert parse_pointer(pointer) == tokens


@pytest.mark.parametrize("text", ["a", "a/b", "#/a", "/a~", "/a~2", "/~x", "/a/~/b"])
def test_text_that_is_no_pointer_is_a_syntax_error(text):
    """No leading ``/``, or a ``~`` not followed by 0 or 1: a ValueError naming the text."""
    with pytest.raises(PointerSyntaxError, match="is not a JSON pointer"):
        check_pointer(text)
    with pytest.raises(ValueError, match="is not a JSON pointer"):
        resolve_pointer({}, text)


def test_a_pointer_into_a_scalar_or_a_missing_member_is_missing():
    """Walking into a string, a number or a member that is not there finds nothing."""
    doc = {"s": "text", "n": 3, "o": {}}
    for pointer in ("/s/0", "/n/0", "/o/x", "/x", "/o/x/y"):
        with pytest.raises(PointerMissingError):
            resolve_pointer(doc, pointer)
    assert resolve_pointer({"0": "key"}, "/0") == "key"  # on an object "0" is a name


# ---------------------------------------------------------------------- properties

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def _paths(doc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every (tokens, value) in ``doc``, found by walking it with Python indexing."""
    out = [(prefix, doc)]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, str(i)))
    return out


@given(st.lists(st.text(max_size=8), max_size=6))
def test_escaping_round_trips_any_tokens(tokens):
    """Any member names, ``~`` and ``/`` included, survive pointer_of then parse_pointer."""
    assert parse_pointer(pointer_of(tokens)) == tuple(tokens)


@given(json_values)
def test_every_value_in_a_document_is_found_by_its_pointer(doc):
    """The pointer built from a path reaches exactly the value at that path."""
    for tokens, value in _paths(doc):
        assert resolve_pointer(doc, pointer_of(tokens)) is value


@given(json_values, st.text(max_size=12))
def test_resolving_any_text_finds_a_value_or_says_why(doc, text):
    """Whatever the document and the text: a value, PointerSyntaxError or
    PointerMissingError; never another exception."""
    with contextlib.suppress(PointerSyntaxError, PointerMissingError):
        resolve_pointer(doc, text)


@given(st.text(min_size=1, max_size=4))
def test_only_canonical_ascii_decimals_index_an_array(token):
    """A token indexes a 10 000-element array iff it is ``0`` or ASCII digits not led by 0."""
    doc = list(range(10_000))
    canonical = token.isascii() and token.isdecimal() and (token == "0" or token[0] != "0")
    try:
        found = resolve_pointer(doc, pointer_of([token]))
    except PointerMissingError:
        assert not canonical
    else:
        assert canonical
        assert found == int(token)


def _canonical(value: Any) -> Any:  # noqa: PLR0911 - one return per JSON type
    """An independent statement of JSON equality: each value as a tagged, exact form."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return ("nan", object())  # equal to nothing, itself included
        if value in (float("inf"), float("-inf")):
            return ("number", value)
        return ("number", Fraction(value))
    if isinstance(value, str):
        return ("string", value)
    if value is None:
        return ("null",)
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))


@given(json_values, json_values)
def test_json_equality_matches_its_canonical_statement(a, b):
    """json_equal agrees with comparing exact tagged forms: numbers by value, booleans,
    strings and null by type and value, arrays in order, objects in any order."""
    assert json_equal(a, b) == (_canonical(a) == _canonical(b))
    assert json_equal(a, b) == json_equal(b, a)


@given(json_values)
def test_json_equality_sees_a_value_equal_to_a_copy(doc):
    """A value equals a copy of itself unless a NaN is in it."""
    has_nan = any(isinstance(v, float) and math.isnan(v) for _, v in _paths(doc))
    assert json_equal(doc, _rebuild(doc)) is not has_nan


def _rebuild(value: Any) -> Any:
    if isinstance(value, list):
        return [_rebuild(v) for v in value]
    if isinstance(value, dict):
        return {k: _rebuild(v) for k, v in reversed(list(value.items()))}
    return value


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (30, 30.0, True),
        (True, 1, False),
        (False, 0, False),
        (True, True, True),
        (None, None, True),
        (None, 0, False),
        ("1", 1, False),
        (2**53 + 1, float(2**53 + 1), False),
        ([1, 2], [2, 1], False),
        ({"a": 1, "b": [True]}, {"b": [True], "a": 1.0}, True),
        ({"a": 1}, {"a": True}, False),
        (float("nan"), float("nan"), False),
    ],
)
def test_json_equality_examples(a, b, equal):
    """The documented cases: 1 is 1.0, true is not 1, exact big numbers, NaN equals nothing."""
    assert json_equal(a, b) is equal
