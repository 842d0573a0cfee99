"""Writes of blocks: add (with bindings, dependencies and deduplication), edit, archive,
restore, delete; the review queue's entry and the daemon's small facts (``meta``).

Each write is one writer job (one transaction, group-committed with others); the
:class:`~memwarden.memory._store.Store` reads the block back after it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memwarden.errors import ValidationInputError, VersionConflictError
from memwarden.memory._codec import (
    BLOCK_COLUMNS,
    binding_selector_json,
    content_key,
    new_record,
    normalise_content,
    record_to_row,
)
from memwarden.memory._ids import new_id
from memwarden.memory._model import BlockState, NewBlock
from memwarden.memory._results import BlockPatch, validate_input
from memwarden.memory._sql import load_record, save_record, select_in
from memwarden.memory.policy import demote_core

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database
    from memwarden.memory._model import Binding
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy import PolicyConfig

__all__ = ["Blocks"]

_BLOCK_INSERT = (  # the record's columns, then content_key
    f"INSERT INTO blocks ({', '.join(BLOCK_COLUMNS)}, content_key) "
    f"VALUES ({', '.join('?' for _ in BLOCK_COLUMNS)}, ?)"
)


class Blocks:
    """Writes of blocks and of the small tables around them."""

    def __init__(self, db: Database, clock: Clock, policy: PolicyConfig) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy

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
        validated = []
        errors: list[tuple[str, str]] = []
        for i, item in enumerate(news):
            try:
                validated.append(validate_input(NewBlock, item))
            except ValidationInputError as err:
                prefix = f"{i}." if len(news) > 1 else ""
                errors.extend((prefix + f, m) for f, m in err.errors)
        if errors:
            raise ValidationInputError(errors)
        now = self.clock.time()
        all_records = [
            new_record(n, block_id=new_id(), now=now, cfg=self.policy) for n in validated
        ]
        all_keys = [content_key(r.content) for r in all_records]
        answer = [r.id for r in all_records]
        records = all_records
        found: dict[int, str] = {}

        async def job(conn: aiosqlite.Connection) -> None:
            nonlocal validated, records
            if dedupe:  # in the writer: two concurrent adds of one fact store it once
                found.update(await _find_duplicates(conn, all_records, all_keys))
                keep = [i for i in range(len(all_records)) if i not in found]
                records = [all_records[i] for i in keep]
                validated = [validated[i] for i in keep]
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
            binding_rows = [
                (first + i, b.sensor, b.subject, binding_selector_json(b), now)
                for i, n in enumerate(validated)
                for b in n.bindings
            ]
            if binding_rows:
                await conn.executemany(
                    "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    binding_rows,
                )
            if audit_rows:
                await conn.executemany(
                    "INSERT INTO audit (at, actor, action, block_id, detail) VALUES (?,?,?,?,?)",
                    audit_rows,
                )
            await _insert_dependencies(conn, validated, first, {r.id for r in records})

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
        p = validate_input(BlockPatch, patch)
        nulls = [k for k in sorted(p.model_fields_set) if getattr(p, k) is None]
        if nulls:  # None means "absent" only when left out; an explicit null is an error
            raise ValidationInputError(
                [(k, "cannot be null (leave the field out to keep its value)") for k in nulls]
            )
        changes = p.model_dump(exclude_unset=True, exclude={"bindings"})
        bindings = p.bindings
        now = self.clock.time()
        cfg = self.policy

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await load_record(conn, block_id)
            if expected_version is not None and rec.version != expected_version:
                raise VersionConflictError(rec.id, expected_version, rec.version)
            old = (rec.version, rec.title, rec.content, json.dumps(rec.tags))
            rebound = bindings is not None and await _replace_bindings(
                conn, rec.rid, rec.id, bindings, now
            )
            if _apply_patch(rec, changes, now, cfg, rebound=rebound):  # a new version
                await conn.execute(
                    "INSERT INTO block_history (block_id, version, title, content, tags,"
                    " replaced_at, replaced_by) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rec.id, *old, now, actor),
                )
            await save_record(conn, rec)
            if "content" in changes:
                await conn.execute(
                    "UPDATE blocks SET content_key = ? WHERE rid = ?",
                    (content_key(rec.content), rec.rid),
                )
            detail = dict(changes)
            if bindings is not None:
                # Sensor and subject only: an expected value may be a secret's.
                detail["bindings"] = [{"sensor": b.sensor, "subject": b.subject} for b in bindings]
            await self._audit(conn, actor, "update", rec.id, detail)

        await self.db.write(job)

    async def archive(self, block_id: str, *, reason: str, actor: str = "agent") -> None:
        """Move a block to cold storage (out of search) with a reason."""
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

        async def job(conn: aiosqlite.Connection) -> None:
            rec = await load_record(conn, block_id)
            await conn.execute("DELETE FROM blocks WHERE id = ?", (block_id,))
            await conn.execute("DELETE FROM sessions WHERE block_id = ?", (block_id,))
            await self._audit(
                conn,
                actor,
                "delete",
                block_id,
                {"reason": reason, "title": rec.title, "content": rec.content[:1000]},
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
                row = await cur.fetchone()
            assert row is not None  # noqa: S101 - inserted or already open just above
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


def _apply_patch(
    rec: BlockRecord,
    changes: dict[str, Any],
    now: float,
    cfg: PolicyConfig,
    *,
    rebound: bool = False,
) -> bool:
    """Apply an edit to a record; True when it is a new version (the text or the
    bindings changed).

    A new text was never checked: the block becomes unverified again, its window
    restarts, and a core block is demoted (the core rule: an update demotes). New
    bindings (``rebound``) were never checked either: unverified again, the window
    restarts, a new version (what a compare-and-set on the version must see); the text,
    tier and reliability stay.
    """
    text_changed = any(
        k in changes and changes[k] != getattr(rec, k) for k in ("title", "content", "tags")
    )
    if text_changed or rebound:
        rec.version += 1
    if text_changed:
        demote_core(rec, cfg)
    if (text_changed or rebound) and rec.state in (
        BlockState.FRESH,
        BlockState.STALE,
        BlockState.REFUTED,
    ):
        rec.state = BlockState.UNVERIFIED.value
        rec.stale_reasons = []
    for key in ("title", "content", "importance"):
        if key in changes:
            setattr(rec, key, changes[key])
    if "tags" in changes:
        rec.tags = list(dict.fromkeys(changes["tags"]))
    for key in ("category", "info_type", "volatility"):
        if key in changes:
            setattr(rec, key, str(changes[key].value))
    if "volatility" in changes and "validity_window" not in changes:
        rec.validity_window_s = cfg.window_s(rec.volatility)
        rec.half_life_s = cfg.half_life_s(rec.volatility)
    if "validity_window" in changes:
        rec.validity_window_s = changes["validity_window"].total_seconds()
    if "signals" in changes:
        rec.signals = {**rec.signals, **changes["signals"]}
    base = rec.validated_at if rec.validated_at is not None else rec.created_at
    rec.stale_at = (now if text_changed or rebound else base) + rec.validity_window_s
    rec.updated_at = now
    return text_changed or rebound


async def _replace_bindings(
    conn: aiosqlite.Connection, rid: int, block_id: str, bindings: Sequence[Binding], now: float
) -> bool:
    """Make ``bindings`` the block's own; True when they differ from the stored ones.

    A binding kept as it was keeps its row (and its quarantine, if any); open
    revalidation requests of a removed one are closed (``expired``, outcome
    ``unbound``); a new binding makes the block's pending binding proposals moot.
    """
    async with conn.execute(
        "SELECT id, sensor, subject, selector FROM bindings WHERE block_rid = ?", (rid,)
    ) as cur:
        rows = await cur.fetchall()
    # Compared as the selectors' JSON re-encoded alike: a row written another way matches.
    stored: dict[tuple[str, str, str], list[int]] = {}
    for r in rows:
        stored.setdefault((str(r[1]), str(r[2]), _selector_key(str(r[3]))), []).append(int(r[0]))
    wanted = {(b.sensor, b.subject, _selector_key(binding_selector_json(b))): b for b in bindings}
    gone = [key for key in stored if key not in wanted]
    new = [key for key in wanted if key not in stored]
    # A binding stored twice (an old import) is kept once: its first row.
    dropped = [i for key, ids in stored.items() for i in (ids if key in gone else ids[1:])]
    if not dropped and not new:
        return False
    await conn.executemany("DELETE FROM bindings WHERE id = ?", [(i,) for i in dropped])
    await conn.executemany(
        "INSERT INTO bindings (block_rid, sensor, subject, selector, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        [
            (rid, s, subj, binding_selector_json(wanted[(s, subj, sel)]), now)
            for s, subj, sel in new
        ],
    )
    kept = {(s, subj) for s, subj, _ in wanted}
    closed = [(now, block_id, s, subj) for s, subj, _ in gone if (s, subj) not in kept]
    await conn.executemany(
        "UPDATE revalidations SET status = 'expired', finished_at = ?, outcome = 'unbound'"
        " WHERE block_id = ? AND sensor = ? AND subject = ? AND status IN ('pending', 'sent')",
        closed,
    )
    if new:
        await conn.execute(
            "UPDATE proposals SET status = 'obsolete', decided_at = ? WHERE block_rid = ?"
            " AND kind = 'binding' AND status = 'pending'",
            (now, rid),
        )
    return True


def _selector_key(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except ValueError:  # a row gone wrong never matches a binding given now
        return text


async def _insert_dependencies(
    conn: aiosqlite.Connection, news: Sequence[NewBlock], first_rid: int, new_ids: set[str]
) -> None:
    """Record ``depends_on``; every target must exist (or be added in the same call) in
    the dependent block's namespace: a block of another namespace is "no block"."""
    rows = [(dep, first_rid + i) for i, n in enumerate(news) for dep in dict.fromkeys(n.depends_on)]
    if not rows:
        return
    targets = list({dep for dep, _ in rows} - new_ids)
    found = {
        str(r[0]): str(r[1])
        for r in await select_in(conn, "SELECT id, namespace FROM blocks WHERE id IN ", targets)
    }
    missing = [
        (f"{i}.depends_on.{j}" if len(news) > 1 else f"depends_on.{j}", f"no block {dep!r}")
        for i, n in enumerate(news)
        for j, dep in enumerate(n.depends_on)
        if found.get(dep) != (n.namespace or "default") and dep not in new_ids
    ]
    if missing:
        raise ValidationInputError(missing)
    await conn.executemany(
        "INSERT OR IGNORE INTO dependencies (depends_on, block_rid) VALUES (?, ?)", rows
    )


async def _find_duplicates(
    conn: aiosqlite.Connection, records: Sequence[BlockRecord], keys: Sequence[str]
) -> dict[int, str]:
    """For each new record whose content a live block (or an earlier new one) already
    holds: its index and that block's id."""
    found: dict[int, str] = {}
    first_new: dict[tuple[str, str], int] = {}
    for i, (rec, key) in enumerate(zip(records, keys, strict=True)):
        rows = await conn.execute_fetchall(  # a namespace's duplicate only: never another's
            "SELECT id, content FROM blocks WHERE content_key = ? AND state <> 'archived'"
            " AND namespace = ? ORDER BY id",
            (key, rec.namespace),
        )
        wanted = normalise_content(rec.content)
        match = next((str(r[0]) for r in rows if normalise_content(r[1]) == wanted), None)
        if match is not None:
            found[i] = match
        elif (rec.namespace, key) in first_new:
            found[i] = records[first_new[rec.namespace, key]].id
        else:
            first_new[rec.namespace, key] = i
    return found
