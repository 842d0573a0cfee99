"""Vectors for search by meaning: kept with the blocks, searched in memory.

Each block's vector (its title and content, made by the configured embedder) is stored
int8-quantised in ``block_vectors`` and held in one contiguous int8 matrix (256
dimensions: 25.6 MB per 100 000 blocks) with its sign bits (3.2 MB): the
:class:`~memwarden.memory._vecmatrix.HeldVectors` this index is, which also searches
them. Up to 8 192 vectors a query is scored against every row (exact cosine, in chunks
converted to float32); past that, the sign bits' Hamming distance keeps a shortlist that
is scored exactly (docs/SEARCH.md): no index to build or to drift. Embedding never runs
on the write path: triggers queue the blocks to embed (``embed_queue``) and
:meth:`VectorIndex.run` drains the queue in batches, the model running in a worker
thread, backing off while the embedder fails. A search uses whatever vectors exist; a
block not embedded yet is found by its words alone.

numpy is imported only when an embedder is configured (``memwarden[semantic]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import random
import sys
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from memwarden.errors import ConfigError, EmbedderUnavailableError
from memwarden.memory._clock import SystemClock, sleep_on
from memwarden.memory._sql import namespace_clause
from memwarden.memory._vecmatrix import HeldVectors

if TYPE_CHECKING:
    from collections.abc import Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database

__all__ = ["EmbedderLike", "VectorIndex", "queue_all"]

log = structlog.get_logger("memwarden.vectors")

# Up to this many vectors a search runs on the loop (two-stage: about 0.4 ms at 100 000
# vectors of 256 dimensions, less than a thread hop under load); beyond, in a worker
# thread.
_INLINE_ROWS = 250_000
# The longest the embedding task waits after failed rounds (see VectorIndex.run).
_BACKOFF_MAX_S = 300.0
# Vectors read per statement when loading (see VectorIndex._load_rows).
_LOAD_ROWS = 8_192


class EmbedderLike(Protocol):
    """What the store needs of an embedder (``memwarden.embedders.Embedder``)."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Any: ...


async def queue_all(db: Database) -> int:
    """Queue every block for a new vector (``memwarden reembed``: works without the
    embedder loaded; the daemon's embedding task does the work); how many."""

    async def job(conn: aiosqlite.Connection) -> int:
        cur = await conn.execute(
            "INSERT INTO embed_queue (block_rid) SELECT rid FROM blocks WHERE true"
            " ON CONFLICT (block_rid) DO UPDATE SET gen = gen + 1"
        )
        return int(cur.rowcount)

    return await db.write(job)


def _numpy() -> Any:
    try:
        import numpy as np  # noqa: PLC0415 - optional: only with an embedder
    except ImportError as err:
        raise ConfigError(
            "search.embedder: search by meaning needs numpy: pip install 'memwarden[semantic]'"
        ) from err
    return np


def _give_back_freed_memory() -> bool:
    """Ask glibc to return the heap pages freed so far to the system (``malloc_trim``);
    whether it could. Loading leaves a lot freed but held: parsing the tokenizer's
    1.8 MB JSON (about 6 MiB of WordLlama's) and the blobs read in bulk. Elsewhere
    (musl, macOS) nothing happens."""
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


class VectorIndex(HeldVectors):
    """The blocks' vectors for one embedder: stored, queued, held and searched."""

    def __init__(
        self,
        db: Database,
        embedder: EmbedderLike,
        *,
        batch: int = 256,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(_numpy(), int(embedder.dim))
        self.db = db
        self.clock: Clock = clock or SystemClock()  # what the embedding task waits on
        self.failures = 0  # embedding rounds failed in a row (the task backs off)
        self.embedder = embedder
        self.model = embedder.model_id
        self.batch = batch
        self._wake = asyncio.Event()
        self.embedded = 0  # vectors made since start (metrics, benchmarks)

    # ------------------------------------------------------------------ memory

    async def load(self) -> int:
        """Read this model's stored vectors into memory; queue blocks of another model."""
        other = await self._load_stored()
        if other:
            await self.reembed(only_other_models=True)
        ready = getattr(self.embedder, "wait_ready", None)
        if ready is not None:  # a model still loading in a thread (WordLlama's tokenizer)
            await asyncio.to_thread(ready)
        trimmed = _give_back_freed_memory()
        log.info(
            "vectors_loaded",
            model=self.model,
            vectors=self._size,
            other_models=other,
            heap_trimmed=trimmed,
        )
        return self._size

    async def _load_stored(self) -> int:
        """Read this model's stored vectors into the matrix; the number of stored
        vectors of other models (to re-embed). SQLite's: one count, then slices."""
        async with self.db.read() as conn:
            # Every stored vector is this model's or another's: one count (SQLite counts
            # a table without decoding its rows) sizes the matrix, and the others are
            # what the load did not take.
            [(total,)] = list(await conn.execute_fetchall("SELECT count(*) FROM block_vectors"))
            self._reserve(int(total))
            self._loading = True
            try:
                await self._load_rows(conn)
            finally:
                self._loading = False
                self._centred_at = 0
                self._recentre()
            other = int(total) - self._size
            # The vectors are in the matrix now: give back the page cache they filled.
            await conn.execute("PRAGMA shrink_memory")
        return other

    async def _load_rows(self, conn: aiosqlite.Connection) -> None:
        """This model's stored vectors, appended in slices of ``_LOAD_ROWS`` by rid.

        Each slice is one row: its rids and its vectors concatenated by SQLite
        (``group_concat``, which joins a BLOB's bytes as they are in a UTF-8 database),
        so Python makes no object per vector (half the time of fetching 100 000 rows).
        In a database of another encoding (the text conversion would change the bytes,
        tested) or when a slice's bytes do not add up, the rows are read one by one."""
        np = self.np
        [(encoding,)] = list(await conn.execute_fetchall("PRAGMA encoding"))
        joined = str(encoding).upper() == "UTF-8"
        args = (self.model, self.dim, _LOAD_ROWS)
        after = -1
        while True:
            if joined:
                [(count, last, rids, blob)] = list(
                    await conn.execute_fetchall(
                        "SELECT count(*), max(block_rid), group_concat(block_rid),"
                        " CAST(group_concat(vector, '') AS BLOB) FROM (SELECT block_rid,"
                        " vector FROM block_vectors WHERE block_rid > ? AND model = ?"
                        " AND dim = ? ORDER BY block_rid LIMIT ?)",
                        (after, *args),
                    )
                )
                if not count:
                    return
                if isinstance(blob, bytes) and len(blob) == count * self.dim:
                    ids = np.array(str(rids).split(","), dtype=np.int64)
                    if len(ids) == count:
                        self._put_many(ids, np.frombuffer(blob, dtype=np.int8))
                        after = int(last)
                        continue
            rows = list(
                await conn.execute_fetchall(
                    "SELECT block_rid, vector FROM block_vectors WHERE block_rid > ?"
                    " AND model = ? AND dim = ? ORDER BY block_rid LIMIT ?",
                    (after, *args),
                )
            )
            if not rows:
                return
            self._put_many(
                np.array([int(rid) for rid, _ in rows], dtype=np.int64),
                np.frombuffer(b"".join(vec for _, vec in rows), dtype=np.int8),
            )
            after = int(rows[-1][0])

    async def prune(self) -> int:
        """Drop from memory the vectors whose block is gone (erased: ``memwarden forget``);
        how many. The stored rows went with their blocks (foreign key, cascade)."""
        kept = await self._stored_rids()
        gone = [int(rid) for rid in self._rids[: self._size] if int(rid) not in kept]
        for rid in gone:
            self._drop(rid)
        return len(gone)

    # ------------------------------------------------------------------ search

    async def query(self, text: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` blocks whose vectors are nearest ``text``: (rid, cosine), best first."""
        if not self._size or not text.strip():
            return []
        # One short query (the API caps it at 1 000 characters) embeds in tens of
        # microseconds with a static model: on the loop, cheaper than a thread hop.
        try:
            if getattr(self.embedder, "remote", False):  # an HTTP round trip: off the loop
                vecs = await asyncio.to_thread(self.embedder.embed, [text])
            else:
                vecs = self.embedder.embed([text])
            [qvec] = self.quantise(vecs)
        except Exception as err:  # noqa: BLE001 - the search goes on by words alone
            log.warning("query_embedding_failed", error=f"{type(err).__name__}: {err}")
            return []
        if self._size < _INLINE_ROWS:
            return self.nearest(qvec, k)
        # A large scan (milliseconds) runs in a thread so the loop keeps answering;
        # numpy lets go of the GIL while it multiplies. The matrix and the rids are
        # taken now: a vector stored meanwhile is seen or not, a row moved by a delete
        # cannot name the wrong block.
        n, matrix, codes, floor = self._size, self._matrix, self._codes, self._floor
        rids = self._rids[:n].copy()
        return await asyncio.to_thread(self._search, matrix, (codes, floor), rids, n, qvec, k)

    # ------------------------------------------------------------------ embedding

    def notify(self) -> None:
        """Something was queued: wake the embedding task (not while it backs off)."""
        self._wake.set()

    async def run(
        self,
        *,
        poll_s: float = 2.0,
        backoff_max_s: float = _BACKOFF_MAX_S,
        rng: random.Random | None = None,
    ) -> None:
        """Drain the queue for as long as the daemon runs (woken by :meth:`notify`, and
        every ``poll_s`` for writes that did not call it).

        When a round fails (the embedder is down: an HTTP server not answering), the
        task backs off on the store's clock: after the n-th failure in a row it waits
        between half and all of ``min(backoff_max_s, poll_s x 2^(n-1))`` (jittered, so
        daemons sharing a server do not retry in step), and writes meanwhile do not wake
        it: a busy daemon never hammers a failing server once per write. The first
        round that embeds something resets it."""
        rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        while True:
            try:
                while await self.drain_once():
                    self.failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the task goes on; the queue stays
                self.failures += 1
                ceiling = min(backoff_max_s, poll_s * 2 ** min(self.failures - 1, 32))
                delay = rng.uniform(ceiling / 2, ceiling)
                log.error(
                    "embedding_failed",
                    error=f"{type(err).__name__}: {err}",
                    failures=self.failures,
                    retry_in_s=round(delay, 3),
                )
                await sleep_on(self.clock, delay)
                continue
            self.failures = 0
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=poll_s)

    async def pending(self, *, namespaces: Sequence[str] | None = None) -> int:
        """Blocks waiting for a vector (of ``namespaces`` only, when given)."""
        sql = "SELECT count(*) FROM embed_queue"
        scope, args = namespace_clause(namespaces, column="b.namespace")
        if namespaces is not None:
            sql += f" q JOIN blocks b ON b.rid = q.block_rid WHERE true{scope}"
        async with self.db.read() as conn:
            [(n,)] = list(await conn.execute_fetchall(sql, args))
        return int(n)

    async def count(self, *, namespaces: Sequence[str] | None = None) -> int:
        """Vectors held: all of them, or (from the database) those of ``namespaces``'
        blocks, so a namespaced caller learns nothing of the others' number."""
        if namespaces is None:
            return self._size
        np = self.np
        # The namespaces' rids (their index covers them) looked up in the held rows: a
        # join with block_vectors would read every vector's row (0.2 s at 100 000, this
        # 0.05-0.1).
        rids = np.fromiter(await self._rids_of(namespaces), dtype=np.int64)
        rids = rids[(rids >= 0) & (rids < len(self._row_of))]
        return int(np.count_nonzero(self._row_of[rids] >= 0))

    async def drain_once(self) -> int:
        """Embed one batch of queued blocks; how many were taken off the queue."""
        rows = await self._queued()
        if not rows:
            return 0
        live = [r for r in rows if r[2] is not None]
        texts = [
            f"{title}\n{content}" if title else str(content) for _, _, title, content, _ in live
        ]
        vecs = await asyncio.to_thread(self._embed_each, [int(r[0]) for r in live], texts)
        done: list[tuple[int, int]] = [(int(r[0]), int(r[1])) for r in rows]
        stored = [
            (int(r[0]), v.tobytes()) for r, v in zip(live, vecs, strict=True) if v is not None
        ]
        kept = await self._store(done, stored)
        np = self.np
        by_rid = {rid: np.frombuffer(blob, dtype=np.int8) for rid, blob in stored}
        for rid in kept:
            self._put(rid, by_rid[rid])
        for rid, _ in done:
            if rid not in by_rid:
                self._drop(rid)
        self.embedded += len(kept)
        return len(rows)

    def _embed_each(self, rids: list[int], texts: list[str]) -> list[Any]:
        """Quantised vectors of ``texts`` (in a worker thread); when the batch fails, each
        text alone, and a text the embedder refuses gets ``None`` (logged, taken off the
        queue: one hostile text never stalls the others; its block is found by words)."""
        if not texts:
            return []
        try:
            return list(self.quantise(self.embedder.embed(texts)))
        except EmbedderUnavailableError:
            raise  # the model, not a text: the batch stays queued for the next round
        except Exception as err:  # noqa: BLE001 - find the one that fails below
            log.info("embedding_batch_failed", texts=len(texts), error=type(err).__name__)
        out: list[Any] = []
        for rid, text in zip(rids, texts, strict=True):
            try:
                out.append(self.quantise(self.embedder.embed([text]))[0])
            except EmbedderUnavailableError:
                raise
            except Exception as err:  # noqa: BLE001 - an embedder's failure, reported
                log.warning(
                    "embedding_skipped", block_rid=rid, error=f"{type(err).__name__}: {err}"
                )
                out.append(None)
        return out

    async def reembed(self, *, only_other_models: bool = False) -> int:
        """Queue every block again (a model change: ``memwarden reembed``); how many."""
        n = await self._requeue(only_other_models=only_other_models)
        self.notify()
        return n

    # ------------------------------------------------------------------ the SQL
    # What the index reads and writes, in SQLite's SQL (memory/pg/_vectors.py has
    # PostgreSQL's): the rest of the class is the same on both backends.

    async def _stored_rids(self) -> set[int]:
        async with self.db.read() as conn:
            return {
                int(r)
                for (r,) in await conn.execute_fetchall("SELECT block_rid FROM block_vectors")
            }

    async def _rids_of(self, namespaces: Sequence[str]) -> list[int]:
        scope, args = namespace_clause(namespaces)
        async with self.db.read() as conn:
            rows = await conn.execute_fetchall(f"SELECT rid FROM blocks WHERE true{scope}", args)
        return [int(r) for (r,) in rows]

    async def _queued(self) -> list[tuple[Any, ...]]:
        """A batch of the queue: ``(rid, gen, title, content, state)``, title None for a
        block gone meanwhile."""
        async with self.db.read() as conn:
            return [
                tuple(r)
                for r in await conn.execute_fetchall(
                    "SELECT q.block_rid, q.gen, b.title, b.content, b.state"
                    " FROM embed_queue q LEFT JOIN blocks b ON b.rid = q.block_rid"
                    " ORDER BY q.block_rid LIMIT ?",
                    (self.batch,),
                )
            ]

    async def _store(
        self, done: list[tuple[int, int]], stored: list[tuple[int, bytes]]
    ) -> list[int]:
        """Store the vectors made of queue rows ``done`` ``(rid, gen)``; the rids stored
        (those not queued again meanwhile: an edit bumps gen)."""
        model, dim = self.model, self.dim

        async def job(conn: aiosqlite.Connection) -> list[int]:
            kept: list[int] = []
            gens = dict(done)
            for rid, blob in stored:
                cur = await conn.execute(
                    "DELETE FROM embed_queue WHERE block_rid = ? AND gen = ?", (rid, gens[rid])
                )
                if cur.rowcount:
                    await conn.execute(
                        "INSERT INTO block_vectors (block_rid, model, dim, vector)"
                        " SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM blocks WHERE rid = ?)"
                        " ON CONFLICT (block_rid) DO UPDATE SET model = excluded.model,"
                        " dim = excluded.dim, vector = excluded.vector",
                        (rid, model, dim, blob, rid),
                    )
                    kept.append(rid)
            made = {s[0] for s in stored}
            gone = [rid for rid, _ in done if rid not in made]
            for rid in gone:  # deleted meanwhile, or its text could not be embedded
                await conn.execute("DELETE FROM embed_queue WHERE block_rid = ?", (rid,))
                await conn.execute("DELETE FROM block_vectors WHERE block_rid = ?", (rid,))
            return kept

        return await self.db.write(job, weight=len(done))

    async def _requeue(self, *, only_other_models: bool) -> int:
        async def job(conn: aiosqlite.Connection) -> int:
            where = (
                " WHERE rid IN (SELECT block_rid FROM block_vectors WHERE model != ? OR dim != ?)"
            )
            sql = (
                "INSERT INTO embed_queue (block_rid) SELECT rid FROM blocks"
                + (where if only_other_models else " WHERE true")
                + " ON CONFLICT (block_rid) DO UPDATE SET gen = gen + 1"
            )
            cur = await conn.execute(sql, (self.model, self.dim) if only_other_models else ())
            return int(cur.rowcount)

        return await self.db.write(job)
