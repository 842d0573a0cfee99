"""The leader: one node runs the singleton jobs, another takes over within seconds.

**A lease row with heartbeats**, not a session-level advisory lock (docs/SCALE.md says
why: takeover bounded by the lease, not by TCP keepalives; the old leader knows when to
stop; it works through any pooler and across a failover; it is visible and fences).

What is guaranteed, and how:

- **Expiry is judged by one clock, the database's.** ``cluster_leases.expires_at`` is
  ``clock_timestamp() + ttl`` at the moment a renewal (or the acquisition) ran, and a
  lease is taken over only when ``expires_at <= clock_timestamp()``.
- **A leader stops believing before its lease can expire.** It reads its own clock
  (injected; by default monotonic) *before* sending a renewal; once that renewal
  succeeded it is sure until ``sent + ttl - safety``. The database stamped the expiry
  when the statement arrived, after ``sent``: so, with clocks that run at the same rate
  (offsets do not matter), the leader's deadline comes first. A watchdog task deposes the
  leader at that deadline whatever the renewal is doing (a hung statement, a partition
  that drops packets), cancels the jobs and drops the connection.
- **Jobs run only while sure.** :meth:`Leader.run_while_leader` starts a job when the
  node is elected and cancels it the moment it is deposed (renewal refused, connection
  lost, deadline reached, stop). A job whose writes must never land after its term ends
  calls :meth:`Term.fence` in its transaction (the lease row ``FOR SHARE``: still ours,
  same epoch, not expired; nobody can take the lease over until that transaction ends).
- **Each acquisition is a new epoch** (a fencing token); a clean stop releases the lease,
  so the next node takes over at its next poll instead of after the TTL.

The proof is ``tests/cluster/test_leader.py``: two processes contend, the leader is
killed with SIGKILL and the other leads within 10 s; a counted job never runs on two
nodes at once; a leader whose database stops answering is deposed by its own clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import structlog

from memwarden.cluster._ddl import SESSION_ERRORS, connect, ensure_tables, translated
from memwarden.errors import ConfigError, LeadershipLostError, StorageError
from memwarden.memory import sleep_on
from memwarden.plugins import Backoff

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

    import asyncpg

    from memwarden.cluster._ddl import Executor
    from memwarden.memory import Clock

__all__ = ["Leader", "LeaseTimes", "MonotonicClock", "Term", "check_name"]

log = structlog.get_logger("memwarden.cluster")

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")

_ACQUIRE = """
INSERT INTO cluster_leases AS l (name, holder, epoch, acquired_at, renewed_at, expires_at)
VALUES ($1, $2, 1, clock_timestamp(), clock_timestamp(),
        clock_timestamp() + make_interval(secs => $3::float8))
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, epoch = l.epoch + 1, acquired_at = excluded.acquired_at,
    renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE l.expires_at <= clock_timestamp() OR l.holder = excluded.holder
RETURNING epoch
"""
_RENEW = """
UPDATE cluster_leases
SET renewed_at = clock_timestamp(),
    expires_at = clock_timestamp() + make_interval(secs => $4::float8)
WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
RETURNING epoch
"""
_RELEASE = """
UPDATE cluster_leases SET expires_at = clock_timestamp()
WHERE name = $1 AND holder = $2 AND epoch = $3
"""
_FENCE = """
SELECT 1 FROM cluster_leases
WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
FOR SHARE
"""


def check_name(value: str, what: str = "node") -> str:
    """``value`` if it is a valid node or lease name (1-63 of ``a-z 0-9 . _ -``, starting
    with a letter or digit), else :class:`ConfigError` saying so."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ConfigError(
            f"{what}: {value!r} is not a valid name (1-63 characters of a-z, 0-9, '.', '_'"
            " and '-', starting with a letter or digit)"
        )
    return value


class MonotonicClock:
    """The default clock of a lease: monotonic seconds (a wall clock set back or forward
    must not stretch or cut a term)."""

    def time(self) -> float:
        return time.monotonic()


@dataclass(frozen=True, slots=True)
class LeaseTimes:
    """How long a lease holds and how often it is renewed and looked for (seconds)."""

    ttl_s: float = 6.0
    renew_s: float = 2.0
    poll_s: float = 1.0
    safety_s: float = 0.5

    def __post_init__(self) -> None:
        if not (self.ttl_s > 0 and self.renew_s > 0 and self.poll_s > 0 and self.safety_s > 0):
            raise ConfigError(f"lease times must be positive: {self}")
        if self.renew_s + self.safety_s >= self.ttl_s:
            raise ConfigError(
                f"lease: renew_s ({self.renew_s:g}) + safety_s ({self.safety_s:g}) must be"
                f" below ttl_s ({self.ttl_s:g}), or a renewal could come too late"
            )


@dataclass(frozen=True, slots=True)
class Term:
    """One node's time as leader: the lease ``name``, our ``holder`` id and the ``epoch``."""

    name: str
    holder: str
    epoch: int

    async def fence(self, conn: Executor) -> None:
        """Inside a transaction: raise :class:`LeadershipLostError` unless the lease is
        still this term's; holds the lease row until the transaction ends."""
        with translated(f"cannot check the lease {self.name!r}"):
            held = await conn.fetchval(_FENCE, self.name, self.holder, self.epoch)
        if held is None:
            raise LeadershipLostError(
                f"the lease {self.name!r} is no longer ours (epoch {self.epoch})",
                name=self.name,
                epoch=self.epoch,
            )


class Leader:
    """Contend for the lease ``name`` as ``node``; an async context manager.

    ``await leader.elected()`` waits for a term; ``leader.term`` is the current one (None
    while not sure); ``on_elected(term)`` and ``on_deposed(term, reason)`` are called on
    the event loop at each change; :meth:`run_while_leader` runs a job for each term.
    """

    def __init__(
        self,
        dsn: str,
        *,
        node: str,
        name: str = "singletons",
        times: LeaseTimes | None = None,
        clock: Clock | None = None,
        on_elected: Callable[[Term], None] | None = None,
        on_deposed: Callable[[Term, str], None] | None = None,
        backoff: Backoff | None = None,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.dsn = dsn
        self.node = check_name(node, "node")
        self.name = check_name(name, "lease")
        self.times = times or LeaseTimes()
        self.clock: Clock = clock or MonotonicClock()
        # One id per process and Leader: a node restarted under the same name is another
        # holder, and waits for the old lease to expire (or be released).
        self.holder = f"{self.node}/{uuid.uuid4().hex[:12]}"
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._backoff = backoff or Backoff(base_s=0.2, cap_s=self.times.poll_s * 2)
        self._connect_timeout_s = connect_timeout_s
        self._term: Term | None = None
        self._sure_until = float("-inf")
        self._leading = asyncio.Event()
        self._following = asyncio.Event()
        self._following.set()
        self._jobs: set[asyncio.Task[None]] = set()
        self._conn: asyncpg.Connection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self.elections = 0  # terms begun since start
        self.depositions = 0  # terms ended since start
        self.renewals = 0  # renewals that held the lease
        self.attempts = 0  # acquisitions tried (taken or not)

    # ------------------------------------------------------------------ state

    @property
    def term(self) -> Term | None:
        """The current term, or None while this node is not sure it leads."""
        return self._term

    def holds(self, term: Term) -> bool:
        """Whether ``term`` is still the current one and its deadline has not passed."""
        return self._term is term and self.clock.time() < self._sure_until

    async def elected(self) -> Term:
        """Wait until this node leads; the term."""
        while self._term is None:
            await self._leading.wait()
        return self._term

    async def deposed(self) -> None:
        """Wait until this node does not lead."""
        await self._following.wait()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._main(), name=f"leader[{self.name}]")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop contending: jobs cancelled, the lease released if held (best effort)."""
        held = self._term
        self._depose("stopping")
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._cancel_jobs()
        self._drop_connection()
        if held is not None:
            # Released: the next node takes over at its next poll, not after the TTL. On
            # a connection of its own: the campaign's was cut off mid-statement.
            with contextlib.suppress(*SESSION_ERRORS):
                conn = await connect(self.dsn, timeout_s=2.0)
                try:
                    await conn.execute(_RELEASE, held.name, held.holder, held.epoch, timeout=2)
                    log.info("leader_released", lease=self.name, holder=self.holder)
                finally:
                    await conn.close(timeout=2)

    async def run_while_leader(self, job: Callable[[Term], Awaitable[None]], *, name: str) -> None:
        """Run ``job(term)`` once per term, from election until it returns or the node is
        deposed (then it is cancelled); forever, until this call is cancelled."""
        while True:
            term = await self.elected()
            task: asyncio.Task[None] = asyncio.ensure_future(job(term))
            task.set_name(f"leader[{self.name}].{name}")
            self._jobs.add(task)
            try:
                await asyncio.wait({task})
            finally:
                self._jobs.discard(task)
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if not task.cancelled() and task.exception() is not None:
                err = task.exception()
                log.error(
                    "leader_job_failed",
                    lease=self.name,
                    job=name,
                    epoch=term.epoch,
                    error=f"{type(err).__name__}: {err}",
                )
            # Once per term: wait for this one to end before the next can start.
            while self._term is term:
                await self._following.wait()

    # ------------------------------------------------------------------ the work

    async def _main(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._campaign(), name=f"leader[{self.name}].campaign")
            tg.create_task(self._watchdog(), name=f"leader[{self.name}].watchdog")

    async def _campaign(self) -> None:
        """Connect, contend and renew; after any connection trouble: deposed, reconnect."""
        attempt = 0
        while True:
            try:
                conn = self._conn = await connect(
                    self.dsn,
                    timeout_s=self._connect_timeout_s,
                    application_name=f"memwarden leader {self.holder}",
                )
                await ensure_tables(conn)
                attempt = 0
                await self._session(conn)
            except SESSION_ERRORS as err:
                log.warning(
                    "leader_connection_lost",
                    lease=self.name,
                    holder=self.holder,
                    error=f"{type(err).__name__}: {err}",
                )
            except Exception as err:  # a bug here must not end the contention for good
                log.error(
                    "leader_session_failed",
                    lease=self.name,
                    holder=self.holder,
                    error=f"{type(err).__name__}: {err}",
                    exc_info=err,
                )
            finally:
                self._depose("connection lost")
                self._drop_connection()
            attempt += 1
            await sleep_on(self.clock, self._backoff.delay(attempt))

    async def _session(self, conn: asyncpg.Connection[Any]) -> None:
        t = self.times
        while True:
            term = self._term
            sent = self.clock.time()  # before sending: the database stamps after this
            if term is None:
                epoch = await conn.fetchval(
                    _ACQUIRE, self.name, self.holder, t.ttl_s, timeout=t.ttl_s
                )
                self.attempts += 1
                if epoch is None:
                    await sleep_on(self.clock, t.poll_s)
                    continue
                if self.clock.time() >= sent + t.ttl_s - t.safety_s:
                    continue  # taken, but answered too late to be sure of it: again
                self._elect(Term(self.name, self.holder, int(epoch)), sent)
            else:
                epoch = await conn.fetchval(
                    _RENEW, self.name, self.holder, term.epoch, t.ttl_s, timeout=t.ttl_s
                )
                if self._term is not term:
                    # The watchdog deposed us while the renewal was on its way: this
                    # connection is not to be trusted; start again.
                    raise StorageError(f"the lease {self.name!r} was not renewed in time")
                if epoch is None:
                    self._depose("lease taken over or expired")
                    continue
                self._sure_until = sent + t.ttl_s - t.safety_s
                self.renewals += 1
            await sleep_on(self.clock, t.renew_s)

    async def _watchdog(self) -> None:
        """Depose the leader at its deadline, whatever the renewal is doing."""
        while True:
            if self._term is None:
                await self._leading.wait()
                continue
            remaining = self._sure_until - self.clock.time()
            if remaining > 0:
                await sleep_on(self.clock, remaining)
                continue
            self._depose("lease not renewed in time")
            self._drop_connection()  # a hung renewal fails now; the campaign reconnects

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    def _elect(self, term: Term, sent: float) -> None:
        self._term = term
        self._sure_until = sent + self.times.ttl_s - self.times.safety_s
        self.elections += 1
        self._following.clear()
        self._leading.set()
        log.info("leader_elected", lease=self.name, holder=self.holder, epoch=term.epoch)
        if self._on_elected is not None:
            self._on_elected(term)

    def _depose(self, reason: str) -> None:
        term = self._term
        if term is None:
            return
        self._term = None
        self._sure_until = float("-inf")
        self.depositions += 1
        self._leading.clear()
        self._following.set()
        for task in self._jobs:  # stopped now, before the lease could expire
            task.cancel()
        log.warning(
            "leader_deposed", lease=self.name, holder=self.holder, epoch=term.epoch, reason=reason
        )
        if self._on_deposed is not None:
            self._on_deposed(term, reason)

    async def _cancel_jobs(self) -> None:
        jobs = list(self._jobs)
        for task in jobs:
            task.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
