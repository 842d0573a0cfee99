"""Short ids: shown by the CLI, accepted back everywhere, unique even for one burst."""

from __future__ import annotations

import asyncio
import itertools
import json
import re

import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.memory import Store

runner = CliRunner()


def run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


@pytest.fixture
def burst(tmp_path):
    """1 000 blocks imported in one burst (their ids share the timestamp digits)."""
    path = tmp_path / "m.db"
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"content": f"imported fact {i}"}) + "\n" for i in range(1000))
    )
    run("import", str(rows), "--db", str(path))

    async def listing() -> list[tuple[str, str]]:
        async with Store(path) as store:
            blocks = await store.list_blocks({"limit": 10_000})
        return [(b.id, b.short_id or "") for b in blocks]

    return path, asyncio.run(listing())


def test_a_burst_of_1000_gets_distinct_short_ids_each_accepted_by_get(burst):
    path, blocks = burst
    assert len(blocks) == 1000
    # Plain prefixes collide in one burst (how many depends on how busy the machine is).
    assert len({b[0][:13] for b in blocks}) < len(blocks) // 2
    shorts = [s for _, s in blocks]
    assert len(set(shorts)) == 1000
    for block_id, short in blocks:
        assert len(short) >= 8
        assert block_id.replace("-", "").endswith(short)

    async def resolve_all() -> list[str]:
        async with Store(path) as store:  # what `get` resolves with, for every one of them
            return [await store.resolve_id(short) for short in shorts]

    assert asyncio.run(resolve_all()) == [block_id for block_id, _ in blocks]
    # The CLI itself on an even spread of them (a process-like CLI run costs ~60 ms).
    for block_id, short in blocks[::40]:
        shown = json.loads(run("get", short, "--db", str(path), "--json"))
        assert shown["id"] == block_id
        assert shown["short_id"] == short


def test_full_ids_and_dashed_or_upper_case_forms_are_accepted(burst):
    path, blocks = burst
    block_id, short = blocks[7]
    for ref in (
        block_id,
        block_id.upper(),
        block_id.replace("-", ""),
        f"{short[:-4]}-{short[-4:]}",
    ):
        assert json.loads(run("get", ref, "--db", str(path), "--json"))["id"] == block_id


def test_the_tables_show_ids_that_get_accepts_even_at_80_columns(tmp_path):
    path = tmp_path / "m.db"
    run("add", "x " * 200, "--title", "t " * 60, "--db", str(path))
    shown = run("stale", "--db", str(path))  # nothing stale yet
    assert shown == "nothing is stale\n"
    out = run("search", "t", "--db", str(path))
    ids = re.findall(r"\b[0-9a-f]{8,}\b", out)
    assert ids, out
    assert json.loads(run("get", ids[0], "--db", str(path), "--json"))["short_id"] == ids[0]


def _colliding_ids():
    """UUIDv7-shaped ids whose last 10 hex digits are all the same."""
    for n in itertools.count():
        yield f"01a20a43-4801-7{n:03x}-8{n:03x}-{n:02x}0000000000"


def test_colliding_tails_lengthen_the_short_id_and_an_ambiguous_one_names_candidates(
    tmp_path, monkeypatch
):
    ids = _colliding_ids()
    monkeypatch.setattr("memwarden.memory._blocks.new_id", lambda: next(ids))
    path = tmp_path / "m.db"
    first = json.loads(run("add", "first fact", "--db", str(path), "--json"))
    second = json.loads(run("add", "second fact", "--db", str(path), "--json"))
    assert first["short_id"] == "00000000"  # alone, 8 digits are enough
    assert second["short_id"] == "10000000000"  # 11 digits tell them apart
    first = json.loads(run("get", first["id"], "--db", str(path), "--json"))
    assert first["short_id"] == "00000000000"  # lengthened once the second came
    out = run("get", "00000000", "--db", str(path), code=1)
    assert out.startswith("error: ambiguous id '00000000': matches ")
    assert first["id"] in out
    assert second["id"] in out
    assert (
        json.loads(run("get", second["short_id"], "--db", str(path), "--json"))["id"]
        == second["id"]
    )


def test_unknown_and_too_short_ids_are_one_clear_line(tmp_path):
    path = tmp_path / "m.db"
    run("add", "a fact", "--db", str(path))
    assert (
        run("get", "deadbeef", "--db", str(path), code=1) == "error: no block with id 'deadbeef'\n"
    )
    out = run("get", "dead", "--db", str(path), code=2)
    assert "too short" in out
    assert "at least 8 hex digits" in out
