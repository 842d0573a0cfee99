"""Proposals (add, list, get, decide, retire) and the suggestion pass's reads
(``unbound_live``, ``bound_to``) as a contract both backends keep: the same script with the
same ids and clock on SQLite (the Store) and on PostgreSQL (``PgProposals``) gives equal
answers and errors and leaves equal rows (proposals, bindings, blocks, history,
dependencies, audit); accepting a binding makes a new version, so an edit of the version
before is refused; one proposal decided at once by ten callers is decided once."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import MemwardenError, ValidationInputError
from memwarden.memory import Binding, NewProposal
from tests.pg.parts import Backend, backend_fixtures, same_ids

if TYPE_CHECKING:
    from collections.abc import Awaitable


START = 1_767_225_600.0  # 2026-01-01Z
TABLES = {
    "proposals": (
        (
            "id, block_rid, kind, key, proposal, confidence, why, status, created_at,"
            " decided_at, decided_by"
        ),
        "id",
    ),
    "bindings": ("block_rid, sensor, subject, selector, created_at", "id"),
    "blocks": ("rid, id, state, version, updated_at", "rid"),
    "block_history": ("block_id, version, content, replaced_at, replaced_by", "1, 2"),
    "dependencies": ("depends_on, block_rid", "1, 2"),
    "audit": ("at, actor, action, block_id, detail", "id"),
    "retention_points": ("block_rid, at, state", "1, 2"),
}
TIMEOUT = {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}


sqlite_backend, pg_backend, backend = backend_fixtures(TABLES, START)


async def _outcome(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except MemwardenError as err:
        fields = err.errors if isinstance(err, ValidationInputError) else None
        return (type(err).__name__, str(err), fields)


async def script(  # noqa: PLR0915 - one script, read top to bottom
    b: Backend, monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    """Proposals made (twice, for unknown blocks, with hostile reasons), listed, decided
    (accepted, rejected, refused), retired; the unbound blocks and the bound ones."""
    same_ids(monkeypatch)
    s, c, log = b.api, b.clock, []

    async def step(call: Awaitable[Any]) -> Any:
        result = await _outcome(call)
        log.append(result)
        c.advance(7)
        return result

    fact, rests, target, gone, elsewhere, bound = await s.add_many(
        [
            {"content": "The API timeout is 30 s"},
            {"content": "Clients give up after 30 s"},
            {"content": "The timeout lives in config/app.yaml"},
            {"content": "Soon archived"},
            {"content": "Another project's timeout", "namespace": "elsewhere"},
            {
                "content": "Bound already",
                "bindings": [{"sensor": "fs", "subject": "config/app.yaml"}],
            },
        ]
    )
    c.advance(60)
    binding = NewProposal(fact, "binding", TIMEOUT, 0.91234, "the key matches «timeout» 🐘")
    other = NewProposal(fact, "binding", {**TIMEOUT, "equals": 31}, 0.5, "'; DROP TABLE x; --")
    await step(
        s.add_proposals(
            [
                binding,
                binding,  # twice in one call: stored once
                other,
                NewProposal(rests, "depends_on", {"depends_on": target}, 0.8, "same file"),
                NewProposal(rests, "depends_on", {"depends_on": gone}, 0.7, "nul \x00 why \ud800"),
                NewProposal(gone, "binding", TIMEOUT, 0.6, "w" * 5000),  # why kept to 1000
                NewProposal(elsewhere, "binding", {**TIMEOUT, "k": "\x00"}, 0.6, ""),
                NewProposal(bound, "binding", TIMEOUT, 0.6, "bound since"),
                NewProposal("0190a0b0-0000-7000-8000-00000000dead", "binding", TIMEOUT, 0.9, ""),
                NewProposal("a\x00b", "binding", TIMEOUT, 0.9, ""),
            ]
        )
    )
    await step(s.add_proposals([binding]))  # made before
    await step(s.add_proposals([]))
    await step(s.list_proposals())
    await step(s.list_proposals(status="all", limit=2))
    await step(s.list_proposals(block_id=rests))
    await step(s.list_proposals(block_id="a\x00b"))
    await step(s.list_proposals(namespaces=["elsewhere"]))
    await step(s.list_proposals(namespaces=[]))
    await step(s.list_proposals(namespaces=["\x00", "'; --"]))
    await step(s.list_proposals(status="weird\x00"))  # type: ignore[arg-type]
    await step(s.list_proposals(limit=-1))
    ids = {(p.block_id, p.kind, p.proposal.get("equals")): p.id for p in await s.list_proposals()}
    await step(s.get_proposal(ids[fact, "binding", 30]))
    await step(s.get_proposal("0190a0b0-0000-7000-8000-00000000dead"))
    await step(s.get_proposal("a\x00b"))
    await step(s.get_proposal("' OR 1=1; --"))
    # Refused decisions change nothing.
    accept_timeout = ids[fact, "binding", 30]
    await step(s.decide_proposal(accept_timeout, accept=True, actor="ann"))  # no binding
    await step(s.decide_proposal(accept_timeout, accept=True, actor="ann\x00", binding=None))
    await step(s.decide_proposal("a\x00b", accept=False, actor="ann"))
    await step(s.decide_proposal("0190a0b0-0000-7000-8000-00000000dead", accept=False, actor="a"))
    await s.delete(gone, reason="test")
    await step(s.decide_proposal(ids[rests, "depends_on", None], accept=True, actor="ann"))
    # Accepted and rejected: a binding (a new version; the other binding proposal is
    # moot), a dependency; a second decision; an edit of the version before the binding.
    await step(
        s.decide_proposal(
            accept_timeout, accept=True, actor="ann " * 40, binding=Binding.model_validate(TIMEOUT)
        )
    )
    await step(s.decide_proposal(accept_timeout, accept=False, actor="bob"))
    await step(s.update(fact, {"content": "The API timeout is 45 s"}, expected_version=1))
    await step(s.decide_proposal(ids[elsewhere, "binding", 30], accept=False, actor="'; --"))
    await step(s.list_proposals(status="all"))
    # Retired: the bound block's binding proposal; an archived block's.
    await step(s.retire_proposals())
    await s.archive(rests, reason="test")
    await step(s.retire_proposals())
    await step(s.retire_proposals())
    await step(s.list_proposals(status="all"))
    await step(s.unbound_live())
    await step(s.unbound_live(after_rid=2, limit=1))
    await step(s.unbound_live(limit=-1))
    await step(s.unbound_live(after_rid=10**12))
    subjects = [
        ("fs", "config/app.yaml"),
        ("fs", "config/app.yaml"),
        ("fs", "none"),
        ("fs", "\x00"),
    ]
    await step(s.bound_to(subjects))
    await step(s.bound_to(subjects, per_subject=1))
    await step(s.bound_to(subjects, per_subject=-1, namespace="default"))
    await step(s.bound_to(subjects, namespace="elsewhere"))
    await step(s.bound_to(subjects, namespace="\x00"))
    await step(s.bound_to([("'; DROP TABLE bindings; --", "x")]))
    return log


async def test_proposals_answer_as_specified(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On each backend: made once, listed by status, block and namespace; an accepted
    binding binds and makes a new version; refused decisions name what was wrong."""
    log = await script(backend, monkeypatch)
    assert log[0] == 7  # the duplicate, the unknown block and the NUL id are not stored
    assert log[1] == 0
    assert log[2] == 0
    assert [p.why for p in log[3] if p.why.startswith("nul")] == ["nul \ufffd why \ufffd"]
    assert [len(p.why) for p in log[3] if p.why.startswith("w")] == [1000]
    assert log[6] == []
    assert [p.block_id for p in log[7]] == ["0190a0b0-0000-7000-8000-000000000005"]
    assert log[8] == log[9] == log[10] == []
    assert len(log[11]) == 7
    assert log[13][0] == log[14][0] == log[15][0] == "NotFoundError"
    assert log[16][2] == [("proposal", "a binding proposal needs its binding")]
    assert log[17][2] == [("actor", "must not contain NUL characters")]
    assert log[18][0] == log[19][0] == "NotFoundError"
    assert log[20][2][0][0] == "proposal.depends_on"
    accepted = log[21]
    assert (accepted.status, accepted.decided_by) == ("accepted", ("ann " * 40)[:128])
    assert log[22][2] == [("proposal", "is accepted already, not pending")]
    assert log[23][0] == "VersionConflictError"
    statuses = {(p.block_id, p.proposal.get("equals"), p.kind): p.status for p in log[25]}
    assert sorted(statuses.values()).count("obsolete") == 1  # the other binding of fact
    assert log[26] == 1  # the bound block's
    assert log[27] == 2  # the archived block's two
    assert log[28] == 0
    rows = await backend.dump()
    assert rows["blocks"][0][3] == 2.0  # fact: a new version for the binding
    assert len(rows["bindings"]) == 2


async def test_both_backends_propose_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same script gives the same answers and leaves the same rows on both backends."""
    sqlite_log = await script(sqlite_backend, monkeypatch)
    pg_log = await script(pg_backend, monkeypatch)
    for i, (sq, pg) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert pg == sq, i
    sqlite_rows, pg_rows = await sqlite_backend.dump(), await pg_backend.dump()
    for table in TABLES:
        assert pg_rows[table] == sqlite_rows[table], table
    assert sqlite_rows["proposals"]


async def test_ten_decisions_of_one_proposal_decide_it_once(backend: Backend) -> None:
    """Ten callers accept one binding proposal at once: one binds (one binding, version 2),
    nine are told it is accepted already."""
    (block_id,) = await backend.api.add_many([{"content": "contended"}])
    await backend.api.add_proposals([NewProposal(block_id, "binding", TIMEOUT, 0.9, "")])
    [proposal] = await backend.api.list_proposals()
    bind = Binding.model_validate(TIMEOUT)
    outcomes = await asyncio.gather(
        *(
            backend.api.decide_proposal(proposal.id, accept=True, actor=f"p{i}", binding=bind)
            for i in range(10)
        ),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(o, ValidationInputError) for o in outcomes if o not in winners)
    block = await backend.api.get(block_id)
    assert block.version == 2
    assert len(block.bindings) == 1
    rows = await backend.dump()
    assert [r[2] for r in rows["audit"] if r[2].startswith("proposal")] == ["proposal_accepted"]
