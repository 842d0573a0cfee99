"""Optional sensor capabilities, each a small runtime-checkable Protocol.

A sensor implements the four methods of :class:`~memwarden.plugins.Sensor` and, when it
has something more to offer, any of these. The daemon asks ``isinstance(sensor,
QuickCheck)`` (and so on) — never ``getattr(sensor, "...")`` — so the list below is the
whole list, and ``docs/PLUGINS.md`` documents each with an example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from memwarden.plugins._contract import BaseBinding

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "BindingValidator",
    "Describes",
    "NeedsReviews",
    "PreparesValidation",
    "QueuedReview",
    "QuickCheck",
    "ReviewQueue",
]

B_contra = TypeVar("B_contra", bound=BaseBinding, contravariant=True)


@runtime_checkable
class QuickCheck(Protocol):
    """``quick_check``: whether a check answers in milliseconds.

    A read of a stale block may wait (briefly) for a re-check before it answers. Until a
    binding's first check is timed, the daemon trusts this hint: ``True`` lets a read
    wait for the check, ``False`` (a test run, a person) never does. A sensor without it
    is taken as quick for the wait and listed as not quick in ``GET /v1/sensors``.
    """

    quick_check: ClassVar[bool]


@runtime_checkable
class BindingValidator(Protocol[B_contra]):
    """``validate_binding(selector)``: refuse a binding when it is added.

    Called with the selector its ``Binding`` model already accepted; raise
    ``ValueError`` with a message saying what is wrong and what is allowed (the API
    answers 422 with it). It may run **before** ``setup`` (a block added while the sensor
    starts, bindings checked at start) and runs **synchronously on the event loop**: no
    I/O, no waiting — look only at the config and at state loaded in
    :class:`PreparesValidation`'s ``prepare_validation``.
    """

    def validate_binding(self, selector: B_contra) -> None: ...


@runtime_checkable
class Describes(Protocol):
    """``describe()``: what a binding may name, for agents.

    Returns ``{"summary": str, "binds": {...}, "keys": {key: meaning}, "examples":
    [selector, ...]}`` (``binds``: roots, test files, check names, allowed hosts; the
    daemon adds each example's ``"sensor"``). Called for ``GET /v1/sensors`` and MCP
    ``memory_sensors``: keep it cheap and free of secrets.
    """

    def describe(self) -> Mapping[str, Any]: ...


@runtime_checkable
class PreparesValidation(Protocol):
    """``prepare_validation()``: load what ``validate_binding`` rests on, before setup.

    At start the daemon re-checks every stored binding with today's rules (and
    quarantines the ones that fail). A sensor whose rules rest on state read from disk
    (``code_test``'s test collection) loads it here first; it runs under the sensor's
    setup timeout, and a failure is logged (bindings are then judged by the defaults).
    """

    async def prepare_validation(self) -> None: ...


@dataclass(frozen=True, slots=True)
class QueuedReview:
    """An item of the review queue: its id and why it is there."""

    id: str
    reason: str


class ReviewQueue(Protocol):
    """The review operations a sensor may use: find candidates, queue a block."""

    async def candidates(
        self,
        *,
        block_ids: Sequence[str],
        below: float,
        now: float,
        unbound_low_volatility: bool,
        limit: int,
    ) -> list[tuple[str, str]]:
        """Blocks a person should look at, with the reason, that have no open item."""
        ...

    async def queue(self, block_id: str, *, reason: str) -> QueuedReview:
        """Queue a block (or return its open item)."""
        ...


@runtime_checkable
class NeedsReviews(Protocol):
    """``use_reviews(queue)``: the sensor is handed the review queue before ``setup``.

    Only the review operations (:class:`ReviewQueue`), never the whole store. The
    built-in ``review`` sensor uses it; the test kit hands one over its own store.
    """

    def use_reviews(self, reviews: ReviewQueue) -> None: ...
