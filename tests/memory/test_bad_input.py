"""Bad input is a clear error naming the field, and nothing is written."""

from __future__ import annotations

import pytest

from memwarden.errors import MemwardenError, ValidationInputError

BAD_UTF8 = b"caf\xe9".decode("utf-8", "surrogateescape")  # Latin-1 bytes read as UTF-8
GOOD = {"content": "the API timeout is 30 s"}

# (what is wrong, the payload, the field path, a fragment of the message)
BAD_BLOCKS = [
    ("content not text", {"content": 123}, "content", "valid string"),
    ("content missing", {"title": "t"}, "content", "Field required"),
    ("content empty", {"content": ""}, "content", "at least 1 character"),
    ("tags not a list", {**GOOD, "tags": "x"}, "tags", "valid list"),
    ("empty tag", {**GOOD, "tags": ["ok", " "]}, "tags.1", "at least 1 character"),
    (
        "binding without sensor",
        {**GOOD, "bindings": [{"path": "a"}]},
        "bindings.0.sensor",
        "Field required",
    ),
    (
        "bad sensor name",
        {**GOOD, "bindings": [{"sensor": "File System"}]},
        "bindings.0.sensor",
        "pattern",
    ),
    (
        "non-UTF-8 selector",
        {**GOOD, "bindings": [{"sensor": "fs", "path": BAD_UTF8}]},
        "bindings.0",
        "UTF-8",
    ),
    ("reliability above 1", {**GOOD, "reliability": 1.5}, "reliability", "less than or equal to 1"),
    (
        "reliability below 0",
        {**GOOD, "reliability": -0.1},
        "reliability",
        "greater than or equal to 0",
    ),
    ("reliability nan", {**GOOD, "reliability": float("nan")}, "reliability", "finite number"),
    ("importance not a number", {**GOOD, "importance": "high"}, "importance", "valid number"),
    (
        "unknown volatility",
        {**GOOD, "volatility": "extreme"},
        "volatility",
        "'low', 'medium', 'high' or 'ephemeral'",
    ),
    ("unknown info_type", {**GOOD, "info_type": "rumour"}, "info_type", "'static'"),
    ("10 MB content", {"content": "x" * 10_000_000}, "content", "at most 262144 characters"),
    ("non-UTF-8 content", {"content": BAD_UTF8}, "content", "unicode string"),
    ("NUL in content", {"content": "a\x00b"}, "content", "NUL"),
    (
        "bad duration",
        {**GOOD, "validity_window": "5 minutes"},
        "validity_window",
        "'5 minutes' is not a duration (use 30s, 5m, 6h, 7d",
    ),
    (
        "negative duration",
        {**GOOD, "validity_window": -5},
        "validity_window",
        "-5 is not a duration",
    ),
    ("unknown field", {**GOOD, "colour": "red"}, "colour", "Extra inputs are not permitted"),
    ("signals not numbers", {**GOOD, "signals": {"x": "lots"}}, "signals.x", "valid number"),
]


@pytest.mark.parametrize(
    ("payload", "field", "expected"), [c[1:] for c in BAD_BLOCKS], ids=[c[0] for c in BAD_BLOCKS]
)
async def test_add_rejects_bad_input_and_writes_nothing(store, payload, field, expected):
    """store.add raises ValidationInputError naming the field and expectation; writes nothing."""
    before = await store.counts()
    with pytest.raises(ValidationInputError) as info:
        await store.add(payload)
    err = info.value
    assert isinstance(err, MemwardenError)
    assert field in [f for f, _ in err.errors], err.errors
    message = dict(err.errors)[field]
    assert expected in message
    assert f"{field}: " in str(err)
    assert len(str(err)) < 2000  # a 10 MB input is not echoed back whole
    assert await store.counts() == before


async def test_add_many_is_all_or_nothing(store):
    """One bad block in a batch rejects the batch, named by its index; none of it is written."""
    with pytest.raises(ValidationInputError) as info:
        await store.add_many([GOOD, {"content": ""}, GOOD, {**GOOD, "reliability": 2}])
    assert [f for f, _ in info.value.errors] == ["1.content", "3.reliability"]
    assert (await store.counts())["blocks"] == 0


BAD_PATCHES = [
    ("importance above 1", {"importance": 2}, "importance", "less than or equal to 1"),
    ("content empty", {"content": ""}, "content", "at least 1 character"),
    ("content too long", {"content": "x" * 300_000}, "content", "at most 262144 characters"),
    ("non-UTF-8 content", {"content": BAD_UTF8}, "content", "unicode string"),
    ("non-UTF-8 tag", {"tags": [BAD_UTF8]}, "tags.0", "string"),
    ("tags not a list", {"tags": "x"}, "tags", "valid list"),
    ("bad duration", {"validity_window": "5 minutes"}, "validity_window", "is not a duration"),
    ("unknown volatility", {"volatility": "extreme"}, "volatility", "'low'"),
    ("not editable", {"tier": "core"}, "tier", "Extra inputs are not permitted"),
    ("null content", {"content": None}, "content", "cannot be null"),
    ("null tags", {"tags": None}, "tags", "cannot be null"),
    ("null window", {"validity_window": None}, "validity_window", "cannot be null"),
]


@pytest.mark.parametrize(
    ("patch", "field", "expected"), [c[1:] for c in BAD_PATCHES], ids=[c[0] for c in BAD_PATCHES]
)
async def test_update_rejects_bad_patch_and_changes_nothing(store, patch, field, expected):
    """store.update rejects a bad patch field by name; the block is left as it was."""
    block = await store.add({**GOOD, "tags": ["api"]})
    with pytest.raises(ValidationInputError) as info:
        await store.update(block.id, patch)
    assert field in [f for f, _ in info.value.errors], info.value.errors
    assert expected in dict(info.value.errors)[field]
    assert await store.get(block.id) == block


@pytest.mark.parametrize("limit", [0, -1, 1001])
async def test_search_limit_out_of_range(store, limit):
    """search with a limit outside 1..1000 is rejected at `limit`."""
    with pytest.raises(ValidationInputError) as info:
        await store.search("anything", limit=limit)
    assert info.value.field == "limit"
    assert "between 1 and 1000" in str(info.value)


@pytest.mark.parametrize(
    ("flt", "field"),
    [({"state": "rotten"}, "state"), ({"limit": 0}, "limit"), ({"colour": "red"}, "colour")],
)
async def test_list_blocks_bad_filter(store, flt, field):
    """list_blocks rejects a bad filter by field name."""
    with pytest.raises(ValidationInputError) as info:
        await store.list_blocks(flt)
    assert info.value.field == field
