"""The review queue a :class:`~memwarden.plugins.NeedsReviews` sensor is handed.

The daemon and the test kit build it over their store; the sensor sees only these two
operations, never the store itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwarden.plugins._capabilities import QueuedReview

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memwarden.memory import Store

__all__ = ["StoreReviewQueue"]


class StoreReviewQueue:
    """:class:`~memwarden.plugins.ReviewQueue` over a store's ``reviews`` table."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def candidates(
        self,
        *,
        block_ids: Sequence[str],
        below: float,
        now: float,
        unbound_low_volatility: bool,
        limit: int,
    ) -> list[tuple[str, str]]:
        return await self._store.escalation_candidates(
            block_ids=block_ids,
            below=below,
            now=now,
            unbound_low_volatility=unbound_low_volatility,
            limit=limit,
        )

    async def queue(self, block_id: str, *, reason: str) -> QueuedReview:
        review = await self._store.queue_review(block_id, reason=reason)
        return QueuedReview(id=review.id, reason=review.reason)
