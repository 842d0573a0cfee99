"""Running sensors on a host: what the daemon and ``memwarden agent`` share.

Both run sensors the same way, from the same ``[sensors.<name>]`` tables:
:func:`build_runner` looks the plugin up in the registry, validates the sensor's options
(:func:`validate_sensor_options`) and gives back a supervised :class:`SensorRunner`.
"""

from __future__ import annotations

from memwarden.hosting._build import (
    RestartSpec,
    SensorSpec,
    build_runner,
    validate_sensor_options,
)

__all__ = ["RestartSpec", "SensorSpec", "build_runner", "validate_sensor_options"]
