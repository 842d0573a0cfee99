"""Erasure: a block's content goes from every place the store keeps it, and a tombstone
says it went.

Where a block's words live, and what erasure does there (one writer transaction):

- ``blocks`` (title, content, tags), ``block_history`` (earlier versions): deleted;
- ``bindings`` (selectors: a path, a regex, an expected value; quarantine notes):
  deleted; ``dependencies`` both ways: deleted;
- ``blocks_fts`` (the FTS5 index): the row leaves it by the usual trigger, but on SQLite
  before 3.42 (no ``secure-delete`` option) its terms stay in the index's segments
  until they are merged, so the whole index is merged (``optimize``) in the same
  transaction: the segments that held the terms are rewritten without them;
- ``events`` that reached the block (``effects``), or named it (``block_id``): deleted
  when they reached no other block; otherwise kept in those blocks' histories with
  their observation and message blanked. ``effects`` and ``event_runs`` of the block:
  deleted. (The one sanctioned rewrite of the append-only log, under the guard row.)
- ``reviews`` (reasons, comments), ``revalidations``, ``accesses``, ``sessions``:
  deleted; ``audit`` rows about the block stay (who did what, when) with their detail
  (an edit's new text, an archive reason) replaced by ``{"erased": true}``;
- ``dead_letters`` and the MQTT ``outbox`` whose payload names the block: deleted;
- then a tombstone per block in ``erasures`` (id, when, who, why, rows removed).

``PRAGMA secure_delete`` is on for the transaction (and, by default, for every write:
``Database(secure_delete=True)``), so SQLite overwrites what it frees with zeros. After
the commit, :func:`checkpoint` copies the WAL into the database file and truncates it
(``wal_checkpoint(TRUNCATE)``), and, when asked, ``VACUUM`` rewrites the whole file
first. The score log's lines about the block are dropped by the store
(:meth:`~memwarden.memory._scorelog.ScoreLog.drop_blocks`).
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwarden.errors import NotFoundError, StorageError, ValidationInputError
from memwarden.memory._blockedit import check_text
from memwarden.memory._fts import fts_query, query_terms
from memwarden.memory._sql import chunks, namespace_clause, placeholders, select_in

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database

__all__ = [
    "ERASED_DETAIL",
    "MAX_ERASE",
    "REASON_CHARS",
    "UNREACHABLE",
    "ErasureReport",
    "ErasureTarget",
    "check_found",
    "checkpoint",
    "erase",
    "erase_ids",
    "holds_words",
    "select_targets",
    "selection_field",
    "storable_ids",
    "targets_of",
    "tombstone_of",
    "tombstones",
    "totals",
]

MAX_ERASE = 1000  # blocks one erasure may take (a tag or a query naming more is refused)
REASON_CHARS = 500

UNREACHABLE: tuple[str, ...] = (
    "backups made before the erasure (memwarden backup, file-system snapshots, copies)",
    "exports written before it (memwarden export files)",
    "the daemon's log lines (journald, log files): they name block ids, not content",
    "the MQTT broker's persistence: messages queued for offline subscribers, its own disk",
    "remote agents' durable queues (agent-queue.db on their hosts)",
    "clients and agents that already read the block (their caches, transcripts)",
    "the disk below SQLite: blocks the file system or an SSD moved or kept",
)
ERASED_DETAIL = json.dumps({"erased": True})
_WORD = re.compile(r"\w+", re.UNICODE)
_TEXT_CHARS = 80
_COLUMNS = "id, title, state, substr(content, 1, 200)"


@dataclass(frozen=True, slots=True)
class ErasureTarget:
    """A block an erasure would take (what a dry run lists)."""

    id: str
    title: str
    state: str
    text: str  # the title, else the start of the content: what the person confirms

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "state": self.state, "text": self.text}


@dataclass(slots=True)
class ErasureReport:
    """What an erasure removed, table by table, and what it did to the files."""

    erased: list[str]
    removed: dict[str, int] = field(default_factory=dict)
    score_log_lines: int = 0
    fts: str = "optimize"
    vacuumed: bool = False
    wal_truncated: bool | None = False  # None: the backend has no WAL file (PostgreSQL)
    wal_checkpoint: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "erased": list(self.erased),
            "removed": dict(self.removed),
            "score_log_lines": self.score_log_lines,
            "fts": self.fts,
            "vacuumed": self.vacuumed,
            "wal_truncated": self.wal_truncated,
            "wal_checkpoint": dict(self.wal_checkpoint),
        }


# ------------------------------------------------------------------ choosing


async def select_targets(
    db: Database,
    *,
    ids: Sequence[str] = (),
    tag: str | None = None,
    query: str | None = None,
    namespaces: Sequence[str] | None = None,
) -> list[ErasureTarget]:
    """The blocks named by full ``ids`` (each must exist), carrying ``tag``, or holding
    every word of ``query`` (archived blocks included), in id order. With
    ``namespaces``, only blocks of those exist (another's id is not found; another's
    tag or words select nothing and count toward no limit).

    Exactly one of the three. A query is matched as words, never as FTS syntax; one
    without any word, or a selection of more than :data:`MAX_ERASE` blocks, is refused.
    """
    given = selection_field(ids=ids, tag=tag, query=query)
    scope, scope_args = namespace_clause(namespaces)
    async with db.read() as conn:
        if ids:
            known = storable_ids(ids)
            rows = await select_in(conn, f"SELECT {_COLUMNS} FROM blocks WHERE id IN ", known)
            if namespaces is not None:
                owned = await select_in(
                    conn, "SELECT id, namespace FROM blocks WHERE id IN ", known
                )
                visible = {r[0] for r in owned if r[1] in namespaces}
                rows = [r for r in rows if r[0] in visible]
            check_found(ids, {r[0] for r in rows})
        elif tag:
            rows = list(
                await conn.execute_fetchall(
                    f"SELECT {_COLUMNS} FROM blocks WHERE EXISTS"
                    f" (SELECT 1 FROM json_each(blocks.tags) WHERE value = ?){scope} LIMIT ?",
                    (tag, *scope_args, MAX_ERASE + 1),
                )
            )
        else:
            rows = await _matching(conn, str(query), namespaces)
    return targets_of(rows, given)


def selection_field(*, ids: Sequence[str], tag: str | None, query: str | None) -> str:
    """Which one of ``ids``, ``tag`` and ``query`` names the blocks (exactly one must)."""
    given = [name for name, v in (("ids", ids), ("tag", tag), ("query", query)) if v]
    if len(given) != 1:
        raise ValidationInputError(
            [("ids", "name the blocks to erase by ids, tag or query (exactly one of them)")]
        )
    return given[0]


def storable_ids(values: Sequence[str]) -> list[str]:
    """Those of ``values`` a store can hold as text (no NUL, valid UTF-8): the others
    name no block (a lone surrogate would make SQLite's driver raise, a NUL
    PostgreSQL's)."""
    out = []
    for value in values:
        if "\x00" in value:
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            continue
        out.append(value)
    return out


def check_found(ids: Sequence[str], found: set[str]) -> None:
    """:class:`NotFoundError` for the first of ``ids`` not ``found``."""
    missing = [i for i in dict.fromkeys(ids) if i not in found]
    if missing:
        raise NotFoundError("block", missing[0])


def targets_of(rows: Sequence[Sequence[Any]], field_name: str) -> list[ErasureTarget]:
    """``(id, title, state, start of content)`` rows as targets in id order; more than
    :data:`MAX_ERASE` are refused (naming ``field_name``)."""
    if len(rows) > MAX_ERASE:
        raise ValidationInputError(
            [(field_name, f"names more than {MAX_ERASE} blocks: narrow it, or erase in steps")]
        )
    return sorted(
        (ErasureTarget(str(r[0]), str(r[1]), str(r[2]), _text(r[1], r[3])) for r in rows),
        key=_by_id,
    )


def holds_words(wanted: set[str], title: str, content: str, tags: str) -> bool:
    """Whether an archived block (not in the search index) holds every ``wanted`` word."""
    return wanted <= _words(f"{title} {content} {tags}")


def _text(title: str, content: str) -> str:
    text = " ".join(str(title or content).split())
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "…"


def _by_id(t: ErasureTarget) -> str:
    return t.id


async def _matching(
    conn: aiosqlite.Connection, query: str, namespaces: Sequence[str] | None = None
) -> list[Any]:
    """Live blocks through the index (every word); archived ones, which are not in it,
    by their words; of ``namespaces`` only, when given."""
    scope, scope_args = namespace_clause(namespaces, column="b.namespace")
    archived_scope, _ = namespace_clause(namespaces)
    match = fts_query(query)
    if match is None:
        raise ValidationInputError([("query", f"{query[:80]!r} holds no word to match")])
    try:
        live = list(
            await conn.execute_fetchall(
                "SELECT b.id, b.title, b.state, substr(b.content, 1, 200) FROM blocks_fts f"
                " JOIN blocks b ON b.rid = f.rowid"
                f" WHERE blocks_fts MATCH ?{scope} LIMIT ?",
                (match, *scope_args, MAX_ERASE + 1),
            )
        )
    except sqlite3.OperationalError as err:  # the query is quoted words: should not happen
        raise ValidationInputError([("query", f"cannot be matched: {err}")]) from None
    wanted = set(query_terms(query))
    async with conn.execute(
        f"SELECT id, title, state, content, tags FROM blocks WHERE state = 'archived'"
        f"{archived_scope}",
        scope_args,
    ) as cur:
        archived = [
            (*row[:3], row[3][:200])
            async for row in cur
            if holds_words(wanted, row[1], row[3], row[4])
        ]
    return live + archived


def _words(text: str) -> set[str]:
    """Every word of ``text`` as the query's are cut (:func:`query_terms` stops at
    ``MAX_QUERY_TERMS`` words; a block has more)."""
    return {w.lower()[:64] for w in _WORD.findall(text)}


# ------------------------------------------------------------------ erasing


async def erase(
    db: Database, clock: Clock, block_ids: Sequence[str], *, actor: str, reason: str
) -> ErasureReport:
    """Remove these blocks' content from every table (one transaction; all or nothing:
    an unknown id changes nothing) and leave a tombstone per block."""
    ids = erase_ids(block_ids)
    check_text("actor", actor)
    check_text("reason", reason)
    now = clock.time()
    why = reason[:REASON_CHARS]

    async def job(conn: aiosqlite.Connection) -> ErasureReport:
        async with conn.execute("PRAGMA secure_delete") as cur:
            before = int((await cur.fetchone() or (0,))[0])
        await conn.execute("PRAGMA secure_delete = ON")
        try:
            removed = await _erase_rows(conn, ids)
            for block_id in ids:
                await conn.execute(
                    "INSERT INTO erasures (block_id, erased_at, actor, reason, removed)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (block_id, now, actor, why, json.dumps(removed.get(block_id, {}))),
                )
            # Merge every segment of the index into one: the deleted rows' terms, which
            # FTS5 before 3.42 keeps in the old segments, are not copied.
            await conn.execute("INSERT INTO blocks_fts(blocks_fts) VALUES ('optimize')")
        finally:
            await conn.execute(f"PRAGMA secure_delete = {before}")
        return ErasureReport(erased=ids, removed=totals(removed))

    return await db.write(job, weight=len(ids) * 10)


def erase_ids(block_ids: Sequence[str]) -> list[str]:
    """The ids one erasure takes (each once, in order): at least one, at most
    :data:`MAX_ERASE`."""
    ids = list(dict.fromkeys(block_ids))
    if not ids:
        raise ValidationInputError([("ids", "no block to erase")])
    if len(ids) > MAX_ERASE:
        raise ValidationInputError([("ids", f"more than {MAX_ERASE} blocks in one erasure")])
    return ids


def totals(removed: dict[str, dict[str, int]]) -> dict[str, int]:
    """Rows removed per table over every block, by table name."""
    counted: Counter[str] = Counter()
    for per_block in removed.values():
        counted.update(per_block)
    return dict(sorted(counted.items()))


def tombstone_of(row: Sequence[Any]) -> dict[str, Any]:
    """An ``erasures`` row (id, block_id, erased_at, actor, reason, removed) as listed."""
    return {
        "id": int(row[0]),
        "block_id": row[1],
        "erased_at": float(row[2]),
        "actor": row[3],
        "reason": row[4],
        "removed": json.loads(row[5]),
    }


async def _erase_rows(conn: aiosqlite.Connection, ids: list[str]) -> dict[str, dict[str, int]]:
    rows = await select_in(conn, "SELECT rid, id FROM blocks WHERE id IN ", storable_ids(ids))
    rid_of = {str(r[1]): int(r[0]) for r in rows}
    check_found(ids, set(rid_of))
    removed: dict[str, dict[str, int]] = {}
    for block_id in ids:
        removed[block_id] = await _erase_one(conn, block_id, rid_of[block_id])
    return removed


async def _count(conn: aiosqlite.Connection, sql: str, args: Sequence[Any]) -> int:
    async with conn.execute(sql, args) as cur:
        return max(0, cur.rowcount)


async def _erase_one(conn: aiosqlite.Connection, block_id: str, rid: int) -> dict[str, int]:
    n: dict[str, int] = {}
    seqs = sorted(
        {
            int(r[0])
            for r in await conn.execute_fetchall(
                "SELECT event_seq FROM effects WHERE block_rid = ?"
                " UNION SELECT seq FROM events WHERE block_id = ?",
                (rid, block_id),
            )
        }
    )
    await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
    try:
        n["effects"] = await _count(conn, "DELETE FROM effects WHERE block_rid = ?", (rid,))
        n["event_runs"] = await _count(conn, "DELETE FROM event_runs WHERE block_rid = ?", (rid,))
        n["events"] = 0
        n["events_blanked"] = 0
        for part in chunks(seqs):
            n["events"] += await _count(
                conn,
                f"DELETE FROM events WHERE seq IN {placeholders(len(part))}"
                " AND NOT EXISTS (SELECT 1 FROM effects WHERE event_seq = events.seq)",
                part,
            )
            n["events_blanked"] += await _count(
                conn,
                "UPDATE events SET message = '', observed = NULL, block_id = NULL"
                f" WHERE seq IN {placeholders(len(part))}",
                part,
            )
    finally:
        await conn.execute("DELETE FROM compaction_guard")
    by_id = (block_id,)
    n["history"] = await _count(conn, "DELETE FROM block_history WHERE block_id = ?", by_id)
    n["reviews"] = await _count(conn, "DELETE FROM reviews WHERE block_id = ?", by_id)
    n["revalidations"] = await _count(conn, "DELETE FROM revalidations WHERE block_id = ?", by_id)
    n["accesses"] = await _count(conn, "DELETE FROM accesses WHERE block_id = ?", by_id)
    n["sessions"] = await _count(conn, "DELETE FROM sessions WHERE block_id = ?", by_id)
    n["audit_blanked"] = await _count(
        conn, "UPDATE audit SET detail = ? WHERE block_id = ?", (ERASED_DETAIL, block_id)
    )
    n["dead_letters"] = await _count(
        conn, "DELETE FROM dead_letters WHERE instr(payload, ?) > 0", by_id
    )
    n["outbox"] = await _count(
        conn, "DELETE FROM outbox WHERE instr(payload, ?) > 0", (block_id.encode(),)
    )
    n["dependencies"] = await _count(
        conn, "DELETE FROM dependencies WHERE depends_on = ? OR block_rid = ?", (block_id, rid)
    )
    n["proposals"] = await _count(  # its own, and those proposing a dependency on it
        conn,
        "DELETE FROM proposals WHERE block_rid = ?"
        " OR (kind = 'depends_on' AND json_extract(proposal, '$.depends_on') = ?)",
        (rid, block_id),
    )
    n["bindings"] = await _count(conn, "DELETE FROM bindings WHERE block_rid = ?", (rid,))
    n["blocks"] = await _count(conn, "DELETE FROM blocks WHERE rid = ?", (rid,))
    return {k: v for k, v in n.items() if v}


# ------------------------------------------------------------------ the files


async def checkpoint(path: Path, *, vacuum: bool = False, attempts: int = 3) -> dict[str, int]:
    """Copy the WAL into the database file and truncate it (after ``VACUUM``, if asked),
    on a connection of its own; returns SQLite's answer (``busy``, ``log``,
    ``checkpointed``). ``busy`` is 1 when a reader kept it from finishing even after
    ``attempts`` tries (each waits up to the busy timeout)."""
    return await asyncio.to_thread(_checkpoint_sync, path, vacuum=vacuum, attempts=attempts)


def _checkpoint_sync(path: Path, *, vacuum: bool, attempts: int) -> dict[str, int]:
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    except sqlite3.Error as err:
        raise StorageError(f"cannot open {path} to checkpoint it: {err}") from err
    try:
        conn.execute("PRAGMA secure_delete = ON")
        if vacuum:
            conn.execute("VACUUM")
        answer = (1, -1, -1)
        for _ in range(max(1, attempts)):
            row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            answer = (int(row[0]), int(row[1]), int(row[2]))
            if answer[0] == 0:
                break
    except sqlite3.Error as err:
        raise StorageError(f"checkpoint of {path} failed: {err}") from err
    finally:
        conn.close()
    return {"busy": answer[0], "log": answer[1], "checkpointed": answer[2]}


# ------------------------------------------------------------------ the tombstones


async def tombstones(
    db: Database, *, block_id: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """The erasure log, newest first (only ``block_id``'s, if given)."""
    where, args = ("WHERE block_id = ?", [block_id]) if block_id else ("", [])
    async with db.read() as conn:
        rows = await conn.execute_fetchall(
            f"SELECT id, block_id, erased_at, actor, reason, removed FROM erasures {where}"
            " ORDER BY id DESC LIMIT ?",
            (*args, limit),
        )
    return [tombstone_of(r) for r in rows]
