"""Vectors for search by meaning: kept with the blocks, searched in memory.

Each block's vector (its title and content, made by the configured embedder) is stored
int8-quantised in ``block_vectors`` and held in one contiguous int8 matrix (256
dimensions: 25.6 MB per 100 000 blocks) with its sign bits (3.2 MB). Up to 8 192
vectors a query is scored against every row (exact cosine, in chunks converted to
float32); past that, the sign bits' Hamming distance keeps a shortlist that is scored
exactly (docs/SEARCH.md): no index to build or to drift. Embedding never runs on the
write path: triggers queue the blocks to embed (``embed_queue``) and
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

if TYPE_CHECKING:
    from collections.abc import Sequence

    import aiosqlite

    from memwarden.memory._clock import Clock
    from memwarden.memory._database import Database

__all__ = ["EmbedderLike", "VectorIndex", "queue_all"]

log = structlog.get_logger("memwarden.vectors")

_SCALE = 127.0
# Rows converted to float32 at a time: 256 x 256 x 4 = 256 KiB, which stays in the CPU
# cache (16 384-row chunks measured 7x slower at 100 000 rows: the copy left the cache).
_CHUNK = 256
# Up to this many vectors a search runs on the loop (two-stage: about 0.4 ms at 100 000
# vectors of 256 dimensions, less than a thread hop under load); beyond, in a worker
# thread.
_INLINE_ROWS = 250_000
# Past this many vectors a search is two-stage: the Hamming distance of the sign bits
# (one bit a dimension: 32 bytes a vector at 256) over every vector keeps the nearest
# _SHORTLIST, re-scored exactly from the int8 rows. Below, the exact scan is as cheap.
_TWO_STAGE_ROWS = 8_192
# WordLlama at 100 000 blocks: the exact top 10 found 0.64 of the time with 512 and
# uncentred signs, 0.80 centred, 0.90 with 1 024, 0.96 with 2 048 (about 2 250 kept with
# the sampled cut), 0.98 with 3 072 and 4 096. Re-scoring costs about 0.07 ms per 1 000.
_SHORTLIST = 2_560
# The longest the embedding task waits after failed rounds (see VectorIndex.run).
_BACKOFF_MAX_S = 300.0
# From this many vectors the shortlist's cut is estimated on every 8th distance.
_SAMPLED_ROWS = 65_536
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


def _popcount(np: Any) -> Any:
    """Set bits of each uint64: ``np.bitwise_count`` (numpy >= 2), else a byte table."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count
    table = np.array([i.bit_count() for i in range(256)], dtype=np.uint8)

    def count(words: Any, out: Any = None) -> Any:
        by_byte = table[np.ascontiguousarray(words).view(np.uint8)].reshape(-1, 8)
        return by_byte.sum(axis=1, dtype=np.uint8, out=out)

    return count


class VectorIndex:
    """The blocks' vectors for one embedder: stored, queued, held and searched."""

    def __init__(
        self,
        db: Database,
        embedder: EmbedderLike,
        *,
        batch: int = 256,
        clock: Clock | None = None,
    ) -> None:
        self.np = _numpy()
        self.db = db
        self.clock: Clock = clock or SystemClock()  # what the embedding task waits on
        self.failures = 0  # embedding rounds failed in a row (the task backs off)
        self.embedder = embedder
        self.model = embedder.model_id
        self.dim = int(embedder.dim)
        self.batch = batch
        np = self.np
        self._matrix: Any = np.zeros((0, self.dim), dtype=np.int8)
        self._rids: Any = np.zeros(0, dtype=np.int64)
        # The sign bit of each dimension, packed 64 to a uint64 word (the first pass),
        # stored word-major (words x rows) so each pass over a word is contiguous.
        self._words = (self.dim + 63) // 64
        self._codes: Any = np.zeros((self._words, 0), dtype=np.uint64)
        # The signs are taken around the held vectors' mean (a model's vectors share a
        # direction: uncentred, most bits agree for every pair and say little), fixed
        # when the codes were last made and re-made as the count doubles or halves.
        self._centre: Any = np.zeros(self.dim, dtype=np.float32)
        self._floor: Any = self._floor_of(self._centre)  # what signs() compares with
        self._centred_at = 0
        self._loading = False  # load(): the codes are made once, at the end
        self._popcount = _popcount(np)
        self.two_stage_rows = _TWO_STAGE_ROWS
        self.shortlist = _SHORTLIST
        # block rid -> row of the matrix (-1: none), indexed by rid: rids are SQLite's
        # dense integer keys, so 4 bytes a block where a dict took about 100.
        self._row_of: Any = np.full(0, -1, dtype=np.int32)
        self._size = 0
        self._wake = asyncio.Event()
        self.embedded = 0  # vectors made since start (metrics, benchmarks)

    # ------------------------------------------------------------------ memory

    def __len__(self) -> int:
        return self._size

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

    def _reserve(self, n: int) -> None:
        np = self.np
        if n <= len(self._rids):
            return
        cap = max(n, 2 * len(self._rids), 1024)
        matrix = np.zeros((cap, self.dim), dtype=np.int8)
        matrix[: self._size] = self._matrix[: self._size]
        rids = np.full(cap, -1, dtype=np.int64)
        rids[: self._size] = self._rids[: self._size]
        codes = np.zeros((self._words, cap), dtype=np.uint64)
        codes[:, : self._size] = self._codes[:, : self._size]
        self._matrix, self._rids, self._codes = matrix, rids, codes

    def signs(self, rows: Any, centre: Any = None) -> Any:
        """The sign bits of int8 ``rows`` (n x dim) around ``centre`` (the held vectors'
        mean when the codes were made), packed into n x words uint64."""
        np = self.np
        rows = np.asarray(rows, dtype=np.int8).reshape(-1, self.dim)
        floor = self._floor if centre is None else self._floor_of(centre)
        packed = np.packbits(rows > floor, axis=1)
        pad = self._words * 8 - packed.shape[1]
        if pad:
            packed = np.pad(packed, ((0, 0), (0, pad)))
        return np.ascontiguousarray(packed).view(np.uint64)

    def _floor_of(self, centre: Any) -> Any:
        """An integer is above the centre exactly when it is above the centre's floor
        (-127..127 as the mean of int8 rows): the rows are compared as int8, no float32
        copy."""
        np = self.np
        return np.floor(np.clip(centre, -128, 127)).astype(np.int8)

    def _query_code(self, qvec: Any, floor: Any) -> Any:
        """:meth:`signs` of one int8 vector around ``floor``: the same bits in two numpy
        calls where the general path takes a dozen (about 6 us against 30-80 on a
        search's path)."""
        np = self.np
        packed = np.packbits(qvec > floor)
        if len(packed) != self._words * 8:
            packed = np.concatenate((packed, np.zeros(self._words * 8 - len(packed), np.uint8)))
        return packed.view(np.uint64)

    def _recentre(self) -> None:
        """New codes around the held vectors' mean, once their count doubled or halved
        since the last (new arrays: a search in a thread keeps the ones it took)."""
        np = self.np
        n = self._size
        if self._centred_at // 2 <= n <= 2 * self._centred_at and self._centred_at:
            return
        centre = (self._matrix[:n].sum(axis=0, dtype=np.int64) / max(n, 1)).astype(np.float32)
        codes = np.zeros_like(self._codes)
        for start in range(0, n, 1024):  # float32 copies of 1 024 rows (1 MB) at a time
            stop = min(n, start + 1024)
            codes[:, start:stop] = self.signs(self._matrix[start:stop], centre).T
        self._centre, self._floor = centre, self._floor_of(centre)
        self._codes, self._centred_at = codes, n

    def _row(self, rid: int) -> int | None:
        if rid < 0 or rid >= len(self._row_of):
            return None
        row = int(self._row_of[rid])
        return row if row >= 0 else None

    def _grow_rows(self, rid: int) -> None:
        np = self.np
        if rid < len(self._row_of):
            return
        grown = np.full(max(rid + 1, 2 * len(self._row_of), 1024), -1, dtype=np.int32)
        grown[: len(self._row_of)] = self._row_of
        self._row_of = grown

    def _set_row(self, rid: int, row: int) -> None:
        self._grow_rows(rid)
        self._row_of[rid] = row

    def _put(self, rid: int, vec: Any) -> None:
        row = self._row(rid)
        if row is None:
            self._reserve(self._size + 1)
            row = self._size
            self._size += 1
            self._set_row(rid, row)
            self._rids[row] = rid
        self._matrix[row] = vec
        self._codes[:, row] = self.signs(vec)[0]
        self._recentre()

    async def prune(self) -> int:
        """Drop from memory the vectors whose block is gone (erased: ``memwarden forget``);
        how many. The stored rows went with their blocks (foreign key, cascade)."""
        kept = await self._stored_rids()
        gone = [int(rid) for rid in self._rids[: self._size] if int(rid) not in kept]
        for rid in gone:
            self._drop(rid)
        return len(gone)

    def _put_many(self, rids: Any, flat: Any) -> None:
        """Append rows for ``rids`` (an int64 array) not held yet (loading), one copy
        for the lot."""
        np = self.np
        if not len(rids):
            return
        known = rids[(rids >= 0) & (rids < len(self._row_of))]
        if (self._row_of[known] >= 0).any():  # some are held: one at a time
            for rid, vec in zip(rids.tolist(), flat.reshape(-1, self.dim), strict=True):
                self._put(rid, vec)
            return
        n = len(rids)
        self._reserve(self._size + n)
        start = self._size
        self._matrix[start : start + n] = flat.reshape(n, self.dim)
        if not self._loading:
            self._codes[:, start : start + n] = self.signs(self._matrix[start : start + n]).T
        self._rids[start : start + n] = rids
        self._grow_rows(int(rids.max()))
        self._row_of[rids] = np.arange(start, start + n, dtype=np.int32)
        self._size += n
        if not self._loading:
            self._recentre()

    def _drop(self, rid: int) -> None:
        row = self._row(rid)
        if row is None:
            return
        self._row_of[rid] = -1
        last = self._size - 1
        if row != last:  # move the last row into the hole
            moved = int(self._rids[last])
            self._matrix[row] = self._matrix[last]
            self._codes[:, row] = self._codes[:, last]
            self._rids[row] = moved
            self._row_of[moved] = row
        # No copy of a dropped vector stays behind the held rows (erasure, docs/PRIVACY.md).
        self._matrix[last] = 0
        self._codes[:, last] = 0
        self._rids[last] = -1
        self._size = last
        self._recentre()

    def quantise(self, vectors: Any) -> Any:
        """Unit-length int8 rows of ``vectors`` (any 2-D array-like of floats)."""
        np = self.np
        arr = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        # What numpy's norm (rows' Euclidean length) and clip compute, without their
        # Python wrappers (a query's vector: 8 us where they took 30-45): the same
        # operations, so the same bytes (tested).
        norms = np.sqrt(np.add.reduce(arr * arr, axis=1, keepdims=True))
        norms[norms == 0] = 1.0
        scaled = arr / norms
        scaled *= _SCALE
        np.rint(scaled, out=scaled)
        np.minimum(scaled, 127.0, out=scaled)
        np.maximum(scaled, -127.0, out=scaled)
        return scaled.astype(np.int8)

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

    def nearest(self, qvec: Any, k: int) -> list[tuple[int, float]]:
        """The best ``k`` held vectors by cosine with the int8 ``qvec``: exact up to
        ``two_stage_rows`` vectors, beyond that re-scored from a sign-bit shortlist."""
        codes = (self._codes, self._floor)
        return self._search(self._matrix, codes, self._rids, self._size, qvec, k)

    def nearest_exact(self, qvec: Any, k: int) -> list[tuple[int, float]]:
        """Exact cosine of the int8 ``qvec`` against every held vector; the best ``k``."""
        return self._scan(self._matrix, self._rids, self._size, qvec, k)

    def _search(  # noqa: PLR0917 - a snapshot's parts, as _scan takes them
        self, matrix: Any, coded: tuple[Any, Any], rids: Any, n: int, qvec: Any, k: int
    ) -> list[tuple[int, float]]:
        short = max(self.shortlist, k)
        if n <= max(self.two_stage_rows, short) or k < 1:
            return self._scan(matrix, rids, n, qvec, k)
        np = self.np
        # First pass: Hamming distance of the sign bits to every vector (a few bytes
        # each), the nearest ``short`` kept; then their exact cosine from the int8 rows.
        codes, floor = coded  # the codes and the floor of the centre they were made around
        qcode = self._query_code(qvec, floor)
        # Up to 256 bits the distances are summed in uint8 (a quarter of the memory
        # traffic of uint16): only a distance of exactly 256, every bit different, wraps
        # to 0, and that vector is then merely re-scored exactly for nothing.
        small = self._words <= 4
        dist = np.empty(n, dtype=np.uint8 if small else np.uint16)
        part = np.empty(n, dtype=np.uint8)
        buf = np.empty(n, dtype=np.uint64)
        for w in range(self._words):
            np.bitwise_xor(codes[w, :n], qcode[w], out=buf)
            if w == 0 and small:
                self._popcount(buf, out=dist)
            elif w == 0:
                dist[:] = self._popcount(buf)
            else:
                self._popcount(buf, out=part)
                np.add(dist, part, out=dist, casting="unsafe")
        cand = self._shortlist(dist, short)
        sims = self._rescore(matrix, cand, qvec)
        top = self._best(sims, rids, min(k, len(cand)), cand)
        return list(zip(rids[cand[top]].tolist(), sims[top].tolist(), strict=True))

    def _shortlist(self, dist: Any, short: int) -> Any:
        """The rows of about the ``short`` smallest distances, in row order (the gather
        then reads forwards), without a sort: distances are 0..dim, so a histogram gives
        the cut (argpartition took 0.7 ms at 100 000, a histogram 0.1). Past
        ``_SAMPLED_ROWS`` rows the histogram is taken of every 8th distance (0.015 ms):
        the shortlist is then every row at or below the estimated cut, a few hundred
        more or fewer than ``short``; an estimate far off (half or twice ``short``)
        falls back to the whole histogram."""
        np = self.np
        n = len(dist)
        if n >= _SAMPLED_ROWS:
            step = 8
            cum = np.cumsum(np.bincount(dist[::step], minlength=self.dim + 1))
            cut = int(np.searchsorted(cum, -(-short // step)))
            cand = (dist <= cut).nonzero()[0]  # flatnonzero's wrapper: about 2x this
            if short // 2 <= len(cand) <= 2 * short:
                return cand
        cum = np.cumsum(np.bincount(dist, minlength=self.dim + 1))
        cut = int(np.searchsorted(cum, short))  # the distance where the shortlist fills
        below = np.flatnonzero(dist < cut)
        at = np.flatnonzero(dist == cut)[: short - len(below)]
        return np.sort(np.concatenate((below, at)))

    def _rescore(self, matrix: Any, cand: Any, qvec: Any) -> Any:
        """Exact cosine of the int8 ``qvec`` with the rows ``cand`` of ``matrix``, in
        slices converted to float32 that stay in the CPU cache (one product of the
        whole shortlist made OpenBLAS start its threads: 0.45 ms p50 but 4 ms p90 on
        the shared 2-core VM; the slices measured 0.14 ms for 2 048 rows, steadily)."""
        np = self.np
        q = np.asarray(qvec, dtype=np.float32) / (_SCALE * _SCALE)
        rows = np.take(matrix, cand, axis=0)  # half the time of matrix[cand]
        sims = np.empty(len(cand), dtype=np.float32)
        buf = np.empty((_CHUNK, self.dim), dtype=np.float32)
        for start in range(0, len(cand), _CHUNK):
            stop = min(len(cand), start + _CHUNK)
            np.copyto(buf[: stop - start], rows[start:stop], casting="unsafe")
            np.matmul(buf[: stop - start], q, out=sims[start:stop])
        return sims

    def _scan(self, matrix: Any, rids: Any, n: int, qvec: Any, k: int) -> list[tuple[int, float]]:
        np = self.np
        if not n or k < 1:
            return []
        q = np.asarray(qvec, dtype=np.float32) / (_SCALE * _SCALE)
        sims = np.empty(n, dtype=np.float32)
        buf = np.empty((_CHUNK, self.dim), dtype=np.float32)  # stays in the CPU cache
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            rows = buf[: stop - start]
            np.copyto(rows, matrix[start:stop], casting="unsafe")
            np.matmul(rows, q, out=sims[start:stop])
        top = self._best(sims, rids, min(k, n))
        return list(zip(rids[top].tolist(), sims[top].tolist(), strict=True))

    def _best(self, sims: Any, rids: Any, k: int, rows: Any = None) -> Any:
        """The positions of the ``k`` highest ``sims``, best first, equal ones by rid: the
        same answer whatever order the rows are held in (two nodes on one database hold
        them in the order each learnt them). ``sims[i]`` is row ``rows[i]``'s (``None``:
        row ``i``'s), whose rid is ``rids[row]``; only the rids of the rows at or above
        the ``k``-th similarity are looked up."""
        np = self.np
        n = len(sims)
        if k < n:
            kth = sims[np.argpartition(sims, n - k)[n - k]]
            top = (sims >= kth).nonzero()[0]
        else:
            top = np.arange(n)
        named = rids[top if rows is None else rows[top]]
        return top[np.lexsort((named, -sims[top]))[:k]]

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
