"""as_of: what was believed at each instant of a block edited, refuted and confirmed again."""

from __future__ import annotations

import pytest

from memwarden.errors import NotFoundError
from memwarden.memory import FakeClock, Store, ValidationEvent, from_ts
from tests.support import daemon

__all__ = ["daemon"]


def _event(outcome: str, at: float, **kw) -> ValidationEvent:
    return ValidationEvent(
        sensor="tests", subject="t::x", outcome=outcome, observed_at=from_ts(at), **kw
    )


async def test_each_instant_answers_what_was_believed_then(tmp_path):
    clock = FakeClock()
    t0 = clock.time()
    async with Store(tmp_path / "m.db", clock=clock) as store:
        block = await store.add(
            {
                "content": "retries: 3",
                "info_type": "semi_static",
                "bindings": [{"sensor": "tests", "test": "t::x", "subject": "t::x"}],
            }
        )
        clock.advance(10)  # t0+10: confirmed
        await store.apply_events([_event("confirmed", clock.time() - 1, observed={"passed": 1})])
        clock.advance(10)  # t0+20: edited (a new text was never checked)
        await store.update(block.id, {"content": "retries: 5"})
        clock.advance(10)  # t0+30: refuted (a failing test: hard at once)
        await store.apply_events([_event("refuted", clock.time() - 2, reliability=1.0)])
        clock.advance(10)  # t0+40: confirmed again
        await store.apply_events([_event("confirmed", clock.time() - 1)])

        with pytest.raises(NotFoundError, match="did not exist yet"):
            await store.believed_at(block.id, t0 - 1)
        seen = {
            t: await store.believed_at(block.id, t0 + t) for t in (5, 15, 25, 35, 45, 10_000_000)
        }
    assert [(seen[t]["content"], seen[t]["version"], seen[t]["state"]) for t in seen] == [
        ("retries: 3", 1, "unverified"),
        ("retries: 3", 1, "fresh"),
        ("retries: 5", 2, "unverified"),
        ("retries: 5", 2, "refuted"),
        ("retries: 5", 2, "fresh"),
        ("retries: 5", 2, "stale"),  # its window (7 d) ran out long before
    ]
    assert seen[5]["last_evidence"] is None
    confirmed = seen[15]["last_evidence"]
    assert (confirmed["outcome"], confirmed["observed"]) == ("confirmed", {"passed": 1})
    # Bi-temporal: observed a second before we committed it.
    assert confirmed["observed_at"] == from_ts(t0 + 9).isoformat()
    assert confirmed["committed_at"] == from_ts(t0 + 10).isoformat()
    assert seen[35]["reliability"] < seen[15]["reliability"]
    assert seen[35]["last_evidence"]["outcome"] == "refuted"
    assert seen[45]["validated_at"] == from_ts(t0 + 39).isoformat()


async def test_as_of_over_http_on_get_and_search(daemon):
    """GET /v1/blocks/{id}?as_of= and /v1/search?as_of= answer from history; a bad
    as_of is a 422 naming the field."""
    import time  # noqa: PLC0415 - only this test needs the wall clock

    import httpx  # noqa: PLC0415

    from memwarden.daemon._api import ensure_token  # noqa: PLC0415

    before = time.time() - 1
    block = await daemon.add_block({"content": "the mirror runs in frankfurt"})
    headers = {"Authorization": f"Bearer {ensure_token(daemon.settings.home)}"}
    async with httpx.AsyncClient(base_url=daemon.api.bound_url(), headers=headers) as http:
        now = from_ts(time.time() + 1).isoformat()
        got = (await http.get(f"/v1/blocks/{block.id}", params={"as_of": now})).json()
        assert (got["content"], got["state"], got["version"]) == (
            "the mirror runs in frankfurt",
            "unverified",
            1,
        )
        early = await http.get(
            f"/v1/blocks/{block.id}", params={"as_of": from_ts(before).isoformat()}
        )
        assert early.status_code == 404
        found = (await http.get("/v1/search", params={"q": "mirror", "as_of": now})).json()
        assert [b["block_id"] for b in found["believed"]] == [block.id]
        then = from_ts(before).isoformat()
        none = (await http.get("/v1/search", params={"q": "mirror", "as_of": then})).json()
        bad = await http.get("/v1/search", params={"q": "mirror", "as_of": "yesterday"})
    assert (none["as_of"], none["believed"]) == (then, [])  # it did not exist yet
    assert bad.status_code == 422
    assert "as_of" in bad.text


def test_cli_get_as_of_on_a_database(tmp_path):
    """`memwarden get ID --as-of T --db FILE` answers from history; a bad time is one
    clear line naming as_of, exit 2, no traceback."""
    import asyncio  # noqa: PLC0415 - only this test
    import json  # noqa: PLC0415

    from typer.testing import CliRunner  # noqa: PLC0415

    from memwarden.cli import app  # noqa: PLC0415

    clock = FakeClock()
    t0 = clock.time()
    path = tmp_path / "m.db"

    async def history() -> str:
        async with Store(path, clock=clock) as store:
            block = await store.add({"content": "replicas: 2"})
            clock.advance(60)
            await store.update(block.id, {"content": "replicas: 4"})
            return block.id

    block_id = asyncio.run(history())
    then = from_ts(t0 + 30).isoformat()
    result = CliRunner().invoke(
        app, ["get", block_id, "--as-of", then, "--db", str(path), "--json"]
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    assert (got["content"], got["version"], got["current_version"]) == ("replicas: 2", 1, 2)
    bad = CliRunner().invoke(app, ["get", block_id, "--as-of", "soon", "--db", str(path)])
    assert bad.exit_code == 2
    assert "as_of" in bad.output
    assert "Traceback" not in bad.output
