"""Agents and namespaces (issue 19, item 4), through a running daemon over HTTP.

Two agents share one daemon: ``alpha`` (namespace ``alpha``) and ``beta`` (namespace
``beta``); ``reader`` may only read ``alpha``; ``keeper`` reads and writes ``alpha`` but
may not forget. Each hostile request asserts the refusal (404 for another namespace's
block, never 403: its existence is not told; 403 naming the operation an agent lacks;
401 for a token not configured) and that nothing changed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from memwarden.client import AsyncClient
from memwarden.daemon import Daemon, load_settings
from memwarden.daemon._callers import Callers, load_callers
from memwarden.errors import ConfigError, NotFoundError, TransportError
from memwarden.plugins import Registry
from tests.support import start_in_loop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


def _token_file(directory: Path, name: str) -> tuple[Path, str]:
    token = secrets.token_urlsafe(32)
    path = directory / f"{name}.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return path, token


@dataclass
class Agents:
    daemon: Daemon
    url: str
    tokens: dict[str, str]

    def client(self, agent: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[agent]}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10)

    async def count(self) -> int:
        return int((await self.daemon.store.counts())["blocks"])


@pytest.fixture
async def agents(tmp_path: Path) -> AsyncIterator[Agents]:
    """A daemon with the default token and four named agents (tokens in 0600 files)."""
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    files = {name: _token_file(secrets_dir, name) for name in ("alpha", "beta", "reader", "keeper")}
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "home",
        api={"port": 0},
        sensors={},
        privacy={"profiles": {"strict": {"email": "reject"}}},
        agents={
            "alpha": {"token_file": str(files["alpha"][0]), "namespaces": ["alpha"]},
            "beta": {
                "token_file": str(files["beta"][0]),
                "namespaces": ["beta"],
                "privacy_profile": "strict",
            },
            "reader": {
                "token_file": str(files["reader"][0]),
                "namespaces": ["alpha"],
                "operations": ["read"],
            },
            "keeper": {
                "token_file": str(files["keeper"][0]),
                "namespaces": ["alpha", "shared"],
                "operations": ["read", "write"],
            },
        },
    )
    daemon = Daemon(settings, registry=Registry.from_classes({}))
    task = await start_in_loop(daemon, timeout_s=20)
    home = settings.home
    url = json.loads((home / "api.json").read_text())["url"]
    tokens = {name: token for name, (_, token) in files.items()}
    tokens["default"] = (home / "token").read_text().strip()
    try:
        yield Agents(daemon, url, tokens)
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, timeout=20)


async def _add(client: httpx.AsyncClient, content: str, **extra: Any) -> dict[str, Any]:
    answer = await client.post("/v1/blocks", json={"content": content, **extra})
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _not_found(answer: httpx.Response) -> None:
    assert answer.status_code == 404, answer.text
    assert "Traceback" not in answer.text


async def test_agent_b_cannot_read_search_edit_forget_or_count_agent_a_facts(agents):
    """Every door beta knocks on for alpha's fact answers 404 (or nothing), and alpha's
    fact is unchanged afterwards: same version, content, access count, not erased."""
    marker = f"m{uuid.uuid4().hex[:10]}"
    tag = f"t{uuid.uuid4().hex[:8]}"
    async with agents.client("alpha") as alpha, agents.client("beta") as beta:
        fact = await _add(alpha, f"alpha secret {marker}", tags=[tag])
        assert fact["namespace"] == "alpha"
        mine = await _add(beta, "beta's own fact")
        assert mine["namespace"] == "beta"
        fid, short = fact["id"], fact["short_id"]
        before = await agents.daemon.store.get(fid)
        health_before = (await beta.get("/v1/health")).json()["counts"]

        for ref in (fid, short):
            _not_found(await beta.get(f"/v1/blocks/{ref}"))
        _not_found(await beta.get(f"/v1/blocks/{fid}", params={"as_of": "2030-01-01T00:00:00"}))
        _not_found(await beta.get(f"/v1/blocks/{fid}/events"))
        _not_found(await beta.get(f"/v1/blocks/{fid}/explain"))
        _not_found(await beta.patch(f"/v1/blocks/{fid}", json={"content": "hijacked"}))
        _not_found(await beta.patch(f"/v1/blocks/{fid}", json={"bindings": []}))
        _not_found(await beta.post(f"/v1/blocks/{fid}/bind", json={"bind": "auto"}))
        _not_found(await beta.delete(f"/v1/blocks/{fid}"))
        _not_found(await beta.delete(f"/v1/blocks/{fid}", params={"erase": "true"}))
        _not_found(await beta.post(f"/v1/blocks/{fid}/revalidate"))
        _not_found(await beta.post(f"/v1/blocks/{fid}/review", json={"reason": "look"}))
        _not_found(await beta.post("/v1/forget", json={"ids": [fid]}))
        by_tag = await beta.post("/v1/forget", json={"tag": tag})
        assert by_tag.status_code == 200, by_tag.text
        assert by_tag.json()["erased"] == []
        by_words = await beta.post("/v1/forget", json={"query": marker, "dry_run": True})
        assert by_words.json()["blocks"] == []
        found = await beta.get("/v1/search", params={"q": marker, "session": "s1"})
        assert found.status_code == 200
        assert found.json()["results"] == []
        as_of = await beta.get("/v1/search", params={"q": marker, "as_of": "2030-01-01"})
        assert as_of.json()["believed"] == []
        listed = (await beta.get("/v1/blocks", params={"limit": 1000})).json()["blocks"]
        assert [b["id"] for b in listed] == [mine["id"]]
        assert (await beta.get("/v1/blocks", params={"tag": tag})).json()["blocks"] == []
        depends = await beta.post("/v1/blocks", json={"content": "leans", "depends_on": [fid]})
        assert depends.status_code == 422, depends.text
        assert depends.json()["detail"][0]["loc"] == ["depends_on", "0"]

        health = (await beta.get("/v1/health")).json()
        assert health["counts"]["blocks"] == 1 == health_before["blocks"]
        assert health["coverage"]["live"] == 1

    after = await agents.daemon.store.get(fid)
    assert after.version == before.version
    assert after.content == f"alpha secret {marker}"
    assert after.state == before.state
    assert after.access_count == before.access_count  # beta's search reinforced nothing
    assert (await agents.daemon.store.erasures(block_id=fid, limit=10)) == []


async def test_agent_sees_its_own_namespace_and_the_default_token_sees_all(agents):
    """alpha finds its fact by search, id and listing; the default token (every
    namespace, as before agents) finds both alpha's and beta's."""
    word = f"w{uuid.uuid4().hex[:10]}"
    async with (
        agents.client("alpha") as alpha,
        agents.client("beta") as beta,
        agents.client("default") as owner,
    ):
        a = await _add(alpha, f"alpha says {word}")
        b = await _add(beta, f"beta says {word}")
        hits = (await alpha.get("/v1/search", params={"q": word})).json()["results"]
        assert [h["block"]["id"] for h in hits] == [a["id"]]
        assert (await alpha.get(f"/v1/blocks/{a['short_id']}")).status_code == 200
        every = (await owner.get("/v1/search", params={"q": word})).json()["results"]
        assert {h["block"]["id"] for h in every} == {a["id"], b["id"]}
        plain = await _add(owner, "the owner's fact")
        assert plain["namespace"] == "default"
        owner_health = (await owner.get("/v1/health")).json()["counts"]["blocks"]
        assert owner_health == await agents.count()
        assert (await owner.get("/v1/events")).status_code == 200


async def test_search_by_one_agent_never_reinforces_another_namespace(agents):
    """Same words in both namespaces: beta's searches (with sessions, which feed
    promotion) count accesses on beta's block only."""
    word = f"r{uuid.uuid4().hex[:10]}"
    async with agents.client("alpha") as alpha, agents.client("beta") as beta:
        a = await _add(alpha, f"shared words {word}")
        b = await _add(beta, f"shared words {word}")
        for i in range(3):
            hits = await beta.get("/v1/search", params={"q": word, "session": f"s{i}"})
            assert [h["block"]["id"] for h in hits.json()["results"]] == [b["id"]]
    assert (await agents.daemon.store.get(a["id"])).access_count == 0
    assert (await agents.daemon.store.get(b["id"])).access_count == 3


async def test_dedupe_never_answers_with_another_namespace_block(agents):
    """A duplicate in another namespace is not a duplicate: beta's add is stored as its own."""
    text = f"the same fact {uuid.uuid4().hex[:8]}"
    async with agents.client("alpha") as alpha, agents.client("beta") as beta:
        a = await _add(alpha, text)
        answer = await beta.post("/v1/blocks", params={"dedupe": "true"}, json={"content": text})
        assert answer.status_code == 201, answer.text
        assert answer.json()["id"] != a["id"]
        assert answer.json()["namespace"] == "beta"
        again = await alpha.post("/v1/blocks", params={"dedupe": "true"}, json={"content": text})
        assert again.status_code == 200
        assert again.json()["duplicate_of"] == a["id"]


async def test_read_only_agent_cannot_write_and_nothing_is_applied(agents):
    """reader reads alpha's facts; every write is 403 naming the operation, and the
    store holds the same blocks, unchanged, afterwards."""
    async with agents.client("alpha") as alpha, agents.client("reader") as reader:
        fact = await _add(alpha, "alpha's fact the reader may read")
        fid = fact["id"]
        assert (await reader.get(f"/v1/blocks/{fid}")).status_code == 200
        count = await agents.count()
        refusals = {
            "write": [
                await reader.post("/v1/blocks", json={"content": "not allowed"}),
                await reader.patch(f"/v1/blocks/{fid}", json={"content": "not allowed"}),
                await reader.delete(f"/v1/blocks/{fid}"),
                await reader.post(f"/v1/blocks/{fid}/revalidate"),
            ],
            "forget": [
                await reader.post("/v1/forget", json={"ids": [fid]}),
            ],
            "admin": [
                await reader.get("/v1/export"),
                await reader.get("/metrics"),
                await reader.post("/v1/review-links", json={"reviewer": "mallory"}),
            ],
            "review": [
                await reader.post(
                    "/v1/reviews/0190abcd-0000-7000-8000-000000000000/decision",
                    json={"decision": "confirm", "decided_by": "mallory"},
                ),
            ],
            "report": [await reader.post("/v1/events", json=[])],
        }
        for operation, answers in refusals.items():
            for answer in answers:
                assert answer.status_code == 403, (operation, answer.text)
                detail = answer.json()["detail"]
                assert f"may not {operation}" in detail
                assert "'reader'" in detail
    assert await agents.count() == count
    block = await agents.daemon.store.get(fid)
    assert (block.version, block.content, block.state) == (1, fact["content"], fact["state"])


async def test_agent_without_forget_cannot_erase(agents):
    """keeper may write but not forget: DELETE ?erase=true and POST /v1/forget are 403
    and the block stays; a plain DELETE (archive) is allowed."""
    async with agents.client("keeper") as keeper:
        fact = await _add(keeper, "keeper keeps this")
        erase = await keeper.delete(f"/v1/blocks/{fact['id']}", params={"erase": "true"})
        assert erase.status_code == 403
        assert "may not forget" in erase.json()["detail"]
        forget = await keeper.post("/v1/forget", json={"ids": [fact["id"]]})
        assert forget.status_code == 403
        assert (await agents.daemon.store.get(fact["id"])).content == "keeper keeps this"
        archived = await keeper.delete(f"/v1/blocks/{fact['id']}")
        assert archived.json()["state"] == "archived"


async def test_namespace_on_add_is_one_of_the_agents_own(agents):
    """keeper may put a block in its second namespace; naming another is 403 and
    stores nothing; a malformed name is 422 naming the field."""
    async with agents.client("keeper") as keeper, agents.client("beta") as beta:
        shared = await _add(keeper, "in the shared namespace", namespace="shared")
        assert shared["namespace"] == "shared"
        count = await agents.count()
        other = await keeper.post("/v1/blocks", json={"content": "sneak", "namespace": "beta"})
        assert other.status_code == 403
        assert "may not write namespace 'beta'" in other.json()["detail"]
        bad = await keeper.post("/v1/blocks", json={"content": "x", "namespace": "../Beta"})
        assert bad.status_code == 422
        assert bad.json()["detail"][0]["loc"][-1] == "namespace"
        assert await agents.count() == count
        _not_found(await beta.get(f"/v1/blocks/{shared['id']}"))


async def test_tokens_not_configured_are_refused(agents):
    """A token no agent holds, an agent's token with a byte changed, or none: 401, and
    the body is never read (nothing stored)."""
    count = await agents.count()
    wrong = agents.tokens["alpha"][:-1] + ("A" if agents.tokens["alpha"][-1] != "A" else "B")
    async with httpx.AsyncClient(base_url=agents.url, timeout=10) as anon:
        for headers in (
            {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"},
            {"Authorization": f"Bearer {wrong}"},
            {"Authorization": "Bearer"},
            {},
        ):
            answer = await anon.post("/v1/blocks", json={"content": "nope"}, headers=headers)
            assert answer.status_code == 401, headers
    assert await agents.count() == count


async def test_scoped_agent_gets_its_session_notices_but_not_the_whole_event_log(agents):
    """The event log spans every namespace: 403 to an agent of some namespaces; its own
    session's notices are allowed."""
    async with agents.client("beta") as beta:
        log = await beta.get("/v1/events")
        assert log.status_code == 403
        assert "event log" in log.json()["detail"]
        notices = await beta.get("/v1/events", params={"session": "mine"})
        assert notices.status_code == 200
        assert notices.json() == []


async def test_reviews_and_proposals_of_another_namespace_are_not_found(agents):
    """alpha's review item is not listed to beta, and is 404 to read or decide."""
    async with agents.client("alpha") as alpha, agents.client("beta") as beta:
        fact = await _add(alpha, "alpha wants a review")
        item = await alpha.post(f"/v1/blocks/{fact['id']}/review", json={"reason": "check"})
        assert item.status_code == 200, item.text
        review_id = item.json()["review_id"]
        assert review_id in {r["id"] for r in (await alpha.get("/v1/reviews")).json()}
        assert (await beta.get("/v1/reviews")).json() == []
        _not_found(await beta.get(f"/v1/reviews/{review_id}"))
        decide = await beta.post(
            f"/v1/reviews/{review_id}/decision",
            json={"decision": "reject", "decided_by": "mallory"},
        )
        _not_found(decide)
        assert (await beta.get("/v1/proposals", params={"status": "all"})).json() == {
            "proposals": []
        }
        _not_found(await beta.get("/v1/proposals", params={"block_id": fact["id"]}))
    pending = await agents.daemon.store.list_reviews(status="pending")
    assert review_id in {r["id"] for r in pending}


# ------------------------------------------------------------------ configuration


def _settings(tmp_path: Path, agents: dict[str, Any], **more: Any) -> Any:
    return load_settings(None, env={}, home=tmp_path / "home", agents=agents, **more)


def test_agents_config_refuses_tokens_in_the_wrong_place(tmp_path):
    """No token source, both sources, a source for the default agent, an unknown
    operation, a bad namespace or agent name: each a ConfigError naming the key."""
    cases = {
        "needs token_file or token_env": {"x": {}},
        "not both": {"x": {"token_file": "/a", "token_env": "A"}},
        "takes no token_file": {"default": {"token_file": "/a"}},
        "operations": {"x": {"token_env": "A", "operations": ["read", "sudo"]}},
        "namespaces": {"x": {"token_env": "A", "namespaces": ["Bad Name"]}},
        "agent name": {"Bad": {"token_env": "A"}},
        "stands alone": {"x": {"token_env": "A", "namespaces": ["*", "a"]}},
    }
    for words, agents in cases.items():
        with pytest.raises(ConfigError) as err:
            _settings(tmp_path, agents)
        problems = " ".join(err.value.problems)
        assert words in problems, (words, problems)


def test_agent_tokens_from_env_and_file_are_checked(tmp_path):
    """token_env unset or short, a token file with loose permissions, two agents with one
    token: refused at start, naming the agent; a good set loads."""
    token = secrets.token_urlsafe(32)
    default = secrets.token_urlsafe(32)
    loose = tmp_path / "loose.token"
    loose.write_text(token)
    loose.chmod(0o644)
    settings = _settings(tmp_path, {"x": {"token_env": "X_TOKEN"}})
    with pytest.raises(ConfigError, match=r"agents\.x\.token_env"):
        load_callers(settings, default, {})
    with pytest.raises(ConfigError, match=r"agents\.x\.token_env"):
        load_callers(settings, default, {"X_TOKEN": "short"})
    with pytest.raises(ConfigError, match=r"agents\.y\.token_file.*0644"):
        load_callers(_settings(tmp_path, {"y": {"token_file": str(loose)}}), default, {})
    twins = _settings(tmp_path, {"x": {"token_env": "X"}, "y": {"token_env": "Y"}})
    with pytest.raises(ConfigError, match="share one token"):
        load_callers(twins, default, {"X": token, "Y": token})
    callers = load_callers(settings, default, {"X_TOKEN": token})
    assert isinstance(callers, Callers)
    assert callers.names == ["default", "x"]
    x = callers.match(f"Bearer {token}")
    assert x is not None
    assert (x.name, x.scope(), x.home_namespace) == ("x", ["default"], "default")
    owner = callers.match(f"bearer {default}")
    assert owner is not None
    assert owner.scope() is None
    assert owner.may("forget")
    assert callers.match(f"Basic {token}") is None
    assert callers.match(None) is None


def test_default_agent_can_be_narrowed_and_profiles_are_named(tmp_path):
    """[agents.default] narrows the state dir's token; privacy_profile_for answers the
    agent's profile name (the hook the redaction policy uses)."""
    from memwarden.daemon._callers import privacy_profile_for  # noqa: PLC0415

    settings = _settings(
        tmp_path,
        {"default": {"operations": ["read"], "namespaces": ["*"], "privacy_profile": "strict"}},
        privacy={"profiles": {"strict": {"email": "reject"}}},
    )
    callers = load_callers(settings, "d" * 40, {})
    owner = callers.match("Bearer " + "d" * 40)
    assert owner is not None
    assert not owner.may("write")
    assert owner.scope() is None
    assert privacy_profile_for(owner) == "profile:strict"
    with pytest.raises(ConfigError) as err:
        _settings(tmp_path, {"x": {"token_env": "A", "privacy_profile": "lax"}})
    assert "agents.x.privacy_profile: 'lax' is not a profile" in " ".join(err.value.problems)


async def test_the_python_client_carries_an_agents_token_and_namespace(agents):
    """AsyncClient with keeper's token: a block added with a namespace lands there; the
    read-only agent's client gets a clear error naming the operation, nothing stored."""
    async with AsyncClient(agents.url, agents.tokens["keeper"]) as keeper:
        block = await keeper.add({"content": "via the client", "namespace": "shared"})
        assert block.namespace == "shared"
        assert (await keeper.get(block.id)).id == block.id
    count = await agents.count()
    async with AsyncClient(agents.url, agents.tokens["reader"]) as reader:
        with pytest.raises(TransportError, match="may not write"):
            await reader.add({"content": "refused"})
        with pytest.raises(NotFoundError):
            await reader.get(block.id)  # reader is of alpha only: shared is not its own
    assert await agents.count() == count


async def test_an_agents_privacy_profile_judges_what_it_writes(agents):
    """beta's profile rejects e-mail addresses: its add, edit and review reason with one
    are 422 naming the rule, nothing stored; alpha (no profile) gets the placeholder."""
    mail = "ann.example@example.org"
    async with agents.client("alpha") as alpha, agents.client("beta") as beta:
        stored = await _add(alpha, f"the owner is {mail}")
        assert mail not in stored["content"]
        assert "[email:" in stored["content"]
        count = await agents.count()
        refused = await beta.post("/v1/blocks", json={"content": f"the owner is {mail}"})
        assert refused.status_code == 422, refused.text
        assert "email" in refused.text
        assert await agents.count() == count
        own = await _add(beta, "the owner is on leave")
        edited = await beta.patch(f"/v1/blocks/{own['id']}", json={"content": f"ask {mail}"})
        assert edited.status_code == 422, edited.text
        asked = await beta.post(f"/v1/blocks/{own['id']}/review", json={"reason": f"ask {mail}"})
        assert asked.status_code == 422, asked.text
        after = (await beta.get(f"/v1/blocks/{own['id']}")).json()
        assert (after["content"], after["version"]) == ("the owner is on leave", own["version"])


async def test_only_an_admin_agent_changes_the_privacy_policy(agents):
    """The policy applies to every agent and a PUT is kept across restarts: a reader or a
    writer without ``admin`` is refused (403 naming it), nothing changes and nothing is
    kept; the owner's token (every operation) may."""
    home = agents.daemon.settings.home
    async with agents.client("keeper") as keeper, agents.client("reader") as reader:
        before = (await reader.get("/v1/privacy")).json()
        loose = {**before["policy"], "enabled": False}
        for client in (keeper, reader):
            for answer in (
                await client.put("/v1/privacy", json=loose),
                await client.delete("/v1/privacy"),
            ):
                assert answer.status_code == 403, answer.text
                assert "may not admin" in answer.json()["detail"]
    assert agents.daemon.privacy.policy.enabled is True
    assert not (home / "privacy.policy.json").exists()
    async with agents.client("default") as owner:
        answer = await owner.put("/v1/privacy", json=loose)
    assert answer.status_code == 200, answer.text
    assert (home / "privacy.policy.json").exists()
