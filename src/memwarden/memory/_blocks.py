"""Writes of blocks: add (with bindings, dependencies and deduplication), edit, archive,
restore, delete; the review queue's entry and the daemon's small facts (``meta``).

Each write is one writer job (one transaction, group-committed with others); the
:class:`~memwarden.memory._store.Store` reads the block back after it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memwarden.errors import VersionConflictError
from memwarden.memory._blockedit import (
    apply_patch,
    check_text,
    delete_detail,
    dependency_rows,
    diff_bindings,
    find_duplicates,
    history_row,
    missing_dependencies,
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
    record_to_row,
)
from memwarden.memory._ids import new_id
from memwarden.memory._model import BlockState, NewBlock, default_node_name
from memwarden.memory._sql import load_record, one_row, save_record, select_in

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._model import Binding
    from memwarden.memory._record import BlockRecord
    from memwarden.memory._results import BlockPatch
    from memwarden.memory.policy import PolicyConfig

__all__ = ["Blocks"]

_BLOCK_INSERT = (  # the record's columns, then content_key
    f"INSERT INTO blocks ({', '.join(BLOCK_COLUMNS)}, content_key) "
    f"VALUES ({', '.join('?' for _ in BLOCK_COLUMNS)}, ?)"
)


# On SQLite the one node serves every binding it stores (``served_by``).
_BINDING_INSERT = (
    "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at, nodes, served_by)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class Blocks:
    """Writes of blocks and of the small tables around them."""

    def __init__(self, db: Database, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        # The node storing bindings: a binding's default ``nodes``; on SQLite, one node
        # serves every binding (docs/SCALE.md, "Node-scoped bindings").
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
        answer = [r.id for r in all_records]
        found: dict[int, str] = {}

        async def job(conn: aiosqlite.Connection) -> None:
            records, news = all_records, validated
            found.clear()  # a job may run again (after another job of its batch failed)
            if dedupe:  # in the writer: two concurrent adds of one fact store it once
                found.update(await _find_duplicates(conn, all_records, all_keys))
                keep = [i for i in range(len(all_records)) if i not in found]
                records = [all_records[i] for i in keep]
                news = [validated[i] for i in keep]
            keys = [all_keys[i] for i in range(len(all_records)) if i not in found]
            block_rows = [record_to_row(r) for r in records]
            audit_rows = (
                [(now, actor, "add", r.id, "{}") for r in records] if len(records) < 100 else []
            )
            # One writer: the next rids are ours to hand out, so bindings can name them.
            # Never reuse a deleted block's rid: its effects (the event history) keep it.
            async with conn.execute(
                "SELECT max(coalesce((SELECT max(rid) FROM blocks), 0),"
                " coalesce((SELECT max(block_rid) FROM effects), 0))"
            ) as cur:
                first = (await cur.fetchone() or (0,))[0] + 1
            rows = [(*row[:-1], first + i, keys[i]) for i, row in enumerate(block_rows)]
            await conn.executemany(_BLOCK_INSERT, rows)
            node = self.node
            binding_rows = [
                (
                    first + i,
                    b.sensor,
                    b.subject,
                    binding_selector_json(b),
                    now,
                    binding_nodes_json(b, node),
                    node,
                )
                for i, n in enumerate(news)
                for b in n.bindings
            ]
            if binding_rows:
                await conn.executemany(_BINDING_INSERT, binding_rows)
            if audit_rows:
                await conn.executemany(
                    "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?,?,?,?,?)",
                    audit_rows,
                )
            await _insert_dependencies(conn, news, first, {r.id for r in records})

        await self.db.write(job)
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
        """Edit a block. A new text (title, content, tags) or new bindings make a new
        ``version``: the old one is kept in history (its text; after a change of bindings
        only, the same text as the new one), the block is unverified again, and a new text
        demotes it from core. With ``expected_version`` the edit applies only to that
        version (else :class:`VersionConflictError`, nothing changed): the version is the
        block's compare-and-set token, so an edit based on what it read never undoes a
        change of bindings it did not see."""
        check_text("actor", actor)
        changes, bindings = validate_patch(patch)
        now = self.clock.time()
        cfg = self.policy

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await load_record(conn, block_id)
            if expected_version is not None and rec.version != expected_version:
                raise VersionConflictError(rec.id, expected_version, rec.version)
            old = history_row(rec)
            rebound = bindings is not None and await _replace_bindings(
                conn, rec.rid, rec.id, bindings, now, node=self.node
            )
            if apply_patch(rec, changes, now, cfg, rebound=rebound):  # a new version
                await conn.execute(
                    "INSERT INTO block_history (block_id, version, title, content, tags,"
                    " replaced_at, replaced_by) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*old, now, actor),
                )
            await save_record(conn, rec)
            if "content" in changes:
                await conn.execute(
                    "UPDATE blocks SET content_key = ? WHERE rid = ?",
                    (content_key(rec.content), rec.rid),
                )
            detail = update_detail(changes, bindings)
            await self._audit(conn, actor, "update", rec.id, detail)

        await self.db.write(job)

    async def archive(self, block_id: str, *, reason: str, actor: str = "agent") -> None:
        """Move a block to cold storage (out of search) with a reason."""
        check_text("reason", reason)
        check_text("actor", actor)
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await load_record(conn, block_id)
            if rec.state == BlockState.ARCHIVED:
                return
            await conn.execute(
                "UPDATE blocks SET state = 'archived', archived_at = ?, archive_reason = ?,"
                " updated_at = ? WHERE id = ?",
                (now, reason, now, block_id),
            )
            await self._audit(conn, actor, "archive", block_id, {"reason": reason})

        await self.db.write(job)

    async def restore(self, block_id: str, *, actor: str = "agent") -> None:
        """Bring an archived block back; it returns unverified until a sensor confirms it."""
        check_text("actor", actor)
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await load_record(conn, block_id)
            if rec.state != BlockState.ARCHIVED:
                return
            await conn.execute(
                "UPDATE blocks SET state = 'unverified', stale_reasons = '', archived_at = NULL,"
                " archive_reason = NULL, updated_at = ?, last_accessed_at = ? WHERE id = ?",
                (now, now, block_id),
            )
            await self._audit(conn, actor, "restore", block_id, {})

        await self.db.write(job)

    async def delete(self, block_id: str, *, actor: str = "agent", reason: str = "") -> None:
        """Delete a block for good. The event log and an audit row keep the trace."""
        check_text("actor", actor)

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await load_record(conn, block_id)
            await conn.execute("DELETE FROM blocks WHERE id = ?", (block_id,))
            await conn.execute("DELETE FROM sessions WHERE block_id = ?", (block_id,))
            await self._audit(
                conn,
                actor,
                "delete",
                block_id,
                delete_detail(rec, reason),
            )

        await self.db.write(job)

    # ------------------------------------------------------------------ events

    async def request_review(self, block_id: str, *, reason: str) -> dict[str, Any]:
        """Put a block in the human review queue (one open item per block)."""
        now = self.clock.time()

        async def job(conn: aiosqlite.Connection) -> dict[str, Any]:
            await load_record(conn, block_id)
            await conn.execute(
                "INSERT OR IGNORE INTO reviews (id, block_id, reason, created_at)"
                " VALUES (?, ?, ?, ?)",
                (new_id(), block_id, reason[:1000], now),
            )
            async with conn.execute(
                "SELECT id, status, reason FROM reviews WHERE block_id = ? AND status = 'pending'",
                (block_id,),
            ) as cur:
                row = one_row(await cur.fetchone(), "the pending review")  # inserted or open
            return {"review_id": row[0], "block_id": block_id, "status": row[1], "reason": row[2]}

        return await self.db.write(job)

    async def set_meta(self, key: str, value: str) -> None:
        async def job(conn: aiosqlite.Connection) -> None:
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

        await self.db.write(job)

    # ------------------------------------------------------------------ reads
    async def _audit(
        self, conn: aiosqlite.Connection, actor: str, action: str, block_id: str, detail: Any
    ) -> None:
        await conn.execute(
            "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?, ?, ?, ?, ?)",
            (self.clock.time(), actor, action, block_id, json.dumps(detail, default=str)),
        )


async def _replace_bindings(
    conn: aiosqlite.Connection,
    rid: int,
    block_id: str,
    bindings: Sequence[Binding],
    now: float,
    *,
    node: str,
) -> bool:
    """Make ``bindings`` the block's own; True when they differ from the stored ones.

    A binding kept as it was keeps its row (and its quarantine, if any); open
    revalidation requests of a removed one are closed (``expired``, outcome
    ``unbound``); a new binding makes the block's pending binding proposals moot.
    """
    async with conn.execute(
        "SELECT id, sensor, subject, selector, nodes FROM bindings WHERE block_rid = ?", (rid,)
    ) as cur:
        rows = await cur.fetchall()
    change = diff_bindings([tuple(r) for r in rows], bindings, node=node)
    if change is None:
        return False
    await conn.executemany("DELETE FROM bindings WHERE id = ?", [(i,) for i in change.dropped])
    await conn.executemany(
        _BINDING_INSERT,
        [(rid, s, subj, sel, now, nodes, node) for s, subj, sel, nodes in change.new],
    )
    await conn.executemany(
        "UPDATE bindings SET nodes = ? WHERE id = ?", [(n, i) for i, n in change.renodes]
    )
    await conn.executemany(
        "UPDATE revalidations SET status = 'expired', finished_at = ?, outcome = 'unbound'"
        " WHERE block_id = ? AND sensor = ? AND subject = ? AND status IN ('pending', 'sent')",
        [(now, block_id, s, subj) for s, subj in change.unbound],
    )
    if change.new:
        await conn.execute(
            "UPDATE proposals SET status = 'obsolete', decided_at = ? WHERE block_rid = ?"
            " AND kind = 'binding' AND status = 'pending'",
            (now, rid),
        )
    return True


async def _insert_dependencies(
    conn: aiosqlite.Connection, news: Sequence[NewBlock], first_rid: int, new_ids: set[str]
) -> None:
    """Record ``depends_on``; every target must exist (or be added in the same call) in
    the dependent block's namespace: a block of another namespace is "no block"."""
    rows = dependency_rows(news, first_rid)
    if not rows:
        return
    targets = list({dep for dep, _ in rows} - new_ids)
    found = {
        str(r[0]): str(r[1])
        for r in await select_in(conn, "SELECT id, namespace FROM blocks WHERE id IN ", targets)
    }
    missing_dependencies(news, found, new_ids)
    await conn.executemany(
        "INSERT OR IGNORE INTO dependencies (depends_on, block_rid) VALUES (?, ?)", rows
    )


async def _find_duplicates(
    conn: aiosqlite.Connection, records: Sequence[BlockRecord], keys: Sequence[str]
) -> dict[int, str]:
    async def candidates(key: str, namespace: str) -> Sequence[tuple[Any, Any]]:
        rows = await conn.execute_fetchall(
            "SELECT id, content FROM blocks WHERE content_key = ? AND state <> 'archived'"
            " AND namespace = ? ORDER BY id",
            (key, namespace),
        )
        return [(r[0], r[1]) for r in rows]

    return await find_duplicates(records, keys, candidates)
