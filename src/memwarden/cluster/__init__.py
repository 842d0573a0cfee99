"""Several daemons on one PostgreSQL database: the primitives (docs/SCALE.md).

Needs the ``postgres`` extra (asyncpg). Each part works on its own ``cluster_*`` tables,
created by :func:`ensure_tables`:

- :class:`Leader`: a lease row with heartbeats; one node runs the singleton jobs and
  another takes over within seconds of its death (``_leader``);
- :class:`NodeRegistry`: a node's row in ``cluster_nodes`` (a random instance id,
  heartbeats; a second live instance of one name is refused) (``_nodes``);
- :class:`Notifier` and :func:`notify`: ``LISTEN``/``NOTIFY`` with reconnect and the
  ``missed`` signal (``_notify``);
- :class:`Spool` and :class:`SpoolingIngest`: a node's local durable spool of the events
  it could not commit, delivered exactly once by event id after a reconnect (``_spool``).
"""

from memwarden.cluster._ddl import DDL, SESSION_ERRORS, connect, ensure_tables
from memwarden.cluster._leader import Leader, LeaseTimes, MonotonicClock, Term, check_name
from memwarden.cluster._nodes import ALIVE_S, BEAT_S, LeaseHolder, NodeRegistry, lease_holder
from memwarden.cluster._notify import (
    MAX_PAYLOAD_BYTES,
    Notice,
    Notifier,
    Subscription,
    check_channel,
    notify,
)
from memwarden.cluster._spool import (
    Ingested,
    Spool,
    SpooledEvent,
    SpoolingIngest,
    SpoolStats,
    is_unavailable,
)

__all__ = [
    "ALIVE_S",
    "BEAT_S",
    "DDL",
    "MAX_PAYLOAD_BYTES",
    "SESSION_ERRORS",
    "Ingested",
    "Leader",
    "LeaseHolder",
    "LeaseTimes",
    "MonotonicClock",
    "NodeRegistry",
    "Notice",
    "Notifier",
    "Spool",
    "SpoolStats",
    "SpooledEvent",
    "SpoolingIngest",
    "Subscription",
    "Term",
    "check_channel",
    "check_name",
    "connect",
    "ensure_tables",
    "is_unavailable",
    "lease_holder",
    "notify",
]
