"""The sensor contract: what a plugin implements and what the daemon hands it.

This is version :data:`PLUGIN_API` of the contract. A sensor class says which version it
was written for (``api_version: ClassVar[int] = 2``); one that says nothing is a version
1 plugin and runs through the shim in :mod:`memwarden.plugins._shim` for one release.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Final,
    Generic,
    Protocol,
    TypeVar,
    runtime_checkable,
)

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from memwarden.errors import ValidationInputError
from memwarden.memory import Binding, Outcome, RevalidationRequest, ValidationEvent, sleep_on

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path

    import structlog

    from memwarden.memory import Clock

__all__ = [
    "PLUGIN_API",
    "BaseBinding",
    "BaseSensorConfig",
    "BoundSubject",
    "Sensor",
    "SensorContext",
    "StartupPolicy",
]


#: The version of the plugin contract this memwarden implements. A plugin declares the
#: version it was written for as ``api_version: ClassVar[int]`` on its sensor class.
PLUGIN_API: Final = 2


class StartupPolicy(StrEnum):
    """What a failing ``setup`` means for the daemon."""

    ERROR = "error"  # the daemon refuses to start
    IGNORE = "ignore"  # the sensor stays disabled; the daemon runs without it
    RETRY = "retry"  # keep retrying with backoff in the background


class BaseSensorConfig(BaseModel):
    """Base for a sensor's own config model (its ``[sensors.<name>]`` table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class BaseBinding(BaseModel):
    """Base for a sensor's binding model: the selector keys of a binding.

    ``sensor`` and ``subject`` are handled by the daemon; a binding model declares the
    rest (``path``, ``key``, ``equals`` ...) and may override :meth:`subject_of`.

    Strict: a selector is JSON, validated as JSON with no coercion, so ``"clean": "yes"``
    is refused for a ``bool`` and ``"by": "3"`` for an ``int`` (a string still becomes an
    enum member, a duration string a ``timedelta``). Unknown keys are refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def subject_of(self) -> str | None:
        """The subject this selector checks; None lets the daemon derive it."""
        return None


B = TypeVar("B", bound=BaseBinding)


@dataclass(frozen=True, slots=True)
class BoundSubject(Generic[B]):
    """One binding a sensor owns: the block, the raw binding and the parsed selector.

    Generic in the sensor's binding model: in a sensor whose ``Binding`` is
    ``EnvVarBinding``, ``bound: BoundSubject[EnvVarBinding]`` has ``bound.selector``
    typed ``EnvVarBinding`` (the daemon parsed it with that model).

    ``validity_window`` is how long the block stays fresh after a confirmation (its own
    window, else its volatility's), filled in by the daemon and the test kit; None when
    unknown (bindings handed to a remote agent). The polling base emits an unchanged
    confirmation again at least every half of it, so a polled block never expires.
    """

    block_id: str
    binding: Binding
    selector: B
    validity_window: timedelta | None = field(default=None, kw_only=True)

    @property
    def subject(self) -> str:
        return self.binding.subject


@runtime_checkable
class Sensor(Protocol[B]):
    """What a sensor plugin implements (plugin API version 2).

    The class is found through the entry-point group ``memwarden.sensors`` (the
    entry-point name is its kind) and built as ``SensorClass(config)`` with its validated
    ``Config``. The daemon then calls:

    - ``setup(ctx)`` once to acquire resources (may raise; the startup policy decides);
    - ``run(ctx)`` as a long-running task: watch the world, ``await ctx.emit(...)``, and
      call ``ctx.ready()`` once watching. It is restarted with backoff if it raises;
    - ``revalidate(request, ctx)`` to check one bound subject now, under a deadline;
      return the event(s) observed (or emit them and return None);
    - ``teardown()`` once at the end; idempotent and safe after a partial setup.

    ``api_version`` says which contract the class was written for (:data:`PLUGIN_API`).
    A class may also declare ``kind``; it must then equal its entry-point name. Optional
    capabilities are separate protocols in :mod:`memwarden.plugins`: ``QuickCheck``,
    ``BindingValidator``, ``Describes``, ``PreparesValidation``, ``NeedsReviews``.
    """

    api_version: ClassVar[int]
    Config: ClassVar[type[BaseSensorConfig]]
    Binding: ClassVar[type[BaseBinding]]

    async def setup(self, ctx: SensorContext[B]) -> None: ...

    async def run(self, ctx: SensorContext[B]) -> None: ...

    async def revalidate(
        self, request: RevalidationRequest, ctx: SensorContext[B]
    ) -> ValidationEvent | Sequence[ValidationEvent] | None: ...

    async def teardown(self) -> None: ...


class SensorContext(Generic[B]):
    """What the daemon gives a sensor: emit, bindings, clock, logger, a state dir.

    Generic in the sensor's binding model ``B``: :attr:`bindings` are
    ``BoundSubject[B]`` and :meth:`parse_binding` returns a ``B``.
    """

    def __init__(
        self,
        *,
        name: str,
        binding_model: type[B],
        clock: Clock,
        log: structlog.typing.FilteringBoundLogger,
        state_dir: Path,
        emit: Callable[[ValidationEvent], Awaitable[None]],
        default_window: timedelta | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.log = log
        self.state_dir = state_dir
        self._emit = emit
        self._binding_model = binding_model
        self._bindings: list[BoundSubject[B]] = []
        self._changed = asyncio.Event()
        self._ready = asyncio.Event()
        self.default_window = default_window

    # -- readiness

    def ready(self) -> None:
        """Say the sensor is watching (``run`` calls this once it is)."""
        self._ready.set()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set()

    # -- bindings

    @property
    def bindings(self) -> list[BoundSubject[B]]:
        """The bindings this sensor owns right now."""
        return list(self._bindings)

    async def wait_bindings_changed(self) -> list[BoundSubject[B]]:
        """Wait until the bindings change; returns the new list.

        The first call in each ``run`` (the first run and every restart) returns at once
        with the current bindings, so ``while True: reconcile(await
        ctx.wait_bindings_changed())`` sees every binding exactly when it matters.
        """
        await self._changed.wait()
        self._changed.clear()
        return self.bindings

    def set_bindings(self, bindings: list[BoundSubject[B]]) -> None:
        """Daemon side: replace the bindings and wake the sensor."""
        self._bindings = list(bindings)
        self._changed.set()

    def touch_bindings(self) -> None:
        """Daemon side: make the next :meth:`wait_bindings_changed` return at once."""
        self._changed.set()

    def binding_keys(self) -> list[str]:
        """The selector keys a binding to this sensor may have (from its model)."""
        return list(self._binding_model.model_fields)

    @property
    def binding_model(self) -> type[B]:
        """The sensor's ``Binding`` model."""
        return self._binding_model

    def parse_binding(self, binding: Binding) -> B:
        """Validate a binding's selector with the sensor's model (ValidationInputError).

        A strict model (every :class:`BaseBinding` unless it says otherwise) validates
        the selector as the JSON it is: no coercion of ``"yes"`` to ``True``. A lax model
        (a version-1 plugin's, through the shim) validates it as before.
        """
        model = self._binding_model
        try:
            if model.model_config.get("strict"):
                return model.model_validate_json(json.dumps(binding.selector))
            return model.model_validate(binding.selector)
        except ValidationError as err:
            raise ValidationInputError(
                [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.errors()]
            ) from None

    # -- events

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.time(), tz=UTC)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on the daemon's clock.

        With the real clock this is ``asyncio.sleep``; a test clock that can sleep
        (``memwarden.plugins.testing.FakeClock``) wakes the sleeper when the test
        advances it, so a test never waits for real time to pass.
        """
        await sleep_on(self.clock, seconds)

    def event(
        self,
        subject: str,
        outcome: Outcome | str,
        *,
        observed: JsonValue = None,
        message: str = "",
        reliability: float | None = None,
        validity_window: timedelta | None = None,
        request_id: str | None = None,
        block_id: str | None = None,
        observed_at: datetime | None = None,
    ) -> ValidationEvent:
        """Build an event from this sensor, observed now unless told otherwise."""
        fields: dict[str, Any] = {
            "sensor": self.name,
            "subject": subject,
            "outcome": outcome,
            "observed": observed,
            "message": message[:4096],
            "reliability": reliability,
            "validity_window": validity_window,
            "request_id": request_id,
            "block_id": block_id,
            "observed_at": observed_at or self.now(),
        }
        return ValidationEvent.model_validate(fields)

    async def emit(self, event: ValidationEvent) -> None:
        """Hand an event to the daemon; waits while the daemon is behind (back-pressure)."""
        await self._emit(event)
