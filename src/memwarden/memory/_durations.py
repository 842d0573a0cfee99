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
        if timedelta(0) <= value <= timedelta(seconds=_MAX_SECONDS):
            return value  # exact: a round trip through float seconds would lose microseconds
        seconds = None
    elif isinstance(value, bool):
        seconds = None
    elif isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float is certainly too long
            seconds = None
    elif isinstance(value, str):
        seconds = _seconds_from_text(value)
    else:
        seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 0 or seconds > _MAX_SECONDS:
        raise _reject(value)
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The exact compact form, largest units first: ``6h``, ``1m30s``, ``1d12h``, ``0.5s``."""
    # Whole microseconds, not float seconds: ``f"{x:g}"`` kept 6 significant digits
    # (123456.789 s became "123457s") and wrote 1 us as "1e-06s", which does not parse.
    rest, micros = divmod(value // timedelta(microseconds=1), 1_000_000)
    if rest == 0 and micros == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if rest >= size:
            n, rest = divmod(rest, size)
            parts.append(f"{n}{unit}")
    if micros:
        parts.append(f"{rest}.{micros:06d}".rstrip("0") + "s")
    elif rest:
        parts.append(f"{rest}s")
    return "".join(parts)


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "string",
                    "pattern": r"^\s*([0-9]+(\.[0-9]+)?([mM][sS]|[sSmMhHdDwW]))+\s*$",
                },
                {
                    "type": "string",
                    "pattern": r"^\s*[pP](?=[0-9tT])([0-9]+([.,][0-9]+)?[wW])?"
                    r"([0-9]+([.,][0-9]+)?[dD])?"
                    r"([tT](?=[0-9])([0-9]+([.,][0-9]+)?[hH])?([0-9]+([.,][0-9]+)?[mM])?"
                    r"([0-9]+([.,][0-9]+)?[sS])?)?\s*$",
                },
                {"type": "number", "minimum": 0, "maximum": _MAX_SECONDS},
            ],
            "description": "A duration: 30s, 5m, 6h, 7d, ISO 8601 (PT6H) or seconds.",
        }
    ),
]
