"""The MQTT wire shared by the daemon's bridge and ``memwarden agent``.

Topics, under a prefix (``memwarden/v1`` by default; see ``docs/MQTT.md``)::

    agents/<agent>/events/<sensor>  agent -> daemon  a ValidationEvent (JSON, QoS 1)
    events/<sensor>                 any -> daemon    a ValidationEvent from any client
    agents/<agent>/status           agent -> daemon  birth / last will (retained JSON)
    agents/<agent>/heartbeat        agent -> daemon  the last sequence number the broker took
    agents/<agent>/resend           daemon -> agent  {"agent", "from_seq", "to_seq"}
    revalidate/<sensor>             daemon -> agent  a RevalidationRequest (QoS 1)
    bindings/<sensor>               daemon -> agent  [{"block_id", "binding"}] (retained)
    blocks/<id>/state               daemon -> any    a block's state change (QoS 1)
    status                          daemon -> any    ``online`` / ``offline`` (retained)

Here: the topic names (:class:`Topics`) and the identities in them
(:func:`split_agent`, :func:`is_agent_id`); the JSON bodies each end publishes
(:func:`resend_request`, :func:`heartbeat`, ...); one connection's client (:func:`make_client`:
MQTT 3.1.1, persistent session, TLS from :func:`tls_context`, the username and password
of whoever connects) with delayed acknowledgements (:func:`manual_acks`); reconnecting
with capped full-jitter backoff (:func:`keep_connected`); and sequence-gap bookkeeping
(:class:`GapTracker`). Nothing here knows the store or the daemon.
"""

from __future__ import annotations

from memwarden.mqtt._client import ConnectionSettings, make_client, manual_acks, tls_context
from memwarden.mqtt._gaps import AgentGaps, GapTracker
from memwarden.mqtt._messages import (
    AGENT_ACCEPTS,
    DAEMON_OFFLINE,
    DAEMON_ONLINE,
    QUEUED_AT,
    agent_status,
    bindings_message,
    block_state,
    heartbeat,
    resend_request,
    revalidation_request,
)
from memwarden.mqtt._reconnect import describe_error, keep_connected
from memwarden.mqtt._topics import Topics, is_agent_id, split_agent

__all__ = [
    "AGENT_ACCEPTS",
    "DAEMON_OFFLINE",
    "DAEMON_ONLINE",
    "QUEUED_AT",
    "AgentGaps",
    "ConnectionSettings",
    "GapTracker",
    "Topics",
    "agent_status",
    "bindings_message",
    "block_state",
    "describe_error",
    "heartbeat",
    "is_agent_id",
    "keep_connected",
    "make_client",
    "manual_acks",
    "resend_request",
    "revalidation_request",
    "split_agent",
    "tls_context",
]
