"""Writes of blocks on PostgreSQL: add (with bindings, dependencies and deduplication),
edit, archive, restore, delete, the review queue's entry and ``meta``.

The same contract as :class:`~memwarden.memory._blocks.Blocks` on SQLite: the rules
(validation, the records a call adds, an edit's version bump, the bindings an edit keeps,
dependencies, duplicates, audit details) are the shared ones of
:mod:`~memwarden.memory._blockedit` and :mod:`~memwarden.memory._codec`; only the SQL
differs. What SQLite's triggers do on a write (``retention_points``, ``embed_queue``) the
PostgreSQL triggers of the same names do; the full-text column is generated, so there is
no index to keep. ``tests/pg/test_writes_contract.py`` holds both backends' answers and
rows equal.

Each write is one writer job; the writer may run a job twice (after another job of its
batch failed), so a job keeps nothing from one run to the next.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from memwarden.errors import NotFoundError, VersionConflictError
from memwarden.memory._blockedit import (
    apply_patch,
    check_text,
    delete_detail,
    dependency_rows,
    diff_bindings,
    find_duplicates,
    history_row,
    missing_dependencies,
    serving_node,
    update_detail,
    validate_news,
    validate_patch,
)
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    binding_nodes_json,
    binding_selector_json,
    content_key,
    new_record,
    record_from_row,
    record_to_row,
)
from memwarden.memory._ids import new_id
from memwarden.memory._model import BlockState, default_node_name
from memwarden.memory._sql import one_row
from memwarden.memory.pg._ids import allocate

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._model import Binding, NewBlock
    from memwarden.memory._record import BlockRecord
    from memwarden.memory._results import BlockPatch
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection
    from memwarden.memory.policy import PolicyConfig

__all__ = ["PgBlocks"]

_BLOCK_INSERT = (  # the record's columns, then content_key
    f"INSERT INTO blocks ({', '.join(BLOCK_COLUMNS)}, content_key) "
    f"VALUES ({', '.join(f'${i + 1}' for i in range(len(BLOCK_COLUMNS) + 1))})"
)
_BLOCK_SELECT = f"SELECT {', '.join(BLOCK_COLUMNS)} FROM blocks"
_SAVED = [c for c in BLOCK_COLUMNS if c not in ("id", "rid")]
_BLOCK_SAVE = (
    "UPDATE blocks SET "
    + ", ".join(f"{c} = ${i + 1}" for i, c in enumerate(_SAVED))
    + f" WHERE rid = ${len(_SAVED) + 1}"
)
# Duplicate checks take turns per (namespace, content key) across nodes: transaction-level
# advisory locks, in key order (two adds of overlapping facts never wait on each other in
# a cycle), held until the commit that stores the fact, so a second node's check sees it.
_DEDUPE_LOCKS = (
    "SELECT count(pg_advisory_xact_lock(k)) FROM"
    " (SELECT DISTINCT k FROM unnest($1::bigint[]) AS u(k) ORDER BY k) AS s"
)
# A call with more keys than this takes one lock for every duplicate check instead (each
# advisory lock takes a slot of PostgreSQL's shared lock table, max_locks_per_transaction
# x max_connections in all): exclusive for it, shared before the per-key ones for the
# others, so a large add and small ones still take turns.
DEDUPE_KEYS_MAX = 64
_DEDUPE_ALL = int.from_bytes(hashlib.sha256(b"memwarden.dedupe").digest()[:8], signed=True)
_AUDIT = "INSERT INTO audit (at, actor, action, block_id, detail) VALUES ($1, $2, $3, $4, $5)"


_BINDING_INSERT = (
    "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at, nodes, served_by)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7)"
)


class PgBlocks:
    """Writes of blocks and of the small tables around them, on a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        # The node storing bindings: a binding's default ``nodes``, and its server until
        # the leader's pass says otherwise (docs/SCALE.md, "Node-scoped bindings").
        self.node = default_node_name()

    async def add_many(
        self,
        news: Sequence[NewBlock | Mapping[str, Any]],
        *,
        actor: str = "agent",
        dedupe: bool = False,
        duplicates: set[str] | None = None,
    ) -> list[str]:
        """Store many blocks in one transaction; returns their ids in order.

        With ``dedupe``, a block whose normalised content equals a live block's (or an
        earlier one's in the same call) is not stored: its place in the answer holds the
        existing id, which is also added to ``duplicates``.
        """
        check_text("actor", actor)
        validated = validate_news(news)
        now = self.clock.time()
        all_records = [
            new_record(n, block_id=new_id(), now=now, cfg=self.policy) for n in validated
        ]
        all_keys = [content_key(r.content) for r in all_records]

        async def job(conn: PgConnection) -> dict[int, str]:
            found: dict[int, str] = {}
            if dedupe:  # in the writer: two concurrent adds of one fact store it once,
                # on two nodes too (each (namespace, key) locked until this commits; a
                # deadlock between two nodes' group commits is run again by the writer)
                await _lock_for_dedupe(conn, dedupe_locks(all_records, all_keys))
                found = await _find_duplicates(conn, all_records, all_keys)
            keep = [i for i in range(len(all_records)) if i not in found]
            records = [all_records[i] for i in keep]
            kept_news = [validated[i] for i in keep]
            keys = [all_keys[i] for i in keep]
            # The rids come from the identity's sequence: several writers (nodes) may add
            # at once. Never reused (migration 3 moved the sequence past every rid the
            # event history keeps), not necessarily contiguous.
            rids = await allocate(conn, "blocks", "rid", len(records))
            rows = [(*record_to_row(r)[:-1], rids[i], keys[i]) for i, r in enumerate(records)]
            if rows:
                await conn.executemany(_BLOCK_INSERT, rows)
            node = self.node
            binding_rows = [
                (
                    rids[i],
                    b.sensor,
                    b.subject,
                    binding_selector_json(b),
                    now,
                    nodes,
                    serving_node(nodes, node),
                )
                for i, n in enumerate(kept_news)
                for b in n.bindings
                for nodes in (binding_nodes_json(b, node),)
            ]
            if binding_rows:
                await conn.executemany(_BINDING_INSERT, binding_rows)
            if 0 < len(records) < 100:
                await conn.executemany(_AUDIT, [(now, actor, "add", r.id, "{}") for r in records])
            await _insert_dependencies(conn, kept_news, rids, {r.id for r in records})
            return found

        found = await self.db.write(job)
        answer = [r.id for r in all_records]
        for i, existing in found.items():
            answer[i] = existing
            if duplicates is not None:
                duplicates.add(existing)
        return answer

    async def update(
        self,
        block_id: str,
        patch: BlockPatch | Mapping[str, Any],
        *,
        actor: str = "agent",
        expected_version: int | None = None,
    ) -> None:
        """Edit a block (SQLite's ``Blocks.update``): a new text or new bindings make a new
        ``version``, the old one kept in ``block_history``; with ``expected_version`` the
        edit applies only to that version, else :class:`VersionConflictError`."""
        check_text("actor", actor)
        changes, bindings = validate_patch(patch)
        now = self.clock.time()
        cfg = self.policy

        async def job(conn: PgConnection) -> None:
            # FOR UPDATE: the compare-and-set holds even for a writer that is not the only one.
            rec = await _load_record(conn, block_id, lock=True)
            if expected_version is not None and rec.version != expected_version:
                raise VersionConflictError(rec.id, expected_version, rec.version)
            old = history_row(rec)
            rebound = bindings is not None and await _replace_bindings(
                conn, rec.rid, rec.id, bindings, now, node=self.node
            )
            if apply_patch(rec, changes, now, cfg, rebound=rebound):  # a new version
                await conn.execute(
                    "INSERT INTO block_history (block_id, version, title, content, tags,"
                    " replaced_at, replaced_by) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    *old,
                    now,
                    actor,
                )
            await _save_record(conn, rec)
            if "content" in changes:
                await conn.execute(
                    "UPDATE blocks SET content_key = $1 WHERE rid = $2",
                    content_key(rec.content),
                    rec.rid,
                )
            await self._audit(conn, actor, "update", rec.id, update_detail(changes, bindings))

        await self.db.write(job)

    async def archive(self, block_id: str, *, reason: str, actor: str = "agent") -> None:
        """Move a block to cold storage (out of search) with a reason."""
        check_text("reason", reason)
        check_text("actor", actor)
        now = self.clock.time()

        async def job(conn: PgConnection) -> None:
            rec = await _load_record(conn, block_id, lock=True)
            if rec.state == BlockState.ARCHIVED:
                return
            await conn.execute(
                "UPDATE blocks SET state = 'archived', archived_at = $1, archive_reason = $2,"
                " updated_at = $1 WHERE id = $3",
                now,
                reason,
                block_id,
            )
            await self._audit(conn, actor, "archive", block_id, {"reason": reason})

        await self.db.write(job)

    async def restore(self, block_id: str, *, actor: str = "agent") -> None:
        """Bring an archived block back; it returns unverified until a sensor confirms it."""
        check_text("actor", actor)
        now = self.clock.time()

        async def job(conn: PgConnection) -> None:
            rec = await _load_record(conn, block_id, lock=True)
            if rec.state != BlockState.ARCHIVED:
                return
            await conn.execute(
                "UPDATE blocks SET state = 'unverified', stale_reasons = '', archived_at = NULL,"
                " archive_reason = NULL, updated_at = $1, last_accessed_at = $1 WHERE id = $2",
                now,
                block_id,
            )
            await self._audit(conn, actor, "restore", block_id, {})

        await self.db.write(job)

    async def delete(self, block_id: str, *, actor: str = "agent", reason: str = "") -> None:
        """Delete a block for good. The event log and an audit row keep the trace."""
        check_text("actor", actor)

        async def job(conn: PgConnection) -> None:
            rec = await _load_record(conn, block_id, lock=True)
            await conn.execute("DELETE FROM blocks WHERE id = $1", block_id)
            await conn.execute("DELETE FROM sessions WHERE block_id = $1", block_id)
            await self._audit(conn, actor, "delete", block_id, delete_detail(rec, reason))

        await self.db.write(job)

    async def request_review(self, block_id: str, *, reason: str) -> dict[str, Any]:
        """Put a block in the human review queue (one open item per block)."""
        now = self.clock.time()
        review_id = new_id()

        async def job(conn: PgConnection) -> dict[str, Any]:
            await _load_record(conn, block_id)
            await conn.execute(
                "INSERT INTO reviews (id, block_id, reason, created_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT DO NOTHING",
                review_id,
                block_id,
                reason[:1000],
                now,
            )
            row = one_row(  # inserted or already open just above
                await conn.fetchrow(
                    "SELECT id, status, reason FROM reviews"
                    " WHERE block_id = $1 AND status = 'pending'",
                    block_id,
                ),
                "the pending review",
            )
            return {"review_id": row[0], "block_id": block_id, "status": row[1], "reason": row[2]}

        return await self.db.write(job)

    async def set_meta(self, key: str, value: str) -> None:
        async def job(conn: PgConnection) -> None:
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                key,
                value,
            )

        await self.db.write(job)

    async def _audit(
        self, conn: PgConnection, actor: str, action: str, block_id: str, detail: Any
    ) -> None:
        await conn.execute(
            _AUDIT, self.clock.time(), actor, action, block_id, json.dumps(detail, default=str)
        )


async def _load_record(conn: PgConnection, block_id: str, *, lock: bool = False) -> BlockRecord:
    row = await conn.fetchrow(
        _BLOCK_SELECT + " WHERE id = $1" + (" FOR UPDATE" if lock else ""), block_id
    )
    if row is None:
        raise NotFoundError("block", block_id)
    return record_from_row(tuple(row))


async def _save_record(conn: PgConnection, rec: BlockRecord) -> None:
    values = dict(zip(BLOCK_COLUMNS, record_to_row(rec), strict=True))
    await conn.execute(_BLOCK_SAVE, *(values[c] for c in _SAVED), rec.rid)


async def _replace_bindings(
    conn: PgConnection,
    rid: int,
    block_id: str,
    bindings: Sequence[Binding],
    now: float,
    *,
    node: str,
) -> bool:
    """Make ``bindings`` the block's own; True when they differ from the stored ones
    (SQLite's ``_replace_bindings``: kept rows stay, removed ones close their open
    revalidation requests, new ones make pending binding proposals moot)."""
    rows = await conn.fetch(
        "SELECT id, sensor, subject, selector, nodes FROM bindings WHERE block_rid = $1"
        " ORDER BY id",
        rid,
    )
    change = diff_bindings([tuple(r) for r in rows], bindings, node=node)
    if change is None:
        return False
    if change.dropped:
        await conn.execute("DELETE FROM bindings WHERE id = ANY($1::bigint[])", change.dropped)
    if change.new:
        await conn.executemany(
            _BINDING_INSERT,
            [
                (rid, s, subj, sel, now, nodes, serving_node(nodes, node))
                for s, subj, sel, nodes in change.new
            ],
        )
    if change.renodes:  # served as a new binding is, until the leader's next pass
        await conn.executemany(
            "UPDATE bindings SET nodes = $1, served_by = $2 WHERE id = $3",
            [(n, serving_node(n, node), i) for i, n in change.renodes],
        )
    if change.unbound:
        await conn.executemany(
            "UPDATE revalidations SET status = 'expired', finished_at = $1, outcome = 'unbound'"
            " WHERE block_id = $2 AND sensor = $3 AND subject = $4"
            " AND status IN ('pending', 'sent')",
            [(now, block_id, s, subj) for s, subj in change.unbound],
        )
    if change.new:
        await conn.execute(
            "UPDATE proposals SET status = 'obsolete', decided_at = $1 WHERE block_rid = $2"
            " AND kind = 'binding' AND status = 'pending'",
            now,
            rid,
        )
    return True


async def _insert_dependencies(
    conn: PgConnection, news: Sequence[NewBlock], rids: Sequence[int], new_ids: set[str]
) -> None:
    """Record ``depends_on`` (``rids``: the new blocks' rids in order): every target exists
    (or comes in the same call) in the dependent block's namespace."""
    rows = [(dep, rids[i]) for dep, i in dependency_rows(news, 0)]
    if not rows:
        return
    targets = list({dep for dep, _ in rows} - new_ids)
    found = {
        str(r[0]): str(r[1])
        for r in await conn.fetch(
            "SELECT id, namespace FROM blocks WHERE id = ANY($1::text[])", targets
        )
    }
    missing_dependencies(news, found, new_ids)
    await conn.executemany(
        "INSERT INTO dependencies (depends_on, block_rid) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        rows,
    )


def dedupe_locks(records: Sequence[BlockRecord], keys: Sequence[str]) -> list[int]:
    """The advisory lock keys of these records' duplicate checks, sorted: the first 8
    bytes of sha256 over a prefix, the namespace and the content key."""
    out = set()
    for rec, key in zip(records, keys, strict=True):
        digest = hashlib.sha256(f"memwarden.dedupe\0{rec.namespace}\0{key}".encode()).digest()
        out.add(int.from_bytes(digest[:8], signed=True))
    return sorted(out)


async def _lock_for_dedupe(conn: PgConnection, keys: list[int]) -> None:
    """Take the duplicate checks' advisory locks of these keys (held until commit)."""
    if len(keys) > DEDUPE_KEYS_MAX:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _DEDUPE_ALL)
        return
    await conn.execute("SELECT pg_advisory_xact_lock_shared($1)", _DEDUPE_ALL)
    await conn.execute(_DEDUPE_LOCKS, keys)


# A new block's possible duplicates: live blocks only, which is what lets the content-key
# index leave archived blocks out (schema migration 9; a test holds the plan to it).
DUPLICATES_SQL = (
    "SELECT id, content FROM blocks WHERE content_key = $1 AND state <> 'archived'"
    " AND namespace = $2 ORDER BY id"
)


async def _find_duplicates(
    conn: PgConnection, records: Sequence[BlockRecord], keys: Sequence[str]
) -> dict[int, str]:
    async def candidates(key: str, namespace: str) -> Sequence[tuple[Any, Any]]:
        rows = await conn.fetch(DUPLICATES_SQL, key, namespace)
        return [(r[0], r[1]) for r in rows]

    return await find_duplicates(records, keys, candidates)
