"""The vectors held in memory for search by meaning: one contiguous int8 matrix, the
sign bits of its rows, and the search over them.

Up to ``two_stage_rows`` vectors a query is scored against every row (exact cosine, in
chunks converted to float32); past that, the sign bits' Hamming distance keeps a
shortlist that is scored exactly (docs/SEARCH.md). :class:`HeldVectors` knows nothing of
the database or of the embedder: :class:`~memwarden.memory._vectors.VectorIndex` (and
PostgreSQL's) loads it, keeps it in step with the stored vectors and embeds the query.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HeldVectors"]


_SCALE = 127.0
# Rows converted to float32 at a time: 256 x 256 x 4 = 256 KiB, which stays in the CPU
# cache (16 384-row chunks measured 7x slower at 100 000 rows: the copy left the cache).
_CHUNK = 256
# Past this many vectors a search is two-stage: the Hamming distance of the sign bits
# (one bit a dimension: 32 bytes a vector at 256) over every vector keeps the nearest
# _SHORTLIST, re-scored exactly from the int8 rows. Below, the exact scan is as cheap.
_TWO_STAGE_ROWS = 8_192
# WordLlama at 100 000 blocks: the exact top 10 found 0.64 of the time with 512 and
# uncentred signs, 0.80 centred, 0.90 with 1 024, 0.96 with 2 048 (about 2 250 kept with
# the sampled cut), 0.98 with 3 072 and 4 096. Re-scoring costs about 0.07 ms per 1 000.
_SHORTLIST = 2_560
# From this many vectors the shortlist's cut is estimated on every 8th distance.
_SAMPLED_ROWS = 65_536


def _popcount(np: Any) -> Any:
    """Set bits of each uint64: ``np.bitwise_count`` (numpy >= 2), else a byte table."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count
    table = np.array([i.bit_count() for i in range(256)], dtype=np.uint8)

    def count(words: Any, out: Any = None) -> Any:
        by_byte = table[np.ascontiguousarray(words).view(np.uint8)].reshape(-1, 8)
        return by_byte.sum(axis=1, dtype=np.uint8, out=out)

    return count


class HeldVectors:
    """Int8 rows of ``dim`` dimensions by block rid, their sign bits, searched by cosine
    (``np`` is numpy, imported by the caller: it is an extra)."""

    def __init__(self, np: Any, dim: int) -> None:
        self.np = np
        self.dim = dim
        self._matrix: Any = np.zeros((0, dim), dtype=np.int8)
        self._rids: Any = np.zeros(0, dtype=np.int64)
        # The sign bit of each dimension, packed 64 to a uint64 word (the first pass),
        # stored word-major (words x rows) so each pass over a word is contiguous.
        self._words = (dim + 63) // 64
        self._codes: Any = np.zeros((self._words, 0), dtype=np.uint64)
        # The signs are taken around the held vectors' mean (a model's vectors share a
        # direction: uncentred, most bits agree for every pair and say little), fixed
        # when the codes were last made and re-made as the count doubles or halves.
        self._centre: Any = np.zeros(dim, dtype=np.float32)
        self._floor: Any = self._floor_of(self._centre)  # what signs() compares with
        self._centred_at = 0
        self._loading = False  # loading: the codes are made once, at the end
        self._popcount = _popcount(np)
        self.two_stage_rows = _TWO_STAGE_ROWS
        self.shortlist = _SHORTLIST
        # block rid -> row of the matrix (-1: none), indexed by rid: rids are SQLite's
        # dense integer keys, so 4 bytes a block where a dict took about 100.
        self._row_of: Any = np.full(0, -1, dtype=np.int32)
        self._size = 0

    # ------------------------------------------------------------------ memory

    def __len__(self) -> int:
        return self._size

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
