"""Proposals: what the periodic suggestion pass offers a person to accept or reject.

Two kinds: a **binding** for a block that has none (found by the fs value index and
confirmed by a dry run when proposed), and **depends_on**: a block rests on another that
is bound to the subject its text speaks of. Nothing is applied until someone accepts it;
accepting adds the binding (and makes the block's other pending binding proposals
``obsolete``) or the dependency, in the same transaction as the decision. One row per
(block, kind, what is proposed) whatever its status, so a rejected proposal is remembered
and never proposed again; a deleted block takes its proposals with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from memwarden.errors import NotFoundError, ValidationInputError
from memwarden.memory._blockedit import check_text, storable
from memwarden.memory._clock import from_ts
from memwarden.memory._codec import binding_selector_json
from memwarden.memory._ids import new_id
from memwarden.memory._sql import placeholders

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._model import Binding

__all__ = [
    "PROPOSAL_SELECT",
    "NewProposal",
    "Proposal",
    "ProposalKind",
    "ProposalStatus",
    "add_proposals",
    "bound_to",
    "check_pending",
    "decide",
    "get",
    "list_proposals",
    "new_rows",
    "no_target",
    "proposal_of",
    "require_binding",
    "retire",
    "unbound_live",
]

ProposalKind = Literal["binding", "depends_on"]
ProposalStatus = Literal["pending", "accepted", "rejected", "obsolete"]
WHY_MAX = 1000


@dataclass(frozen=True, slots=True)
class NewProposal:
    """What a pass proposes for one block."""

    block_id: str
    kind: ProposalKind
    proposal: dict[str, Any]  # the binding (flat, with its sensor), or {"depends_on": id}
    confidence: float
    why: str

    @property
    def key(self) -> str:
        return json.dumps(self.proposal, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True, slots=True)
class Proposal:
    """A stored proposal."""

    id: str
    block_id: str
    kind: ProposalKind
    proposal: dict[str, Any]
    confidence: float
    why: str
    status: ProposalStatus
    created_at: float
    decided_at: float | None
    decided_by: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "block_id": self.block_id,
            "kind": self.kind,
            "proposal": self.proposal,
            "confidence": self.confidence,
            "why": self.why,
            "status": self.status,
            "created_at": from_ts(self.created_at).isoformat(),
            "decided_at": None if self.decided_at is None else from_ts(self.decided_at).isoformat(),
            "decided_by": self.decided_by,
        }


# Without parameters: PostgreSQL runs it as it is.
PROPOSAL_SELECT = (
    "SELECT p.id, b.id, p.kind, p.proposal, p.confidence, p.why, p.status, p.created_at,"
    " p.decided_at, p.decided_by FROM proposals p JOIN blocks b ON b.rid = p.block_rid"
)


def proposal_of(row: Sequence[Any]) -> Proposal:
    """A stored proposal from its row of :data:`PROPOSAL_SELECT`."""
    return Proposal(
        id=row[0],
        block_id=row[1],
        kind=row[2],
        proposal=json.loads(row[3]),
        confidence=float(row[4]),
        why=row[5],
        status=row[6],
        created_at=float(row[7]),
        decided_at=None if row[8] is None else float(row[8]),
        decided_by=row[9],
    )


def new_rows(
    proposals: Iterable[NewProposal], now: float
) -> list[tuple[str, str, str, str, float, str, float, str]]:
    """``(id, kind, key, proposal, confidence, why, created_at, block_id)`` of each."""
    return [
        (
            new_id(),
            p.kind,
            p.key,
            p.key,
            round(p.confidence, 3),
            storable(p.why[:WHY_MAX]),
            now,
            p.block_id,
        )
        for p in proposals
    ]


def check_pending(status: str) -> None:
    """Only a pending proposal can be decided."""
    if status != "pending":
        raise ValidationInputError([("proposal", f"is {status} already, not pending")])


def require_binding(binding: Binding | None) -> Binding:
    """The binding an accepted binding proposal adds (its sensor validated it)."""
    if binding is None:
        raise ValidationInputError([("proposal", "a binding proposal needs its binding")])
    return binding


def no_target(target: str) -> ValidationInputError:
    """A dependency proposal whose target is gone."""
    return ValidationInputError([("proposal.depends_on", f"no block {target!r}")])


async def add_proposals(db: Database, clock: Clock, proposals: Iterable[NewProposal]) -> int:
    """Store the proposals not made before (for a block that still exists); how many."""
    rows = new_rows(proposals, clock.time())
    if not rows:
        return 0

    async def job(conn: aiosqlite.Connection) -> int:
        before = conn.total_changes
        await conn.executemany(
            "INSERT OR IGNORE INTO proposals (id, block_rid, kind, key, proposal, confidence,"
            " why, created_at) SELECT ?, rid, ?, ?, ?, ?, ?, ? FROM blocks WHERE id = ?",
            rows,
        )
        return int(conn.total_changes - before)

    return await db.write(job)


async def list_proposals(
    db: Database,
    *,
    status: ProposalStatus | Literal["all"] = "pending",
    block_id: str | None = None,
    limit: int = 100,
    namespaces: Sequence[str] | None = None,
) -> list[Proposal]:
    """Proposals, oldest first (of the status, of one block when given, and of the
    blocks of ``namespaces`` when given)."""
    where: list[str] = []
    args: list[str] = []
    if namespaces is not None:
        where.append(f"b.namespace IN {placeholders(len(namespaces))}" if namespaces else "0")
        args.extend(namespaces)
    if status != "all":
        where.append("p.status = ?")
        args.append(status)
    if block_id is not None:
        where.append("b.id = ?")
        args.append(block_id)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    async with db.read() as conn:
        rows = await conn.execute_fetchall(
            f"{PROPOSAL_SELECT}{clause} ORDER BY p.created_at, p.id LIMIT ?", [*args, limit]
        )
    return [proposal_of(r) for r in rows]


async def get(db: Database, proposal_id: str) -> Proposal:
    async with db.read() as conn:
        rows = list(
            await conn.execute_fetchall(f"{PROPOSAL_SELECT} WHERE p.id = ?", (proposal_id,))
        )
    if not rows:
        raise NotFoundError("proposal", proposal_id)
    return proposal_of(rows[0])


async def decide(
    db: Database,
    clock: Clock,
    proposal_id: str,
    *,
    accept: bool,
    actor: str,
    binding: Binding | None = None,
) -> Proposal:
    """Accept (apply it: ``binding`` is the proposal as the sensor validated it) or reject
    a pending proposal, in one transaction; the proposal as decided."""
    check_text("actor", actor)
    now = clock.time()

    async def job(conn: aiosqlite.Connection) -> None:
        async with conn.execute(
            "SELECT p.block_rid, p.kind, p.proposal, p.status, b.id FROM proposals p"
            " JOIN blocks b ON b.rid = p.block_rid WHERE p.id = ?",
            (proposal_id,),
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError("proposal", proposal_id)
        rid, kind, raw, status, block_id = row
        check_pending(status)
        action = "proposal_rejected"
        if accept:
            action = "proposal_accepted"
            await _apply(
                conn,
                rid,
                kind,
                json.loads(raw),
                binding=binding,
                proposal_id=proposal_id,
                now=now,
                actor=actor,
            )
        await conn.execute(
            "UPDATE proposals SET status = ?, decided_at = ?, decided_by = ? WHERE id = ?",
            ("accepted" if accept else "rejected", now, actor[:128], proposal_id),
        )
        await conn.execute(
            "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, ?, ?, ?)",
            (now, actor[:128], action, block_id, json.dumps({"proposal": proposal_id})),
        )

    await db.write(job)
    return await get(db, proposal_id)


async def _apply(
    conn: aiosqlite.Connection,
    rid: int,
    kind: str,
    proposal: dict[str, Any],
    *,
    binding: Binding | None,
    proposal_id: str,
    now: float,
    actor: str,
) -> None:
    if kind == "binding":
        binding = require_binding(binding)
        await conn.execute(
            "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (rid, binding.sensor, binding.subject, binding_selector_json(binding), now),
        )
        # New bindings are a new version, as an edit's are (Store.update): an edit based
        # on the version read before this one is refused instead of dropping the binding.
        await conn.execute(
            "INSERT INTO block_history (block_id, version, title, content, tags,"
            " replaced_at, replaced_by) SELECT id, version, title, content, tags, ?, ?"
            " FROM blocks WHERE rid = ?",
            (now, actor[:128], rid),
        )
        await conn.execute(
            "UPDATE blocks SET version = version + 1, updated_at = ? WHERE rid = ?", (now, rid)
        )
        # The block is bound now: its other binding proposals are moot.
        await conn.execute(
            "UPDATE proposals SET status = 'obsolete', decided_at = ? WHERE block_rid = ?"
            " AND kind = 'binding' AND status = 'pending' AND id <> ?",
            (now, rid, proposal_id),
        )
        return
    target = str(proposal.get("depends_on", ""))
    async with conn.execute("SELECT 1 FROM blocks WHERE id = ?", (target,)) as cur:
        if await cur.fetchone() is None:
            raise no_target(target)
    await conn.execute(
        "INSERT OR IGNORE INTO dependencies (depends_on, block_rid) VALUES (?, ?)", (target, rid)
    )


async def retire(db: Database, clock: Clock) -> int:
    """Mark ``obsolete`` the pending proposals that no longer apply: binding proposals for
    blocks bound since (by hand, by ``bind``) and every proposal of an archived or refuted
    block; how many."""
    now = clock.time()

    async def job(conn: aiosqlite.Connection) -> int:
        before = conn.total_changes
        await conn.execute(
            "UPDATE proposals SET status = 'obsolete', decided_at = ? WHERE status = 'pending'"
            " AND ((kind = 'binding' AND EXISTS (SELECT 1 FROM bindings d"
            " WHERE d.block_rid = proposals.block_rid))"
            " OR EXISTS (SELECT 1 FROM blocks b WHERE b.rid = proposals.block_rid"
            " AND b.state IN ('archived', 'refuted')))",
            (now,),
        )
        return int(conn.total_changes - before)

    return await db.write(job)


async def unbound_live(
    db: Database, *, after_rid: int = 0, limit: int = 100
) -> list[tuple[int, str, str, str, str]]:
    """Live blocks (neither archived nor refuted) without a binding, by rid after
    ``after_rid``: ``(rid, id, title, content, namespace)``."""
    async with db.read() as conn:
        rows = await conn.execute_fetchall(
            "SELECT rid, id, title, content, namespace FROM blocks b WHERE rid > ?"
            " AND state NOT IN ('archived', 'refuted')"
            " AND NOT EXISTS (SELECT 1 FROM bindings d WHERE d.block_rid = b.rid)"
            " ORDER BY rid LIMIT ?",
            (after_rid, limit),
        )
    return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in rows]


async def bound_to(
    db: Database,
    subjects: Iterable[tuple[str, str]],
    *,
    per_subject: int = 3,
    namespace: str | None = None,
) -> dict[tuple[str, str], list[str]]:
    """The live blocks bound to each ``(sensor, subject)`` (at most ``per_subject``, oldest
    first), quarantined bindings left out; of ``namespace`` only, when given (a fact
    never leans on another project's)."""
    out: dict[tuple[str, str], list[str]] = {}
    scope = "" if namespace is None else " AND b.namespace = ?"
    async with db.read() as conn:
        for sensor, subject in dict.fromkeys(subjects):
            rows = await conn.execute_fetchall(
                "SELECT DISTINCT b.id FROM bindings d JOIN blocks b ON b.rid = d.block_rid"
                " WHERE d.subject = ? AND d.sensor = ? AND d.quarantine IS NULL"
                f" AND b.state NOT IN ('archived', 'refuted'){scope} ORDER BY b.rid LIMIT ?",
                (subject, sensor, *([] if namespace is None else [namespace]), per_subject),
            )
            if rows:
                out[sensor, subject] = [str(r[0]) for r in rows]
    return out
