"""The fs sensor against real files in tmp_path, under the real supervisor."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import PurePath
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError
from tests.sensors.conftest import Watch, outcomes
from tests.support import eventually
from watchdog.observers.api import BaseObserver, EventEmitter

from memwarden.errors import ValidationInputError
from memwarden.sensors import FsBinding, FsConfig
from memwarden.sensors import _fscheck as fc
from memwarden.sensors.fs import STATE_FILE

if TYPE_CHECKING:
    from collections.abc import Awaitable
    from pathlib import Path
    from typing import Any

STRUCTURED = {
    "json": ("app.json", '{"http": {"timeout": 30}}', '{"http": {"timeout": 31}}'),
    "toml": ("app.toml", "[http]\ntimeout = 30\n", "[http]\ntimeout = 31\n"),
    "yaml": ("app.yaml", "http:\n  timeout: 30\n", "http:\n  timeout: 31\n"),
}


async def _is(value: Awaitable[str], want: str) -> bool:
    return await value == want


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ---------------------------------------------------------------------- assertions


@pytest.mark.parametrize("fmt", sorted(STRUCTURED))
async def test_key_equals_confirms_then_refutes_with_the_value_found(fs_root, fs_harness, fmt):
    """A key/equals binding on JSON, TOML or YAML confirms, then refutes on a change."""
    name, good, bad = STRUCTURED[fmt]
    _write(fs_root / "config" / name, good)
    binding = {"path": f"config/{name}", "key": "/http/timeout", "equals": 30}
    async with fs_harness([binding]) as h:
        w = Watch(h)
        await h.wait_ready()
        [first] = await w.next()
        assert (first.outcome, first.observed, first.reliability) == ("confirmed", 30, 0.9)
        _write(fs_root / "config" / name, bad)
        [second] = await w.next()
        assert (second.outcome, second.observed) == ("refuted", 31)
        assert "expected 30" in second.message
        _write(fs_root / "config" / name, good)
        assert outcomes(await w.next()) == ["confirmed"]
        assert (await h.block(f"config/{name}")).validation.validated_by == "fs"


async def test_missing_key_is_refuted_as_missing(fs_root, fs_harness):
    """A pointer that finds nothing refutes with observed 'missing'."""
    _write(fs_root / "app.json", '{"http": {}}')
    async with fs_harness([{"path": "app.json", "key": "/http/timeout", "equals": 30}]) as h:
        [event] = await Watch(h).next()
        assert (event.outcome, event.observed) == ("refuted", "missing")


async def test_exists_and_absent_follow_creation_and_deletion(fs_root, fs_harness):
    """exists/absent flip between confirmed and refuted as a file comes and goes."""
    target = fs_root / "flag"
    async with fs_harness(
        [{"path": "flag", "exists": True}, {"path": "flag", "absent": True}]
    ) as h:
        w = Watch(h)
        initial = await w.next(2)
        by_kind = {e.block_id: e.outcome for e in initial}
        assert sorted(by_kind.values()) == ["confirmed", "refuted"]
        target.write_text("x")
        created = await w.next(2)
        assert sorted((e.outcome, e.observed) for e in created) == [
            ("confirmed", "present"),
            ("refuted", "present"),
        ]
        target.unlink()
        deleted = await w.next(2)
        assert sorted((e.outcome, e.observed) for e in deleted) == [
            ("confirmed", "missing"),
            ("refuted", "missing"),
        ]


async def test_sha256_confirms_and_refutes(fs_root, fs_harness):
    """A sha256 binding confirms the exact content and refutes any other."""
    import hashlib  # noqa: PLC0415 - only this test needs it

    (fs_root / "blob").write_bytes(b"v1")
    want = hashlib.sha256(b"v1").hexdigest()
    async with fs_harness([{"path": "blob", "sha256": want.upper()}]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        (fs_root / "blob").write_bytes(b"v2")
        [event] = await w.next()
        assert (event.outcome, event.observed) == ("refuted", hashlib.sha256(b"v2").hexdigest())


async def test_regex_must_match_and_must_not_match(fs_root, fs_harness):
    """regex with match true/false confirms or refutes depending on the content."""
    (fs_root / "README").write_text("timeout = 30 s\n")
    bindings = [
        {"path": "README", "regex": r"timeout = \d+"},
        {"path": "README", "regex": "TODO", "match": False},
    ]
    async with fs_harness(bindings) as h:
        w = Watch(h)
        assert outcomes(await w.next(2)) == ["confirmed", "confirmed"]
        (fs_root / "README").write_text("TODO: decide\n")
        events = await w.next(2)
        assert outcomes(events) == ["refuted", "refuted"]
        assert {e.observed for e in events} == {None, "TODO"}


async def test_no_assertion_reports_changed_only_when_content_changes(fs_root, fs_harness):
    """Without an assertion a change is 'changed'; rewriting the same bytes is not a change."""
    (fs_root / "notes.md").write_text("a")
    async with fs_harness([{"path": "notes.md"}]) as h:
        w = Watch(h)
        await h.wait_ready()
        assert w.since() == []  # a baseline, not an event
        (fs_root / "notes.md").write_text("a")
        (fs_root / "notes.md").write_text("b")
        [event] = await w.next()
        assert event.outcome == "changed"
        assert event.observed["bytes"] == 1
        assert outcomes(w.since()) == []


async def test_rename_away_and_atomic_save_onto_the_path(fs_root, fs_harness):
    """Moving the file away refutes; an editor's save (write temp, rename onto) confirms."""
    _write(fs_root / "config" / "app.yaml", "http:\n  timeout: 30\n")
    binding = {"path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
    async with fs_harness([binding]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        (fs_root / "config" / "app.yaml").rename(fs_root / "config" / "app.yaml.bak")
        [gone] = await w.next()
        assert (gone.outcome, gone.observed) == ("refuted", "missing")
        _write(fs_root / "config" / ".app.yaml.tmp", "http:\n  timeout: 30\n")
        (fs_root / "config" / ".app.yaml.tmp").rename(fs_root / "config" / "app.yaml")
        assert outcomes(await w.next()) == ["confirmed"]


async def test_a_parent_directory_moved_away_and_recreated(fs_root, fs_harness):
    """Moving a parent directory refutes; recreating the tree confirms again."""
    _write(fs_root / "a" / "b" / "c.txt", "x")
    async with fs_harness([{"path": "a/b/c.txt", "exists": True}]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        (fs_root / "a").rename(fs_root / "a2")
        assert outcomes(await w.next()) == ["refuted"]
        _write(fs_root / "a" / "b" / "c.txt", "y")
        assert outcomes(await w.next()) == ["confirmed"]


async def test_glob_binding_sees_matches_come_and_go(fs_root, fs_harness):
    """A glob with exists confirms while a match exists, refutes when none is left."""
    (fs_root / "docs").mkdir()
    async with fs_harness([{"path": "docs/**/*.md", "exists": True}]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["refuted"]
        _write(fs_root / "docs" / "guide" / "intro.md", "# hi")
        [found] = await w.next()
        assert found.outcome == "confirmed"
        assert found.observed == {"matches": 1, "first": ["docs/guide/intro.md"]}
        (fs_root / "docs" / "guide" / "intro.md").unlink()
        assert outcomes(await w.next()) == ["refuted"]


async def test_a_file_above_max_file_bytes_is_an_error(fs_root, fs_harness):
    """A content check on a file bigger than max_file_bytes is an error, not a refutation."""
    (fs_root / "big.json").write_text('{"a": "' + "x" * 2000 + '"}')
    async with fs_harness([{"path": "big.json", "key": "/a"}], max_file_bytes=1000) as h:
        [event] = await Watch(h).next()
        assert event.outcome == "error"
        assert "file too large" in event.message


async def test_an_unparsable_file_is_an_error(fs_root, fs_harness):
    """A YAML file that does not parse makes the key check an error."""
    (fs_root / "app.yaml").write_text("http: [unclosed\n")
    async with fs_harness([{"path": "app.yaml", "key": "/http", "equals": 1}]) as h:
        [event] = await Watch(h).next()
        assert event.outcome == "error"
        assert "not valid yaml" in event.message


async def test_revalidate_checks_now(fs_root, fs_harness):
    """revalidate answers from the file as it is now; without an assertion it cannot confirm."""
    (fs_root / "app.json").write_text('{"v": 1}')
    bindings = [{"path": "app.json", "key": "/v", "equals": 1}, {"path": "other.txt"}]
    async with fs_harness(bindings) as h:
        await Watch(h).next()
        [answer] = await h.revalidate("app.json")
        assert (answer.outcome, answer.observed) == ("confirmed", 1)
        assert answer.request_id is not None
        [unknown] = await h.revalidate("other.txt")
        assert unknown.outcome == "error"
        assert "no assertion" in unknown.message


async def test_key_without_equals_and_explicit_formats(fs_root, fs_harness):
    """key alone asserts presence; format names the parser; an unknown format is an error."""
    (fs_root / "app.conf").write_text('{"db": {"hosts": ["a", "b"]}}')
    (fs_root / "other.conf").write_text("x = 1")
    bindings = [
        {"path": "app.conf", "key": "/db/hosts/1", "format": "json"},
        {"path": "other.conf", "key": "/x"},
    ]
    async with fs_harness(bindings) as h:
        events = {e.subject: e for e in await Watch(h).next(2)}
        assert (events["app.conf"].outcome, events["app.conf"].observed) == ("confirmed", "b")
        assert events["other.conf"].outcome == "error"
        assert "cannot tell the format" in events["other.conf"].message


async def test_a_directory_cannot_be_content_checked(fs_root, fs_harness):
    """A content assertion on a directory is an error; exists on it confirms."""
    (fs_root / "conf.d").mkdir()
    bindings = [{"path": "conf.d", "regex": "x"}, {"path": "conf.d", "exists": True}]
    async with fs_harness(bindings) as h:
        events = await Watch(h).next(2)
        assert sorted(outcomes(events)) == ["confirmed", "error"]
        assert any("is a directory" in e.message for e in events)


async def test_a_symlink_inside_the_root_is_followed(fs_root, fs_harness):
    """A bound link to a file inside the roots sees writes to its target."""
    (fs_root / "shared").mkdir()
    (fs_root / "shared" / "app.json").write_text('{"v": 1}')
    (fs_root / "app.json").symlink_to(fs_root / "shared" / "app.json")
    async with fs_harness([{"path": "app.json", "key": "/v", "equals": 1}]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        (fs_root / "shared" / "app.json").write_text('{"v": 2}')
        [event] = await w.next()
        assert (event.outcome, event.observed) == ("refuted", 2)


async def test_bindings_added_and_removed_while_running(fs_root, fs_harness):
    """A new binding is judged at once and watched; a removed one is no longer reported."""
    (fs_root / "a.txt").write_text("a")
    (fs_root / "sub").mkdir()
    (fs_root / "sub" / "b.txt").write_text("b")
    async with fs_harness([{"path": "a.txt", "exists": True}]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        await h.set_bindings([{"path": "sub/b.txt", "regex": "b"}])
        [added] = await w.next()
        assert (added.subject, added.outcome) == ("sub/b.txt", "confirmed")
        assert str(fs_root / "sub") in h.sensor._watcher.watched
        (fs_root / "a.txt").unlink()
        (fs_root / "sub" / "b.txt").write_text("c")
        [event] = await w.next()
        assert (event.subject, event.outcome) == ("sub/b.txt", "refuted")


async def test_a_stored_binding_outside_the_roots_gets_one_error(fs_root, fs_harness, tmp_path):
    """A binding that reaches the sensor unchecked (roots narrowed since) is an error, once."""
    from memwarden.memory import Binding  # noqa: PLC0415
    from memwarden.plugins import BoundSubject  # noqa: PLC0415

    async with fs_harness([]) as h:
        w = Watch(h)
        await h.wait_ready()
        raw = Binding(sensor="fs", path=str(tmp_path / "elsewhere.txt"))
        bound = BoundSubject("b-1", raw, FsBinding.model_validate(raw.selector))
        h.ctx.set_bindings([bound])
        [event] = await w.next()
        assert event.outcome == "error"
        assert "outside the allowed roots" in event.message
        h.ctx.set_bindings([bound])
        answer = await h.sensor.revalidate(_request(raw, "b-1"), h.ctx)
        assert answer.outcome == "error"
        assert w.since() == []


def _request(binding, block_id):
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    from memwarden.memory import RevalidationRequest  # noqa: PLC0415

    now = datetime.now(UTC)
    return RevalidationRequest(
        block_id=block_id,
        sensor="fs",
        subject=binding.subject,
        binding=binding,
        reason="manual",
        created_at=now,
        deadline=now + timedelta(seconds=5),
    )


async def test_a_missing_root_fails_setup_and_a_bad_state_file_is_ignored(
    fs_root, fs_harness, tmp_path
):
    """A root that is not a directory fails setup; an unreadable state file starts afresh."""
    from memwarden.errors import PluginError  # noqa: PLC0415

    with pytest.raises(PluginError, match="is not a directory"):
        async with fs_harness([], roots=[str(tmp_path / "nope")]):
            pass
    state = tmp_path / "sensors" / "fs" / STATE_FILE
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{not json")
    (fs_root / "x").write_text("x")
    async with fs_harness([{"path": "x", "exists": True}]) as h:
        assert outcomes(await Watch(h).next()) == ["confirmed"]
    assert json.loads(state.read_text())["version"] == 1


# ---------------------------------------------------------------------- nothing missed


async def test_a_change_made_while_stopped_is_seen_at_start(fs_root, fs_harness, tmp_path):
    """The last known hashes persist in the state dir; a change during downtime is reported."""
    (fs_root / "kept.txt").write_text("same")
    (fs_root / "edited.txt").write_text("before")
    bindings = [{"path": "kept.txt"}, {"path": "edited.txt"}]
    async with fs_harness(bindings) as h:
        await h.wait_ready()
        assert h.emitted == []
    state = json.loads((tmp_path / "sensors" / "fs" / STATE_FILE).read_text())
    assert set(state["hashes"]) == {str(fs_root / "kept.txt"), str(fs_root / "edited.txt")}

    (fs_root / "edited.txt").write_text("after")  # the daemon is down

    async with fs_harness(bindings) as h:
        await h.wait_ready()  # the start scan has emitted by then
        assert [(e.subject, e.outcome) for e in h.emitted] == [("edited.txt", "changed")]


async def test_an_overflow_makes_the_sensor_rescan(fs_root, fs_harness):
    """When the kernel drops events (logged by watchdog), the bound paths are rescanned."""
    (fs_root / "app.json").write_text('{"v": 1}')
    async with fs_harness([{"path": "app.json", "key": "/v", "equals": 1}]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        sensor = h.sensor
        watcher = sensor._watcher
        lookup = sensor._lookup
        sensor._lookup = type(lookup)()  # the kernel "loses" what comes next
        seen = watcher.events_seen
        (fs_root / "app.json").write_text('{"v": 2}')
        await eventually(lambda: watcher.events_seen > seen)
        assert w.since() == []
        logging.getLogger("watchdog.observers.inotify_c").warning(
            "Inotify queue overflowed; filesystem events were lost"
        )
        [event] = await w.next()
        assert (event.outcome, event.observed) == ("refuted", 2)
        assert sensor.rescans == 1


async def test_a_dead_observer_restarts_the_sensor_and_nothing_is_missed(fs_root, fs_harness):
    """If watchdog's thread dies, the sensor crashes, is restarted, and rescans at start."""
    (fs_root / "app.json").write_text('{"v": 1}')
    binding = {"path": "app.json", "key": "/v", "equals": 1}
    async with fs_harness([binding], health_interval_s=0.05) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        h.sensor._watcher._observer.stop()  # the thread is gone: no more events
        (fs_root / "app.json").write_text('{"v": 2}')
        [event] = await w.next()
        assert (event.outcome, event.observed) == ("refuted", 2)
        assert h.counters.restarts == 1
        assert "observer thread stopped" in (h.counters.last_error or "")


@pytest.mark.slow
async def test_a_burst_of_10000_writes_reports_every_bound_file(fs_root, fs_harness, monkeypatch):
    """10 000 files rewritten at once: all 200 bound changes are seen, unbound ones never read."""
    files = [fs_root / "data" / f"f{i:05d}.txt" for i in range(10_000)]
    files[0].parent.mkdir()
    for f in files:
        f.write_text("0")
    bound = {f"data/f{i:05d}.txt" for i in range(0, 10_000, 50)}
    looked: list[str] = []
    real_look = fc.look_at

    def counting_look(path, roots, max_file_bytes):
        looked.append(path)
        return real_look(path, roots, max_file_bytes)

    monkeypatch.setattr(fc, "look_at", counting_look)
    async with fs_harness([{"path": p} for p in sorted(bound)]) as h:
        w = Watch(h)
        await h.wait_ready(timeout_s=20)
        looked.clear()

        def burst() -> None:
            for f in files:
                f.write_text("1")

        await asyncio.to_thread(burst)
        events = await w.next(len(bound), timeout_s=30)
        assert {e.subject for e in events} == bound
        assert set(outcomes(events)) == {"changed"}
        assert {str(PurePath(p).relative_to(fs_root)) for p in looked} <= bound
        watcher = h.sensor._watcher
        # The bound changes are all in; an unbound write's event may still be on its way
        # through the watcher thread (the last file, f09999, is not bound).
        await eventually(
            lambda: watcher.events_seen >= 10_000 or h.sensor.rescans > 0,
            timeout_s=30,
            what="every write's event counted (or a rescan)",
        )
        assert watcher.events_accepted <= len(bound) * 2 + 10


# ---------------------------------------------------------------------- what may be read


async def test_a_binding_outside_the_roots_is_refused(fs_root, fs_harness, tmp_path):
    """A path outside every root (absolute, or climbing with ..) is refused when bound."""
    (tmp_path / "secret.txt").write_text("s")
    async with fs_harness([]) as h:
        for path in (str(tmp_path / "secret.txt"), "../secret.txt"):
            with pytest.raises(ValidationInputError) as err:
                await h.set_bindings([{"path": path}])
            assert err.value.errors[0][0] == "bindings.0"
            assert "outside the allowed roots" in err.value.errors[0][1]


async def test_a_symlink_escaping_the_root_is_refused_and_never_read(fs_root, fs_harness, tmp_path):
    """A symlink out of the root is refused when bound, and not read when it appears later."""
    outside = tmp_path / "outside.json"
    outside.write_text('{"v": 1}')
    (fs_root / "link.json").symlink_to(outside)
    async with fs_harness([{"path": "late.json", "key": "/v", "equals": 1}]) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["refuted"]  # missing so far
        with pytest.raises(ValidationInputError) as err:
            await h.set_bindings([{"path": "link.json", "exists": True}])
        assert "resolves to" in err.value.errors[0][1]
        (fs_root / "late.json").symlink_to(outside)
        [event] = await w.next()
        assert event.outcome == "error"
        assert "outside the allowed roots; not read" in event.message


async def test_teardown_stops_the_observer_threads(fs_root, fs_harness):
    """Leaving the harness (teardown) stops watchdog's observer and emitter threads."""

    def watchdog_threads() -> list[threading.Thread]:
        return [
            t
            for t in threading.enumerate()
            if isinstance(t, BaseObserver | EventEmitter) and t.is_alive()
        ]

    before = set(watchdog_threads())
    (fs_root / "x").write_text("x")
    async with fs_harness([{"path": "x", "exists": True}]) as h:
        await h.wait_ready()
        assert set(watchdog_threads()) - before
    assert set(watchdog_threads()) <= before


# ---------------------------------------------------------------------- the binding model


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ({"path": "a", "exists": True, "sha256": "0" * 64}, "at most one assertion"),
        ({"path": "a", "equals": 3}, "equals: needs key"),
        ({"path": "a", "match": False}, "match: only goes with regex"),
        ({"path": "a", "regex": "("}, "does not compile"),
        ({"path": "a", "key": "http/timeout"}, "not a JSON pointer"),
        ({"path": "*.json", "key": "/a"}, "is a glob"),
        ({"path": "a", "sha256": "xyz"}, "String should match pattern"),
    ],
)
def test_the_binding_model_refuses_unclear_selectors(selector, problem):
    """Each malformed selector is refused with a message that says what is wrong."""
    with pytest.raises(ValidationError, match=problem):
        FsBinding.model_validate(selector)


def test_config_requires_roots_and_resolves_them(tmp_path):
    """roots is required and stored resolved (symlinks in the root path followed once)."""
    with pytest.raises(ValidationError, match="roots"):
        FsConfig.model_validate({})
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert FsConfig(roots=[link]).roots == [tmp_path.resolve()]


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("/r/docs/*.md", "/r/docs/a.md", True),
        ("/r/docs/*.md", "/r/docs/sub/a.md", False),
        ("/r/docs/**/*.md", "/r/docs/a.md", True),
        ("/r/docs/**/*.md", "/r/docs/x/y/a.md", True),
        ("/r/f?.txt", "/r/f1.txt", True),
        ("/r/f[!0-9].txt", "/r/f1.txt", False),
    ],
)
def test_glob_patterns(pattern, path, matches):
    """Globs: * and ? stay within a component, **/ spans directories, [!..] negates."""
    assert (fc.glob_regex(pattern).match(path) is not None) is matches


def test_values_are_reported_as_json():
    """Dates become ISO strings; a value too large to compare is refused."""
    import datetime as dt  # noqa: PLC0415

    assert fc.to_json({"d": dt.date(2026, 1, 2), "n": [1, 2.5, None]}) == {
        "d": "2026-01-02",
        "n": [1, 2.5, None],
    }
    with pytest.raises(fc.TooBigError):
        fc.to_json(list(range(200_000)))
    assert fc.glob_regex("/r/a[b").match("/r/a[b") is not None


async def test_keys_follow_the_shared_pointer_and_equality_rules(fs_root, fs_harness):
    """fs resolves keys and compares values with memwarden.jsonpointer: YAML's 30.0 equals
    30, true is not 1, and an index that is not ASCII digits (``²``, ``01``) finds nothing."""
    _write(fs_root / "app.yaml", "timeout: 30.0\nflag: true\nlist: [a, b, c]\n")
    cases = {
        "/timeout": (30, "confirmed"),
        "/flag": (1, "refuted"),
        "/list/2": ("c", "confirmed"),
        "/list/\u00b2": ("c", "refuted"),
        "/list/01": ("b", "refuted"),
    }
    bindings = [{"path": "app.yaml", "key": k, "equals": v} for k, (v, _) in cases.items()]
    async with fs_harness(bindings) as h:
        events = await Watch(h).next(len(cases))
        by_block = {b.block_id: b.selector.key for b in h.bindings}
    assert {by_block[e.block_id]: str(e.outcome) for e in events} == {
        k: outcome for k, (_, outcome) in cases.items()
    }


async def test_a_bad_pointer_in_a_binding_is_refused_naming_the_key(fs_harness):
    """A key that is no JSON pointer (no leading /, a ~ not followed by 0 or 1) is a 422
    naming ``key``, never a crash."""
    async with fs_harness() as h:
        for key in ("http/timeout", "/a~2b", "/a~"):
            with pytest.raises(ValidationInputError, match="key") as err:
                await h.set_bindings([{"path": "app.json", "key": key}])
            assert err.value.field == "bindings.0.key"


# ---------------------------------------------------------------------- in the daemon


async def test_in_the_daemon_a_write_reaches_the_store_and_outside_paths_are_refused(
    fs_root, tmp_path
):
    """Through the daemon: add_block refuses a path outside the roots; a write refutes."""
    from memwarden.daemon import Daemon, load_settings  # noqa: PLC0415 - daemon-level test
    from memwarden.plugins import Registry  # noqa: PLC0415
    from memwarden.sensors import FsSensor  # noqa: PLC0415

    (fs_root / "app.json").write_text('{"http": {"timeout": 30}}')
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "home",
        api={"enabled": False},
        sensors={"fs": {"roots": [str(fs_root)], "debounce_ms": 10, "startup": "error"}},
    )
    daemon = Daemon(settings, registry=Registry.from_classes({"fs": FsSensor}))
    task = asyncio.create_task(daemon.run())
    try:
        await asyncio.wait_for(daemon.ready(), 20)
        with pytest.raises(ValidationInputError) as err:
            await daemon.add_block(
                {"content": "x", "bindings": [{"sensor": "fs", "path": "/etc/hostname"}]}
            )
        assert err.value.errors[0][0].startswith("bindings.0")
        assert "outside the allowed roots" in str(err.value)

        block = await daemon.add_block(
            {
                "content": "The API timeout is 30 s",
                "bindings": [
                    {"sensor": "fs", "path": "app.json", "key": "/http/timeout", "equals": 30}
                ],
            }
        )

        async def state() -> str:
            return str((await daemon.store.get(block.id)).state)

        async def refutations() -> list[Any]:
            return [e for e in await daemon.store.events_for(block.id) if e.outcome == "refuted"]

        await eventually(lambda: _is(state(), "fresh"))
        (fs_root / "app.json").write_text('{"http": {"timeout": 45}}')
        [refuted] = await eventually(refutations)
        assert refuted.observed == 45
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, 20)


async def test_the_periodic_rescan_finds_what_no_event_reported(fs_root, fs_harness):
    """Even with every event lost and no overflow reported, the periodic rescan finds it."""
    (fs_root / "app.json").write_text('{"v": 1}')
    config = {"health_interval_s": 0.05, "rescan_interval_s": 0.2}
    async with fs_harness([{"path": "app.json", "key": "/v", "equals": 1}], **config) as h:
        w = Watch(h)
        assert outcomes(await w.next()) == ["confirmed"]
        sensor = h.sensor
        sensor._watcher._accept = lambda event: []  # the kernel drops every event, silently
        (fs_root / "app.json").write_text('{"v": 3}')
        [event] = await w.next()
        assert (event.outcome, event.observed) == ("refuted", 3)
        assert sensor.rescans == 0  # no overflow was reported: the schedule found it
