"""The human review sensor: a queue of blocks for people to confirm, reject or edit.

A block joins the queue (the store's ``reviews`` table) when

- the rules escalate it: a hard refutation that no bound sensor can settle, or
  repeated check errors (the store queues those itself);
- it is bound to this sensor (``{"sensor": "review"}``) and its revalidation is asked
  for — its window ran out, its reliability fell, someone asked — see :meth:`revalidate`;
- the periodic scan finds a review-bound block below ``escalate_below`` reliability or
  past its window, or (``escalate_unbound``) a low-volatility block that no sensor is
  bound to and that is past its window or below that reliability.

Decisions come from people through ``memwarden review`` or ``POST
/v1/reviews/{id}/decision`` (:func:`memwarden.memory._reviews.decide_review`) and
arrive as events from this sensor with ``block_id`` set, reliability 0.95.

A review binding selects nothing: its subject is the constant ``"human"``
(:meth:`ReviewBinding.subject_of`) and its events target the block by ``block_id``.
:meth:`ReviewSensor.revalidate` therefore never waits on anything: it notes the block
and returns, so checks of different blocks (one shared subject) never overlap and none
is skipped; the run loop writes the queue. The queue lives in the store: the daemon
hands this sensor the review operations it uses (a
:class:`~memwarden.plugins.ReviewQueue`, through :meth:`ReviewSensor.use_reviews`: the
sensor is a :class:`~memwarden.plugins.NeedsReviews`) before ``setup`` — never the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field

from memwarden.errors import NotFoundError, PluginError
from memwarden.memory import Duration, RevalidationReason
from memwarden.plugins import PLUGIN_API, BaseBinding, BaseSensorConfig

if TYPE_CHECKING:
    from memwarden.memory import RevalidationRequest, ValidationEvent
    from memwarden.plugins import ReviewQueue, SensorContext

__all__ = ["ReviewBinding", "ReviewConfig", "ReviewSensor"]

_REASONS = {
    RevalidationReason.EXPIRED: "its validity window ran out",
    RevalidationReason.LOW_RELIABILITY: "its reliability is too low",
    RevalidationReason.SOURCE_CHANGED: "its source changed",
    RevalidationReason.ON_READ: "it was read while stale",
    RevalidationReason.DEPENDENCY: "something it depends on changed",
    RevalidationReason.MANUAL: "a check was asked for",
}


class ReviewConfig(BaseSensorConfig):
    """``[sensors.review]``."""

    scan_interval: Duration = Field(
        default=timedelta(minutes=10), description="How often to look for blocks to escalate."
    )
    escalate_below: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.4, description="Queue review-bound blocks whose reliability falls below this."
    )
    escalate_unbound: bool = Field(
        default=True,
        description="Also queue low-volatility blocks no sensor is bound to, once past "
        "their window (the human review cycle).",
    )
    scan_limit: Annotated[int, Field(ge=1, le=100_000)] = 500


SUBJECT = "human"


class ReviewBinding(BaseBinding):
    """``{"sensor": "review"}``: people settle this block. There is nothing to select."""

    def subject_of(self) -> str:
        return SUBJECT


class ReviewSensor:
    """Keeps the review queue filled; people empty it."""

    api_version: ClassVar[int] = PLUGIN_API
    kind: ClassVar[str] = "review"
    Config: ClassVar[type[ReviewConfig]] = ReviewConfig
    Binding: ClassVar[type[ReviewBinding]] = ReviewBinding
    # A read never waits for this check (a test run, a person) until it is measured.
    quick_check: ClassVar[bool] = False

    def __init__(self, config: ReviewConfig) -> None:
        self.config = config
        self._reviews: ReviewQueue | None = None
        self._ctx: SensorContext[ReviewBinding] | None = None
        self._asked: deque[tuple[str, str]] = deque()  # (block id, reason) from revalidate
        self._wake = asyncio.Event()
        self.queued = 0

    def use_reviews(self, reviews: ReviewQueue) -> None:
        """The review queue (called by the daemon before ``setup``)."""
        self._reviews = reviews

    @property
    def reviews(self) -> ReviewQueue:
        if self._reviews is None:
            raise PluginError(
                "the review sensor has no review queue (the daemon hands it one before setup)",
                plugin="review",
            )
        return self._reviews

    def describe(self) -> dict[str, Any]:
        """A review binding names nothing: a person settles the block."""
        return {
            "summary": "A person confirms, rejects or edits the fact on the review page.",
            "binds": {},
            "keys": {},
            "examples": [{}],
        }

    async def setup(self, ctx: SensorContext[ReviewBinding]) -> None:
        _ = self.reviews  # fail at setup, with the reason, rather than at the first item
        self._ctx = ctx

    async def run(self, ctx: SensorContext[ReviewBinding]) -> None:
        loop = asyncio.get_running_loop()
        interval_s = self.config.scan_interval.total_seconds()
        next_scan = loop.time()
        ctx.ready()
        while True:
            self._wake.clear()
            while self._asked:
                block_id, reason = self._asked[0]
                with contextlib.suppress(NotFoundError):  # deleted meanwhile
                    await self._queue(block_id, reason)
                self._asked.popleft()  # only once written: a restart retries it
            if loop.time() >= next_scan:
                await self.scan(ctx)
                next_scan = loop.time() + interval_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_scan - loop.time())):
                    await self._wake.wait()

    async def scan(self, ctx: SensorContext[ReviewBinding]) -> int:
        """Queue what needs a human now; returns how many items were queued."""
        candidates = await self.reviews.candidates(
            block_ids=[b.block_id for b in ctx.bindings],
            below=self.config.escalate_below,
            now=ctx.clock.time(),
            unbound_low_volatility=self.config.escalate_unbound,
            limit=self.config.scan_limit,
        )
        for block_id, reason in candidates:
            await self._queue(block_id, reason)
        return len(candidates)

    async def revalidate(
        self, request: RevalidationRequest, ctx: SensorContext[ReviewBinding]
    ) -> ValidationEvent | None:
        """Queue the block for a human; the answer comes later, as the decision's event.

        Returns at once without an event (the run loop writes the item): every review
        binding shares one subject, and a check that waited could overlap another.
        """
        del ctx  # the run loop writes the queue, with the context it was given
        why = _REASONS.get(request.reason, request.reason.value)
        self._asked.append((request.block_id, f"revalidation: {why}"))
        self._wake.set()
        return None

    async def _queue(self, block_id: str, reason: str) -> None:
        review = await self.reviews.queue(block_id, reason=reason)
        self.queued += 1
        if self._ctx is not None:
            self._ctx.log.info(
                "review_queued", block_id=block_id, review_id=review.id, reason=review.reason
            )

    async def teardown(self) -> None:
        self._ctx = None
