"""Durations as people write them: ``90s``, ``5m``, ``6h``, ``7d``, ``PT6H`` or seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_core import PydanticCustomError

__all__ = ["Duration", "format_duration", "parse_duration"]

ACCEPTED_FORMS = "use 30s, 5m, 6h, 7d, 1h30m, ISO 8601 like PT6H, or a number of seconds"

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_COMPACT = re.compile(r"(?:(\d+(?:\.\d+)?)(ms|s|m|h|d|w))", re.ASCII)
_COMPACT_FULL = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+", re.ASCII)
_ISO = re.compile(
    r"P(?!$)(?:(?P<w>\d+(?:[.,]\d+)?)W)?(?:(?P<d>\d+(?:[.,]\d+)?)D)?"
    r"(?:T(?!$)(?:(?P<h>\d+(?:[.,]\d+)?)H)?(?:(?P<m>\d+(?:[.,]\d+)?)M)?(?:(?P<s>\d+(?:[.,]\d+)?)S)?)?",
    re.ASCII,
)
_MAX_SECONDS = 100 * 365 * 86400  # a century is long enough for any validity window


def _reject(value: object) -> PydanticCustomError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return PydanticCustomError(
        "duration",
        "{value} is not a duration ({forms})",
        {"value": shown, "forms": ACCEPTED_FORMS},
    )


def _seconds_from_text(text: str) -> float | None:
    s = text.strip().lower()
    if not s:
        return None
    try:
        return float(s)
    except ValueError:
        pass
    if _COMPACT_FULL.fullmatch(s):
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in _COMPACT.findall(s))
    m = _ISO.fullmatch(text.strip().upper())
    if m:
        factors = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
        return sum(float(v.replace(",", ".")) * factors[k] for k, v in m.groupdict().items() if v)
    return None


def parse_duration(value: Any) -> timedelta:
    """Parse a duration, raising ``PydanticCustomError`` that shows the value and the forms."""
    seconds: float | None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        seconds = None
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _seconds_from_text(value)
    else:
        seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 0 or seconds > _MAX_SECONDS:
        raise _reject(value)
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact compact form: ``6h``, ``90s``, ``1d12h``, ``0.5s``."""
    total = value.total_seconds()
    if total == 0:
        return "0s"
    if total != int(total):
        return f"{total:g}s"
    rest = int(total)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            n, rest = divmod(rest, size)
            parts.append(f"{n}{unit}")
    return "".join(parts)


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?(ms|s|m|h|d|w))+\s*$"},
                {"type": "string", "pattern": r"^P"},
                {"type": "number", "minimum": 0},
            ],
            "description": "A duration: 30s, 5m, 6h, 7d, ISO 8601 (PT6H) or seconds.",
        }
    ),
]
