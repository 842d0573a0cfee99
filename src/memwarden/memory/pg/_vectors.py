"""Vectors for search by meaning on PostgreSQL: the SQLite store's
:class:`~memwarden.memory._vectors.VectorIndex` with this backend's SQL.

Everything but the SQL is the SQLite class's own (the int8 matrix held in memory, the
sign-bit shortlist, the exact re-scoring, the embedding task with its back-off, a hostile
text skipped alone): :class:`PgVectorIndex` overrides only the small methods that read and
write ``block_vectors`` and ``embed_queue`` (the same tables, filled by the same triggers:
a new block or a new text is queued). ``tests/pg/test_vectors_contract.py`` holds both
backends' answers, nearest lists and rows equal.

Several nodes may embed one database's queue. A node **claims** each batch before running
the model (``FOR UPDATE SKIP LOCKED`` on the queue rows, then a row in ``embed_claims``
per block, inserted ``ON CONFLICT ... WHERE`` the old claim expired: the arbiter between
two claimers): a claim holds ``claim_s`` seconds by the database's clock, so the rows of a
node that dies mid-batch are taken by another once it expires; a failed round gives its
claims back at once. Each node holds its own matrix: at every drain tick it reads the
vectors other nodes stored since it last looked (``vector_stamps``, each vector's writing
transaction, from the oldest transaction still running at its previous look: a commit
that lands late is read at the next tick, never missed).
"""

from __future__ import annotations

import contextlib
import secrets
from typing import TYPE_CHECKING, Any

from memwarden.memory._sql import namespace_clause
from memwarden.memory._vectors import VectorIndex

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._vectors import EmbedderLike
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["CLAIM_S", "PgVectorIndex", "queue_all"]

# How long a claim on queued blocks holds (database clock): longer than any batch takes.
CLAIM_S = 120.0
_CLAIM = (
    "WITH picked AS ("
    " SELECT q.block_rid, q.gen FROM embed_queue q WHERE NOT EXISTS (SELECT 1 FROM"
    " embed_claims c WHERE c.block_rid = q.block_rid AND c.until > now())"
    " ORDER BY q.block_rid LIMIT $1 FOR UPDATE OF q SKIP LOCKED"
    "), claimed AS ("
    " INSERT INTO embed_claims (block_rid, claimed_by, until)"
    " SELECT block_rid, $2, now() + make_interval(secs => $3) FROM picked"
    " ON CONFLICT (block_rid) DO UPDATE SET claimed_by = EXCLUDED.claimed_by,"
    " until = EXCLUDED.until WHERE embed_claims.until <= now()"
    " RETURNING block_rid"
    ") SELECT p.block_rid, p.gen, b.title, b.content, b.state FROM picked p"
    " JOIN claimed c ON c.block_rid = p.block_rid LEFT JOIN blocks b ON b.rid = p.block_rid"
    " ORDER BY p.block_rid"
)
_XMIN = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text"
_NEWER = (
    "SELECT v.block_rid, v.model = $2 AND v.dim = $3, v.vector FROM vector_stamps s"
    " JOIN block_vectors v ON v.block_rid = s.block_rid WHERE s.xid >= $1::text::xid8"
)

_BATCH_ROWS = 8192
_REQUEUE = (
    "INSERT INTO embed_queue (block_rid) SELECT rid FROM blocks{where}"
    " ON CONFLICT (block_rid) DO UPDATE SET gen = embed_queue.gen + 1"
)
_OTHER_MODELS = " WHERE rid IN (SELECT block_rid FROM block_vectors WHERE model <> $1 OR dim <> $2)"


def _rows(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


async def queue_all(db: PgDatabase) -> int:
    """Queue every block for a new vector (``memwarden reembed`` without the embedder
    loaded: the daemon's embedding task does the work); how many."""

    async def job(conn: PgConnection) -> int:
        return _rows(await conn.execute(_REQUEUE.format(where="")))

    return await db.write(job)


class PgVectorIndex(VectorIndex):
    """The blocks' vectors for one embedder, stored in a :class:`PgDatabase`."""

    def __init__(
        self,
        db: PgDatabase,
        embedder: EmbedderLike,
        *,
        batch: int = 256,
        clock: Clock | None = None,
        claim_s: float = CLAIM_S,
    ) -> None:
        # The base class keeps ``db`` only for the SQL methods overridden below.
        super().__init__(db, embedder, batch=batch, clock=clock)  # type: ignore[arg-type]
        self.pg = db
        self.claim_s = claim_s
        self.claimer = secrets.token_hex(8)  # this index's name on its claims
        self._claimed: list[int] = []  # the rids of the batch claimed, until stored
        self._seen_from: str | None = None  # xid8 from which others' vectors are unread
        self.caught_up = 0  # vectors read from other nodes' writes since start

    async def drain_once(self) -> int:
        """Read the vectors other nodes stored, then embed one claimed batch; how many
        queue rows were taken. A round that fails gives its claims back."""
        await self.catch_up()
        try:
            return await super().drain_once()
        except Exception:
            with contextlib.suppress(Exception):  # the database may be what failed
                await self._release()
            raise

    async def catch_up(self) -> int:
        """Put into the matrix the vectors stored (by any node) since the last look, and
        drop those of blocks now embedded by another model; how many rows were read."""
        np = self.np
        async with self.pg.read() as conn:
            # The oldest transaction running now: every one before it has ended, so the
            # next look reads from here and misses no commit that lands after this read.
            xmin = str(await conn.fetchval(_XMIN))
            since = self._seen_from
            if since is None:  # not loaded: load() reads everything
                self._seen_from = xmin
                return 0
            rows = await conn.fetch(_NEWER, since, self.model, self.dim)
        for rid, ours, blob in rows:
            if ours:
                self._put(int(rid), np.frombuffer(bytes(blob), dtype=np.int8))
            else:
                self._drop(int(rid))
        self._seen_from = xmin
        self.caught_up += len(rows)
        return len(rows)

    async def _release(self) -> None:
        claimed, self._claimed = self._claimed, []
        if claimed:

            async def job(conn: PgConnection) -> None:
                await conn.execute(
                    "DELETE FROM embed_claims WHERE block_rid = ANY($1::bigint[])"
                    " AND claimed_by = $2",
                    claimed,
                    self.claimer,
                )

            await self.pg.write(job)

    async def pending(self, *, namespaces: Sequence[str] | None = None) -> int:
        """Blocks waiting for a vector (of ``namespaces`` only, when given)."""
        async with self.pg.read() as conn:
            if namespaces is None:
                n = await conn.fetchval("SELECT count(*) FROM embed_queue")
            else:
                namespace_clause(namespaces)  # SQLite's limit, SQLite's error
                n = await conn.fetchval(
                    "SELECT count(*) FROM embed_queue q JOIN blocks b ON b.rid = q.block_rid"
                    " WHERE b.namespace = ANY($1::text[])",
                    list(namespaces),
                )
        return int(n)

    async def _load_stored(self) -> int:
        """This model's vectors into the matrix, streamed in batches from a cursor; the
        number of stored vectors of other models (to re-embed)."""
        np = self.np
        async with self.pg.read() as conn:
            self._seen_from = str(await conn.fetchval(_XMIN))  # before the load's read
            self._reserve(
                int(
                    await conn.fetchval(
                        "SELECT count(*) FROM block_vectors WHERE model = $1", self.model
                    )
                )
            )
        self._loading = True
        try:
            async for rows in self._stored_batches():
                self._put_many(
                    np.array([rid for rid, _ in rows], dtype=np.int64),
                    np.frombuffer(b"".join(blob for _, blob in rows), dtype=np.int8),
                )
        finally:
            self._loading = False
            self._centred_at = 0
            self._recentre()
        async with self.pg.read() as conn:
            other = await conn.fetchval(
                "SELECT count(*) FROM block_vectors WHERE model <> $1 OR dim <> $2",
                self.model,
                self.dim,
            )
        return int(other)

    async def _stored_batches(self) -> AsyncIterator[list[tuple[int, bytes]]]:
        async with self.pg.read() as conn, conn.transaction(readonly=True):
            batch: list[tuple[int, bytes]] = []
            async for rid, blob in conn.cursor(
                "SELECT block_rid, vector FROM block_vectors WHERE model = $1 AND dim = $2",
                self.model,
                self.dim,
                prefetch=_BATCH_ROWS,
            ):
                batch.append((int(rid), bytes(blob)))
                if len(batch) == _BATCH_ROWS:
                    yield batch
                    batch = []
            if batch:
                yield batch

    async def _stored_rids(self) -> set[int]:
        async with self.pg.read() as conn:
            return {int(r[0]) for r in await conn.fetch("SELECT block_rid FROM block_vectors")}

    async def _rids_of(self, namespaces: Sequence[str]) -> list[int]:
        namespace_clause(namespaces)
        async with self.pg.read() as conn:
            rows = await conn.fetch(
                "SELECT rid FROM blocks WHERE namespace = ANY($1::text[])", list(namespaces)
            )
        return [int(r[0]) for r in rows]

    async def _queued(self) -> list[tuple[Any, ...]]:
        """A batch of the queue claimed for this index (rows claimed by another node
        whose claim has not expired are left to it)."""

        async def job(conn: PgConnection) -> list[tuple[Any, ...]]:
            rows = await conn.fetch(_CLAIM, self.batch, self.claimer, self.claim_s)
            return [tuple(r) for r in rows]

        rows = await self.pg.write(job)
        self._claimed = [int(r[0]) for r in rows]
        return rows

    async def _store(
        self, done: list[tuple[int, int]], stored: list[tuple[int, bytes]]
    ) -> list[int]:
        model, dim = self.model, self.dim

        async def job(conn: PgConnection) -> list[int]:
            kept: list[int] = []
            gens = dict(done)
            for rid, blob in stored:
                taken = await conn.execute(
                    "DELETE FROM embed_queue WHERE block_rid = $1 AND gen = $2", rid, gens[rid]
                )
                if _rows(taken):
                    await conn.execute(
                        "INSERT INTO block_vectors (block_rid, model, dim, vector)"
                        " SELECT $1::bigint, $2::text, $3::bigint, $4::bytea"
                        " WHERE EXISTS (SELECT 1 FROM blocks WHERE rid = $1)"
                        " ON CONFLICT (block_rid) DO UPDATE SET model = EXCLUDED.model,"
                        " dim = EXCLUDED.dim, vector = EXCLUDED.vector",
                        rid,
                        model,
                        dim,
                        blob,
                    )
                    kept.append(rid)
            made = {s[0] for s in stored}
            gone = [rid for rid, _ in done if rid not in made]
            if gone:  # deleted meanwhile, or its text could not be embedded
                await conn.execute(
                    "DELETE FROM embed_queue WHERE block_rid = ANY($1::bigint[])", gone
                )
                await conn.execute(
                    "DELETE FROM block_vectors WHERE block_rid = ANY($1::bigint[])", gone
                )
            # This batch's claims, and expired ones whose queue row is gone (a node that
            # died after storing); a row queued again meanwhile is free for the next round.
            await conn.execute(
                "DELETE FROM embed_claims c WHERE (c.block_rid = ANY($1::bigint[])"
                " AND c.claimed_by = $2) OR (c.until <= now() AND NOT EXISTS"
                " (SELECT 1 FROM embed_queue q WHERE q.block_rid = c.block_rid))",
                [rid for rid, _ in done],
                self.claimer,
            )
            return kept

        kept = await self.pg.write(job, weight=len(done))
        self._claimed = []
        return kept

    async def _requeue(self, *, only_other_models: bool) -> int:
        async def job(conn: PgConnection) -> int:
            if only_other_models:
                sql = _REQUEUE.format(where=_OTHER_MODELS)
                return _rows(await conn.execute(sql, self.model, self.dim))
            return _rows(await conn.execute(_REQUEUE.format(where="")))

        return await self.pg.write(job)
