"""The value index: what it reads, and the bounds that keep untrusted files harmless."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from memwarden.plugins.testing import SensorHarness
from memwarden.sensors import FsSensor
from memwarden.sensors._suggest import candidates
from memwarden.sensors._valueindex import IndexLimits, ValueIndex, file_format
from tests.support import eventually

if TYPE_CHECKING:
    from pathlib import Path


async def _index(root: Path, **limits: int) -> ValueIndex:
    index = ValueIndex((str(root),), (".git", "node_modules"), IndexLimits(**limits))
    await index.rebuild()
    return index


def _values(index: ValueIndex) -> dict[tuple[str, str], object]:
    return {(e.path.rsplit("/", 1)[-1], e.pointer): e.value for e in index.entries()}


async def test_every_format_gives_pointers_to_scalars(tmp_path: Path):
    """JSON, YAML, TOML and INI become RFC 6901 pointers (escaped) to their scalars."""
    (tmp_path / "a.json").write_text(json.dumps({"x": {"a/b": [1, "two"]}, "t~": True}))
    (tmp_path / "b.yaml").write_text("http:\n  timeout: 30\n")
    (tmp_path / "c.toml").write_text('[tool.x]\nname = "demo"\n')
    (tmp_path / "d.ini").write_text("[server]\nWorkers = 4\n")
    (tmp_path / "notes.txt").write_text("timeout: 30")
    values = _values(await _index(tmp_path))
    assert values == {
        ("a.json", "/x/a~1b/0"): 1,
        ("a.json", "/x/a~1b/1"): "two",
        ("a.json", "/t~0"): True,
        ("b.yaml", "/http/timeout"): 30,
        ("c.toml", "/tool/x/name"): "demo",
        ("d.ini", "/server/Workers"): 4,
    }


async def test_ignored_directories_are_not_entered(tmp_path: Path):
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "p.json").write_text('{"a": 1}')
    assert _values(await _index(tmp_path)) == {}


async def test_a_yaml_alias_bomb_is_refused_without_expanding(tmp_path: Path):
    """A "billion laughs" file: aliases are refused, so nothing expands."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    index = await _index(tmp_path)
    assert index.entry_count == 0
    assert "LimitError" in index.problems[str(tmp_path / "bomb.yaml")]


async def test_too_many_yaml_nodes_are_refused(tmp_path: Path):
    (tmp_path / "big.yaml").write_text("".join(f"k{i}: {i}\n" for i in range(500)))
    index = await _index(tmp_path, max_nodes_per_file=100)
    assert index.entry_count == 0
    assert str(tmp_path / "big.yaml") in index.problems


async def test_nesting_beyond_the_depth_limit_is_cut_off(tmp_path: Path):
    """A 50-level JSON: values above the limit are kept, the deeper part is not."""
    doc: object = {"leaf": 1}
    for _ in range(50):
        doc = {"n": doc}
    (tmp_path / "deep.json").write_text(json.dumps({"top": 7, "deep": doc}))
    index = await _index(tmp_path, max_depth=10)
    assert _values(index) == {("deep.json", "/top"): 7}
    assert "deeper than 10" in index.problems[str(tmp_path / "deep.json")]


async def test_a_file_over_the_byte_limit_is_not_read(tmp_path: Path):
    (tmp_path / "big.json").write_text(json.dumps({"pad": "x" * 5000}))
    (tmp_path / "ok.json").write_text('{"a": 1}')
    index = await _index(tmp_path, max_file_bytes=1000)
    assert _values(index) == {("ok.json", "/a"): 1}
    assert "over the index's 1000" in index.problems[str(tmp_path / "big.json")]


async def test_the_entry_limit_stops_the_index_growing(tmp_path: Path):
    for i in range(5):
        (tmp_path / f"f{i}.json").write_text(json.dumps({f"k{j}": j for j in range(10)}))
    index = await _index(tmp_path, max_entries=25)
    assert index.entry_count == 20
    assert index.truncated


async def test_a_parse_error_names_the_kind_not_the_content(tmp_path: Path):
    (tmp_path / "bad.json").write_text('{"password": "hunter2" oops')
    index = await _index(tmp_path)
    problem = index.problems[str(tmp_path / "bad.json")]
    assert "hunter2" not in problem
    assert "not valid json" in problem


async def test_secrets_are_kept_only_as_a_keyed_hash(tmp_path: Path):
    """.env values and keys named like secrets: no value in the index, none in a why."""
    (tmp_path / ".env").write_text("API_TOKEN=s3cr3t-value\nexport PORT='8080'\n")
    (tmp_path / "db.yaml").write_text("db:\n  password: hunter2\n  host: db.local\n")
    index = await _index(tmp_path)
    entries = {e.pointer: e for e in index.entries()}
    assert entries["/db/host"].value == "db.local"
    for pointer in ("/API_TOKEN", "/PORT", "/db/password"):
        assert entries[pointer].value is None
        assert entries[pointer].secret
    dump = repr(list(index.entries())) + repr(index.problems)
    assert "s3cr3t-value" not in dump
    assert "hunter2" not in dump
    other = ValueIndex((str(tmp_path),))
    await other.rebuild()  # another daemon: another key, other hashes
    mine = {e.secret_hash for e in index.entries() if e.secret}
    theirs = {e.secret_hash for e in other.entries() if e.secret}
    assert len(mine) == 3
    assert mine.isdisjoint(theirs)
    found = candidates("the db password is hunter2", index)
    assert found[0].entry.pointer == "/db/password"
    assert "hunter2" not in found[0].why


async def test_update_follows_a_change_and_a_removal(tmp_path: Path):
    path = tmp_path / "app.json"
    path.write_text('{"a": 1}')
    index = await _index(tmp_path)
    path.write_text('{"a": 2, "b": 3}')
    await index.update([str(path)])
    assert _values(index) == {("app.json", "/a"): 2, ("app.json", "/b"): 3}
    path.unlink()
    await index.update([str(path)])
    assert index.entry_count == 0
    assert _values(index) == {}


def test_formats_by_name():
    assert [
        file_format(n)
        for n in ("a.yml", ".env", ".env.local", "prod.env", "x.cfg", "x.txt", "pyproject.toml")
    ] == ["yaml", "env", "env", "env", "ini", None, "toml"]


def _harness(tmp_path: Path, root: Path) -> SensorHarness:
    config = {"roots": [str(root)], "debounce_ms": 10, "ignore": [".git"]}
    return SensorHarness(FsSensor, config=config, name="fs", tmp_path=tmp_path)


def _index_of(h: SensorHarness) -> ValueIndex:
    assert isinstance(h.sensor, FsSensor)
    assert h.sensor.index is not None
    return h.sensor.index


async def test_following_sees_files_and_directories_come_and_go(tmp_path: Path):
    """Written, created in a new directory, moved away with it, and in ignored dirs: not."""
    root = tmp_path / "root"
    root.mkdir()
    async with _harness(tmp_path, root) as h:
        await h.wait_ready()
        index = _index_of(h)
        await eventually(lambda: index.builds == 1)
        (root / "a.json").write_text('{"a": 1}')
        await eventually(lambda: _values(index) == {("a.json", "/a"): 1})
        (root / "sub").mkdir()
        (root / "sub" / "b.yaml").write_text("b: 2\n")
        (root / ".git").mkdir()
        (root / ".git" / "c.json").write_text('{"c": 3}')
        await eventually(lambda: ("b.yaml", "/b") in _values(index))
        (root / "sub").rename(tmp_path / "moved")
        await eventually(lambda: _values(index) == {("a.json", "/a"): 1})
        assert index.builds == 1  # no full walk: only what changed was looked at


async def test_the_index_rides_the_sensors_watcher_one_directory_at_a_time(tmp_path: Path):
    """No recursive watch of the roots: each indexed directory is watched alone, ignored
    ones not at all, by the same watcher as the bindings."""
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / ".git" / "objects").mkdir(parents=True)
    async with _harness(tmp_path, root) as h:
        await h.wait_ready()
        assert isinstance(h.sensor, FsSensor)
        watcher = h.sensor._watcher
        assert watcher is not None
        want = {str(root): False, str(root / "a"): False, str(root / "a" / "b"): False}
        await eventually(lambda: watcher.watched == want)


async def test_a_directory_moved_away_and_made_again_is_followed(tmp_path: Path):
    """The case a recursive watch warns about (and may go deaf after): the index sees the
    new directory's files, forgets the old ones, and no warning is raised (warnings are
    errors in this suite, in threads too)."""
    root = tmp_path / "root"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "app.json").write_text('{"port": 1}')
    async with _harness(tmp_path, root) as h:
        await h.wait_ready()
        index = _index_of(h)
        await eventually(lambda: _values(index) == {("app.json", "/port"): 1})
        (root / "conf").rename(root / "old")
        (root / "conf").mkdir()
        (root / "conf" / "app.json").write_text('{"port": 2}')
        want = {("app.json", "/port"): 2}

        def both() -> bool:
            found = {(e.path, e.pointer): e.value for e in index.entries()}
            return found == {
                (str(root / "conf" / "app.json"), "/port"): 2,
                (str(root / "old" / "app.json"), "/port"): 1,
            }

        await eventually(both)
        (root / "old" / "app.json").unlink()
        await eventually(lambda: _values(index) == want)
        (root / "conf" / "app.json").write_text('{"port": 3}')
        await eventually(lambda: _values(index) == {("app.json", "/port"): 3})
        assert index.builds == 1


def test_a_document_that_is_no_file_has_the_same_bounds():
    """An HTTP answer indexed with add_document: too big, too deep or not JSON gives
    nothing (and says why, without its content); a good one gives its values."""
    index = ValueIndex((), limits=IndexLimits(max_file_bytes=1000, max_depth=5))
    assert index.add_document("http://h/big", b'{"a": "' + b"x" * 2000 + b'"}', "json")
    assert not list(index.entries())
    deep = b'{"a": ' * 50 + b"1" + b"}" * 50
    assert index.add_document("http://h/deep", deep, "json") is not None
    why = index.add_document("http://h/bad", b'{"secret-ish": oops}', "json")
    assert why == "not indexed: not valid json (JSONDecodeError)"
    assert index.add_document("http://h/ok", b'{"version": "3.1.0"}', "json") is None
    assert _values(index) == {("ok", "/version"): "3.1.0"}


async def test_a_directory_moved_out_and_back_and_swapped_is_still_watched(tmp_path: Path):
    """The moves that break a recursive watch of the root: with one (tried: the sensor
    watching its roots recursively, watchdog 7.1) this test fails on watchdog's
    RuntimeWarning "Callback with id ... already exists" in its thread, once the directory
    comes back. Watched one directory at a time, the index follows each move, and a write
    afterwards is still seen."""
    root = tmp_path / "root"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "app.json").write_text('{"port": 1}')
    where = {(str(root / "conf" / "app.json"), "/port"): 1}

    def found() -> dict[tuple[str, str], object]:
        return {(e.path, e.pointer): e.value for e in index.entries()}

    async with _harness(tmp_path, root) as h:
        await h.wait_ready()
        index = _index_of(h)
        await eventually(lambda: found() == where)
        (root / "conf").rename(tmp_path / "away")
        (root / "conf").mkdir()
        await eventually(lambda: found() == {})
        (root / "conf").rmdir()
        (tmp_path / "away").rename(root / "conf")
        await eventually(lambda: found() == where)
        (root / "conf").rename(root / "swap")
        (root / "conf").mkdir()
        (root / "conf").rmdir()
        (root / "swap").rename(root / "conf")
        await eventually(lambda: found() == where)
        (root / "conf" / "app.json").write_text('{"port": 2}')
        await eventually(lambda: found() == {(str(root / "conf" / "app.json"), "/port"): 2})
