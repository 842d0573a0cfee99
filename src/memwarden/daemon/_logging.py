"""structlog, configured once: contextvars first, ISO UTC time, JSON lines off a TTY."""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

__all__ = ["configure_logging"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_QUIET = ("aiosqlite", "asyncio", "httpx", "httpcore", "uvicorn.access", "watchdog", "aiomqtt")


def configure_logging(
    level: str = "info", fmt: Literal["auto", "console", "json"] = "auto", stream: Any = None
) -> None:
    """Configure structlog (and route stdlib logging through the same renderer)."""
    out = stream or sys.stdout
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
