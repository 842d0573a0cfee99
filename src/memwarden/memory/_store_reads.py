"""The store's reads: blocks, listings, bindings, the event log, counts, and search
(a group of :class:`~memwarden.memory.Store`'s methods, see
:mod:`memwarden.memory._store_base`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from memwarden.memory import _decayline, _series
from memwarden.memory._store_base import _StoreBase
from memwarden.memory._vectors import queue_all

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import timedelta

    from memwarden.memory._model import Binding, Block
    from memwarden.memory._reads import Reads
    from memwarden.memory._record import BlockRecord
    from memwarden.memory._results import BlockFilter, EventRecord, SearchHit
    from memwarden.memory._search import SearchMode
    from memwarden.memory.policy import CoverageDict


__all__: list[str] = []


class _Reads(_StoreBase):
    """Blocks, listings, bindings, the event log, counts, and search."""

    # ------------------------------------------------------------------ reads

    async def get(self, block_id: str) -> Block:
        """A block with its bindings, its short id and its state as of now."""
        return await self._reads.get(block_id)

    async def resolve_id(self, ref: str, *, namespaces: Sequence[str] | None = None) -> str:
        """The full id a caller means: a full id, or a short id (the id's last hex digits,
        at least 8, dashes optional) that only one block's id ends with. With
        ``namespaces``, a block of any other namespace does not exist (not found).

        Raises :class:`NotFoundError` ("no block with id …"), :class:`AmbiguousIdError`
        naming the candidates, or :class:`ValidationInputError` for too short a ref.
        """
        return await self._reads.resolve_id(ref, namespaces=namespaces)

    async def short_ids(self, block_ids: Sequence[str]) -> dict[str, str]:
        """Each block's short id: its last 8 hex digits, more while another id ends
        the same way (git's abbreviations, from the end of the id)."""
        return await self._reads.short_ids(block_ids)

    async def get_record(self, block_id: str) -> BlockRecord:
        """The raw record of a block (for rules and explanations)."""
        return await self._reads.get_record(block_id)

    async def list_blocks(self, flt: BlockFilter | Mapping[str, Any] | None = None) -> list[Block]:
        """Blocks matching a filter, ordered by id (time of creation), keyset-paginated."""
        return await self._reads.list_blocks(flt)

    async def find_by_subject(self, sensor: str, subject: str) -> list[str]:
        """Ids of the blocks bound to ``sensor`` for ``subject``."""
        return await self._reads.find_by_subject(sensor, subject)

    async def sensors_bound(self, block_ids: Sequence[str]) -> dict[str, set[str]]:
        """For each of these blocks that exists, the sensors it has a binding for."""
        return await self._reads.sensors_bound(block_ids)

    async def validity_windows(self, block_ids: Sequence[str]) -> dict[str, timedelta]:
        """For each of these blocks that exists, its validity window (its own, else its
        volatility's)."""
        return await self._reads.validity_windows(block_ids)

    async def bindings_for_sensor(
        self, sensor: str, *, served_by: str | None = None
    ) -> list[tuple[str, Binding]]:
        """Every (block id, binding) a sensor owns: what it must watch; with
        ``served_by``, only the bindings that node serves (docs/SCALE.md)."""
        return await self._reads.bindings_for_sensor(sensor, served_by=served_by)

    async def events_after(self, seq: int, *, limit: int = 100) -> list[dict[str, Any]]:
        """The event log after ``seq`` (oldest first), each with the blocks it changed."""
        return await self._reads.events_after(seq, limit=limit)

    async def events_for(self, block_id: str, *, limit: int = 50) -> list[EventRecord]:
        """A block's validation history, newest first."""
        return await self._reads.events_for(block_id, limit=limit)

    async def versions(self, block_id: str) -> list[dict[str, Any]]:
        """A block's earlier texts, oldest first (the current one is the block)."""
        return await self._reads.versions(block_id)

    async def event_counts(
        self, *, since: float, bucket_s: float, scan: int = 50_000
    ) -> dict[str, dict[int, dict[str, int]]]:
        """Events received since ``since`` by sensor, time bucket and outcome (the newest
        ``scan`` events at most): what the console's sensor charts draw."""
        return await self._reads.event_counts(since=since, bucket_s=bucket_s, scan=scan)

    async def recent_event_counts(
        self, *, since: float, bucket_s: float
    ) -> dict[str, dict[int, dict[str, int]]]:
        """Events received since a recent ``since``, by sensor, bucket and outcome, reading
        only those events (found by a binary search on the log's order)."""
        return await self._reads.recent_event_counts(since=since, bucket_s=bucket_s)

    async def record_series(self) -> int:
        """Sample blocks by state and tier, the revalidation backlog and each sensor's
        events and errors into the current 5-minute slot of the time series, dropping
        rows past its 14-day retention (:mod:`~memwarden.memory._series`)."""
        if self._pg is not None:
            return await self._pg.maintenance.record_series()
        return await _series.record(self.db, self.clock)

    async def series(self, metric: str, *, since: float) -> dict[str, list[tuple[float, int]]]:
        """One metric of the time series since ``since``, by key: (slot start, value)."""
        if self._pg is not None:
            return await self._pg.maintenance.series(metric, since=since)
        return await _series.read(self.db, metric, since=since)

    async def retention_points(self, block_id: str) -> list[_decayline.RetentionPoint]:
        """The block's retention history: the decay formula's inputs at each change,
        oldest first (:mod:`~memwarden.memory._decayline`); none for an unknown id."""
        if self._pg is not None:
            return await self._pg.maintenance.retention_points(block_id)
        return await _decayline.read_points(self.db, block_id)

    async def retention_histogram(self, *, bins: int = 10) -> list[int]:
        """Live blocks by retention, in ``bins`` equal ranges of 0-1 (the decay picture)."""
        if self._pg is not None:
            return await self._pg.maintenance.retention_histogram(bins=bins)
        return await cast("Reads", self._reads).retention_histogram(bins=bins)

    async def dependents(self, block_id: str) -> list[str]:
        """Ids of the blocks that depend on this one."""
        return await self._reads.dependents(block_id)

    async def counts(self, *, namespaces: Sequence[str] | None = None) -> dict[str, Any]:
        """Blocks by state (as of now), tier and volatility; events; pending work (of
        ``namespaces`` only, when given)."""
        return await self._reads.counts(namespaces=namespaces)

    async def coverage(
        self, alive: Sequence[str], *, namespaces: Sequence[str] | None = None
    ) -> CoverageDict:
        """The share of live blocks with a binding to one of the ``alive`` sensors, overall
        and by source and tier (:func:`~memwarden.memory.policy.coverage_of`)."""
        return await self._reads.coverage(alive, namespaces=namespaces)

    # ------------------------------------------------------------------ search

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        include_refuted: bool = False,
        session: str | None = None,
        record: bool = True,
        namespaces: Sequence[str] | None = None,
        mode: SearchMode | None = None,
    ) -> list[SearchHit]:
        """Blocks matching ``query`` (words, never FTS syntax), ranked by
        relevance x freshness x reliability x retention.

        Every word must match; when no block has them all, any word may (ranked by BM25,
        so blocks with more of them come first).
        BM25 picks the best ``ranking.candidates`` matches in one pass; only those are
        joined to their blocks and re-ranked, so ranking adds no second pass over every
        match. Archived blocks are not in the index; refuted ones only when asked.
        With a ``session`` (and ``record``), the hits' retrievals are recorded, which
        feeds core promotion (:meth:`record_access`); the hits show the blocks as they
        were before this retrieval. With ``namespaces``, only blocks of those are found
        (so only they are reinforced by the retrieval).
        """
        hits = await self._search.search(
            query,
            limit=limit,
            include_refuted=include_refuted,
            namespaces=namespaces,
            mode=mode,
        )
        if session is not None and record and hits:
            await self._store.record_access([h.id for h in hits], session=session)
        return hits

    @property
    def default_search_mode(self) -> SearchMode:
        """``hybrid`` with an embedder, ``keyword`` without."""
        return self._search.default_mode

    async def reembed(self) -> int:
        """Queue every block for a new vector (after a model change); how many."""
        if self.vectors is None:  # a daemon with an embedder embeds them when it runs
            if self._pg is not None:
                return await self._pg.queue_vectors()
            return await queue_all(self.db)
        return await self.vectors.reembed()

    async def count_refuted_matches(
        self,
        query: str,
        *,
        namespaces: Sequence[str] | None = None,
        mode: SearchMode = "keyword",
        limit: int = 10,
    ) -> int:
        """How many refuted blocks a search of ``query`` in ``mode`` hides: those
        matching its words, or among its nearest vectors, or either (hybrid)."""
        return await self._search.count_refuted_matches(
            query, namespaces=namespaces, mode=mode, limit=limit
        )
