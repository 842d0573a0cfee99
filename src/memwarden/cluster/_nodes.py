"""A node's registration in ``cluster_nodes``: one row per node name, with the random id
of the instance (process) that holds it and its heartbeats (docs/SCALE.md, "What each
node needs").

- :meth:`NodeRegistry.register` at start: the row becomes ours unless another instance
  with this name heartbeated within :data:`ALIVE_S` (the database's clock) and did not
  stop cleanly; then :class:`~memwarden.errors.ConfigError` naming its host. One
  exception: an instance on *this* host whose process is gone (a crash, a ``kill -9``) is
  our predecessor, and its row is taken over at once.
- :meth:`NodeRegistry.beat` every :data:`BEAT_S`; it says False once the row is no
  longer ours (another instance took the name while our heartbeats failed).
- :meth:`NodeRegistry.stopped` on a clean stop: the name is free at once.

Times are the database's (``clock_timestamp()``), so clock skew between hosts cannot make
a live node look dead.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from memwarden.cluster._ddl import connect, ensure_tables, translated
from memwarden.cluster._leader import check_name
from memwarden.errors import ConfigError

if TYPE_CHECKING:
    from memwarden.cluster._ddl import Executor

__all__ = ["ALIVE_S", "BEAT_S", "LeaseHolder", "NodeRegistry", "lease_holder"]

log = structlog.get_logger("memwarden.cluster")

ALIVE_S = 30.0  # a node whose last heartbeat is younger than this is alive
BEAT_S = 5.0  # how often a node heartbeats

_CLAIM = """
INSERT INTO cluster_nodes AS n (node, instance, host, pid, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, clock_timestamp(), clock_timestamp())
ON CONFLICT (node) DO UPDATE
SET instance = excluded.instance, host = excluded.host, pid = excluded.pid,
    started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, stopped_at = NULL
WHERE n.instance = excluded.instance OR n.stopped_at IS NOT NULL
   OR n.heartbeat_at <= clock_timestamp() - make_interval(secs => $5::float8)
   OR (n.host = excluded.host AND n.instance = $6)
RETURNING instance
"""
_OTHER = """
SELECT instance, host, pid, extract(epoch FROM clock_timestamp() - heartbeat_at) AS age
FROM cluster_nodes WHERE node = $1
"""
_BEAT = """
UPDATE cluster_nodes SET heartbeat_at = clock_timestamp()
WHERE node = $1 AND instance = $2 RETURNING instance
"""
_STOPPED = """
UPDATE cluster_nodes SET stopped_at = clock_timestamp() WHERE node = $1 AND instance = $2
"""
_HOLDER = """
SELECT holder, epoch, expires_at > clock_timestamp() AS valid
FROM cluster_leases WHERE name = $1
"""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


class NodeRegistry:
    """This process as node ``node`` in ``cluster_nodes``."""

    def __init__(self, dsn: str, *, node: str, host: str | None = None) -> None:
        self.dsn = dsn
        self.node = check_name(node, "cluster.node")
        self.host = host or socket.gethostname()
        self.pid = os.getpid()
        self.instance = uuid.uuid4().hex
        self.registered = False
        self.lost = False  # another instance took the name over

    async def register(self) -> None:
        """Claim the name (see the module's note), or :class:`ConfigError`."""
        conn = await connect(self.dsn, application_name=f"memwarden node {self.node}")
        try:
            await ensure_tables(conn)
            with translated("cannot register the node"):
                other = await conn.fetchrow(_OTHER, self.node)
                crashed = ""  # a dead predecessor on this host: taken over at once
                if (
                    other is not None
                    and other["host"] == self.host
                    and other["pid"] is not None
                    and other["pid"] != self.pid
                    and not _pid_alive(int(other["pid"]))
                ):
                    crashed = str(other["instance"])
                got = await conn.fetchval(
                    _CLAIM, self.node, self.instance, self.host, self.pid, ALIVE_S, crashed
                )
        finally:
            await conn.close(timeout=5)
        if got is None:
            # Another live instance holds the name (registered between our read and our
            # claim if none was read).
            where = (
                "elsewhere"
                if other is None
                else f"on host {other['host']!r} (pid {other['pid']}, last heartbeat"
                f" {float(other['age']):.0f} s ago)"
            )
            raise ConfigError(
                f"cluster.node: node {self.node!r} is already running {where}: give this"
                " daemon another [cluster] node name, or stop the other one (a node is taken"
                f" for dead {ALIVE_S:g} s after its last heartbeat)"
            )
        self.registered = True
        log.info("cluster_node_registered", node=self.node, instance=self.instance)

    async def beat(self, conn: Executor) -> bool:
        """One heartbeat; False (and logged) once the name is another instance's."""
        with translated("cannot heartbeat"):
            ours = await conn.fetchval(_BEAT, self.node, self.instance)
        if ours is None and not self.lost:
            self.lost = True
            log.error(
                "cluster_node_taken_over",
                node=self.node,
                instance=self.instance,
                hint="another daemon registered this node name while this one could not"
                " heartbeat; stop one of them",
            )
        return ours is not None

    async def stopped(self, conn: Executor) -> None:
        """A clean stop: the name is free for the next start at once."""
        with translated("cannot unregister the node"):
            await conn.execute(_STOPPED, self.node, self.instance)


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who holds a lease now (``holder`` is ``<node>/<random>``; never a password)."""

    holder: str | None
    epoch: int
    valid: bool


async def lease_holder(conn: Executor, name: str = "singletons") -> LeaseHolder:
    """The lease's row as the database sees it now."""
    with translated("cannot read the lease"):
        rows = await conn.fetch(_HOLDER, name)
    if not rows:
        return LeaseHolder(None, 0, valid=False)
    row = rows[0]
    return LeaseHolder(str(row["holder"]), int(row["epoch"]), valid=bool(row["valid"]))
