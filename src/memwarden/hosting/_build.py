"""Building a supervised sensor from its ``[sensors.<name>]`` table.

The daemon and the remote agent (``memwarden agent``) run sensors the same way; this is
the one place that turns settings into a :class:`SensorRunner`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import structlog
from pydantic import BaseModel, ValidationError

from memwarden._files import private_dir
from memwarden.errors import ConfigError, PluginError, PluginLoadError
from memwarden.plugins import Backoff, SensorContext, SensorRunner

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from datetime import timedelta
    from pathlib import Path

    from pydantic_core import ErrorDetails

    from memwarden.memory import Clock, ValidationEvent
    from memwarden.plugins import Registry, StartupPolicy

__all__ = ["RestartSpec", "SensorSpec", "build_runner", "validate_sensor_options"]

M = TypeVar("M", bound=BaseModel)


class RestartSpec(Protocol):
    """How a crashing sensor is restarted (``[sensors.<name>.restart]``)."""

    @property
    def backoff_initial(self) -> timedelta: ...
    @property
    def backoff_max(self) -> timedelta: ...
    @property
    def crash_loop_restarts(self) -> int: ...
    @property
    def crash_loop_window(self) -> timedelta: ...
    @property
    def healthy_after(self) -> timedelta: ...


class SensorSpec(Protocol):
    """What building a runner needs of a ``[sensors.<name>]`` table."""

    @property
    def kind(self) -> str | None: ...
    @property
    def options(self) -> Mapping[str, Any]: ...
    @property
    def startup(self) -> StartupPolicy: ...
    @property
    def revalidate_timeout(self) -> timedelta | None: ...
    @property
    def setup_timeout(self) -> timedelta: ...
    @property
    def teardown_timeout(self) -> timedelta: ...
    @property
    def restart(self) -> RestartSpec: ...


def _sensor_problem(name: str, item: ErrorDetails) -> str:
    path = ".".join(["sensors", name, *(str(p) for p in item["loc"])])
    msg = "unknown setting" if item["type"] == "extra_forbidden" else item["msg"]
    return f"{path}: {msg}"


def validate_sensor_options(name: str, model: type[M], options: Mapping[str, Any]) -> M:
    """A sensor's own ``Config`` from its table; :class:`ConfigError` naming each key.

    Problems read ``sensors.<name>.<key>: <message>`` (``unknown setting`` for a key the
    sensor does not declare), exactly as ``memwarden config check`` prints them.
    """
    try:
        return model.model_validate(dict(options))
    except ValidationError as err:
        problems = [_sensor_problem(name, item) for item in err.errors()]
        raise ConfigError("; ".join(problems), problems=problems) from None


def build_runner(
    name: str,
    conf: SensorSpec,
    *,
    registry: Registry,
    clock: Clock,
    state_root: Path,
    emit: Callable[[str, ValidationEvent], Awaitable[None]],
    prepare: Callable[[Any], None] | None = None,
    **log_context: Any,
) -> SensorRunner:
    """A runner for sensor ``name``: plugin looked up, options validated, context made.

    ``prepare`` sees the sensor instance before anything runs (the daemon hands a
    ``NeedsReviews`` sensor its review queue there). Raises :class:`ConfigError` for
    unknown kinds and bad options, :class:`PluginError` when the plugin's constructor fails.
    """
    kind = conf.kind or name
    try:
        info = registry.get(kind)
    except PluginLoadError as err:
        raise ConfigError(f"sensors.{name}.kind: {err}") from None
    config = validate_sensor_options(name, info.cls.Config, conf.options)
    try:
        sensor = info.cls(config)
    except Exception as err:
        raise PluginError(
            f"sensor {name!r} ({kind}) could not be created: {type(err).__name__}: {err}",
            plugin=name,
        ) from err
    if prepare is not None:
        prepare(sensor)
    state_dir = state_root / "sensors" / name
    private_dir(state_dir.parent)  # each level 0700: mkdir(parents=True) follows the umask
    private_dir(state_dir)
    ctx = SensorContext(
        name=name,
        binding_model=info.cls.Binding,
        clock=clock,
        log=structlog.get_logger("memwarden.sensor").bind(sensor=name, **log_context),
        state_dir=state_dir,
        emit=functools.partial(emit, name),
    )
    restart = conf.restart
    return SensorRunner(
        name=name,
        kind=kind,
        sensor=sensor,
        ctx=ctx,
        startup=conf.startup,
        revalidate_timeout_s=(
            None if conf.revalidate_timeout is None else conf.revalidate_timeout.total_seconds()
        ),
        setup_timeout_s=conf.setup_timeout.total_seconds(),
        teardown_timeout_s=conf.teardown_timeout.total_seconds(),
        backoff=Backoff(
            base_s=restart.backoff_initial.total_seconds(),
            cap_s=restart.backoff_max.total_seconds(),
        ),
        crash_loop_restarts=restart.crash_loop_restarts,
        crash_loop_window_s=restart.crash_loop_window.total_seconds(),
        healthy_after_s=restart.healthy_after.total_seconds(),
    )
