"""sd_notify over the datagram socket, by hand: the protocol is one sendto().

``READY=1`` once the store, bus and sensors are up; ``STATUS=`` one-line summaries;
``WATCHDOG=1`` from the event loop itself every half ``WATCHDOG_USEC``; ``STOPPING=1``;
``RELOADING=1`` with ``MONOTONIC_USEC``. Without ``NOTIFY_SOCKET`` every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Notifier"]

log = structlog.get_logger("memwarden.daemon")


class Notifier:
    """Talks to the service manager named by ``NOTIFY_SOCKET``."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        environ = os.environ if env is None else env
        path = environ.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = None
        if path.startswith("@"):
            self._address = "\0" + path[1:]  # abstract namespace
        elif path.startswith("/"):
            self._address = path
        self.watchdog_interval_s: float | None = None
        usec = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_interval_s = int(usec) / 1_000_000 / 2
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` lines; False (and a log line) if it could not be sent."""
        if self._address is None:
            return False
        message = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message, self._address)
        except OSError as err:
            log.warning("sd_notify_failed", error=str(err))
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send(ready=1, **({"status": status} if status else {}))

    def status(self, status: str) -> bool:
        return self.send(status=status.replace("\n", " "))

    def watchdog(self) -> bool:
        return self.send(watchdog=1)

    def stopping(self) -> bool:
        return self.send(stopping=1)

    def reloading(self) -> bool:
        monotonic_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(reloading=1, monotonic_usec=monotonic_usec)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
