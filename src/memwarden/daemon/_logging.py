"""structlog, configured once: contextvars first, ISO UTC time, JSON lines off a TTY."""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog

__all__ = ["configure_logging"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_QUIET = ("aiosqlite", "asyncio", "httpx", "httpcore", "uvicorn.access", "watchdog", "aiomqtt")


class _StdStream:
    """``sys.stdout`` or ``sys.stderr`` as it is at each write, not as it was when logging
    was configured: whoever swaps the stream (pytest, an in-process CLI runner) never
    leaves the loggers holding a closed file."""

    def __init__(self, name: Literal["stdout", "stderr"]) -> None:
        self.name = name

    def _target(self) -> TextIO:
        return sys.stdout if self.name == "stdout" else sys.stderr

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._target().isatty()


def configure_logging(
    level: str = "info",
    fmt: Literal["auto", "console", "json"] = "auto",
    stream: TextIO | Literal["stdout", "stderr"] | None = None,
) -> None:
    """Configure structlog (and route stdlib logging through the same renderer).

    ``stream`` is a file, or ``"stdout"`` (the default) / ``"stderr"``, looked up at each
    write.
    """
    out: Any = (
        _StdStream(stream or "stdout") if stream is None or isinstance(stream, str) else stream
    )
    json_lines = fmt == "json" or (fmt == "auto" and not out.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Any
    if json_lines:
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(level, logging.INFO))
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
