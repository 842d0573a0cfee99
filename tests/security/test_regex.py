"""No regex in a binding can stall the daemon (issue 13, item 3), against a real daemon.

Before: an fs binding ``"regex": "^(a+)+$"`` on a 28-byte file ``aaaa…!`` made every
request wait ~4 s per evaluation (Python's ``re`` backtracks and holds the GIL), and the
http sensor's regexes ran on the event loop itself. Now every binding regex runs on RE2:
what RE2 refuses is refused when the block is added (422 naming the field), what it
accepts matches in linear time, and ``/healthz`` answers within 200 ms throughout.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.sensors import _regex
from memwarden.sensors._regex import INLINE_BUDGET, RegexTimeoutError, compile_user_regex
from tests.security.sensor_daemon import (
    Answer,
    HealthProbe,
    RealDaemon,
    Recorder,
    real_daemon,
    recording_server,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

# Backtracking in ``re`` takes ~2**n steps on "a" * n + "!": hours at n = 40.
CATASTROPHIC = "^(a+)+$"
HOSTILE_TEXT = "a" * 5000 + "!"
# Linear for RE2, but its DFA gives up and the NFA needs ~10 us per byte: ~100 s on 10 MB.
COSTLY = "(a|b)*a(a|b){200}c"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, Recorder]]:
    tmp = tmp_path_factory.mktemp("regex")
    with recording_server() as server:
        http = {"allowed_hosts": [f"127.0.0.1:{server.port}"], "interval": "1h"}
        with real_daemon(tmp, http=http) as daemon:
            yield daemon, server


def _refused_bindings(port: int) -> list[tuple[dict[str, Any], list[str]]]:
    url = f"http://127.0.0.1:{port}/v"
    return [
        ({"sensor": "fs", "path": "a.txt", "regex": r"^(a+)+\1$"}, ["regex"]),
        ({"sensor": "fs", "path": "a.txt", "regex": "(?=a)a"}, ["regex"]),
        ({"sensor": "http", "url": url, "body_regex": r"(?<!x)a"}, ["body_regex"]),
        ({"sensor": "http", "url": url, "key": "/v", "matches": "(a)\\1"}, ["matches"]),
        (
            {"sensor": "http", "url": url, "header": {"name": "X", "regex": "a++"}},
            ["header", "regex"],
        ),
    ]


@pytest.mark.parametrize("case", range(5))
def test_a_pattern_re2_refuses_is_refused_when_added_naming_the_field(world, case):
    """Backreferences, lookaround, possessive repeats: 422 on bindings.0.<field>; nothing
    is stored, nothing is fetched, and the daemon keeps answering."""
    daemon, server = world
    binding, field = _refused_bindings(server.port)[case]
    before, fetched = daemon.block_count(), len(server.seen())
    with HealthProbe(daemon.url) as probe:
        response = daemon.add(binding)
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["bindings", "0", *field]
    assert "does not compile with RE2" in problem["msg"]
    assert "Traceback" not in response.text
    assert daemon.block_count() == before
    assert len(server.seen()) == fetched
    probe.assert_responsive()
    assert daemon.alive()


def _judged(daemon: RealDaemon, binding: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Add a block with ``binding``, revalidate it, and return its newest event."""
    response = daemon.add(binding)
    assert response.status_code == 201, response.text
    block_id = response.json()["id"]
    began = time.perf_counter()
    answer = daemon.revalidate(block_id)
    elapsed = time.perf_counter() - began
    assert answer["answered"], answer
    events = [e for e in daemon.events(block_id) if e["sensor"] == binding["sensor"]]
    return events[0], elapsed


def test_a_backtracking_pattern_on_a_hostile_file_answers_at_once(world):
    """``^(a+)+$`` on ``a * 5000 + "!"`` (forever in ``re``) is judged in linear time:
    refuted, with /healthz under 200 ms throughout."""
    daemon, _ = world
    (daemon.root / "hostile.txt").write_text(HOSTILE_TEXT)
    (daemon.root / "xs.txt").write_text("x" * 5000)
    with HealthProbe(daemon.url) as probe:
        event, elapsed = _judged(
            daemon, {"sensor": "fs", "path": "hostile.txt", "regex": CATASTROPHIC}
        )
        assert event["outcome"] == "refuted"
        assert "no match" in event["message"]
        # (x+x+)+y: the classic that RE2 accepts and re cannot finish on 5000 x's.
        event2, elapsed2 = _judged(daemon, {"sensor": "fs", "path": "xs.txt", "regex": "(x+x+)+y"})
        assert event2["outcome"] == "refuted"
        # A pattern that does match still confirms, and shows (a bounded part of) the match.
        event3, _ = _judged(daemon, {"sensor": "fs", "path": "hostile.txt", "regex": "^(a+)+!$"})
        assert event3["outcome"] == "confirmed"
        assert len(event3["observed"]) == 256
    assert elapsed < 10.0
    assert elapsed2 < 10.0
    probe.assert_responsive()
    assert daemon.alive()


def test_http_regexes_on_large_hostile_answers_do_not_block_the_loop(world):
    """body_regex on a 1 MiB body, matches on a JSON value, header.regex on a long header:
    each backtracking pattern is judged (refuted) while /healthz stays under 200 ms."""
    daemon, server = world
    big = ("a" * (1024 * 1024 - 2) + "!").encode()
    server.answers["/big"] = Answer(body=big, headers={"Content-Type": "text/plain"})
    server.answers["/json"] = Answer(body=b'{"v": "' + HOSTILE_TEXT.encode() + b'"}')
    server.answers["/hdr"] = Answer(headers={"Content-Type": "text/plain", "X-A": HOSTILE_TEXT})
    cases = [
        ({"url": server.url("/big"), "body_regex": CATASTROPHIC}, "body does not match"),
        ({"url": server.url("/json"), "key": "/v", "matches": CATASTROPHIC}, "does not match"),
        (
            {"url": server.url("/hdr"), "header": {"name": "X-A", "regex": CATASTROPHIC}},
            "does not match",
        ),
    ]
    with HealthProbe(daemon.url) as probe:
        for selector, why in cases:
            event, elapsed = _judged(daemon, {"sensor": "http", **selector})
            assert event["outcome"] == "refuted", event
            assert why in event["message"]
            assert elapsed < 10.0
            if "value" in event["observed"]:
                assert len(event["observed"]["value"]) == 256
            if event["observed"].get("header") is not None:
                assert len(event["observed"]["header"]) == 256
    probe.assert_responsive()
    assert daemon.alive()


def _random_ab(size: int) -> bytes:
    """Random a/b text: periodic text would let RE2's DFA cope."""
    return random.Random(7).randbytes(size).translate(bytes(b"ab"[i & 1] for i in range(256)))


def test_a_pattern_too_costly_even_for_re2_is_stopped_after_its_deadline(world):
    """``(a|b)*a(a|b){200}c`` on 10 MB of a/b: linear for RE2, but ~100 s. It runs in the
    regex helper process and is stopped after 5 s: an `error` saying it was not judged.
    The daemon answers throughout, and the next check (a fresh helper) works."""
    daemon, _ = world
    (daemon.root / "ab.txt").write_bytes(_random_ab(10_000_000))
    with HealthProbe(daemon.url) as probe:
        response = daemon.add({"sensor": "fs", "path": "ab.txt", "regex": COSTLY})
        assert response.status_code == 201, response.text
        block_id = response.json()["id"]
        began = time.perf_counter()
        assert daemon.revalidate(block_id)["answered"]
        elapsed = time.perf_counter() - began
        # Judged when added: stopped after 5 s. The revalidation of the same text is then
        # answered at once from that, without running the search again.
        first, *more = reversed([e for e in daemon.events(block_id) if e["sensor"] == "fs"])
        assert first["outcome"] == "error"
        assert (
            "took longer than 5s on 10000000 bytes and was stopped; not judged"
            in (first["message"])
        )
        assert more
        assert more[-1]["outcome"] == "error"
        assert "on this same text before and was not run again" in more[-1]["message"]
        again, _ = _judged(daemon, {"sensor": "fs", "path": "ab.txt", "regex": "^[ab]{100}"})
        assert again["outcome"] == "confirmed"
    assert elapsed < 15.0
    probe.assert_responsive()
    assert daemon.alive()


def test_the_helper_process_answers_what_re2_answers_in_process():
    """Above the in-process budget a search goes to the helper process; same answer."""
    text = b"x" * 30_000 + b"needle" + b"y" * 30_000
    regex = compile_user_regex("(?s).{1000}needle")
    assert regex._compiled.programsize * len(text) > INLINE_BUDGET
    found = regex.search(text)
    assert found is not None
    assert found.endswith("needle")
    assert len(found) == 1006
    assert compile_user_regex("(?s).{1000}absent").search(text) is None
    small = compile_user_regex("needle")
    assert small.search(text) == "needle"  # in process: a few instructions
    text = _random_ab(10_000_000)
    began = time.perf_counter()
    with pytest.raises(RegexTimeoutError, match="took longer than 5s on 10000000 bytes"):
        compile_user_regex(COSTLY).search(text)
    assert 4.5 < time.perf_counter() - began < 15
    began = time.perf_counter()  # the same search again: refused at once, no CPU burnt
    with pytest.raises(RegexTimeoutError, match="on this same text before and was not run"):
        compile_user_regex(COSTLY).search(text)
    assert time.perf_counter() - began < 1.0


def test_a_helper_that_cannot_start_is_an_error_not_a_crash(monkeypatch):
    """No interpreter to run the helper (a sandbox without exec): the costly search is
    refused with the reason; nothing raises past the sensor's verdict."""
    monkeypatch.setattr(_regex.sys, "executable", "/nonexistent/python")
    helper = _regex._Helper()
    with pytest.raises(RegexTimeoutError, match="the regex helper did not start"):
        helper.search(COSTLY, b"ab" * 100)
    helper.close()
