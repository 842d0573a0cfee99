"""The JSON bodies on the wire, written in one place for both ends (``docs/MQTT.md``).

Each function gives the exact bytes published; reading them stays with the side that
receives them (the daemon's bridge, the agent), which decides what to do with bad ones.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import AwareDatetime, TypeAdapter

from memwarden.memory import format_duration, from_ts

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from datetime import timedelta

    from memwarden.memory import Binding, RevalidationRequest

__all__ = [
    "AGENT_ACCEPTS",
    "DAEMON_OFFLINE",
    "DAEMON_ONLINE",
    "QUEUED_AT",
    "agent_status",
    "bindings_message",
    "block_state",
    "heartbeat",
    "resend_request",
    "revalidation_request",
]

DAEMON_ONLINE = b"online"  # <prefix>/status, retained: the daemon's birth message
DAEMON_OFFLINE = b"offline"  # and its last will (also said on a clean stop)

# What an agent reads beyond the first wire format, announced in its status ("accepts"):
# the daemon sends a revalidation request's ``queued_at`` only to agents that said so,
# since agents before it refuse a request with a field they do not know.
QUEUED_AT = "queued_at"
AGENT_ACCEPTS = (QUEUED_AT,)

_INSTANT: TypeAdapter[AwareDatetime] = TypeAdapter(AwareDatetime)


def _dumps(body: Any) -> bytes:
    return json.dumps(body).encode()


def resend_request(agent: str, from_seq: int, to_seq: int) -> bytes:
    """``agents/<id>/resend``: re-send the run's events ``from_seq``..``to_seq``."""
    return _dumps({"agent": agent, "from_seq": from_seq, "to_seq": to_seq})


def revalidation_request(request: RevalidationRequest, *, queued_at: bool = False) -> bytes:
    """``revalidate/<sensor>``: the request, and with ``queued_at`` (for agents that
    accept it) when the check was asked for, on the daemon's clock like ``created_at``
    (``created_at - queued_at`` is how long it waited in the daemon's queue)."""
    body = json.loads(request.model_dump_json())
    if queued_at and request.queued_at is not None:
        body[QUEUED_AT] = _INSTANT.dump_python(request.queued_at, mode="json")
    return _dumps(body)


def bindings_message(
    rows: Iterable[tuple[str, Binding]], windows: Mapping[str, timedelta] | None = None
) -> bytes:
    """``bindings/<sensor>`` (retained): the blocks a remote sensor watches, and how.

    Each item also carries its block's ``validity_window`` (``"6h"``) when known, as a
    local sensor's :class:`~memwarden.plugins.BoundSubject` does: a polling sensor on
    the agent then renews the block itself. An agent that predates the field ignores it.
    """
    windows = windows or {}
    items: list[dict[str, Any]] = []
    for block_id, binding in rows:
        item: dict[str, Any] = {"block_id": block_id, "binding": binding.model_dump(mode="json")}
        window = windows.get(block_id)
        if window is not None:
            item["validity_window"] = format_duration(window)
        items.append(item)
    return _dumps(items)


def block_state(
    block_id: str,
    *,
    state: str,
    before: str,
    reliability: float,
    observed_at: float,
    event_id: str,
) -> bytes:
    """``blocks/<id>/state``: a block changed state (``observed_at`` in epoch seconds)."""
    return _dumps(
        {
            "block_id": block_id,
            "state": state,
            "before": before,
            "reliability": reliability,
            "observed_at": from_ts(observed_at).isoformat(),
            "event_id": event_id,
        }
    )


def agent_status(
    status: str,
    *,
    agent_id: str,
    agent: str,
    sensors: Sequence[str],
    heartbeat_s: float,
    version: str,
    reason: str = "",
    accepts: Sequence[str] = (),
) -> bytes:
    """``agents/<id>/status`` (retained): an agent's birth, last will or goodbye;
    ``accepts``: the later additions to the wire it reads (:data:`AGENT_ACCEPTS`)."""
    body: dict[str, Any] = {
        "status": status,
        "agent_id": agent_id,
        "agent": agent,
        "sensors": list(sensors),
        "heartbeat_s": heartbeat_s,
        "version": version,
    }
    if reason:
        body["reason"] = reason
    if accepts:
        body["accepts"] = list(accepts)
    return _dumps(body)


def heartbeat(agent: str, *, seq: int, queued: int, dropped: int, at: float) -> bytes:
    """``agents/<id>/heartbeat``: the last ``seq`` the broker took, the queue, the time."""
    return _dumps(
        {
            "agent": agent,
            "seq": seq,
            "queued": queued,
            "dropped": dropped,
            "at": from_ts(at).isoformat(),
        }
    )
