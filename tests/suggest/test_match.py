"""The matcher: what it takes from a text, and which entry it puts first."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from memwarden.sensors._suggest import candidates, extract, match_keys, words_of
from memwarden.sensors._valueindex import ValueIndex

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(params=["lookup", "scan"])
async def index(tmp_path: Path, request: pytest.FixtureRequest) -> ValueIndex:
    """The same answers whether entries are found through lookup keys or a full scan."""
    (tmp_path / "app.yaml").write_text(
        "http:\n  timeout: 30\n  port: 8080\nclient:\n  timeout_ms: 30000\n"
        "queue:\n  visibility_timeout: 45s\nlogging:\n  level: warning\n"
    )
    (tmp_path / "package.json").write_text(
        '{"version": "2.4.1", "dependencies": {"left-pad": "^1.3.0"}}'
    )
    (tmp_path / "app.ini").write_text("[server]\nworkers = 8\n")
    keys_of = match_keys if request.param == "lookup" else None
    index = ValueIndex((str(tmp_path),), keys_of=keys_of)
    await index.rebuild()
    return index


def _top(text: str, index: ValueIndex) -> tuple[str, object, bool]:
    best = candidates(text, index)[0]
    return best.entry.pointer, best.equals, best.agrees


def test_numbers_carry_their_units():
    ex = extract("timeout 30 s, then 2 minutes, 500ms, 3 retries and 64 MiB")
    assert [(q.number, q.seconds) for q in ex.quantities] == [
        (30.0, 30.0),
        (2.0, 120.0),
        (500.0, 0.5),
        (3.0, None),
        (64.0, None),
    ]
    assert ex.quantities[-1].size_bytes == 64 * 1024**2


def test_versions_quotes_words_and_files():
    ex = extract('Upgrade to v1.2.3 with "fast mode" in config/app.yaml; maxRetries is_on')
    assert ex.versions == ["1.2.3"]
    assert ex.quoted == ["fast mode"]
    assert ex.files == ["config/app.yaml"]
    assert {"max", "retries", "is_on"} - ex.words == {"is_on"}
    assert words_of("maxRetries_ms") == ["max", "retries", "ms"]


async def test_seconds_meet_a_plain_number_a_duration_string_and_milliseconds(index):
    assert _top("The HTTP timeout is 30 seconds", index) == ("/http/timeout", 30, True)
    assert _top("The client timeout is 30 s", index) == ("/client/timeout_ms", 30000, True)
    assert _top("Queue visibility timeout: 45 s", index) == (
        "/queue/visibility_timeout",
        "45s",
        True,
    )


async def test_a_version_meets_a_range_and_a_key_word_decides(index):
    assert _top("left-pad 1.3.0 is a dependency", index) == (
        "/dependencies/left-pad",
        "^1.3.0",
        True,
    )
    assert _top("We ship version 2.4.1", index) == ("/version", "2.4.1", True)


async def test_a_key_with_another_value_is_a_contradiction_with_the_texts_value(index):
    assert _top("The server has 4 workers", index) == ("/server/workers", 4, False)
    assert _top("http timeout is 1 minute", index) == ("/http/timeout", 60, False)


async def test_a_bare_number_or_word_alone_is_not_enough(index):
    """8080 with no key word, "warning" with no key word: nothing offered."""
    assert candidates("we saw 8080 errors", index) == []
    assert candidates("a warning was printed", index) == []
    assert _top("the http port is 8080", index) == ("/http/port", 8080, True)


async def test_confidence_is_in_range_and_why_says_what_matched(index):
    for text in ("The HTTP timeout is 30 seconds", "left-pad 1.3.0", "server has 4 workers"):
        for c in candidates(text, index):
            assert 0.0 <= c.confidence <= 1.0
            assert c.entry.pointer in c.why or "value" in c.why


async def test_ini_bindings_are_anchored_regexes(index, tmp_path):
    best = candidates("8 server workers", index)[0]
    binding = best.binding("fs", str(tmp_path))
    assert binding["path"] == "app.ini"
    assert "workers" in binding["regex"]
    assert binding["regex"].startswith("(?m)^")


async def test_an_update_replaces_a_files_lookup_keys(tmp_path: Path):
    path = tmp_path / "app.yaml"
    path.write_text("http:\n  timeout: 30\n")
    index = ValueIndex((str(tmp_path),), keys_of=match_keys)
    await index.rebuild()
    assert candidates("the http timeout is 30 s", index)[0].agrees
    path.write_text("http:\n  timeout: 45\n")
    await index.update([str(path)])
    assert not candidates("the http timeout is 30 s", index)[0].agrees
    assert candidates("the http timeout is 45 s", index)[0].agrees
    path.unlink()
    await index.update([str(path)])
    assert index.lookup == {}
