"""``memwarden agent``: run sensors on this host for a daemon elsewhere, over MQTT.

The agent has no store. Its sensors run under the same supervision as in the daemon
(setup policy, restart with backoff, deadlines); what they emit is numbered (``agent``
= ``<agent id>/<run>``, ``seq`` = 1, 2, ...), written to a durable local queue and
published from there to ``<prefix>/agents/<id>/events/<sensor>`` with QoS 1 (its
own topics: a broker ACL can hold each agent to them). An event leaves the
queue only once the broker acknowledged it, so a broker outage or a crash loses none.

It takes the bindings of its sensors from ``<prefix>/bindings/<sensor>`` (retained,
published by the daemon, cached locally), answers ``<prefix>/revalidate/<sensor>``,
re-sends a gap on ``<prefix>/agents/<id>/resend``, and announces itself on
``<prefix>/agents/<id>/status`` (birth and last will, retained) with a heartbeat on
``<prefix>/agents/<id>/heartbeat`` carrying the last sequence number the broker took.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import signal
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import aiomqtt
import structlog
from pydantic import ValidationError

from memwarden import __version__
from memwarden.agent._queue import AgentQueue
from memwarden.errors import ConfigError, MemwardenError
from memwarden.errors import ValidationInputError as InputError
from memwarden.hosting import build_runner
from memwarden.memory import (
    Binding,
    RevalidationRequest,
    SystemClock,
    from_ts,
    new_id,
    parse_duration,
)
from memwarden.mqtt import (
    AGENT_ACCEPTS,
    Topics,
    agent_status,
    heartbeat,
    keep_connected,
    make_client,
    split_agent,
    tls_context,
)
from memwarden.plugins import Backoff, BoundSubject, Registry, SensorRunner, check_binding

if TYPE_CHECKING:
    from memwarden.agent._queue import QueuedEvent
    from memwarden.daemon import MqttSettings, SensorSettings, Settings
    from memwarden.memory import Clock, ValidationEvent

__all__ = ["Agent"]

log = structlog.get_logger("memwarden.agent")
_BINDINGS_KEY = "bindings:"


class Agent:
    """One ``memwarden agent`` process: sensors here, the store on the daemon's host.

    ``await agent.run()`` runs until :meth:`request_stop`; ``await agent.ready()`` waits
    for the queue and the sensors, ``await agent.connected()`` for the broker.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        registry: Registry | None = None,
        clock: Clock | None = None,
        install_signal_handlers: bool = False,
        drain_timeout_s: float = 5.0,
    ) -> None:
        if settings.mqtt is None:
            raise ConfigError(
                'mqtt: `memwarden agent` needs an [mqtt] section (url = "mqtt://broker:1883")'
            )
        self.settings = settings
        self.mqtt: MqttSettings = settings.mqtt
        self.registry = (
            registry
            if registry is not None
            else Registry.from_entry_points(allow=settings.plugin_allowlist)
        )
        self.clock: Clock = clock or SystemClock()
        self.agent_id = settings.agent.id
        self.run_id = new_id()
        self.agent = f"{self.agent_id}/{self.run_id}"
        self.client_id = self.mqtt.client_id or f"memwarden-agent-{self.agent_id}"
        self.topics = Topics(self.mqtt.prefix)
        self.state_dir = settings.agent.state_dir or settings.home / "agent"
        self.runners: dict[str, SensorRunner] = {}
        self._signals = install_signal_handlers
        self._drain_s = drain_timeout_s
        self._queue: AgentQueue | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._checks: set[asyncio.Task[None]] = set()
        self._seq = 0
        self._acked_seq = 0  # the highest seq of this run the broker acknowledged
        self._acked: list[int] = []  # queue ids acknowledged, not yet marked sent
        self._acked_wake = asyncio.Event()
        self._inflight = 0
        self._caught_up = False
        self._progress = asyncio.Event()
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._mqtt_stop = asyncio.Event()
        self._connected = asyncio.Event()
        self._disconnected = asyncio.Event()
        self._disconnected.set()
        self.connections = 0
        self.published = 0
        self.rejected = 0
        self.resent = 0

    # ------------------------------------------------------------------ state

    @property
    def queue(self) -> AgentQueue:
        if self._queue is None:
            raise MemwardenError("the agent is not running")
        return self._queue

    async def ready(self) -> None:
        """Wait until the queue is open and every sensor's first setup settled."""
        await self._ready.wait()

    async def connected(self) -> None:
        """Wait until connected, subscribed and announced ``online``."""
        await self._connected.wait()

    async def disconnected(self) -> None:
        await self._disconnected.wait()

    @property
    def last_seq(self) -> int:
        """The last sequence number handed out in this run."""
        return self._seq

    def request_stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ main

    async def run(self) -> None:
        """Run until asked to stop; a startup failure is raised as itself."""
        try:
            await self._run()
        except BaseExceptionGroup as group:
            inner: BaseException = group
            while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
                inner = inner.exceptions[0]
            if isinstance(inner, MemwardenError):
                raise inner from None
            raise

    async def _run(self) -> None:
        tls = tls_context(self.mqtt)
        settings = self.settings.agent
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        async with contextlib.AsyncExitStack() as stack:
            self._queue = await stack.enter_async_context(
                AgentQueue(
                    self.state_dir / "agent-queue.db",
                    clock=self.clock,
                    max_unsent=settings.queue_max,
                    history_max=settings.history_max,
                )
            )
            stack.callback(setattr, self, "_queue", None)
            if self._signals:
                self._install_signals()
                stack.callback(self._remove_signals)
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                self.runners = self._make_runners()
                await self._cached_bindings()
                tasks = [
                    tg.create_task(r.supervise(), name=f"sensor[{n}]")
                    for n, r in self.runners.items()
                ]
                for runner in self.runners.values():
                    await runner.started()  # PluginError under startup policy "error"
                mqtt = tg.create_task(
                    keep_connected(
                        functools.partial(self._session, tls),
                        stopping=self._mqtt_stop,
                        backoff=Backoff(
                            base_s=self.mqtt.backoff_initial.total_seconds(),
                            cap_s=self.mqtt.backoff_max.total_seconds(),
                        ),
                        what="agent",
                    ),
                    name="agent.mqtt",
                )
                self._ready.set()
                log.info(
                    "agent_ready",
                    agent=self.agent,
                    sensors=sorted(self.runners),
                    broker=self.mqtt.url,
                    state_dir=str(self.state_dir),
                )
                await self._stop.wait()
                await self._shutdown(tasks, mqtt)
        log.info("agent_stopped", agent=self.agent, last_seq=self._seq)

    async def _shutdown(self, sensors: list[asyncio.Task[None]], mqtt: asyncio.Task[None]) -> None:
        """Sensors first (what they emit is queued), then publish what we can, then go."""
        for runner in self.runners.values():
            runner.stop()
        await asyncio.gather(*sensors, return_exceptions=True)
        for task in list(self._checks):
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        self._mqtt_stop.set()
        try:
            async with asyncio.timeout(self._drain_s + 2.0):
                await asyncio.shield(mqtt)
        except TimeoutError:
            mqtt.cancel()
        await asyncio.gather(mqtt, return_exceptions=True)

    # ------------------------------------------------------------------ sensors

    def _make_runners(self) -> dict[str, SensorRunner]:
        runners: dict[str, SensorRunner] = {}
        problems: list[str] = []
        for name, conf in self.settings.sensors.items():
            if not conf.enabled:
                continue
            try:
                runners[name] = self._make_runner(name, conf)
            except ConfigError as err:
                problems.extend(err.problems)
        if problems:
            raise ConfigError("; ".join(problems), problems=problems)
        return runners

    def _make_runner(self, name: str, conf: SensorSettings) -> SensorRunner:
        return build_runner(
            name,
            conf,
            registry=self.registry,
            clock=self.clock,
            state_root=self.state_dir,
            emit=self._emit,
            agent=self.agent_id,
        )

    async def _emit(self, name: str, event: ValidationEvent) -> None:
        """A sensor's ``ctx.emit``: number the event and queue it durably."""
        if event.sensor != name:
            self.rejected += 1
            log.warning(
                "event_rejected",
                sensor=name,
                reason=f"event says sensor {event.sensor!r} but came from {name!r}",
            )
            return
        body = event.model_copy(update={"agent": self.agent, "seq": self._seq + 1})
        payload = body.model_dump_json(exclude_none=True).encode()
        if len(payload) > self.mqtt.max_payload_bytes:
            self.rejected += 1
            log.error(
                "event_too_large",
                sensor=name,
                bytes=len(payload),
                limit=self.mqtt.max_payload_bytes,
            )
            return
        self._seq += 1  # no await between numbering and queueing: queue order = seq order
        await self.queue.put(
            self.agent, self._seq, self.topics.agent_events(self.agent_id, name), payload
        )
        runner = self.runners.get(name)
        if runner is not None:
            runner.counters.events += 1
            runner.counters.last_success = self.clock.time()

    async def _cached_bindings(self) -> None:
        """The bindings last received, so sensors watch even before the broker answers."""
        for name in self.runners:
            cached = await self.queue.get_meta(_BINDINGS_KEY + name)
            if cached is not None:
                await self._set_bindings(name, cached.encode(), cache=False)

    async def _set_bindings(self, name: str, payload: bytes, *, cache: bool = True) -> None:
        runner = self.runners.get(name)
        if runner is None:
            return
        try:
            items = json.loads(payload) if payload else []
        except ValueError as err:
            log.warning("bindings_invalid", sensor=name, error=str(err))
            return
        if not isinstance(items, list):
            log.warning("bindings_invalid", sensor=name, error="not a JSON list")
            return
        bound: list[BoundSubject[Any]] = []
        for item in items:
            try:
                binding, selector = check_binding(
                    runner.sensor, runner.ctx, Binding.model_validate(item["binding"])
                )
                block_id = str(item["block_id"])
                window = _window_of(item, sensor=name, block_id=block_id)
                bound.append(BoundSubject(block_id, binding, selector, validity_window=window))
            except (InputError, ValidationError, ValueError, KeyError, TypeError) as err:
                log.warning("binding_invalid", sensor=name, binding=str(item)[:300], error=str(err))
        runner.ctx.set_bindings(bound)
        log.info("bindings_received", sensor=name, count=len(bound))
        if cache:
            await self.queue.set_meta(_BINDINGS_KEY + name, payload.decode("utf-8", "replace"))

    async def _revalidate(self, name: str, payload: bytes) -> None:
        runner = self.runners.get(name)
        if runner is None:
            return
        try:
            request = self._read_request(payload)
        except (ValidationError, ValueError, TypeError) as err:
            log.warning("revalidation_request_invalid", sensor=name, error=str(err)[:500])
            return
        if request.sensor != name:
            log.warning("revalidation_request_misrouted", sensor=name, request_for=request.sensor)
            return
        if request.deadline.timestamp() < self.clock.time():
            log.info("revalidation_request_expired", sensor=name, request_id=request.id)
            return
        try:
            events = await runner.revalidate(request)  # a crash or timeout: an error event
            for event in events or ():
                await self._emit(name, event)
        except MemwardenError as err:  # the queue closed under us (stopping): the daemon's
            log.warning(  # deadline turns the missing answer into an error event
                "revalidation_answer_lost", sensor=name, request_id=request.id, error=str(err)
            )

    def _read_request(self, payload: bytes) -> RevalidationRequest:
        """A ``revalidate/<sensor>`` body as the request the sensor is handed.

        Fields this release does not know are ignored (a later daemon may add some; this
        agent's status says which additions it reads, ``accepts``). ``queued_at`` comes on
        the daemon's clock; the sensor gets it on this host's clock, the time of receipt
        minus how long the request waited (``created_at - queued_at``, one clock): a
        sensor compares it with its own looks (a poll taken after it answers the request),
        and a skew between the hosts must not make an older look count."""
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise TypeError(f"a request is a JSON object, not {type(data).__name__}")
        known = {k: v for k, v in data.items() if k in RevalidationRequest.model_fields}
        request = RevalidationRequest.model_validate(known)
        if request.queued_at is None:
            return request
        waited = max(0.0, (request.created_at - request.queued_at).total_seconds())
        here = max(0.0, self.clock.time() - waited)
        return request.model_copy(update={"queued_at": from_ts(here)})

    # ------------------------------------------------------------------ MQTT

    def _status(self, status: str, reason: str = "") -> bytes:
        return agent_status(
            status,
            agent_id=self.agent_id,
            agent=self.agent,
            sensors=sorted(self.runners),
            heartbeat_s=self.settings.agent.heartbeat_interval.total_seconds(),
            version=__version__,
            reason=reason,
            accepts=AGENT_ACCEPTS,
        )

    async def _session(self, tls: Any) -> None:
        status_topic = self.topics.agent_status(self.agent_id)
        will = aiomqtt.Will(
            status_topic, self._status("offline", "connection lost"), qos=1, retain=True
        )
        client = make_client(self.mqtt, client_id=self.client_id, will=will, tls=tls)
        async with client:
            try:
                topics = [(self.topics.agent_resend(self.agent_id), 1)]
                for name in sorted(self.runners):
                    topics += [(self.topics.revalidate(name), 1), (self.topics.bindings(name), 1)]
                await client.subscribe(topics)
                await client.publish(status_topic, self._status("online"), qos=1, retain=True)
                self.connections += 1
                self._disconnected.clear()
                self._connected.set()
                log.info("agent_connected", agent=self.agent, broker=self.mqtt.url)
                async with asyncio.TaskGroup() as tg:
                    receiver = tg.create_task(self._receive(client), name="agent.mqtt.receive")
                    publisher = tg.create_task(self._publisher(client), name="agent.mqtt.publish")
                    beats = tg.create_task(self._heartbeats(client), name="agent.mqtt.heartbeat")
                    await self._mqtt_stop.wait()
                    receiver.cancel()
                    beats.cancel()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._drain_s):
                            await self._drained()
                    publisher.cancel()
                await self._mark_acked()
                await client.publish(
                    status_topic, self._status("offline", "stopped"), qos=1, retain=True
                )
            finally:
                self._connected.clear()
                self._disconnected.set()

    async def _receive(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            levels = self.topics.relative(message.topic.value)
            payload = message.payload if isinstance(message.payload, bytes) else b""
            match levels:
                case ["revalidate", name] if name in self.runners and self._tg is not None:
                    task = self._tg.create_task(
                        self._revalidate(name, payload), name=f"sensor[{name}].revalidate"
                    )
                    self._checks.add(task)
                    task.add_done_callback(self._checks.discard)
                case ["bindings", name]:
                    await self._set_bindings(name, payload)
                case ["agents", agent_id, "resend"] if agent_id == self.agent_id:
                    await self._resend(payload)
                case _:
                    pass

    async def _resend(self, payload: bytes) -> None:
        try:
            data = json.loads(payload)
            agent = str(data.get("agent") or self.agent)
            first, last = int(data["from_seq"]), int(data["to_seq"])
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning("resend_request_invalid", error=str(err))
            return
        if split_agent(agent)[0] != self.agent_id or last < first:
            return
        found = await self.queue.requeue(agent, first, last)
        self.resent += found
        wanted = last - first + 1
        (log.info if found == wanted else log.warning)(
            "agent_resend",
            agent=agent,
            from_seq=first,
            to_seq=last,
            found=found,
            lost=wanted - found,
        )

    async def _publisher(self, client: aiomqtt.Client) -> None:
        """Publish the queue in order; mark each event sent once its PUBACK arrived."""
        window = asyncio.Semaphore(self.mqtt.inflight_max)
        last_id = 0  # what this connection already handed to the client
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._mark_acked_loop(), name="agent.mqtt.mark_sent")
            while True:
                self.queue.changed.clear()
                rows = await self.queue.unsent(after_id=last_id, limit=500)
                self._caught_up = not rows
                self._progress.set()
                if not rows:  # woken by the next put; the timeout is only a safety net
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.queue.changed.wait(), timeout=5.0)
                    continue
                for row in rows:
                    await window.acquire()
                    last_id = row.id
                    self._inflight += 1
                    tg.create_task(self._send(client, row, window), name="agent.mqtt.send")

    async def _send(
        self, client: aiomqtt.Client, row: QueuedEvent, window: asyncio.Semaphore
    ) -> None:
        try:
            await client.publish(row.topic, row.payload, qos=1, timeout=math.inf)
        finally:
            window.release()
            self._inflight -= 1
            self._progress.set()
        self.published += 1
        if row.agent == self.agent:
            self._acked_seq = max(self._acked_seq, row.seq)
        self._acked.append(row.id)
        self._acked_wake.set()

    async def _mark_acked_loop(self) -> None:
        while True:
            await self._acked_wake.wait()
            self._acked_wake.clear()
            await self._mark_acked()

    async def _mark_acked(self) -> None:
        ids, self._acked = self._acked, []
        if ids:
            await self.queue.mark_sent(ids)

    async def _drained(self) -> None:
        while self._inflight or not self._caught_up:
            self._progress.clear()
            await self._progress.wait()

    async def _heartbeats(self, client: aiomqtt.Client) -> None:
        interval_s = self.settings.agent.heartbeat_interval.total_seconds()
        topic = self.topics.agent_heartbeat(self.agent_id)
        while True:
            stats = await self.queue.stats()
            body = heartbeat(
                self.agent,
                seq=self._acked_seq,
                queued=stats.unsent,
                dropped=stats.dropped,
                at=self.clock.time(),
            )
            await client.publish(topic, body, qos=1, timeout=math.inf)
            await asyncio.sleep(interval_s)

    # ------------------------------------------------------------------ signals

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)

    def _remove_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _window_of(item: dict[str, Any], *, sensor: str, block_id: str) -> timedelta | None:
    """A binding item's ``validity_window`` (the block's, sent by daemons since it was
    added to the wire; None when absent). A bad one is logged and dropped, never the
    binding: the sensor still watches, and the daemon's queue renews the block."""
    raw = item.get("validity_window")
    if raw is None:
        return None
    try:
        window = parse_duration(raw)
    except ValueError as err:  # PydanticCustomError is a ValueError
        error = str(err)
    else:
        if window > timedelta(0):
            return window
        error = "must be longer than 0s"
    log.warning(
        "binding_window_invalid",
        sensor=sensor,
        block_id=block_id,
        field="validity_window",
        value=str(raw)[:100],
        error=error[:300],
    )
    return None
