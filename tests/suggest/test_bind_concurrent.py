"""``POST /v1/blocks/{id}/bind`` against concurrent changes: the binding is added by
compare-and-set on the block's version, so two binds at once both land, and a text edited
while the binding was looked for answers 409 with nothing bound. A change of bindings is a
new version (an If-Match edit based on the version before it is refused)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.client import AsyncClient
from memwarden.daemon._suggest import Suggested, Suggestions
from memwarden.errors import AmbiguousIdError, VersionConflictError

if TYPE_CHECKING:
    from tests.suggest.conftest import Api

APP = "config/app.yaml"
TIMEOUT = {"sensor": "fs", "path": APP, "key": "/http/timeout", "equals": 30}
PORT = {"sensor": "fs", "path": APP, "key": "/http/port", "equals": 8080}
WAIT_S = 10.0
CONFIRMED = {"outcome": "confirmed", "observed": None, "message": ""}


class HeldSuggestions:
    """Stands for the suggestion search: the ``n``-th call suggests ``bindings[n]``, and
    every call waits until the test releases them (all ``expected`` calls have read their
    block by then: the route reads it before it searches)."""

    def __init__(self, bindings: list[dict[str, Any]], expected: int) -> None:
        self.bindings = bindings
        self.expected = expected
        self.calls = 0
        self.all_in = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, runners: Any, text: str, *, limit: int = 5) -> Suggestions:
        binding = self.bindings[self.calls]
        self.calls += 1
        if self.calls == self.expected:
            self.all_in.set()
        await self.release.wait()
        found = Suggested(binding, 0.99, "held by the test", CONFIRMED, APP)
        return Suggestions(suggestions=[found], searched=["fs"])


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(bindings: list[dict[str, Any]], expected: int) -> HeldSuggestions:
        fake = HeldSuggestions(bindings, expected)
        monkeypatch.setattr("memwarden.daemon._routes.blocks.suggest_bindings", fake)
        return fake

    return make


async def test_two_concurrent_binds_both_land(api: Api, held: Any):
    """Both binds read the unbound block before either writes: the second one's
    compare-and-set fails, it reads the block again and adds its binding to the first's."""
    block = await api.post("/v1/blocks", {"content": "timeout 30, port 8080"}, status=201)
    gate = held([TIMEOUT, PORT], expected=2)
    url = f"/v1/blocks/{block['id']}/bind"
    first = asyncio.create_task(api.client.post(url, json={"bind": "auto"}))
    second = asyncio.create_task(api.client.post(url, json={"bind": "auto"}))
    await asyncio.wait_for(gate.all_in.wait(), WAIT_S)
    gate.release.set()
    answers = await asyncio.gather(first, second)
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    stored = await api.daemon.store.get(block["id"])
    assert sorted(b.selector["key"] for b in stored.bindings) == ["/http/port", "/http/timeout"]
    assert stored.version == block["version"] + 2  # each change of bindings a version
    assert stored.content == block["content"]


async def test_a_text_edited_while_binding_answers_409_and_binds_nothing(api: Api, held: Any):
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    gate = held([TIMEOUT], expected=1)
    bind = asyncio.create_task(
        api.client.post(f"/v1/blocks/{block['id']}/bind", json={"bind": "auto"})
    )
    await asyncio.wait_for(gate.all_in.wait(), WAIT_S)
    edited = await api.client.patch(
        f"/v1/blocks/{block['id']}", json={"content": "The API timeout is 45 s"}
    )
    assert edited.status_code == 200, edited.text
    gate.release.set()
    answer = await bind
    assert answer.status_code == 409, answer.text
    assert "edited while its binding was looked for" in answer.json()["detail"]
    stored = await api.daemon.store.get(block["id"])
    assert stored.bindings == []
    assert stored.version == edited.json()["version"]


async def test_a_change_of_bindings_is_a_new_version_if_match_sees(api: Api):
    """PATCH with If-Match of the version read before a bind is refused (412): it would
    have dropped the binding. The old version is in the history with the same text."""
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    read = await api.client.get(f"/v1/blocks/{block['id']}")
    etag = read.headers["ETag"]
    bound = await api.post(f"/v1/blocks/{block['id']}/bind", {"bind": "auto"})
    assert bound["bind"]["chosen"] is not None, bound["bind"]["why"]
    assert bound["version"] == block["version"] + 1
    stale = await api.client.patch(
        f"/v1/blocks/{block['id']}", json={"bindings": []}, headers={"If-Match": etag}
    )
    assert stale.status_code == 412, stale.text
    assert stale.headers["ETag"] == f'"{bound["version"]}"'
    assert len((await api.daemon.store.get(block["id"])).bindings) == 1
    versions = await api.daemon.store.versions(block["id"])
    assert [(v["version"], v["content"]) for v in versions] == [
        (block["version"], block["content"])
    ]


async def test_the_python_client_says_version_conflict_not_ambiguous_id(api: Api, held: Any):
    """The 409 of a bind whose block was edited meanwhile reaches a client as
    VersionConflictError with the block's version; an ambiguous short id stays
    AmbiguousIdError."""
    block = await api.post("/v1/blocks", {"content": "The API timeout is 30 s"}, status=201)
    gate = held([TIMEOUT], expected=1)
    token = (api.daemon.settings.home / "token").read_text().strip()
    async with AsyncClient(str(api.client.base_url), token) as client:
        bind = asyncio.create_task(client.auto_bind(block["id"]))
        await asyncio.wait_for(gate.all_in.wait(), WAIT_S)
        await client.update(block["id"], {"content": "The API timeout is 45 s"})
        gate.release.set()
        with pytest.raises(VersionConflictError) as caught:
            await bind
        assert caught.value.current == block["version"] + 1
        assert not isinstance(caught.value, AmbiguousIdError)
