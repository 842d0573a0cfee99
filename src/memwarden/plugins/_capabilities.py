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
    "BindingCandidate",
    "BindingValidator",
    "Describes",
    "DryRun",
    "NeedsReviews",
    "PreparesValidation",
    "QueuedReview",
    "QuickCheck",
    "ReviewQueue",
    "SuggestsBindings",
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


@dataclass(frozen=True, slots=True)
class BindingCandidate:
    """A binding a sensor could check a fact with, found in the fact's text.

    ``selector`` is the binding without ``"sensor"`` (the daemon adds the sensor's name).
    ``confidence`` (0..1) is how sure the match is; ``rank`` orders candidates across
    sensors (None: the confidence). ``why`` says what in the text matched what, and never
    quotes a secret. ``agrees`` says what the dry run should show:

    - ``True``: the text names what the check expects and the sensor saw it (a value in a
      file): only a confirming dry run is offered;
    - ``False``: the text names another value than the one seen: a refuting dry run is a
      contradiction (the fact is wrong), a confirming one is dropped;
    - ``None``: the text names the check, not its result (a test, a port, an endpoint):
      a confirming dry run is offered, a refuting one is a contradiction — the other way
      round when ``negated`` (the text says it fails: "the worker is down").

    ``secret``: the dry run's observed value and message are never shown. ``found``
    introduces what a contradicting dry run saw in ``why`` ("the file says 30").
    """

    selector: Mapping[str, Any]
    confidence: float
    why: str
    rank: float | None = None
    agrees: bool | None = True
    negated: bool = False
    secret: bool = False
    found: str = "the check found"

    @property
    def order(self) -> float:
        return self.confidence if self.rank is None else self.rank


@dataclass(frozen=True, slots=True)
class DryRun:
    """A binding checked once now: what a revalidation would say; nothing is kept."""

    outcome: str  # confirmed, refuted, changed or error
    observed: Any = None
    message: str = ""


@runtime_checkable
class SuggestsBindings(Protocol[B_contra]):
    """``binding_candidates(text, limit=)`` and ``dry_run(selector)``: binding suggestions.

    ``binding_candidates`` returns what the sensor can see that the text speaks of, best
    first, at most ``limit`` (``fs``: values in files; ``code_test``: tests by name and
    docstring; ``runtime``: the configured checks; ``http``: URLs on allowed hosts). It
    must stay cheap — no unbounded I/O, nothing stored, nothing emitted — and never quote
    a secret. ``dry_run`` checks one selector once, as a revalidation would, and emits
    nothing. The daemon (``POST /v1/suggest-bindings``, ``bind: auto``) merges the
    candidates of every running sensor, validates each as a binding, dry-runs the best
    and offers only what the dry run bears out (see :class:`BindingCandidate`).
    """

    async def binding_candidates(self, text: str, *, limit: int) -> Sequence[BindingCandidate]: ...

    async def dry_run(self, selector: B_contra) -> DryRun: ...
