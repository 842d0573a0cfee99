"""The Python clients against a real daemon process."""

from __future__ import annotations

import pytest

from memwarden.client import AsyncClient, Client, DaemonNotRunningError
from memwarden.errors import NotFoundError, TransportError, ValidationInputError


def test_sync_client_covers_the_api(live_daemon):
    """Client adds, reads, edits, searches, explains, revalidates, reviews and archives."""
    with Client(live_daemon.url, live_daemon.token) as client:
        block = client.add({"content": "Sync clients are handy", "title": "sync client"})
        assert client.get(block.id).content == "Sync clients are handy"
        edited = client.update(block.id, {"content": "Sync clients are very handy"})
        assert edited.version == 2
        found = client.search("sync clients handy")
        assert [r["block"]["id"] for r in found["results"]] == [block.id]
        assert client.explain(block.id)
        assert client.revalidate(block.id)["requested"] == []
        assert client.events(block.id) == []
        review = client.request_review(block.id, "check it")
        assert review["status"] == "pending"
        assert review["review_id"] in [r["id"] for r in client.reviews()]
        assert client.review(review["review_id"])["block"]["id"] == block.id
        decided = client.decide(review["review_id"], "confirm", decided_by="carol")
        assert decided["review"]["decided_by"] == "carol"
        assert "/review/login?token=" in client.review_link("carol")
        assert client.ingest([])["accepted"] == 0
        assert isinstance(client.sensors(), list)
        assert 0 <= client.health()["score"] <= 100
        assert isinstance(client.stale(), list)
        assert isinstance(client.follow(0, wait="0s"), list)
        assert client.archive(block.id).state == "archived"


def test_client_errors_map_to_memwarden_errors(live_daemon, tmp_path):
    """404, 422, 401 and an unreachable daemon each raise the matching memwarden error."""
    with Client(live_daemon.url, live_daemon.token) as client:
        with pytest.raises(NotFoundError):
            client.get("missing")
        with pytest.raises(ValidationInputError) as info:
            client.add({"content": "x", "reliability": 2})
        assert info.value.errors[0][0] == "reliability"
    with Client(live_daemon.url, "wrong") as client, pytest.raises(TransportError):
        client.health()
    with Client("http://127.0.0.1:9", "x") as client, pytest.raises(DaemonNotRunningError):
        client.health()


def test_client_finds_url_and_token_in_the_state_dir(live_daemon, monkeypatch):
    """With only MEMWARDEN_HOME set, the client finds api.json and the token itself."""
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    monkeypatch.setenv("MEMWARDEN_HOME", str(live_daemon.home))
    with Client() as client:
        assert client.endpoint.url == live_daemon.url
        assert client.health()["score"] >= 0


async def test_async_client_round_trip(live_daemon):
    """AsyncClient does the same over asyncio."""
    async with AsyncClient(live_daemon.url, live_daemon.token) as client:
        block = await client.add({"content": "Async clients too"})
        assert (await client.get(block.id)).content == "Async clients too"
        assert (await client.update(block.id, {"title": "async"})).title == "async"
        assert (await client.archive(block.id)).state == "archived"
        assert isinstance(await client.stale(), list)
        assert isinstance(await client.sensors(), list)
        assert isinstance(await client.reviews("all"), list)
        assert isinstance(await client.follow(0, wait="0s"), list)
        assert (await client.ingest([]))["accepted"] == 0


def test_no_token_is_a_clear_error(tmp_path, monkeypatch):
    """With no token anywhere, the client says where it looked and what to set."""
    monkeypatch.setenv("MEMWARDEN_HOME", str(tmp_path))
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    with pytest.raises(TransportError, match="no API token"):
        Client()


def test_make_run_state_dir_is_found_from_the_checkout(live_daemon, tmp_path, monkeypatch):
    """Without MEMWARDEN_HOME, a daemon advertising itself in ./.memwarden is found."""
    local = tmp_path / ".memwarden"
    local.mkdir()
    for name in ("api.json", "token"):
        (local / name).write_text((live_daemon.home / name).read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMWARDEN_HOME", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    with Client() as client:
        assert client.health()["score"] >= 0


def _keys_fit(answer, typed) -> None:
    assert (
        typed.__required_keys__
        <= answer.keys()
        <= typed.__required_keys__ | (typed.__optional_keys__)
    ), (typed.__name__, sorted(answer))


def test_typed_answers_list_the_fields_the_api_declares():
    """Each client TypedDict names exactly the fields of the model its route declares, so
    the types cannot drift from the published API."""
    from memwarden.client import _answers  # noqa: PLC0415
    from memwarden.daemon._routes import (  # noqa: PLC0415
        blocks,
        erasure,
        events,
        search,
        suggest,
    )

    for typed, model in [
        (_answers.BindAnswer, blocks.BindAnswer),
        (_answers.SuggestAnswer, suggest.SuggestAnswer),
        (_answers.Suggestion, suggest.Suggestion),
        (_answers.DryRun, suggest.DryRun),
        (_answers.BlockPage, blocks.BlockPage),
        (_answers.RevalidateAnswer, blocks.RevalidateAnswer),
        (_answers.EventsAccepted, events.EventsAccepted),
        (_answers.BelievedAt, search.BelievedAt),
        (_answers.ForgetAnswer, erasure.ForgetAnswer),
        (_answers.Tombstone, erasure.Tombstone),
    ]:
        assert set(typed.__annotations__) == set(model.model_fields), typed.__name__


def test_the_answers_have_the_typed_shapes(live_daemon):
    """What the daemon answers has the keys the client's types promise (optional ones
    only when present): health, liveness, a page, a revalidation, ingest, believed-at."""
    from memwarden.client import (  # noqa: PLC0415
        AddedBlock,
        BelievedAt,
        BindAnswer,
        BlockPage,
        EventsAccepted,
        HealthAnswer,
        Liveness,
        RevalidateAnswer,
        SuggestAnswer,
    )

    with Client(live_daemon.url, live_daemon.token) as client:
        block = client.add({"content": "Typed answers say what they hold"})
        health = client.health()
        _keys_fit(health, HealthAnswer)
        assert health["status"] in ("green", "amber", "red")
        assert all(set(w) == {"category", "severity", "message"} for w in health["warnings"])
        _keys_fit(client.healthz(), Liveness)
        page = client.list_blocks(limit=1)
        _keys_fit(page, BlockPage)
        assert page["next"] == page["blocks"][0].id  # a full page: the cursor is its last id
        _keys_fit(client.revalidate(block.id), RevalidateAnswer)
        _keys_fit(client.ingest([]), EventsAccepted)
        _keys_fit(client.believed_at(block.id, "2100-01-01T00:00:00Z"), BelievedAt)
        added = client.add_with_bind({"content": "Typed answers say how they bound"}, "suggest")
        assert added["block"].bindings == []
        _keys_fit(added, AddedBlock)
        assert added["bind"] is not None
        _keys_fit(added["bind"], BindAnswer)
        assert "index = true" in added["bind"]["why"]  # this daemon's fs sensor has none
        plain = client.add_with_bind({"content": "Typed answers may not bind"}, None)
        assert plain["bind"] is None  # [suggest] bind = none: no bind answer
        _keys_fit(client.suggest_bindings("the timeout is 30 s"), SuggestAnswer)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_clients_bind_a_stored_block(live_daemon, kind):
    """bind replaces a block's bindings ([] unbinds), a refused one raises naming
    bindings.0; auto_bind answers what bind found (here: no index, left unbound)."""
    edge = {"sensor": "edge-files", "path": "conf/app.yaml", "key": "/port", "equals": 80}
    if kind == "sync":
        with Client(live_daemon.url, live_daemon.token) as c:
            block = c.add({"content": f"The {kind} port is 80"})
            bound = c.bind(block.id, [edge])
            with pytest.raises(ValidationInputError) as err:
                c.bind(block.id, [{**edge, "sensor": "nope"}])
            auto = c.auto_bind(block.id)
            cleared = c.bind(block.id, [])
    else:
        async with AsyncClient(live_daemon.url, live_daemon.token) as ac:
            block = await ac.add({"content": f"The {kind} port is 80"})
            bound = await ac.bind(block.id, [edge])
            with pytest.raises(ValidationInputError) as err:
                await ac.bind(block.id, [{**edge, "sensor": "nope"}])
            auto = await ac.auto_bind(block.id)
            cleared = await ac.bind(block.id, [])
    assert [(b.sensor, b.subject) for b in bound.bindings] == [("edge-files", "conf/app.yaml")]
    assert err.value.errors[0][0] == "bindings.0.sensor"
    assert auto["bind"] is not None
    assert auto["bind"]["chosen"] is None
    assert "left unbound" in auto["bind"]["why"]
    assert len(auto["block"].bindings) == 1
    assert cleared.bindings == []
