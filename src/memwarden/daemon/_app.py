"""The daemon: wires store, bus, sensors and scheduler, and owns their lifetimes.

Resources are entered through one ``AsyncExitStack`` and closed in reverse; every task
has a name and lives in the daemon's ``TaskGroup``. ``await daemon.ready()`` is what
both ``READY=1`` and the tests wait for. Shutdown: a signal sets the stop event; we
stop taking input (sensors first), let the bus commit what it accepted, tear sensors
down within their timeouts, then cancel what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import structlog
from pydantic import ValidationError

from memwarden._files import private_dir
from memwarden.daemon._api import ApiServer, api_file, ensure_token
from memwarden.daemon._bus import Bus
from memwarden.daemon._callers import DEFAULT_NAMESPACE, Callers, load_callers
from memwarden.daemon._config import (
    SensorSettings,
    Settings,
    load_settings,
)
from memwarden.daemon._freshness import Liveness, receipt, verdict_factor
from memwarden.daemon._ingest import EventGate
from memwarden.daemon._metrics import DaemonMetrics
from memwarden.daemon._mqtt import MqttBridge
from memwarden.daemon._notify import Notifier
from memwarden.daemon._privacy import PrivacyDoors, ensure_key, read_policy_file
from memwarden.daemon._scheduler import ALIVE_KEY, Scheduler
from memwarden.daemon._sessions import SessionWatch
from memwarden.daemon._suggest import propose
from memwarden.embedders import load_embedder
from memwarden.errors import (
    AmbiguousIdError,
    ConfigError,
    MemwardenError,
    NotFoundError,
    PluginError,
    PluginLoadError,
    ValidationInputError,
)
from memwarden.hosting import build_runner
from memwarden.memory import (
    Binding,
    BlockPatch,
    BlockState,
    NewBlock,
    RevalidationReason,
    Store,
    SystemClock,
    Volatility,
    binding_from_row,
    from_ts,
    validate_input,
)
from memwarden.plugins import (
    BoundSubject,
    Describes,
    NeedsReviews,
    PreparesValidation,
    QuickCheck,
    Registry,
    SensorRunner,
    StartupPolicy,
    check_binding,
)
from memwarden.plugins._guard import Crash, guarded_sync
from memwarden.plugins._review_queue import StoreReviewQueue

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from pathlib import Path

    from memwarden.client import ClusterHealth, HealthAnswer, SearchHealth
    from memwarden.daemon._answers import (
        CoverageDict,
        SearchAnswerDict,
        SearchFactors,
        SearchResultDict,
    )
    from memwarden.daemon._cluster import ClusterNode
    from memwarden.daemon._suggest import ProposeReport
    from memwarden.memory import (
        ApplyResult,
        Block,
        Clock,
        Proposal,
        SearchMode,
        StateChange,
        StoredBinding,
        ValidationEvent,
    )
    from memwarden.privacy import Scope, Source

__all__ = ["Daemon", "ReadThrough"]

SERVE_EVERY_S = 5.0  # the leader's pass over who serves each binding (docs/SCALE.md)
# With several nodes, how often a read waiting on revalidations asks the store whether
# another node applied their answers.
ANSWER_POLL_S = 0.1

log = structlog.get_logger("memwarden.daemon")


@dataclass(slots=True)
class ReadThrough:
    """What a read's re-checks did, by block id."""

    checked: list[str] = field(default_factory=list)  # checked and answered for this read
    timed_out: list[str] = field(default_factory=list)  # asked, no answer within the wait
    later: list[str] = field(default_factory=list)  # a retry waiting its interval
    floored: list[str] = field(default_factory=list)  # checked moments ago: not again


class Daemon:
    """One memwarden process."""

    def __init__(
        self,
        settings: Settings,
        *,
        registry: Registry | None = None,
        clock: Clock | None = None,
        notifier: Notifier | None = None,
        config_file: str | Path | None = None,
        install_signal_handlers: bool = False,
    ) -> None:
        self.settings = settings
        self.registry = (
            registry
            if registry is not None
            else Registry.from_entry_points(allow=settings.plugin_allowlist)
        )
        self.clock: Clock = clock or SystemClock()
        self.notifier = notifier or Notifier()
        self.config_file = config_file
        self._signals = install_signal_handlers
        self.runners: dict[str, SensorRunner] = {}
        self.unavailable: dict[str, str] = {}  # configured sensors whose plugin failed to load
        self._runner_tasks: dict[str, asyncio.Task[None]] = {}
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._reload = asyncio.Event()
        self._dirty_bindings: set[str] = set()
        self._bindings_wake = asyncio.Event()
        self._tg: asyncio.TaskGroup | None = None
        self._store: Store | None = None
        self._bus: Bus | None = None
        self._scheduler: Scheduler | None = None
        # On PostgreSQL: this node's registration, lease and spool (daemon/_cluster.py).
        self.cluster: ClusterNode | None = None
        self._fatal: MemwardenError | None = None  # why the daemon stopped itself
        self.reloads = 0
        self.erased = 0  # blocks erased since start (memwarden_blocks_erased_total)
        self.metrics = DaemonMetrics()
        self.api: ApiServer | None = None
        self._answer_waiters: dict[str, asyncio.Future[None]] = {}
        self._waiter_refs: dict[str, int] = {}  # reads waiting on each request
        self._answered_recently: dict[str, None] = {}  # request ids, oldest first
        self.sessions = SessionWatch()  # who read what: told when it is refuted or stale
        self._applied = asyncio.Condition()
        self._applied_generation = 0  # bumped at each commit: long-polls wait for a change
        self._closing = False  # shutting down: long-polls answer now instead of waiting
        self._api_task: asyncio.Task[None] | None = None
        self.mqtt: MqttBridge | None = None  # the MQTT bridge, when [mqtt] is configured
        self._privacy: PrivacyDoors | None = None  # the privacy policy at every door
        self.quarantined: dict[int, str] = {}  # binding id -> sensor, as of the last check
        # Who may report what from outside (POST /v1/events, the MQTT bridge).
        self.gate = EventGate(
            remote_sensors=self.remote_sensors,
            local_sensors=self._local_sensors,
            policy=lambda: self.settings.rules,
            clock=self.clock,
        )

    # ------------------------------------------------------------------ accessors

    @property
    def store(self) -> Store:
        if self._store is None:
            raise MemwardenError("the daemon is not running")
        return self._store

    @property
    def privacy(self) -> PrivacyDoors:
        if self._privacy is None:
            raise MemwardenError("the daemon is not running")
        return self._privacy

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise MemwardenError("the daemon is not running")
        return self._bus

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            raise MemwardenError("the daemon is not running")
        return self._scheduler

    async def ready(self) -> None:
        """Wait until the store, bus and sensors are up."""
        await self._ready.wait()

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        self._reload.set()

    # ------------------------------------------------------------------ main

    async def run(self) -> None:
        """Run until asked to stop.

        Raises the error itself (not wrapped in a group) on a startup failure: a bad
        store, a sensor whose setup fails under policy ``error`` (:class:`PluginError`
        naming it), an unknown sensor kind or bad sensor options (:class:`ConfigError`).
        """
        try:
            await self._run()
        except BaseExceptionGroup as group:
            single = _single_error(group)
            if single is None:
                raise
            raise single from None
        if self._fatal is not None:  # stopped itself (its node name taken over)
            raise self._fatal

    async def _run(self) -> None:
        s = self.settings
        try:
            private_dir(s.home)  # 0700, tightened (and logged) if it was looser
        except OSError as err:
            raise ConfigError(f"home: cannot make the state dir {s.home} private: {err}") from None
        # Checked before anything else is opened: an unfit token file changes nothing.
        token = ensure_token(s.home) if s.api.enabled else ""
        self._privacy = PrivacyDoors(
            s.privacy,
            ensure_key(s.home),
            stored=read_policy_file(s.home),  # a PUT's policy, kept: it overrides [privacy]
            home=s.home,
            config_file=str(self.config_file or ""),
        )
        callers = load_callers(s, token) if s.api.enabled else None
        self.notifier.status("starting")
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self.notifier.close)
            # A configured embedder is loaded before the store opens: a missing model is
            # a ConfigError at start, never a download.
            embedder = (
                load_embedder(s.search.embedder, s.search.embedders.get(s.search.embedder))
                if s.search.embedder != "none"
                else None
            )
            store = Store(
                s.database,
                embedder=embedder,
                embed_batch=s.search.embed_batch,
                embed_claim_s=s.search.embed_claim.total_seconds(),
                clock=self.clock,
                policy=s.rules,
                readers=s.store.readers,
                maintenance_connections=s.store.maintenance_connections,
                inline_read_ms=s.store.inline_read_ms,
                flood_commit_events=s.store.flood_commit_events,
                flood_wal_mib=s.store.flood_wal_mib,
                synchronous=s.store.synchronous_for(mqtt=s.mqtt is not None),
                score_log=s.store.score_log or s.home / "scores.jsonl",
                compaction=s.store.compaction,
                secure_delete=s.store.secure_delete,
                node=s.cluster.node,
            )
            self._store = await stack.enter_async_context(store)
            stack.callback(self._clear)
            await self._join_cluster(stack, store)  # PostgreSQL: closed before the store
            alive = await store.get_meta(ALIVE_KEY)
            down_since = float(alive) if alive else None
            await _requeue_sent(store)
            self._bus = Bus(
                store,
                queue_per_source=s.bus.queue_per_source,
                batch_max=s.bus.batch_max,
                on_applied=self._on_applied,
                screen=self._screen_events,
                scrub=self._scrub,
                ingest=self.cluster.ingest if self.cluster is not None else None,
            )
            if s.mqtt is not None:  # closed after the TaskGroup, before the store
                self.mqtt = await stack.enter_async_context(
                    MqttBridge(
                        s.mqtt,
                        store=store,
                        bus=self._bus,
                        remote_sensors=self.remote_sensors,
                        gate=self.gate,
                        clock=self.clock,
                        drain_timeout_s=s.bus.drain_timeout.total_seconds(),
                    )
                )
            self._scheduler = Scheduler(
                store=store,
                bus=self._bus,
                runners=lambda: self.runners,
                settings=s.scheduler,
                down_since=down_since,
                remote=self.mqtt,
                on_stale=self._on_swept,
                passes=self._leader_passes(),
                retention=s.retention,
                leadership=self.cluster.leader if self.cluster is not None else None,
                claim=self.cluster is not None,
            )
            self._scheduler.stats.observe = self.metrics.observe_check
            if self._signals:
                self._install_signals()
                stack.callback(self._remove_signals)
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                background = [tg.create_task(self._bus.run(), name="bus")]
                background.extend(self._cluster_tasks(tg))
                await self._start_sensors(s.sensors)
                background.append(tg.create_task(self._scheduler.run(), name="scheduler"))
                background.append(tg.create_task(self._refresh_bindings(), name="bindings"))
                if store.vectors is not None:
                    background.append(tg.create_task(store.vectors.run(), name="embedding"))
                if s.api.enabled:
                    await self._start_api(tg, stack, background, token, callers)
                if self.notifier.watchdog_interval_s:
                    background.append(tg.create_task(self._watchdog(), name="watchdog"))
                self._ready.set()
                # READY first: the block counts (a scan of the whole table) follow it.
                self.notifier.ready(self._sensors_line())
                self.notifier.status(await self._status_line())
                log.info(
                    "daemon_ready",
                    config=str(self.config_file) if self.config_file else None,
                    db=store.location,  # a PostgreSQL URL without its password
                    backend=store.backend,
                    sensors=sorted(self.runners),
                    down_since=down_since,
                    synchronous=s.store.synchronous_for(mqtt=s.mqtt is not None),
                )
                if not s.sensors:
                    log.warning(
                        "no_sensors_configured",
                        hint="facts cannot be checked; `memwarden init` writes a "
                        "memwarden.toml with fs, tests, http and review",
                    )
                await self._serve()
                await self._shutdown(background)
        log.info("daemon_stopped")

    def _leader_passes(self) -> list[tuple[str, timedelta, Callable[[], Awaitable[Any]]]]:
        """The daemon's own passes the scheduler runs on the leader."""
        s = self.settings
        passes: list[tuple[str, timedelta, Callable[[], Awaitable[Any]]]] = []
        if s.suggest.propose:
            passes.append(("proposals", s.suggest.propose_interval, self.propose_once))
        if self.cluster is not None:  # who serves each binding, as nodes come and go
            passes.append(("serving", timedelta(seconds=SERVE_EVERY_S), self.serve_once))
        return passes

    async def serve_once(self) -> tuple[int, int]:
        """Who serves each binding (``Store.keep_servers``); this node's sensors learn
        their bindings again when any moved."""
        moved, requeued = await self.store.keep_servers()
        if moved or requeued:
            log.info("bindings_served", moved=moved, requeued=requeued)
        if moved:
            self._mark_bindings_dirty(list(self.runners))
        return moved, requeued

    async def _join_cluster(self, stack: contextlib.AsyncExitStack, store: Store) -> None:
        """On PostgreSQL: this node's registration, lease and spool (the cluster needs
        the postgres extra, imported here); a ConfigError when another live instance
        has this node's name."""
        if store.backend != "postgresql":  # the one node: it serves every binding
            moved, _ = await store.keep_servers()
            if moved:
                log.info("bindings_served", moved=moved, node=store.node)
            return
        from memwarden.daemon._cluster import ClusterNode  # noqa: PLC0415

        node = ClusterNode(
            self.settings,
            store,
            clock=self.clock,
            dsn=str(self.settings.database),
            on_delivered=self._spool_delivered,
        )
        self.cluster = await stack.enter_async_context(node)

    def _cluster_tasks(self, tg: asyncio.TaskGroup) -> list[asyncio.Task[None]]:
        """On PostgreSQL: the spool's delivery, the node's heartbeat, and the listeners
        (long-polls of the log; session notices of changes applied on any node)."""
        if self.cluster is None:
            return []
        return [
            tg.create_task(self.cluster.ingest.run(), name="spool"),
            tg.create_task(self.cluster.heartbeat(self._node_lost), name="node"),
            tg.create_task(
                self.cluster.watch_served(lambda: self._mark_bindings_dirty(list(self.runners))),
                name="served",
            ),
            tg.create_task(self.cluster.wake_on_events(self._wake_followers), name="listen"),
            tg.create_task(self.cluster.tell_sessions(self.sessions), name="session_notices"),
        ]

    async def _wake_followers(self) -> None:
        """Another node (or this one) committed events: long-polls of the log re-read."""
        await self._events_committed()

    async def _events_committed(self) -> None:
        self._applied_generation += 1
        async with self._applied:
            self._applied.notify_all()

    async def _spool_delivered(self, result: ApplyResult) -> None:
        await self.bus.delivered(result)

    def _node_lost(self, err: MemwardenError) -> None:
        """Another instance took this node's name: stop, and exit with that error."""
        log.error("daemon_stopping_node_taken", error=str(err))
        self._fatal = err
        self.request_stop()

    async def _serve(self) -> None:
        while not self._stop.is_set():
            stop = asyncio.ensure_future(self._stop.wait())
            reload = asyncio.ensure_future(self._reload.wait())
            await asyncio.wait({stop, reload}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            reload.cancel()
            if self._reload.is_set() and not self._stop.is_set():
                self._reload.clear()
                await self.reload()

    async def _start_api(
        self,
        tg: asyncio.TaskGroup,
        stack: contextlib.AsyncExitStack,
        background: list[asyncio.Task[Any]],
        token: str,
        callers: Callers | None,
    ) -> None:
        s = self.settings
        self.api = ApiServer(
            self,
            host=s.api.host,
            port=s.api.port,
            unix_socket=s.api.unix_socket,
            token=token,
            callers=callers,
            max_body_bytes=s.api.max_body_bytes,
            docs=s.api.docs,
            socket_group=s.api.socket_group,
        )
        task = tg.create_task(self.api.serve(), name="api")
        background.append(task)
        self._api_task = task
        while not self.api.started:  # uvicorn exposes no event; it starts within milliseconds
            if task.done():
                raise self.api.failure or ConfigError(
                    f"api: could not listen on {s.api.host}:{s.api.port}"
                )
            await asyncio.sleep(0.005)
        await stack.enter_async_context(api_file(s.home, self.api.bound_url()))
        log.info("api_listening", url=self.api.bound_url())

    async def _shutdown(self, background: list[asyncio.Task[Any]]) -> None:
        """Stop taking input, let what was accepted reach the store, then cancel the rest.

        In order: the API and the scheduler stop taking work; the checks in flight finish
        (within the drain timeout, else they are cancelled) and hand their events to the
        bus; the sensors stop and are torn down; the bus closes and commits everything it
        queued (within the drain timeout); a last heartbeat records when we stopped.
        """
        self.notifier.stopping()
        log.info("daemon_stopping")
        drain_s = self.settings.bus.drain_timeout.total_seconds()
        # Long-polls (`memwarden tail`) answer at once; the server finishes what is in
        # flight and closes its connections: a normal end of stream, never a 500.
        self._closing = True
        async with self._applied:
            self._applied.notify_all()
        if self.api is not None:
            self.sessions.close()  # and so do readers' long-polls for notices
            self.api.stop()
            if self._api_task is not None:
                await asyncio.wait({self._api_task}, timeout=drain_s)
        self.scheduler.stop()
        try:
            async with asyncio.timeout(drain_s):
                await self.scheduler.wait_idle()
        except TimeoutError:
            cancelled = await self.scheduler.cancel_checks()
            log.error("revalidations_cancelled", count=cancelled, timeout_s=drain_s)
        for runner in self.runners.values():
            runner.stop()
        await asyncio.gather(*self._runner_tasks.values(), return_exceptions=True)
        self.bus.close()
        log.info("bus_draining", pending=self.bus.pending)
        try:
            async with asyncio.timeout(drain_s):
                await self.bus.drain()
        except TimeoutError:
            log.error("bus_drain_timed_out", pending=self.bus.pending, timeout_s=drain_s)
        try:
            await self.scheduler.heartbeat_once()
        except MemwardenError as err:
            log.warning("heartbeat_failed", error=str(err))
        for task in background:
            task.cancel()

    def _clear(self) -> None:
        self._store = None
        self._ready.clear()

    # ------------------------------------------------------------------ sensors

    async def _start_sensors(self, sensors: Mapping[str, SensorSettings]) -> None:
        """Start the enabled sensors; raise the first startup failure (policy ``error``)."""
        failures = await self._start_runners(self._make_runners(sensors))
        if failures:
            raise failures[0]

    def _make_runners(self, sensors: Mapping[str, SensorSettings]) -> dict[str, SensorRunner]:
        """Build a runner per enabled sensor.

        Raises ConfigError listing every problem (unknown kind, bad options). A sensor
        whose plugin is installed but failed to import follows its startup policy: under
        ``error`` a PluginLoadError naming it, otherwise it is left out and reported.
        """
        runners: dict[str, SensorRunner] = {}
        problems: list[str] = []
        unavailable: dict[str, str] = {}
        for name, conf in sensors.items():
            if not conf.enabled or conf.remote:  # a remote sensor runs in `memwarden agent`
                continue
            kind = conf.kind or name
            failure = self.registry.failures.get(kind)
            if failure is not None and kind not in self.registry.plugins:
                if conf.startup == StartupPolicy.ERROR:
                    raise PluginLoadError(f"sensor {name!r}: {failure}", plugin=name)
                unavailable[name] = str(failure)
                continue
            try:
                runners[name] = self._make_runner(name, conf)
            except ConfigError as err:
                problems.extend(err.problems)
        if problems:
            raise ConfigError("; ".join(problems), problems=problems)
        for name, error in unavailable.items():
            log.error("sensor_unavailable", sensor=name, error=error)
        self.unavailable.update(unavailable)
        return runners

    async def _start_runners(self, runners: Mapping[str, SensorRunner]) -> list[PluginError]:
        """Give the runners their bindings, start them, wait for each first setup."""
        tg = self._tg
        if tg is None:
            raise RuntimeError("sensors start only while the daemon runs")
        self.runners.update(runners)
        await self._quarantine_bindings(runners)
        self._dirty_bindings.update(runners)
        await self._push_bindings()  # before run() starts: its first wait sees them
        for name, runner in runners.items():
            self._runner_tasks[name] = tg.create_task(runner.supervise(), name=f"sensor[{name}]")
        failures: list[PluginError] = []
        for runner in runners.values():
            try:
                await runner.started()
            except PluginError as err:
                failures.append(err)
        return failures

    def _make_runner(self, name: str, conf: SensorSettings) -> SensorRunner:
        def prepare(sensor: Any) -> None:
            if isinstance(sensor, NeedsReviews):  # review: the queue, never the whole store
                sensor.use_reviews(StoreReviewQueue(self.store))

        return build_runner(
            name,
            conf,
            registry=self.registry,
            clock=self.clock,
            state_root=self.settings.home,
            emit=self._emit,
            prepare=prepare,
        )

    async def _emit(self, name: str, event: ValidationEvent) -> None:
        await self.bus.put(name, event)
        runner = self.runners.get(name)
        if runner is not None:  # counted once queued: what emit() returning promises
            runner.counters.events += 1
            runner.counters.count(event, self.clock.time())

    async def _stop_sensor(self, name: str) -> None:
        runner = self.runners.pop(name, None)
        task = self._runner_tasks.pop(name, None)
        if runner is not None:
            runner.stop()
        if task is not None:
            with contextlib.suppress(Exception):
                await task

    async def reload(self) -> None:
        """Re-read the configuration; restart only the sensors whose settings changed.

        The new ``[sensors]`` tables are checked in full before anything stops: a bad
        reload keeps the old configuration running. Other sections need a restart.
        """
        self.notifier.reloading()
        old = self.settings
        try:
            new = load_settings(self.config_file) if self.config_file else old
            changed = {
                n
                for n in set(old.sensors) | set(new.sensors)
                if old.sensors.get(n) != new.sensors.get(n)
            }
            fresh = self._make_runners({n: c for n, c in new.sensors.items() if n in changed})
            stored = read_policy_file(old.home)  # read again: the operator may have removed it
        except MemwardenError as err:
            problems = err.problems if isinstance(err, ConfigError) else [str(err)]
            log.error("reload_failed", error=str(err), problems=problems)
            self.notifier.status("reload failed: keeping the old configuration")
            self.notifier.ready()
            return
        for name in sorted(changed):
            await self._stop_sensor(name)
        self.settings = old.model_copy(update={"sensors": new.sensors, "privacy": new.privacy})
        if self._privacy is not None:
            self._privacy.configure(new.privacy, stored)
        for failure in await self._start_runners(fresh):
            log.error("reload_sensor_failed", sensor=failure.plugin, error=str(failure))
        ignored = [
            k
            for k in type(old).model_fields
            if k not in ("sensors", "privacy") and getattr(old, k) != getattr(new, k)
        ]
        if ignored:
            log.warning("reload_needs_restart", sections=sorted(ignored))
        self.reloads += 1
        log.info("daemon_reloaded", restarted=sorted(changed))
        self.notifier.ready(self._sensors_line())
        self.notifier.status(await self._status_line())

    # ------------------------------------------------------------------ bindings

    async def _refresh_bindings(self) -> None:
        while True:
            await self._bindings_wake.wait()
            self._bindings_wake.clear()
            pending = set(self._dirty_bindings)
            try:
                await self._push_bindings()
            except MemwardenError as err:  # the next change retries; never fatal
                self._dirty_bindings.update(pending)
                log.error("bindings_refresh_failed", sensors=sorted(pending), error=str(err))

    async def _push_bindings(self) -> None:
        dirty, self._dirty_bindings = self._dirty_bindings, set()
        for name in sorted(dirty):
            runner = self.runners.get(name)
            if runner is None:
                if self.mqtt is not None and name in self.remote_sensors():
                    await self.mqtt.publish_bindings(name)  # its agent learns them (retained)
                continue
            bound = []
            # Only the bindings this node serves (docs/SCALE.md): on SQLite, all of them.
            rows = await self.store.bindings_for_sensor(
                name, served_by=self.store.node if self.cluster is not None else None
            )
            # Each block's validity window: a polling sensor confirms within
            # half of it, so a block it answers for never expires between changes.
            windows = await self.store.validity_windows(sorted({b for b, _ in rows}))
            for block_id, binding in rows:
                try:
                    # Checked in full when added and again at start (quarantined if refused):
                    # here only parsed into the sensor's model.
                    selector = runner.ctx.parse_binding(binding)
                except ValidationInputError as err:
                    log.warning("binding_invalid", sensor=name, block_id=block_id, error=str(err))
                    continue
                bound.append(
                    BoundSubject(block_id, binding, selector, validity_window=windows.get(block_id))
                )
            runner.ctx.set_bindings(bound)

    async def _quarantine_bindings(self, runners: Mapping[str, SensorRunner]) -> None:
        """Re-check the stored bindings of these sensors with today's rules.

        One that fails is quarantined (never checked, never sent to its sensor; its
        block gets an error event naming the rule) instead of failing the start; one
        quarantined before that passes again is released. Never raises for a binding.
        """
        try:
            stored = await self.store.stored_bindings(sorted(runners))
        except MemwardenError as err:
            log.error("bindings_recheck_failed", error=str(err))
            return
        for name, runner in runners.items():
            # A sensor whose rules rest on state loaded from disk (code_test's pytest
            # config) loads it before its stored bindings are judged by them.
            sensor = runner.sensor
            if not isinstance(sensor, PreparesValidation) or not any(
                row.sensor == name for row in stored
            ):
                continue
            try:
                async with asyncio.timeout(runner.setup_timeout_s):
                    await sensor.prepare_validation()
            except Exception as err:  # judged by its defaults then; released once it passes
                log.error(
                    "prepare_validation_failed",
                    sensor=name,
                    error=f"{type(err).__name__}: {err}",
                    exc_info=not isinstance(err, (OSError, TimeoutError, MemwardenError)),
                )
        failing: list[tuple[StoredBinding, str]] = []
        released: list[int] = []
        for row in stored:
            problems = _binding_problems(runners[row.sensor], row)
            if problems:
                failing.append((row, _rule_text(problems)[:1000]))
            elif row.quarantine is not None:
                released.append(row.id)
        for row, rule in failing:
            if row.quarantine != rule:
                log.error(
                    "binding_quarantined",
                    sensor=row.sensor,
                    block_id=row.block_id,
                    binding_id=row.id,
                    rule=rule,
                )
        if released:
            log.info("bindings_released", count=len(released))
        try:
            await self.store.set_quarantine(failing, released)
        except MemwardenError as err:  # a broken store: the start fails on the next write
            log.error("bindings_quarantine_failed", error=str(err))
        await self._refresh_quarantined()

    async def _refresh_quarantined(self) -> None:
        with contextlib.suppress(MemwardenError):
            self.quarantined = {
                row.id: row.sensor for row in await self.store.quarantined_bindings()
            }

    def _mark_bindings_dirty(self, sensors: Sequence[str]) -> None:
        self._dirty_bindings.update(sensors)
        self._bindings_wake.set()

    def check_bindings(
        self, bindings: Sequence[Binding], *, stored: Sequence[Binding] = ()
    ) -> list[Binding]:
        """Refuse bindings that name no configured sensor or that its model rejects.

        Returns them with their subject filled in from the sensor's binding model
        (``subject_of()``) where the raw binding named none. One equal to a ``stored``
        binding (the block has it already: an edit keeps it) passes as it is, checked
        when it was added (and quarantined at start if today's rules refuse it).
        """
        errors: list[tuple[str, str]] = []
        out: list[Binding] = []
        remote = self.remote_sensors()
        for i, binding in enumerate(bindings):
            if binding in stored:
                out.append(binding)
                continue
            runner = self.runners.get(binding.sensor)
            if runner is None and binding.sensor in remote:
                # Its plugin runs on the agent's host: the selector is checked there.
                if not binding.subject:
                    errors.append((f"bindings.{i}", "names no subject (path, test, url, check)"))
                out.append(binding)
                continue
            if runner is None:
                errors.append(
                    (
                        f"bindings.{i}.sensor",
                        f"no sensor named {binding.sensor!r}; {self.running_sensors_hint()}",
                    )
                )
                continue
            try:
                checked, _ = check_binding(runner.sensor, runner.ctx, binding)
            except ValidationInputError as err:
                errors.extend(
                    (f"bindings.{i}.{f}" if f else f"bindings.{i}", m) for f, m in err.errors
                )
                continue
            out.append(checked)
        if errors:
            raise ValidationInputError(errors)
        return out

    async def import_blocks(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Import export objects (idempotent by id) and plain new blocks.

        A token holder may bring facts, never vouch for them: a new block comes in
        ``unverified`` (archived ones stay archived), its reliability capped at its
        source's, with its ids, bindings, history and versions; its sensors are asked to
        check it now. (``memwarden import --db``, with the file itself, restores blocks
        exactly as exported.) An exported binding this daemon's sensors refuse (a sensor
        not configured here, a selector today's rules reject) is stored quarantined: nothing
        is checked or run for it.
        """
        screened, plain = await self.privacy.import_rows(rows)  # all before anything is stored
        exported = [self._unvouched(r) for r in screened]
        quarantine: dict[tuple[int, int], str] = {}
        for i, row in enumerate(exported):
            for j, raw in enumerate(row.get("bindings") or []):
                try:
                    binding = binding_from_row(
                        str(raw["sensor"]), str(raw["subject"]), str(raw.get("selector") or "{}")
                    )
                    self.check_bindings([binding])
                except ValidationInputError as err:
                    quarantine[(i, j)] = f"refused on import: {err}"
                except (KeyError, TypeError, ValueError):
                    pass  # malformed: the store names it and refuses the object
        report = await self.store.import_blocks(exported, quarantine=quarantine, actor="api")
        self._mark_bindings_dirty(sorted(report.sensors))
        for block_id in report.added:  # validation is earned here, by this daemon's sensors
            with contextlib.suppress(MemwardenError):
                await self.store.request_revalidation(block_id)
        created = 0
        for item in plain:
            await self.add_block(item, actor="import", source="import")
            created += 1
        return {**report.as_dict(), "created": created, "quarantined": len(quarantine)}

    def _unvouched(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """An export object with its validation claims dropped (see import_blocks)."""
        rec = row.get("record")
        if not isinstance(rec, dict) or rec.get("state") == BlockState.ARCHIVED.value:
            return dict(row)
        cap = self.settings.rules.source_reliability(str(rec.get("source", "")))
        given = rec.get("reliability")
        reliability = min(given, cap) if isinstance(given, (int, float)) else cap
        return {
            **row,
            "record": {
                **rec,
                "state": BlockState.UNVERIFIED.value,
                "stale_reasons": "",
                "validated_by": None,
                "validated_at": None,
                "reliability": reliability,
            },
        }

    async def add_block(
        self,
        new: NewBlock | Mapping[str, Any],
        *,
        actor: str = "agent",
        dedupe: bool = False,
        source: Scope = "agent",
        namespaces: Sequence[str] | None = None,
    ) -> Block:
        """Validate (bindings included) and store a block; its sensors learn the binding.

        Its title, content and tags pass the privacy policy for ``source`` first (a
        rejected finding: :class:`PrivacyRejectedError`, nothing stored). With
        ``dedupe``, a live block with the same normalised content is returned instead
        (its ``duplicate_of`` set) and nothing is stored. The block's ``namespace`` (set
        by the caller) must be one of ``namespaces`` when given (the API's agent's); what
        it depends on, and a duplicate, are looked for in that namespace only.
        """
        block = validate_input(NewBlock, new)
        namespace = block.namespace or DEFAULT_NAMESPACE
        if namespaces is not None and namespace not in namespaces:
            raise ValidationInputError([("namespace", f"{namespace!r}: not one of yours")])
        block = await self.privacy.new_block(block, source)
        depends = await self._resolve_depends(block.depends_on, namespaces=[namespace])
        if depends != block.depends_on:
            block = block.model_copy(update={"depends_on": depends})
        bindings = self.check_bindings(block.bindings)
        if bindings != block.bindings:
            block = block.model_copy(update={"bindings": bindings})
        stored = await self.store.add(block, actor=actor, dedupe=dedupe)
        if stored.duplicate_of is None:
            self._mark_bindings_dirty([b.sensor for b in block.bindings])
        return stored

    async def edit_block(
        self,
        block_id: str,
        patch: BlockPatch | Mapping[str, Any],
        *,
        actor: str,
        expected_version: int | None = None,
        source: Scope = "agent",
    ) -> Block:
        """Edit a block (:meth:`Store.update`); its new title, content and tags pass the
        privacy policy first. When the edit moved its validity window (its own, or its
        volatility's), its sensors are handed its bindings again with the new window,
        local ones and remote agents alike: a polling sensor renews by it.

        ``bindings`` replace the block's own, the new ones checked as an added block's
        are (:meth:`check_bindings`: a refused one names ``bindings.N``, nothing changed);
        the sensors of the old and the new ones learn the change."""
        checked = await self.privacy.patch(validate_input(BlockPatch, patch), source)
        before = await self.store.get(block_id)
        if checked.bindings is not None:
            bindings = self.check_bindings(checked.bindings, stored=before.bindings)
            if bindings != checked.bindings:
                checked = checked.model_copy(update={"bindings": bindings})
        block = await self.store.update(
            block_id, checked, actor=actor, expected_version=expected_version
        )
        sensors: set[str] = set()
        if block.validation.validity_window != before.validation.validity_window:
            sensors.update(b.sensor for b in block.bindings)
        if checked.bindings is not None and block.bindings != before.bindings:
            sensors.update(b.sensor for b in [*before.bindings, *block.bindings])
        if sensors:
            self._mark_bindings_dirty(sorted(sensors))
        return block

    async def archive_block(
        self, block_id: str, *, reason: str, actor: str, source: Scope = "agent"
    ) -> Block:
        """Archive a block (out of search, restorable); the reason passes the privacy
        policy first (it is kept with the block and in the audit trail)."""
        reason = await self.privacy.text(reason, source, "reason")
        return await self.store.archive(block_id, reason=reason, actor=actor)

    async def request_review(
        self, block_id: str, *, reason: str, source: Scope = "agent"
    ) -> dict[str, Any]:
        """Queue a block for a person's review; the reason passes the privacy policy."""
        reason = await self.privacy.text(reason, source, "reason")
        return await self.store.request_review(block_id, reason=reason)

    async def decide_review(
        self,
        review_id: str,
        decision: str,
        *,
        reviewer: str,
        comment: str = "",
        new_content: str | None = None,
    ) -> dict[str, Any]:
        """Decide a review item (``Store.decide_review``) with its comment and new
        content passed through the privacy policy (source ``review``) first."""
        comment, new_content = await self.privacy.review(comment, new_content)
        sensor = next((n for n, r in sorted(self.runners.items()) if r.kind == "review"), "review")
        return await self.store.decide_review(
            review_id,
            decision,
            reviewer=reviewer,
            comment=comment,
            new_content=new_content,
            sensor=sensor,
            apply=functools.partial(self.bus.submit, sensor),  # committed before closing
        )

    async def _screen_events(
        self, source: str, events: Sequence[ValidationEvent]
    ) -> list[ValidationEvent | ValidationInputError]:
        """Each event as the privacy policy lets it be stored, or why it may not be."""
        runner = self.runners.get(source)
        kind: Source = (
            "review"
            if source == "review" or (runner is not None and runner.kind == "review")
            else "sensor"
        )
        return await self.privacy.screen_events(events, kind)

    def _scrub(self, text: str) -> str:
        return self.privacy.scrub(text)

    async def _resolve_depends(
        self, refs: Sequence[str], *, namespaces: Sequence[str] | None = None
    ) -> list[str]:
        """``depends_on`` as full ids (short ids accepted) among ``namespaces``; each bad
        one named (a block of another namespace is not found: facts never lean across)."""
        out: list[str] = []
        errors: list[tuple[str, str]] = []
        for j, ref in enumerate(refs):
            try:
                out.append(await self.store.resolve_id(ref, namespaces=namespaces))
            except ValidationInputError as err:
                errors.append((f"depends_on.{j}", err.errors[0][1]))
            except (NotFoundError, AmbiguousIdError) as err:
                errors.append((f"depends_on.{j}", str(err)))
        if errors:
            raise ValidationInputError(errors)
        return out

    async def delete_block(self, block_id: str, *, actor: str, reason: str = "") -> None:
        block = await self.store.get(block_id)
        await self.store.delete(block_id, actor=actor, reason=reason)
        self._mark_bindings_dirty([b.sensor for b in block.bindings])
        if self.quarantined:
            await self._refresh_quarantined()

    async def forget(
        self,
        *,
        ids: Sequence[str] = (),
        tag: str | None = None,
        query: str | None = None,
        actor: str,
        reason: str = "",
        dry_run: bool = False,
        vacuum: bool = False,
        namespaces: Sequence[str] | None = None,
        source: Scope = "agent",
    ) -> dict[str, Any]:
        """Erase blocks (by ids, short ids accepted; a tag; or the words of a query)
        among ``namespaces`` when given (an agent's: another's blocks are not found):
        their content leaves every table, the search index, the WAL and the score log,
        and a tombstone stays (``Store.erase``). With ``dry_run``, only what would go.
        The reason kept in the tombstone passes the privacy policy first (an erasure
        "at the request of <e-mail>" must not keep the address it erases).

        The sensors that watched them are told (their bindings are gone). The answer
        also lists what the daemon cannot reach (``unreachable``).
        """
        reason = await self.privacy.text(reason, source, "reason")
        full = [await self.store.resolve_id(ref, namespaces=namespaces) for ref in ids]
        targets = await self.store.erasure_targets(
            ids=full, tag=tag, query=query, namespaces=namespaces
        )
        answer: dict[str, Any] = {
            "dry_run": dry_run,
            "blocks": [t.as_dict() for t in targets],
            "unreachable": list(self.store.unreachable),
        }
        if dry_run or not targets:
            return {**answer, "erased": []}
        chosen = [t.id for t in targets]
        sensors = await self.store.sensors_bound(chosen)
        report = await self.store.erase(chosen, actor=actor, reason=reason, vacuum=vacuum)
        self.erased += len(report.erased)
        self._mark_bindings_dirty(sorted(set().union(*sensors.values())))
        if self.quarantined:
            await self._refresh_quarantined()
        log.info(
            "blocks_erased",
            blocks=report.erased,
            actor=actor,
            removed=report.removed,
            wal_truncated=report.wal_truncated,
        )
        if report.wal_truncated is False:  # None: no WAL file to truncate (PostgreSQL)
            log.warning("erasure_wal_not_truncated", checkpoint=report.wal_checkpoint)
        return {**answer, **report.as_dict()}

    # ------------------------------------------------------------------ reads through sensors

    async def revalidate(self, block_id: str, *, wait_s: float = 0.0) -> dict[str, Any]:
        """Ask a block's sensors to check it now; wait up to ``wait_s`` for the answers."""
        ids = await self.store.request_revalidation(block_id, reason=RevalidationReason.MANUAL)
        answered, timed_out = await self._dispatch_and_wait(ids, wait_s)
        return {
            "requested": ids,
            "answered": answered,
            "timed_out": timed_out,
            "block": await self.store.get(block_id),
        }

    async def _dispatch_and_wait(
        self, request_ids: Sequence[str], wait_s: float
    ) -> tuple[list[str], list[str]]:
        """Send what is due and wait up to ``wait_s`` for these requests' answers.

        Waiters are shared: two reads waiting on one request (one check of a binding)
        are both woken by its answer.
        """
        loop = asyncio.get_running_loop()
        waiters: dict[str, asyncio.Future[None]] = {}
        for rid in request_ids:
            fut = self._answer_waiters.get(rid)
            if fut is None:
                fut = self._answer_waiters[rid] = loop.create_future()
                if rid in self._answered_recently:  # answered before we started waiting
                    fut.set_result(None)
            self._waiter_refs[rid] = self._waiter_refs.get(rid, 0) + 1
            waiters[rid] = fut
        try:
            await self.scheduler.dispatch_once()
            if wait_s > 0:
                await self._wait_answers(waiters, wait_s)
        finally:
            for rid in request_ids:
                refs = self._waiter_refs.get(rid, 1) - 1
                if refs <= 0:
                    self._waiter_refs.pop(rid, None)
                    self._answer_waiters.pop(rid, None)
                else:
                    self._waiter_refs[rid] = refs
        answered = [rid for rid, fut in waiters.items() if fut.done()]
        timed_out = [rid for rid, fut in waiters.items() if not fut.done()]
        return answered, timed_out

    async def _wait_answers(
        self, waiters: Mapping[str, asyncio.Future[None]], wait_s: float
    ) -> None:
        """Wait up to ``wait_s`` for the requests' answers.

        Alone, this daemon applies every answer, so its own futures say it. With several
        nodes, the node serving a binding checks it and applies the answer there: the
        store is asked which requests are answered every ``ANSWER_POLL_S`` meanwhile.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while pending := [f for f in waiters.values() if not f.done()]:
            left = deadline - loop.time()
            if left <= 0:
                return
            if self.cluster is None:
                await asyncio.wait(pending, timeout=left)
                return
            await asyncio.wait(pending, timeout=min(left, ANSWER_POLL_S))
            open_ids = [rid for rid, fut in waiters.items() if not fut.done()]
            for rid in await self.store.answered_requests(open_ids) if open_ids else ():
                if not waiters[rid].done():
                    waiters[rid].set_result(None)

    def liveness(self) -> dict[str, Liveness]:
        """Whether each sensor (local or remote) can check anything now, since when not."""
        out: dict[str, Liveness] = {}
        for name, runner in self.runners.items():
            if runner.status == "running":
                out[name] = Liveness(alive=True)
            else:
                why = runner.status
                if runner.counters.last_error:
                    why += f" ({runner.counters.last_error})"
                out[name] = Liveness(alive=False, since=runner.status_since, why=why)
        if self.mqtt is not None:
            for row in self.mqtt.sensor_status():
                alive = row.get("status") == "running"
                out[row["name"]] = Liveness(
                    alive=alive,
                    since=None if alive else row.get("down_since"),
                    why="" if alive else f"remote: {row.get('reason') or 'offline'}",
                )
        for name in self.unavailable:
            out.setdefault(name, Liveness(alive=False, why="its plugin failed to load"))
        return out

    def _binding_quick(self, sensor: str, subject: str, live: Mapping[str, Liveness]) -> bool:
        """A binding whose sensor is up and whose checks are measured as quick."""
        if not (sensor in live and live[sensor].alive):
            return False
        runner = self.runners.get(sensor)
        # Until its first check is timed, a binding is taken as quick unless its sensor
        # says otherwise (a test suite, a person): the wait bounds that first check.
        prior = (
            runner.sensor.quick_check if runner and isinstance(runner.sensor, QuickCheck) else True
        )
        limit_s = self.settings.read_through.quick.total_seconds()
        return self.scheduler.stats.quick(sensor, subject, limit_s=limit_s, prior=prior)

    def _floor_s(self, sensor: str) -> float:
        """The re-check floor of a sensor's bindings: the setting, or the sensor's own
        ``min_interval`` when that is longer."""
        floor = self.settings.read_through.recheck_floor.total_seconds()
        runner = self.runners.get(sensor)
        config = getattr(runner.sensor, "config", None) if runner else None
        own = getattr(config, "min_interval", None)
        if own is not None and hasattr(own, "total_seconds"):
            floor = max(floor, own.total_seconds())
        return floor

    async def read_through(
        self,
        blocks: Sequence[Block],
        *,
        max_age_s: float | None,
        fresh: bool = False,
        wait_s: float = 2.0,
    ) -> ReadThrough:
        """Re-check, before a read answers, the blocks older than ``max_age_s`` whose
        check is quick (see :mod:`memwarden.daemon._freshness`); wait up to ``wait_s``.

        With no ``max_age_s``, facts that change by the hour or minute (high, ephemeral)
        are re-checked when a quick check can do it, as always. A binding checked less
        than its re-check floor ago is not checked again. Concurrent reads share checks.
        """
        now = self.clock.time()
        live = self.liveness()
        fast_changing = (Volatility.HIGH, Volatility.EPHEMERAL)
        stats = self.scheduler.stats
        out = ReadThrough()
        to_check: list[str] = []
        for block in blocks:
            validated = block.validation.validated_at
            age = None if validated is None else now - validated.timestamp()
            if max_age_s is not None:
                needs = age is None or age > max_age_s
            else:
                needs = block.volatility in fast_changing
            if fresh and block.state == BlockState.STALE:
                needs = True
            if not needs:
                continue
            quick = [
                b
                for b in block.bindings
                if b.subject and self._binding_quick(b.sensor, b.subject, live)
            ]
            due = [
                b
                for b in quick
                if not stats.checked_within(b.sensor, b.subject, now, self._floor_s(b.sensor))
            ]
            if due:
                to_check.append(block.id)
                for b in due:  # the floor counts the checks reads ask for
                    stats.started(b.sensor, b.subject, now)
            elif quick:
                out.floored.append(block.id)
        if not to_check:
            return out
        open_checks = await self.store.request_checks(to_check, reason=RevalidationReason.ON_READ)
        after = self.clock.time()  # what was queued just now is due now
        wait_for: dict[str, list[str]] = {}
        for block_id, requests in open_checks.items():
            now_due = [rid for rid, send_at in requests if send_at <= after]
            if len(now_due) < len(requests):  # a retry waits its interval: not pulled forward
                out.later.append(block_id)
            elif now_due:
                wait_for[block_id] = now_due
        ids = [rid for rids in wait_for.values() for rid in rids]
        _, late = await self._dispatch_and_wait(ids, wait_s)
        late_set = set(late)
        for block_id, rids in wait_for.items():
            (out.timed_out if late_set.intersection(rids) else out.checked).append(block_id)
        return out

    async def receipts(
        self, blocks: Sequence[Block], rt: ReadThrough | None = None
    ) -> dict[str, dict[str, Any]]:
        """The receipt of each block (see :func:`memwarden.daemon._freshness.receipt`)."""
        rt = rt or ReadThrough()
        evidence = await self.store.receipts_for([b.id for b in blocks])
        live = self.liveness()
        now = self.clock.time()
        checked, checking = set(rt.checked), set(rt.timed_out) | set(rt.later)
        out = {
            b.id: receipt(
                b,
                now=now,
                evidence=evidence.get(b.id),
                liveness=live,
                settings=self.settings.read_through,
                checked_now=b.id in checked,
                checking=b.id in checking,
            )
            for b in blocks
        }
        for rec in out.values():  # the SLI: how old what we serve is, by verdict
            if rec["age_s"] is not None:
                self.metrics.served_age.labels(rec["verdict"]).observe(max(0.0, rec["age_s"]))
        return out

    async def read_block(
        self,
        block_id: str,
        *,
        max_age_s: float | None = None,
        fresh: bool = False,
        wait_s: float = 2.0,
        session: str | None = None,
    ) -> dict[str, Any]:
        """One block with its receipt; with ``max_age_s``/``fresh``, checked first if old.
        With a ``session``, that session is told when the block later falls."""
        block = await self.store.get(block_id)
        if session is not None:
            self.sessions.read(session, [block.id])
        rt = ReadThrough()
        if max_age_s is not None or fresh:
            rt = await self.read_through(
                [block], max_age_s=0.0 if fresh else max_age_s, fresh=fresh, wait_s=wait_s
            )
            if rt.checked or rt.timed_out:
                block = await self.store.get(block_id)
        receipts = await self.receipts([block], rt)
        return {**block.model_dump(mode="json"), "receipt": receipts[block.id]}

    async def search_as_of(
        self,
        query: str,
        at: float,
        *,
        limit: int = 10,
        include_refuted: bool = False,
        namespaces: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """What a search would have answered at ``at``: the matching blocks that existed
        then, each as believed then (:meth:`Store.believed_at`). Matching uses today's
        text: words only an older version had are not found."""
        query = self.privacy.query(query)
        hits = await self.store.search(
            query,
            limit=min(1000, limit * 3),
            include_refuted=True,
            record=False,
            namespaces=namespaces,
        )
        believed: list[dict[str, Any]] = []
        for hit in hits:
            if hit.block.created_at.timestamp() > at:
                continue
            then = await self.store.believed_at(hit.block.id, at)
            if then["state"] == "archived" or (then["state"] == "refuted" and not include_refuted):
                continue
            believed.append(then)
            if len(believed) >= limit:
                break
        return {
            "query": query,
            "results": [],
            "as_of": from_ts(at).isoformat(),
            "believed": believed,
        }

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        fresh: bool = False,
        max_age_s: float | None = None,
        session: str | None = None,
        include_refuted: bool = False,
        wait_s: float = 2.0,
        namespaces: Sequence[str] | None = None,
        mode: SearchMode | None = None,
    ) -> SearchAnswerDict:
        """Search; results older than ``max_age_s`` (``fresh``: any age, and stale ones)
        whose check is quick are re-checked first, up to ``wait_s``. Every result carries
        a receipt and a ``rank`` on a 0-1 scale. With ``namespaces`` (an agent's), only
        their blocks are found, and only they are reinforced by the retrieval."""
        mode = mode or self.store.default_search_mode
        kwargs: dict[str, Any] = {
            "limit": limit,
            "include_refuted": include_refuted,
            "namespaces": namespaces,
            "mode": mode,
        }
        if session is not None:
            kwargs["session"] = session
        query = self.privacy.query(query)  # a value looked for as its placeholder is stored
        hits = await self.store.search(query, **kwargs)
        rt = await self.read_through(
            [h.block for h in hits],
            max_age_s=0.0 if fresh else max_age_s,
            fresh=fresh,
            wait_s=wait_s,
        )
        if rt.checked or rt.timed_out:
            again = {k: v for k, v in kwargs.items() if k != "session"}
            hits = await self.store.search(query, **again)
        if session is not None:  # told later when one of these is refuted or goes stale
            self.sessions.read(session, [h.id for h in hits])
        receipts = await self.receipts([h.block for h in hits], rt)
        checked = await self.store.receipts_for(rt.checked) if rt.checked else {}
        observations = {  # what each check for this read saw (the block's last event)
            block_id: ev.last_event for block_id, ev in checked.items() if ev.last_event is not None
        }
        best = max((h.relevance for h in hits), default=0.0)
        short = await self.store.short_ids([h.id for h in hits])
        results: list[SearchResultDict] = []
        for h in hits:
            rec = receipts[h.id]
            match = h.relevance / best if best > 0 else 0.0
            block = h.block.model_dump(mode="json")
            block["short_id"] = short.get(h.id)
            results.append(
                {
                    "block": block,
                    "score": h.score,
                    "stale": h.stale,
                    "warnings": h.warnings,
                    "factors": cast(
                        "SearchFactors",
                        {
                            "relevance": h.relevance,
                            "freshness": h.freshness,
                            "reliability": h.reliability,
                            "retention": h.retention,
                            **h.parts,  # vector and hybrid: the fused rank's parts
                        },
                    ),
                    "rank": round(
                        match
                        * h.freshness
                        * h.reliability
                        * h.retention
                        * verdict_factor(rec["verdict"]),
                        4,
                    ),
                    "receipt": rec,
                }
            )
        results.sort(key=lambda r: r["rank"], reverse=True)
        hidden = (
            0
            if include_refuted
            else await self.store.count_refuted_matches(
                query, namespaces=namespaces, mode=mode, limit=limit
            )
        )
        return {
            "query": query,
            "mode": mode,
            "results": results,
            "checked": rt.checked,
            "timed_out": rt.timed_out + rt.later,
            "observations": observations,
            "hidden_refuted": hidden,
        }

    async def health(self, *, namespaces: Sequence[str] | None = None) -> HealthAnswer:
        """The 0-100 health score with its warnings, and the counts behind it; with
        ``namespaces`` (an agent's), of their blocks only. A node cut off from its
        PostgreSQL database answers ``red`` with the reason, its node and spool."""
        try:
            return await self._health(namespaces=namespaces)
        except Exception as err:
            cluster = self.cluster
            if cluster is None or not self.store_unavailable(err):
                raise
            return await self._health_cut_off(err, cluster)

    def store_unavailable(self, err: BaseException) -> bool:
        """Whether ``err`` says the (PostgreSQL) store cannot be reached just now."""
        return self.cluster is not None and self.cluster.unavailable(err)

    async def _health_cut_off(self, err: BaseException, cluster: ClusterNode) -> HealthAnswer:
        answer: HealthAnswer = {
            "score": 0,
            "status": "red",
            "warnings": [
                {
                    "severity": "critical",
                    "category": "storage",
                    "message": f"storage unavailable: {err} (events are kept in the spool)",
                }
            ],
            "counts": {},
            "quarantined_bindings": [],
            "sensors": self.sensor_status(),
            "dead_letters": 0,
            "coverage": {"live": 0, "checkable": 0, "share": None, "by_source": {}, "by_tier": {}},
            "store": {"backend": self.store.backend},
            "cluster": cast("ClusterHealth", await cluster.health()),
        }
        return answer

    async def _health(self, *, namespaces: Sequence[str] | None = None) -> HealthAnswer:
        failing = [n for n, r in self.runners.items() if r.status in ("failed", "backoff")]
        counts = await self.store.counts(namespaces=namespaces)
        report = await self.store.health(
            failing_sensors=failing, sensors_total=len(self.runners), namespaces=namespaces
        )
        warnings = [w.as_dict() for w in report.warnings]
        quarantined = [b.as_dict() for b in await self.store.quarantined_bindings()]
        if namespaces is not None and quarantined:
            visible = set(
                await self.store.visible_ids([q["block_id"] for q in quarantined], namespaces)
            )
            quarantined = [q for q in quarantined if q["block_id"] in visible]
        if quarantined:
            warnings.append(
                {
                    "severity": "warning",
                    "category": "bindings",
                    "message": f"{len(quarantined)} binding(s) quarantined: today's rules refuse"
                    " them, so they are not checked (fix or delete their blocks;"
                    " see quarantined_bindings)",
                }
            )
        answer: HealthAnswer = {
            "score": report.score,
            "status": report.status,
            "warnings": warnings,
            "counts": counts,
            "quarantined_bindings": quarantined,
            "sensors": self.sensor_status(),
            "dead_letters": counts.get("dead_letters", 0),
            "coverage": await self.coverage(namespaces=namespaces),
            "store": {"backend": self.store.backend},
        }
        if self.cluster is not None:
            answer["cluster"] = cast("ClusterHealth", await self.cluster.health())
        if self.mqtt is not None:
            answer["mqtt"] = await self.mqtt.health()
        answer["search"] = await self.search_health(namespaces=namespaces)
        return answer

    async def search_health(self, *, namespaces: Sequence[str] | None = None) -> SearchHealth:
        """The embedder, the vectors held and the embedding backlog (of ``namespaces``'
        blocks only, when given)."""
        vectors = self.store.vectors
        if vectors is None:
            return {"embedder": None, "vectors": 0, "embedding_backlog": 0}
        return {
            "embedder": vectors.model,
            "vectors": await vectors.count(namespaces=namespaces),
            "embedding_backlog": await vectors.pending(namespaces=namespaces),
        }

    async def propose_once(self) -> ProposeReport:
        """One pass of binding proposals for unbound facts (the scheduler's, every
        ``[suggest] propose_interval``): proposals stored for review, never bindings."""
        return await propose(self.runners, self.store, batch=self.settings.suggest.propose_batch)

    async def decide_proposal(self, proposal_id: str, *, accept: bool, actor: str) -> Proposal:
        """Accept (bind the block, or record its dependency) or reject a proposal. An
        accepted binding is checked by today's rules of its sensor first, and the sensor
        learns it like any new binding."""
        proposal = await self.store.get_proposal(proposal_id)
        binding = None
        if accept and proposal.kind == "binding":
            try:
                raw = Binding.model_validate(proposal.proposal)
            except ValidationError as err:  # a stored row gone wrong: name it, never crash
                raise ValidationInputError([("proposal", "is not a binding")]) from err
            [binding] = self.check_bindings([raw])
        decided = await self.store.decide_proposal(
            proposal_id, accept=accept, actor=actor, binding=binding
        )
        if binding is not None:
            self._mark_bindings_dirty([binding.sensor])
        return decided

    async def coverage(self, *, namespaces: Sequence[str] | None = None) -> CoverageDict:
        """The share of live facts with a binding whose sensor is alive now (local ones
        running; remote ones as their agents last reported over MQTT), by source and
        tier: the share of memory that can be checked at all (of ``namespaces``' facts,
        when given)."""
        alive = [name for name, live in self.liveness().items() if live.alive]
        return await self.store.coverage(alive, namespaces=namespaces)

    # ------------------------------------------------------------------ status

    def events_mark(self) -> int:
        """A mark to pass to :meth:`wait_for_events`, taken *before* reading the log."""
        return self._applied_generation

    async def wait_for_events(self, timeout_s: float, *, since: int | None = None) -> None:
        """Wait until a batch of events is committed after ``since``, or the timeout.

        ``since`` (from :meth:`events_mark`, taken before the caller read the log) closes
        the window between that read and this wait: a batch committed in between ends
        the wait at once instead of leaving a ``tail`` long-poll hanging to its timeout.
        Without it, the next commit from now on ends the wait.
        """
        mark = self._applied_generation if since is None else since
        async with self._applied:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._applied.wait_for(
                        lambda: self._closing or self._applied_generation != mark
                    ),
                    timeout=timeout_s,
                )

    async def _on_applied(self, result: ApplyResult) -> None:
        await self._events_committed()
        now = self.clock.time()
        scheduler = self._scheduler
        for request_id in result.answered:
            sent = scheduler.sent_at.pop(request_id, None) if scheduler else None
            if sent is not None:
                self.metrics.revalidation_latency.observe(max(0.0, now - sent))
                binding = scheduler.sent_binding.pop(request_id, None) if scheduler else None
                if binding is not None and scheduler is not None:  # a remote check, timed
                    scheduler.stats.finished(*binding, now - sent)
            self._answered_recently[request_id] = None
            waiter = self._answer_waiters.get(request_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        while len(self._answered_recently) > 10_000:  # only the race window matters
            del self._answered_recently[next(iter(self._answered_recently))]
        for change in result.changes:
            if change.sensor and change.after in ("stale", "refuted"):
                self.metrics.invalidation_latency.labels(change.sensor).observe(
                    max(0.0, now - change.observed_at)
                )
            if change.event_id or self.cluster is None:
                # A dependency's fall has no event: on PostgreSQL every node (this one
                # too) tells it from `block_falls` (daemon/_cluster.py), once.
                self._tell_sessions(change, now)
            log.debug(
                "block_state_changed",
                block_id=change.block_id,
                before=change.before,
                after=change.after,
            )
        if self.mqtt is not None:
            await self.mqtt.on_applied(result)  # state changes out, answered requests off

    def _on_swept(self, fallen: dict[str, str], dependents: list[StateChange]) -> None:
        if self.cluster is not None:  # every node tells them from `block_falls`, this one too
            return
        now = self.clock.time()
        for block_id, before in fallen.items():
            self.sessions.changed(block_id, before=before, after="stale", at=now, reason="expired")
        for change in dependents:
            self._tell_sessions(change, now)

    def _tell_sessions(self, change: StateChange, now: float) -> None:
        """Tell the sessions that read a block of its change (an event's, or a fall by
        dependency: no event of its own)."""
        self.sessions.changed(
            change.block_id,
            before=change.before,
            after=change.after,
            at=now,
            reliability=change.reliability,
            event_id=change.event_id or None,
            reason="" if change.event_id else "dependency",
        )

    def _sensors_line(self) -> str:
        running = sum(1 for r in self.runners.values() if r.available)
        return f"{running}/{len(self.runners)} sensors running"

    async def _status_line(self) -> str:
        counts = await self.store.counts()
        stale = counts["by_state"].get("stale", 0)
        return f"{counts['blocks']} blocks, {stale} stale, {self._sensors_line()}"

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval_s or 1.0
        beats = 0
        while True:
            self.notifier.watchdog()
            beats += 1
            if beats % 30 == 0:
                with contextlib.suppress(MemwardenError):
                    self.notifier.status(await self._status_line())
            await asyncio.sleep(interval)

    def _local_sensors(self) -> list[str]:
        configured = [n for n, c in self.settings.sensors.items() if not c.remote]
        return [*configured, *self.runners]

    def remote_sensors(self) -> dict[str, SensorSettings]:
        """The enabled sensors that run on another host (``remote = true``), by name."""
        return {n: c for n, c in self.settings.sensors.items() if c.remote and c.enabled}

    def sensor_status(self, *, describe: bool = False) -> list[dict[str, Any]]:
        """Every configured sensor's status; with ``describe``, what a binding to each
        running one may name and examples (the sensor's optional ``describe()``)."""
        out = []
        for name, runner in sorted(self.runners.items()):
            out.append(
                {
                    "name": name,
                    "kind": runner.kind,
                    "status": runner.status,
                    "ready": runner.ctx.is_ready,
                    **runner.counters.as_dict(),
                    "quarantined_bindings": sum(1 for s in self.quarantined.values() if s == name),
                    **(self._describe(name, runner) if describe else {}),
                }
            )
        if self.mqtt is not None:
            out.extend(self.mqtt.sensor_status())  # remote sensors: as their agents report
        for name, error in sorted(self.unavailable.items()):
            if name not in self.runners:
                out.append({"name": name, "status": "load_failed", "error": error})
        listed = {row["name"] for row in out}
        for kind, err in sorted(self.registry.failures.items()):
            if kind not in listed:
                out.append({"name": kind, "kind": kind, "status": "load_failed", "error": str(err)})
        return out

    def _describe(self, name: str, runner: SensorRunner) -> dict[str, Any]:
        sensor = runner.sensor
        fields = sorted(runner.ctx.binding_keys())
        about: dict[str, Any] = {
            "quick_check": isinstance(sensor, QuickCheck) and bool(sensor.quick_check),
            "binding_keys": fields,
        }
        if not isinstance(sensor, Describes):
            return {**about, "summary": "", "binds": {}, "keys": {}, "examples": []}
        info = guarded_sync(lambda: dict(sensor.describe()))
        if isinstance(info, Crash):  # a plugin's bug: say so, never fail the listing
            err = info.error
            log.warning("sensor_describe_failed", sensor=name, error=repr(err))
            return {**about, "describe_error": f"{type(err).__name__}: {err}", "examples": []}
        examples = [{"sensor": name, **dict(e)} for e in info.get("examples") or []]
        return {
            **about,
            "summary": str(info.get("summary", "")),
            "binds": info.get("binds") or {},
            "keys": info.get("keys") or {},
            "examples": examples,
        }

    def running_sensors_hint(self) -> str:
        """``running: tests, http`` (or that none is), for error messages."""
        running = sorted(n for n, r in self.runners.items() if r.available)
        running += sorted(self.remote_sensors())
        return "running: " + ", ".join(running) if running else "no sensor is running"

    # ------------------------------------------------------------------ signals

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)

    def _remove_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)


def _binding_problems(runner: SensorRunner, row: StoredBinding) -> list[tuple[str, str]]:
    """What today's rules refuse in a stored binding, as ``(field, message)``."""
    try:
        check_binding(runner.sensor, runner.ctx, row.as_binding())
    except ValidationInputError as err:
        return list(err.errors)
    return []


def _rule_text(problems: Sequence[tuple[str, str]]) -> str:
    return "; ".join(f"{f}: {m}" if f else m for f, m in problems)


async def _requeue_sent(store: Store) -> None:
    """Requests a dead daemon left ``sent``: pending again, before the scheduler runs; on
    PostgreSQL only this node's own (the leader requeues a dead node's)."""
    requeued = await store.requeue_sent_revalidations(
        node=store.node if store.backend == "postgresql" else None
    )
    if requeued:
        log.info("revalidations_requeued", count=requeued)


def _single_error(group: BaseExceptionGroup[BaseException]) -> MemwardenError | None:
    """The one MemwardenError a TaskGroup wrapped (a startup failure), if that is all."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if isinstance(inner, MemwardenError):
            return inner
        if not isinstance(inner, BaseExceptionGroup):
            return None
        group = inner
    return None
