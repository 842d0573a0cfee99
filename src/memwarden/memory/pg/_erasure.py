"""Erasure on PostgreSQL: a block's content goes from every table, a tombstone says it went.

The same contract as :mod:`~memwarden.memory._erasure` on SQLite (the same targets, the
same rows removed and counted, the same tombstones, all or nothing; the choosing rules,
the limits and the counting are that module's), with PostgreSQL's SQL:

- ``blocks``, ``block_history``, ``bindings``, ``dependencies``, ``proposals``,
  ``reviews``, ``revalidations``, ``accesses``, ``sessions``, the ``dead_letters`` and
  ``outbox`` rows whose payload names the block: deleted; ``events`` that reached only
  these blocks deleted, the others blanked (under the guard row, as on SQLite); ``audit``
  details replaced by ``{"erased": true}``; ``retention_points``, ``embed_queue`` and
  ``block_vectors`` go with the block (trigger, cascades);
- the full-text index is the block's generated ``search`` column: it goes with the row
  (there is no separate index to merge, as SQLite's FTS5 ``optimize``).

What PostgreSQL keeps after the commit, and what ``vacuum=True`` does about it (SQLite's
``secure_delete``, WAL checkpoint and ``VACUUM`` have no exact equivalent here; measured
on PostgreSQL 15 by reading the data files, see docs/PRIVACY.md):

- a deleted or updated row is a *dead tuple*: its bytes (title, content, tags, an old
  event's observation) stay in the table's pages, and in its TOAST table for long
  values. No query sees them; a copy of the data files does. A plain ``VACUUM`` (or
  autovacuum) frees the space but leaves the bytes on a page that still holds live rows
  until new rows overwrite them;
- the GIN index keeps the words (lexemes) of erased blocks as keys, with empty posting
  lists, until it is rebuilt; B-tree indexes keep ``id`` entries until vacuumed;
- ``pg_statistic`` (``pg_stats``) holds sampled column values (most common values,
  histogram bounds: a title, a tag) until the next ``ANALYZE``, and the replaced ones as
  its own dead tuples after it;
- the write-ahead log holds the rows as written until its segments are recycled and
  overwritten; archived WAL (point-in-time recovery), streaming replicas and base backups
  keep their copies: they are outside the store (:data:`UNREACHABLE`, docs/PRIVACY.md).

With ``vacuum=True`` the erase is followed by ``VACUUM (FULL, ANALYZE)`` of the tables it
touched, then ``VACUUM FULL pg_statistic``: each is rewritten into new files with only
its live rows (TOAST and indexes rebuilt, statistics resampled; rewriting
``pg_statistic`` needs the database's owner, else PostgreSQL skips it with a warning)
and the old files are deleted (what the file system then
does with their blocks is below the store). It runs outside the transaction, on a
connection of its own, and holds each table's ACCESS EXCLUSIVE lock while rewriting it:
reads and writes of that table wait (seconds per 100k blocks). Like SQLite's ``VACUUM``
it is asked for, not run by default. It cannot drop rows an older snapshot may still see
(a long transaction, a replica with ``hot_standby_feedback``): those stay until the next.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, ClassVar

from memwarden.errors import ValidationInputError
from memwarden.memory import _erasure
from memwarden.memory._blockedit import check_text
from memwarden.memory._erasure import (
    ERASED_DETAIL,
    MAX_ERASE,
    REASON_CHARS,
    ErasureReport,
    ErasureTarget,
    check_found,
    erase_ids,
    holds_words,
    selection_field,
    storable_ids,
    targets_of,
    tombstone_of,
    totals,
)
from memwarden.memory._fts import query_terms
from memwarden.memory._retention import run
from memwarden.memory._sql import namespace_clause, one_row
from memwarden.memory.pg._retention import PgRetentionSteps
from memwarden.memory.pg._search import CONFIG, WORDS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._retention import RetentionConfig, RetentionReport
    from memwarden.memory._scorelog import ScoreLog
    from memwarden.memory._vectors import VectorIndex
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["UNREACHABLE", "VACUUMED_TABLES", "PgErasure"]

UNREACHABLE: tuple[str, ...] = (
    *(u for u in _erasure.UNREACHABLE if "SQLite" not in u),
    "PostgreSQL's dead tuples and index keys until VACUUM FULL (erase with vacuum)",
    "PostgreSQL's write-ahead log until recycled, archived WAL, replicas and base backups",
    "the disk below PostgreSQL: blocks the file system or an SSD moved or kept",
)
# The tables an erasure deletes from or rewrites (vacuumed after it, when asked).
VACUUMED_TABLES = (
    "blocks",
    "block_history",
    "bindings",
    "dependencies",
    "proposals",
    "events",
    "effects",
    "event_runs",
    "reviews",
    "revalidations",
    "accesses",
    "sessions",
    "audit",
    "dead_letters",
    "outbox",
    "retention_points",
    "embed_queue",
    "block_vectors",
    "block_falls",
)
_COLUMNS = "id, title, state, substr(content, 1, 200)"


def _scope(
    namespaces: Sequence[str] | None, n: int, column: str = "namespace"
) -> tuple[str, list[Any]]:
    """SQLite's :func:`~memwarden.memory._sql.namespace_clause` as ``= ANY($n)``."""
    if namespaces is None:
        return "", []
    namespace_clause(namespaces)  # the same limit, the same error
    return f" AND {column} = ANY(${n}::text[])", [list(namespaces)]


def _rows(status: str) -> int:
    """The row count of a command's status (``DELETE 3``, ``UPDATE 0``)."""
    return int(status.rsplit(" ", 1)[-1])


class PgErasure:
    """Erasure, the erasure log and retention on a :class:`PgDatabase`: the SQLite
    Store's ``erasure_targets``, ``visible_ids``, ``erase``, ``erasures`` and
    ``enforce_retention`` with the same signatures and answers.

    ``score_log`` (set by the store once it has one) loses an erased block's lines, and
    ``vectors`` (:class:`~memwarden.memory.pg._vectors.PgVectorIndex`, with an embedder)
    the erased blocks' vectors held in memory, as the SQLite store's ``erase`` does.
    """

    unreachable: ClassVar[tuple[str, ...]] = UNREACHABLE  # what an erasure cannot reach

    def __init__(
        self,
        db: PgDatabase,
        clock: Clock,
        *,
        score_log: ScoreLog | None = None,
        vectors: VectorIndex | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.score_log = score_log
        self.vectors = vectors

    # ------------------------------------------------------------------ choosing

    async def erasure_targets(
        self,
        *,
        ids: Sequence[str] = (),
        tag: str | None = None,
        query: str | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> list[ErasureTarget]:
        """The blocks an erasure by full ``ids``, ``tag`` or ``query`` (words; archived
        blocks included) would take: what a dry run lists. An unknown id (or one of a
        namespace not in ``namespaces``, when given) is :class:`NotFoundError`."""
        given = selection_field(ids=ids, tag=tag, query=query)
        async with self.db.read() as conn:
            if ids:
                rows = await conn.fetch(
                    f"SELECT {_COLUMNS}, namespace FROM blocks WHERE id = ANY($1::text[])",
                    storable_ids(ids),
                )
                if namespaces is not None:
                    rows = [r for r in rows if r[4] in namespaces]
                check_found(ids, {r[0] for r in rows})
            elif tag:
                rows = await self._tagged(conn, tag, namespaces)
            else:
                rows = await _matching(conn, str(query), namespaces)
        return targets_of([tuple(r)[:4] for r in rows], given)

    @staticmethod
    async def _tagged(conn: PgConnection, tag: str, namespaces: Sequence[str] | None) -> list[Any]:
        scope, scope_args = _scope(namespaces, 3)
        if not storable_ids([tag]):
            return []
        return list(
            await conn.fetch(
                f"SELECT {_COLUMNS} FROM blocks WHERE tags::jsonb ? $1{scope} LIMIT $2",
                tag,
                MAX_ERASE + 1,
                *scope_args,
            )
        )

    async def visible_ids(self, block_ids: Sequence[str], namespaces: Sequence[str]) -> list[str]:
        """Those of ``block_ids`` that are blocks of ``namespaces`` (in the given order)."""
        async with self.db.read() as conn:
            rows = await conn.fetch(
                "SELECT id, namespace FROM blocks WHERE id = ANY($1::text[])",
                storable_ids(block_ids),
            )
        owned = {str(r[0]) for r in rows if r[1] in namespaces}
        return [i for i in dict.fromkeys(block_ids) if i in owned]

    # ------------------------------------------------------------------ erasing

    async def erase(
        self, block_ids: Sequence[str], *, actor: str, reason: str = "", vacuum: bool = False
    ) -> ErasureReport:
        """Remove these blocks' content from every table (one transaction; all or
        nothing: an unknown id changes nothing), a tombstone per block, the score log's
        lines; with ``vacuum``, then ``VACUUM (FULL, ANALYZE)`` the touched tables (see
        the module docstring for what stays without it)."""
        ids = erase_ids(block_ids)
        check_text("actor", actor)
        check_text("reason", reason)
        now = self.clock.time()
        why = reason[:REASON_CHARS]

        async def job(conn: PgConnection) -> ErasureReport:
            found = await conn.fetch(
                "SELECT rid, id FROM blocks WHERE id = ANY($1::text[])", storable_ids(ids)
            )
            rid_of = {str(r[1]): int(r[0]) for r in found}
            check_found(ids, set(rid_of))
            # The guard row lets the log's deletes through; the transaction ends with it gone
            # (and a failed statement rolls it back with everything else).
            await conn.execute("INSERT INTO compaction_guard (id) VALUES (1)")
            removed = {
                block_id: await _erase_one(conn, block_id, rid_of[block_id]) for block_id in ids
            }
            await conn.execute("DELETE FROM compaction_guard")
            await conn.executemany(
                "INSERT INTO erasures (block_id, erased_at, actor, reason, removed)"
                " VALUES ($1, $2, $3, $4, $5)",
                [(i, now, actor, why, json.dumps(removed.get(i, {}))) for i in ids],
            )
            return ErasureReport(erased=ids, removed=totals(removed), fts="row", wal_truncated=None)

        report = await self.db.write(job, weight=len(ids) * 10)
        if self.vectors is not None:  # the rows went with the blocks (cascade); memory too
            await self.vectors.prune()
        if self.score_log is not None:
            report.score_log_lines = await asyncio.to_thread(
                self.score_log.drop_blocks, report.erased
            )
        if vacuum:
            await self.vacuum()
            report.vacuumed = True
            report.fts = "rebuilt"
        return report

    async def vacuum(self) -> None:
        """``VACUUM (FULL, ANALYZE)`` the tables an erasure touches (new files of their
        live rows, indexes rebuilt), on a connection outside any transaction."""
        async with self.db.read() as conn:
            await conn.execute(f"VACUUM (FULL, ANALYZE) {', '.join(VACUUMED_TABLES)}")
            # ANALYZE replaced the sampled values in pg_statistic: the old rows are dead
            # tuples there. A database owner may rewrite it (others get a warning).
            await conn.execute("VACUUM FULL pg_catalog.pg_statistic")

    async def erasures(
        self, *, block_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The erasure log (tombstones: id, when, who, why, rows removed), newest first."""
        async with self.db.read() as conn:
            if block_id:
                if not storable_ids([block_id]):
                    return []
                rows = await conn.fetch(
                    "SELECT id, block_id, erased_at, actor, reason, removed FROM erasures"
                    " WHERE block_id = $1 ORDER BY id DESC LIMIT $2",
                    block_id,
                    limit,
                )
            else:
                rows = await conn.fetch(
                    "SELECT id, block_id, erased_at, actor, reason, removed FROM erasures"
                    " ORDER BY id DESC LIMIT $1",
                    limit,
                )
        return [tombstone_of(tuple(r)) for r in rows]

    # ------------------------------------------------------------------ retention

    async def enforce_retention(self, cfg: RetentionConfig) -> RetentionReport:
        """One retention pass (``[retention]``): archive, purge (erase, actor
        ``retention``), drop old events and score lines as configured; nothing when
        nothing is (see :mod:`~memwarden.memory._retention`)."""
        return await run(
            cfg,
            steps=PgRetentionSteps(self.db),
            clock=self.clock,
            erase=self.erase,
            score_log=self.score_log,
        )


async def _matching(conn: PgConnection, query: str, namespaces: Sequence[str] | None) -> list[Any]:
    """Live blocks through the ``search`` column (every word of the query, each word's
    parts in order, as SQLite's quoted FTS5 strings); archived ones, which are not in the
    index, by their words; of ``namespaces`` only, when given."""
    terms = query_terms(query)
    if not terms:
        raise ValidationInputError([("query", f"{query[:80]!r} holds no word to match")])
    phrases = await conn.fetch(
        f"SELECT phraseto_tsquery('{CONFIG}', {WORDS.replace('$1', 't')})::text"
        " FROM unnest($1::text[]) AS t",
        terms,
    )
    parts = [str(r[0]) for r in phrases if r[0]]
    live: list[Any] = []
    if len(parts) == len(terms):  # a word of no letters the index keeps matches nothing
        scope, scope_args = _scope(namespaces, 3)
        live = list(
            await conn.fetch(
                f"SELECT {_COLUMNS} FROM blocks WHERE search @@ CAST($1 AS tsquery)"
                f" AND state <> 'archived'{scope} LIMIT $2",
                " & ".join(f"({p})" for p in parts),
                MAX_ERASE + 1,
                *scope_args,
            )
        )
    wanted = set(terms)
    scope, scope_args = _scope(namespaces, 1)
    archived = [
        (*r[:3], r[3][:200])
        for r in await conn.fetch(
            "SELECT id, title, state, content, tags FROM blocks WHERE state = 'archived'" + scope,
            *scope_args,
        )
        if holds_words(wanted, r[1], r[3], r[4])
    ]
    return live + archived


# One block's erasure in four statements (SQLite's ``_erase_one`` runs the same deletes one
# by one). The sub-statements of one WITH see the same snapshot, so each statement holds
# only deletes that do not depend on one another: the events (first the effects, then the
# events no effect holds, then the rest blanked) take three; everything else one, whose
# foreign-key cascades run at its end and find nothing left.
_LOG_FIRST = """
WITH seqs AS (
    SELECT event_seq AS seq FROM effects WHERE block_rid = $1
    UNION SELECT seq FROM events WHERE block_id = $2
), effects_gone AS (
    DELETE FROM effects WHERE block_rid = $1 RETURNING 1
), runs_gone AS (
    DELETE FROM event_runs WHERE block_rid = $1 RETURNING 1
)
SELECT coalesce((SELECT array_agg(seq ORDER BY seq) FROM seqs), '{}'::bigint[]),
    (SELECT count(*) FROM effects_gone), (SELECT count(*) FROM runs_gone)
"""
_EVENTS_GONE = (
    "DELETE FROM events WHERE seq = ANY($1::bigint[])"
    " AND NOT EXISTS (SELECT 1 FROM effects WHERE event_seq = events.seq)"
)
_EVENTS_BLANKED = (
    "UPDATE events SET message = '', observed = NULL, block_id = NULL WHERE seq = ANY($1::bigint[])"
)
# (name in the tombstone, statement over $1 = rid, $2 = id, $3 = id as bytes, $4 = the
# erased detail), in SQLite's order.
_REST = (
    ("history", "DELETE FROM block_history WHERE block_id = $2"),
    ("reviews", "DELETE FROM reviews WHERE block_id = $2"),
    ("revalidations", "DELETE FROM revalidations WHERE block_id = $2"),
    ("accesses", "DELETE FROM accesses WHERE block_id = $2"),
    ("sessions", "DELETE FROM sessions WHERE block_id = $2"),
    ("audit_blanked", "UPDATE audit SET detail = $4 WHERE block_id = $2"),
    ("dead_letters", "DELETE FROM dead_letters WHERE position($3::bytea IN payload) > 0"),
    ("outbox", "DELETE FROM outbox WHERE position($3::bytea IN payload) > 0"),
    ("dependencies", "DELETE FROM dependencies WHERE depends_on = $2 OR block_rid = $1"),
    (  # its own, and those proposing a dependency on it
        "proposals",
        (
            "DELETE FROM proposals WHERE block_rid = $1 OR (kind = 'depends_on' AND"
            " CASE WHEN kind = 'depends_on' THEN proposal::jsonb ->> 'depends_on' END = $2)"
        ),
    ),
    ("bindings", "DELETE FROM bindings WHERE block_rid = $1"),
    ("blocks", "DELETE FROM blocks WHERE rid = $1"),
)
_REST_SQL = (
    "WITH "
    + ", ".join(f"{name} AS ({sql} RETURNING 1)" for name, sql in _REST)
    + " SELECT "
    + ", ".join(f"(SELECT count(*) FROM {name})" for name, _ in _REST)
)


async def _erase_one(conn: PgConnection, block_id: str, rid: int) -> dict[str, int]:
    """SQLite's ``_erase_one``: the same tables, counted alike (under the guard row)."""
    # SELECTs of aggregates: always one row each.
    first = one_row(await conn.fetchrow(_LOG_FIRST, rid, block_id), "the log's counts")
    seqs, effects, runs = first
    n = {"effects": int(effects), "event_runs": int(runs)}
    n["events"] = _rows(await conn.execute(_EVENTS_GONE, seqs))
    n["events_blanked"] = _rows(await conn.execute(_EVENTS_BLANKED, seqs))
    counts = one_row(
        await conn.fetchrow(_REST_SQL, rid, block_id, block_id.encode(), ERASED_DETAIL),
        "the erasure's counts",
    )
    n.update(zip((name for name, _ in _REST), (int(c) for c in counts), strict=True))
    # This backend's own log of falls (session notices across nodes; SQLite has none):
    # gone too, not counted, so the tombstone says what SQLite's says.
    await conn.execute("DELETE FROM block_falls WHERE block_id = $1", block_id)
    return {k: v for k, v in n.items() if v}
