"""Fixture: the example sensor exactly as it was written for plugin API 1 (memwarden 0.1).

Kept unchanged so tests/plugins/test_shim.py can prove the version-1 shim still runs a
plugin written before ``api_version``, ``revalidate(request, ctx)`` and strict bindings.
Do not modernise it.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from memwarden.plugins import BaseBinding, BaseSensorConfig, Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping

    from memwarden.plugins import (
        BoundSubject,
        RevalidationRequest,
        SensorContext,
        ValidationEvent,
    )

__all__ = ["EnvVarBinding", "EnvVarConfig", "EnvVarSensor", "__version__"]

try:
    __version__ = version("memwarden-sensor-example")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"


class EnvVarConfig(BaseSensorConfig):
    """``[sensors.envvar]``: what the sensor may read and how often it looks."""

    allow: list[str] = Field(
        default_factory=list,
        description="Shell-style patterns of the variables it may read (APP_*); none by default.",
    )
    interval_s: float = Field(default=60.0, gt=0, description="How often to look for changes.")
    reliability: float = Field(
        default=0.95, ge=0.0, le=1.0, description="How far a confirmation is trusted."
    )


class EnvVarBinding(BaseBinding):
    """A binding's selector: the variable, and optionally the value it must have."""

    var: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
    equals: str | None = None

    def subject_of(self) -> str:
        """The variable is the subject: ``{"sensor": "envvar", "var": "APP_MODE"}``."""
        return self.var


class EnvVarSensor:
    """Confirms or refutes blocks bound to environment variables."""

    kind: ClassVar[str] = "envvar"
    Config: ClassVar[type[EnvVarConfig]] = EnvVarConfig
    Binding: ClassVar[type[EnvVarBinding]] = EnvVarBinding

    def __init__(self, config: EnvVarConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._ctx: SensorContext | None = None
        self._last: dict[tuple[str, str], str | None] = {}  # (block, var) -> value seen

    # -- the optional hook: refuse a binding when it is added, with a clear message

    def validate_binding(self, selector: EnvVarBinding) -> None:
        """Refuse a variable the config does not allow (raised as a 422 by the API)."""
        if not self._allowed(selector.var):
            allowed = ", ".join(self.config.allow) or "nothing"
            msg = (
                f"var: {selector.var!r} is not allowed for this sensor "
                f"(allow = {allowed}; add a pattern to its [sensors.<name>] allow list)"
            )
            raise ValueError(msg)

    def describe(self) -> dict[str, Any]:
        """What a binding may name and examples (GET /v1/sensors, MCP memory_sensors)."""
        allowed = list(self.config.allow)
        var = next((p for p in allowed if "*" not in p and "?" not in p), "APP_MODE")
        return {
            "summary": "An environment variable of the daemon: set, or equal to a value.",
            "binds": {"allow": allowed},
            "keys": {"var": "a variable the allow list admits", "equals": "its expected value"},
            "examples": [{"var": var}, {"var": var, "equals": "production"}],
        }

    # -- the contract

    async def setup(self, ctx: SensorContext) -> None:
        self._ctx = ctx

    async def run(self, ctx: SensorContext) -> None:
        ctx.ready()
        # The first wait returns at once with the current bindings; later ones when
        # blocks are bound or unbound. Between changes, look again every interval_s.
        bindings = await ctx.wait_bindings_changed()
        while True:
            for bound in bindings:
                event = self._observe(ctx, bound, only_changes=True)
                if event is not None:
                    await ctx.emit(event)
            try:
                async with asyncio.timeout(self.config.interval_s):
                    bindings = await ctx.wait_bindings_changed()
            except TimeoutError:
                pass  # nothing changed in the bindings: poll the same ones again

    async def revalidate(self, request: RevalidationRequest) -> ValidationEvent:
        if self._ctx is None:
            raise RuntimeError("revalidate() before setup()")
        selector = self._ctx.parse_binding(request.binding)
        assert isinstance(selector, EnvVarBinding)
        return self._check(
            self._ctx, request.subject, selector, block_id=request.block_id, request_id=request.id
        )

    async def teardown(self) -> None:
        # Idempotent and safe after a partial setup: it only forgets.
        self._ctx = None
        self._last.clear()

    # -- the work

    def _allowed(self, var: str) -> bool:
        return any(fnmatch.fnmatchcase(var, pattern) for pattern in self.config.allow)

    def _observe(
        self, ctx: SensorContext, bound: BoundSubject, *, only_changes: bool
    ) -> ValidationEvent | None:
        selector = bound.selector
        assert isinstance(selector, EnvVarBinding)
        key = (bound.block_id, selector.var)
        value = self._environ.get(selector.var)
        if only_changes and key in self._last and self._last[key] == value:
            return None
        self._last[key] = value
        return self._check(ctx, bound.subject, selector, block_id=bound.block_id)

    def _check(
        self,
        ctx: SensorContext,
        subject: str,
        selector: EnvVarBinding,
        *,
        block_id: str,
        request_id: str | None = None,
    ) -> ValidationEvent:
        var = selector.var
        if not self._allowed(var):
            # Bindings can reach the store without passing validate_binding (an import,
            # an older config): the config still decides what may be read.
            return ctx.event(
                subject,
                Outcome.ERROR,
                message=f"{var} is not allowed by this sensor's config",
                block_id=block_id,
                request_id=request_id,
            )
        value = self._environ.get(var)
        if value is None:
            outcome, message = Outcome.REFUTED, f"{var} is not set"
        elif selector.equals is None:
            outcome, message = Outcome.CONFIRMED, f"{var} is set"
        elif value == selector.equals:
            outcome, message = Outcome.CONFIRMED, f"{var} is {value!r} as expected"
        else:
            outcome, message = Outcome.REFUTED, f"{var} is {value!r}, expected {selector.equals!r}"
        # block_id: the outcome depends on this binding's `equals`, so it must reach only
        # this block, not every block watching the same variable.
        return ctx.event(
            subject,
            outcome,
            observed=value,
            message=message,
            reliability=self.config.reliability,
            block_id=block_id,
            request_id=request_id,
        )
