"""Vectors for search by meaning on PostgreSQL: the SQLite store's
:class:`~memwarden.memory._vectors.VectorIndex` with this backend's SQL.

Everything but the SQL is the SQLite class's own (the int8 matrix held in memory, the
sign-bit shortlist, the exact re-scoring, the embedding task with its back-off, a hostile
text skipped alone): :class:`PgVectorIndex` overrides only the small methods that read and
write ``block_vectors`` and ``embed_queue`` (the same tables, filled by the same triggers:
a new block or a new text is queued). ``tests/pg/test_vectors_contract.py`` holds both
backends' answers, nearest lists and rows equal.

Each node holds its own matrix, loaded at start and kept up to date by its own embedding
task; several nodes on one database would each embed the queue (the first to store a
queue row's generation wins, the others' work is dropped): one embedding node is the
supported layout until the queue is claimed with ``SKIP LOCKED``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwarden.memory._sql import namespace_clause
from memwarden.memory._vectors import VectorIndex

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from memwarden.memory._clock import Clock
    from memwarden.memory._vectors import EmbedderLike
    from memwarden.memory.pg._database import PgDatabase
    from memwarden.memory.pg._types import PgConnection

__all__ = ["PgVectorIndex", "queue_all"]

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
    ) -> None:
        # The base class keeps ``db`` only for the SQL methods overridden below.
        super().__init__(db, embedder, batch=batch, clock=clock)  # type: ignore[arg-type]
        self.pg = db

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
        async with self.pg.read() as conn:
            return [
                tuple(r)
                for r in await conn.fetch(
                    "SELECT q.block_rid, q.gen, b.title, b.content, b.state"
                    " FROM embed_queue q LEFT JOIN blocks b ON b.rid = q.block_rid"
                    " ORDER BY q.block_rid LIMIT $1",
                    self.batch,
                )
            ]

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
            return kept

        return await self.pg.write(job, weight=len(done))

    async def _requeue(self, *, only_other_models: bool) -> int:
        async def job(conn: PgConnection) -> int:
            if only_other_models:
                sql = _REQUEUE.format(where=_OTHER_MODELS)
                return _rows(await conn.execute(sql, self.model, self.dim))
            return _rows(await conn.execute(_REQUEUE.format(where="")))

        return await self.pg.write(job)
