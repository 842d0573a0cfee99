"""How much of what a sensor read goes into an event's ``observed`` value.

An observed value is evidence, not a copy: a binding such as ``"key": ""`` (the whole
document) or ``"regex": ".*"`` must not turn the event log into a way to read files or
API answers. A string is cut to :data:`MAX_OBSERVED_CHARS` characters (the last one
``…``); any other value whose JSON text is longer becomes that text, cut the same way.
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["MAX_OBSERVED_CHARS", "bounded"]

MAX_OBSERVED_CHARS: Final = 256


def bounded(value: Any, limit: int = MAX_OBSERVED_CHARS) -> Any:
    """``value`` if it is short enough, else its first ``limit`` characters (as text)."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= limit else text[: limit - 1] + "…"
