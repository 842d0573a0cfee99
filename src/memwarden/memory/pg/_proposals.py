"""Proposals on PostgreSQL: the suggestion pass's bindings and dependencies, stored once,
accepted or rejected by a person.

The same contract as :mod:`~memwarden.memory._proposals` on SQLite, with its rules shared
(the rows a call stores, the stored proposal's shape, which decisions are refused); only
the SQL differs. Accepting a binding proposal binds the block and makes it a new version
in the decision's transaction, the block's row read ``FOR UPDATE`` first: an edit based on
the version before it is refused (:class:`VersionConflictError`) instead of dropping the
binding, whichever node made it. ``tests/pg/test_proposals_contract.py`` holds both
backends' answers, errors and rows equal.

A text holding NUL names nothing here (PostgreSQL text cannot hold one; on SQLite it
matches no row): an id with one is not found, a subject or block with one has nothing.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from memwarden.errors import NotFoundError
from memwarden.memory._blockedit import check_text
from memwarden.memory._codec import binding_selector_json
from memwarden.memory._proposals import (
    PROPOSAL_SELECT,
    NewProposal,
    Proposal,
    ProposalStatus,
    check_pending,
    new_rows,
    no_target,
    proposal_of,
    require_binding,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._model import Binding
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["PgProposals"]

_ADD = (
    "INSERT INTO proposals (id, block_rid, kind, key, proposal, confidence, why, created_at)"
    " SELECT v.id, b.rid, v.kind, v.key, v.proposal, v.confidence, v.why, v.created_at"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::text[],"
    " $7::float8[], $8::text[]) WITH ORDINALITY"
    " AS v(id, kind, key, proposal, confidence, why, created_at, block_id, ord)"
    " JOIN blocks b ON b.id = v.block_id ORDER BY v.ord"
    " ON CONFLICT DO NOTHING RETURNING 1"
)


def _limit(n: int) -> int | None:
    """SQLite's ``LIMIT`` of a negative number is no limit; PostgreSQL's is ``NULL``."""
    return None if n < 0 else n


class PgProposals:
    """Proposals on a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def add_proposals(self, proposals: Iterable[NewProposal]) -> int:
        """Store the proposals not made before (for a block that still exists); how many."""
        rows = [r for r in new_rows(proposals, self.clock.time()) if "\x00" not in r[7]]
        if not rows:
            return 0
        columns = [list(c) for c in zip(*rows, strict=True)]

        async def job(conn: PgConnection) -> int:
            return len(await conn.fetch(_ADD, *columns))

        return await self.db.write(job, weight=len(rows))

    async def list_proposals(
        self,
        *,
        status: ProposalStatus | Literal["all"] = "pending",
        block_id: str | None = None,
        limit: int = 100,
        namespaces: Sequence[str] | None = None,
    ) -> list[Proposal]:
        """Proposals, oldest first (of the status, of one block when given, and of the
        blocks of ``namespaces`` when given)."""
        where: list[str] = []
        args: list[Any] = []
        if namespaces is not None:
            args.append([n for n in namespaces if "\x00" not in n])
            where.append(f"b.namespace = ANY(${len(args)}::text[])")
        if status != "all":
            if "\x00" in status:
                return []
            args.append(status)
            where.append(f"p.status = ${len(args)}")
        if block_id is not None:
            if "\x00" in block_id:
                return []
            args.append(block_id)
            where.append(f"b.id = ${len(args)}")
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        args.append(_limit(limit))
        async with self.db.read() as conn:
            rows = await conn.fetch(
                f"{PROPOSAL_SELECT}{clause} ORDER BY p.created_at, p.id LIMIT ${len(args)}",
                *args,
            )
        return [proposal_of(tuple(r)) for r in rows]

    async def get_proposal(self, proposal_id: str) -> Proposal:
        if "\x00" in proposal_id:
            raise NotFoundError("proposal", proposal_id)
        async with self.db.read() as conn:
            row = await conn.fetchrow(f"{PROPOSAL_SELECT} WHERE p.id = $1", proposal_id)
        if row is None:
            raise NotFoundError("proposal", proposal_id)
        return proposal_of(tuple(row))

    async def decide_proposal(
        self,
        proposal_id: str,
        *,
        accept: bool,
        actor: str,
        binding: Binding | None = None,
    ) -> Proposal:
        """Accept (apply it: ``binding`` is the proposal as the sensor validated it) or
        reject a pending proposal, in one transaction; the proposal as decided."""
        check_text("actor", actor)
        if "\x00" in proposal_id:
            raise NotFoundError("proposal", proposal_id)
        now = self.clock.time()

        async def job(conn: PgConnection) -> None:
            # FOR UPDATE: one decision of a proposal, and the block's version compare-and-set,
            # hold whichever node writes.
            row = await conn.fetchrow(
                "SELECT p.block_rid, p.kind, p.proposal, p.status, b.id FROM proposals p"
                " JOIN blocks b ON b.rid = p.block_rid WHERE p.id = $1 FOR UPDATE",
                proposal_id,
            )
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
                "UPDATE proposals SET status = $1, decided_at = $2, decided_by = $3 WHERE id = $4",
                "accepted" if accept else "rejected",
                now,
                actor[:128],
                proposal_id,
            )
            await conn.execute(
                "INSERT INTO audit (at, actor, action, block_id, detail)"
                " VALUES ($1, $2, $3, $4, $5)",
                now,
                actor[:128],
                action,
                block_id,
                json.dumps({"proposal": proposal_id}),
            )

        await self.db.write(job)
        return await self.get_proposal(proposal_id)

    async def retire_proposals(self) -> int:
        """Mark ``obsolete`` the pending proposals that no longer apply: binding proposals
        for blocks bound since and every proposal of an archived or refuted block; how many."""
        now = self.clock.time()

        async def job(conn: PgConnection) -> int:
            status = await conn.execute(
                "UPDATE proposals SET status = 'obsolete', decided_at = $1"
                " WHERE status = 'pending'"
                " AND ((kind = 'binding' AND EXISTS (SELECT 1 FROM bindings d"
                " WHERE d.block_rid = proposals.block_rid))"
                " OR EXISTS (SELECT 1 FROM blocks b WHERE b.rid = proposals.block_rid"
                " AND b.state IN ('archived', 'refuted')))",
                now,
            )
            return int(status.rsplit(" ", 1)[-1])

        return await self.db.write(job)

    async def unbound_live(
        self, *, after_rid: int = 0, limit: int = 100
    ) -> list[tuple[int, str, str, str, str]]:
        """Live blocks (neither archived nor refuted) without a binding, by rid after
        ``after_rid``: ``(rid, id, title, content, namespace)``."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT rid, id, title, content, namespace FROM blocks b WHERE rid > $1"
                " AND state NOT IN ('archived', 'refuted')"
                " AND NOT EXISTS (SELECT 1 FROM bindings d WHERE d.block_rid = b.rid)"
                " ORDER BY rid LIMIT $2",
                after_rid,
                _limit(limit),
            )
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in rows]

    async def bound_to(
        self,
        subjects: Iterable[tuple[str, str]],
        *,
        per_subject: int = 3,
        namespace: str | None = None,
    ) -> dict[tuple[str, str], list[str]]:
        """The live blocks bound to each ``(sensor, subject)`` (at most ``per_subject``,
        oldest first), quarantined bindings left out; of ``namespace`` only, when given."""
        pairs = [p for p in dict.fromkeys(subjects) if "\x00" not in p[0] + p[1]]
        if not pairs or (namespace is not None and "\x00" in namespace):
            return {}
        scope = "" if namespace is None else " AND b.namespace = $4"
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT s.sensor, s.subject, x.id FROM unnest($1::text[], $2::text[])"
                " WITH ORDINALITY AS s(sensor, subject, ord) CROSS JOIN LATERAL"
                " (SELECT b.id, b.rid FROM blocks b WHERE b.state NOT IN ('archived', 'refuted')"
                f"{scope} AND EXISTS (SELECT 1 FROM bindings d WHERE d.block_rid = b.rid"
                " AND d.subject = s.subject AND d.sensor = s.sensor AND d.quarantine IS NULL)"
                " ORDER BY b.rid LIMIT $3) AS x ORDER BY s.ord, x.rid",
                [p[0] for p in pairs],
                [p[1] for p in pairs],
                _limit(per_subject),
                *([] if namespace is None else [namespace]),
            )
        out: dict[tuple[str, str], list[str]] = {}
        for sensor, subject, block_id in rows:
            out.setdefault((sensor, subject), []).append(str(block_id))
        return out


async def _apply(
    conn: PgConnection,
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
            " VALUES ($1, $2, $3, $4, $5)",
            rid,
            binding.sensor,
            binding.subject,
            binding_selector_json(binding),
            now,
        )
        # New bindings are a new version, as an edit's are: an edit based on the version
        # read before this one is refused instead of dropping the binding.
        await conn.execute(
            "INSERT INTO block_history (block_id, version, title, content, tags,"
            " replaced_at, replaced_by) SELECT id, version, title, content, tags, $1, $2"
            " FROM blocks WHERE rid = $3",
            now,
            actor[:128],
            rid,
        )
        await conn.execute(
            "UPDATE blocks SET version = version + 1, updated_at = $1 WHERE rid = $2", now, rid
        )
        # The block is bound now: its other binding proposals are moot.
        await conn.execute(
            "UPDATE proposals SET status = 'obsolete', decided_at = $1 WHERE block_rid = $2"
            " AND kind = 'binding' AND status = 'pending' AND id <> $3",
            now,
            rid,
            proposal_id,
        )
        return
    target = str(proposal.get("depends_on", ""))
    if (
        "\x00" in target
        or await conn.fetchval("SELECT 1 FROM blocks WHERE id = $1", target) is None
    ):
        raise no_target(target)
    await conn.execute(
        "INSERT INTO dependencies (depends_on, block_rid) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        target,
        rid,
    )
