"""The store's proposals: stored once per (block, kind, proposal), gone with their block,
and a decision that cannot apply changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from memwarden.errors import NotFoundError, ValidationInputError, VersionConflictError
from memwarden.memory import Binding, NewProposal

if TYPE_CHECKING:
    from memwarden.memory import Store


async def test_a_proposal_is_made_once_and_leaves_with_its_block(store: Store):
    fact = await store.add({"content": "The API timeout is 30 s"})
    binding = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
    new = NewProposal(fact.id, "binding", binding, 0.9, "the key matches timeout")
    assert await store.add_proposals([new, new]) == 1
    assert await store.add_proposals([new]) == 0  # made before
    assert await store.add_proposals([NewProposal("no-such", "binding", binding, 0.9, "")]) == 0
    [stored] = await store.list_proposals(block_id=fact.id)
    assert (stored.kind, stored.proposal, stored.status) == ("binding", binding, "pending")
    await store.delete(fact.id, reason="test")
    assert await store.list_proposals(status="all") == []
    async with store.db.read() as conn:  # the rows themselves, not only the listing
        assert list(await conn.execute_fetchall("SELECT count(*) FROM proposals")) == [(0,)]
    with pytest.raises(NotFoundError):
        await store.get_proposal(stored.id)


async def test_accepting_a_dependency_on_a_deleted_fact_is_refused(store: Store):
    fact = await store.add({"content": "Clients give up after 30 s"})
    other = await store.add({"content": "The API timeout is 30 s"})
    await store.add_proposals(
        [NewProposal(fact.id, "depends_on", {"depends_on": other.id}, 0.8, "same file")]
    )
    [proposal] = await store.list_proposals()
    await store.delete(other.id, reason="test")
    with pytest.raises(ValidationInputError, match="no block"):
        await store.decide_proposal(proposal.id, accept=True, actor="ann")
    assert (await store.get_proposal(proposal.id)).status == "pending"
    assert (await store.get(fact.id)).depends_on == []
    await store.add_proposals([NewProposal(fact.id, "binding", {"sensor": "fs"}, 0.5, "")])
    [bind] = [p for p in await store.list_proposals() if p.kind == "binding"]
    with pytest.raises(ValidationInputError, match="needs its binding"):  # unchecked by a sensor
        await store.decide_proposal(bind.id, accept=True, actor="ann")
    assert (await store.get(fact.id)).bindings == []
    rejected = await store.decide_proposal(proposal.id, accept=False, actor="ann")
    assert (rejected.status, rejected.decided_by) == ("rejected", "ann")


async def test_proposals_of_an_archived_fact_are_retired(store: Store):
    """Archived (or refuted) since: its pending proposals become obsolete, the others stay."""
    gone = await store.add({"content": "The API timeout is 30 s"})
    kept = await store.add({"content": "The database host is db.internal"})
    binding = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
    await store.add_proposals(
        [
            NewProposal(gone.id, "binding", binding, 0.9, "timeout"),
            NewProposal(kept.id, "binding", {**binding, "key": "/db/host"}, 0.9, "host"),
        ]
    )
    assert await store.retire_proposals() == 0
    await store.archive(gone.id, reason="test")
    assert await store.retire_proposals() == 1
    assert [p.status for p in await store.list_proposals(block_id=gone.id, status="all")] == [
        "obsolete"
    ]
    assert [p.status for p in await store.list_proposals(block_id=kept.id)] == ["pending"]


async def test_erasing_a_fact_erases_its_proposals_and_those_naming_it(store: Store):
    """forget: the erased fact's proposals (a binding's expected value can be its content)
    and the depends_on proposals of other facts that name it leave with it."""
    erased = await store.add({"content": "The API timeout is 30 s"})
    other = await store.add({"content": "Clients give up after 30 s"})
    binding = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
    await store.add_proposals(
        [
            NewProposal(erased.id, "binding", binding, 0.9, "the key matches timeout"),
            NewProposal(other.id, "depends_on", {"depends_on": erased.id}, 0.8, "same file"),
            NewProposal(other.id, "binding", binding, 0.7, "kept"),
        ]
    )
    await store.erase([erased.id], actor="test", reason="asked")
    [left] = await store.list_proposals(status="all")
    assert (left.block_id, left.kind) == (other.id, "binding")


async def test_accepting_a_binding_is_a_new_version(store: Store):
    """An accepted binding changes the block's bindings: a new version (history keeps the
    old one), so an If-Match edit based on the version before it is refused."""
    fact = await store.add({"content": "The API timeout is 30 s"})
    raw = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
    await store.add_proposals([NewProposal(fact.id, "binding", raw, 0.9, "the key matches")])
    [proposal] = await store.list_proposals()
    await store.decide_proposal(
        proposal.id, accept=True, actor="ann", binding=Binding.model_validate(raw)
    )
    bound = await store.get(fact.id)
    assert (bound.version, len(bound.bindings)) == (fact.version + 1, 1)
    [old] = await store.versions(fact.id)
    assert (old["version"], old["content"], old["replaced_by"]) == (1, fact.content, "ann")
    with pytest.raises(VersionConflictError):
        await store.update(fact.id, {"bindings": []}, expected_version=fact.version)
