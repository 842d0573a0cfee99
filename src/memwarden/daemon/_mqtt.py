"""The MQTT bridge: remote sensors' events in, state changes and revalidation requests out.

Topics, under a prefix (``memwarden/v1`` by default; see ``docs/MQTT.md``)::

    agents/<agent>/events/<sensor>  in  a ValidationEvent (JSON, QoS 1) from an agent
    events/<sensor>            in   a ValidationEvent from any client the broker lets publish
    agents/<agent>/status      in   an agent's birth / last will (retained JSON)
    agents/<agent>/heartbeat   in   an agent's last published sequence number (QoS 1)
    agents/<agent>/resend      out  {"agent", "from_seq", "to_seq"}: re-send a gap
    revalidate/<sensor>        out  a RevalidationRequest for a remote sensor (QoS 1)
    bindings/<sensor>          out  [{"block_id", "binding"}] a remote sensor owns (retained)
    blocks/<id>/state          out  a block's state change (QoS 1, not retained)
    status                     out  ``online`` / ``offline`` (birth and last will, retained)

The wire itself (topic names, the client, reconnecting, gap bookkeeping) is
:mod:`memwarden.mqtt`, shared with ``memwarden agent``; here is what only the daemon does:
ingest, acknowledgement after commit, who may report what, the outbox.

**Ack after commit.** The subscription is QoS 1 in a persistent session (MQTT 3.1.1,
``clean_session=False``, a stable client id): the broker keeps what arrives while we
are away. A message is acknowledged (PUBACK) only after :meth:`Bus.submit` returned,
that is after its transaction committed; if we die first, the broker redelivers it on
the next connection and the event's ``event_id`` stores it once.

**Loss you can see.** A broker may still drop messages (a full queue, a crash before
it saved them). Every agent numbers its events (``agent`` = ``<agent id>/<run>``,
``seq`` = 1, 2, ...); a jump, or a heartbeat announcing a higher number than we have,
is a gap: counted per agent, logged, shown in health and ``/metrics``, and the agent
is asked to re-send it from its history.

**Nothing we publish is lost to a disconnect**: while the broker is away (and for
anything still waiting for its PUBACK when the connection drops) messages go to a
bounded outbox table in the store, flushed first on reconnect.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

import aiomqtt
import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import ValidationError

from memwarden.daemon._config import hostname_id
from memwarden.daemon._ingest import RefusalError
from memwarden.errors import StorageError, ValidationInputError
from memwarden.memory import Outcome, ValidationEvent, from_ts, to_ts
from memwarden.mqtt import (
    DAEMON_OFFLINE,
    DAEMON_ONLINE,
    QUEUED_AT,
    AgentGaps,
    GapTracker,
    Topics,
    bindings_message,
    block_state,
    describe_error,
    is_agent_id,
    keep_connected,
    make_client,
    manual_acks,
    resend_request,
    revalidation_request,
    split_agent,
    tls_context,
)
from memwarden.plugins import Backoff

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from types import TracebackType

    from prometheus_client.core import Metric

    from memwarden.daemon._bus import Bus
    from memwarden.daemon._config import MqttSettings, SensorSettings
    from memwarden.daemon._ingest import EventGate
    from memwarden.memory import ApplyResult, Clock, RevalidationRequest, Store

__all__ = ["MqttBridge"]

log = structlog.get_logger("memwarden.mqtt")

_SOURCE = "remote:mqtt"
_MAX_RESEND_RANGES = 64  # per heartbeat
_SKEW_SAMPLES = 8  # heartbeats the clock-offset estimate looks back on
_MAX_CLOCK_CORRECTION_S = 600.0  # a larger skew is a broken clock: corrected this far only
_MIN_CLOCK_CORRECTION_S = 1.0  # below this, delivery jitter: observed_at is left alone


# ---------------------------------------------------------------------- the bridge


class _RejectedError(Exception):  # a control-flow signal, not an error we report
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Out:
    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False


@dataclass(slots=True)
class _Agent:
    """What an agent last said about itself."""

    status: str = "unknown"
    agent: str = ""
    sensors: list[str] = field(default_factory=list)
    heartbeat_s: float | None = None
    since: float = 0.0
    last_heartbeat: float | None = None
    reason: str = ""
    accepts: frozenset[str] = frozenset()  # later additions to the wire it reads
    heard: float = 0.0  # last message from it (status or heartbeat), for eviction
    # Clock skew: our receive time minus its heartbeat's "at", last few; the smallest is
    # the offset plus the smallest delivery delay (NTP's minimum-delay filter).
    skew_samples: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=_SKEW_SAMPLES)
    )

    @property
    def clock_offset_s(self) -> float | None:
        """How far its clock runs behind ours (negative: ahead), bounded; None: unknown."""
        if not self.skew_samples:
            return None
        offset = min(self.skew_samples)
        return max(-_MAX_CLOCK_CORRECTION_S, min(_MAX_CLOCK_CORRECTION_S, offset))


class MqttBridge:
    """Connects the daemon to an MQTT broker; an async context manager.

    Entering starts one background task (``mqtt.bridge``) that owns a TaskGroup and
    keeps a connection up (reconnecting with capped full-jitter backoff); it does not
    wait for the broker: ``await bridge.connected()`` does. Leaving stops taking
    events, publishes what is queued (within ``drain_timeout_s``), says ``offline``,
    disconnects cleanly and keeps whatever could not be sent in the outbox.
    """

    def __init__(
        self,
        settings: MqttSettings,
        *,
        store: Store,
        bus: Bus,
        remote_sensors: Callable[[], Mapping[str, SensorSettings]],
        gate: EventGate,
        clock: Clock,
        drain_timeout_s: float = 5.0,
        live_max: int = 10_000,
    ) -> None:
        self.settings = settings
        self.store = store
        self.bus = bus
        self.clock = clock
        self.topics = Topics(settings.prefix)
        self.client_id = settings.client_id or f"memwarden-{hostname_id()}"
        self._remote = remote_sensors
        self.gate = gate
        self._tls = tls_context(settings)
        self._drain_s = drain_timeout_s
        self._backoff = Backoff(
            base_s=settings.backoff_initial.total_seconds(),
            cap_s=settings.backoff_max.total_seconds(),
        )
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._connected = asyncio.Event()
        self._disconnected = asyncio.Event()
        self._disconnected.set()
        # What we publish: the live queue while connected, the outbox otherwise.
        self._live: collections.deque[_Out] = collections.deque()
        self._live_max = live_max
        self._inflight: dict[int, _Out] = {}
        self._keys = itertools.count()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._outbox_pending = True  # whatever a previous run left is flushed first
        # Remote revalidation requests waiting for their answer: id -> (deadline, request).
        self._awaiting: dict[str, tuple[float, RevalidationRequest]] = {}
        self._deadline_wake = asyncio.Event()
        idle_s = max(1.0, settings.agent_idle_timeout.total_seconds())
        self.gaps = GapTracker(max_agents=settings.max_agents, idle_s=idle_s, clock=clock.time)
        # What each agent last said about itself; bounded like the gap figures.
        self.agents: collections.OrderedDict[str, _Agent] = collections.OrderedDict()
        self._resend_queue: list[tuple[str, int, int]] = []
        # Counters (health and /metrics).
        self.connections = 0
        self.received = 0
        self.accepted = 0
        self.duplicates = 0
        self.rejected: Counter[str] = Counter()
        self.by_sensor: Counter[str] = Counter()
        self.published = 0
        self.outbox_dropped = 0
        self.expired_requests = 0
        self._logged_rejects: set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        self._task = asyncio.get_running_loop().create_task(self._main(), name="mqtt.bridge")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop: drain and disconnect cleanly if connected, then keep the rest in the outbox."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                async with asyncio.timeout(self._drain_s + 2.0):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()
            except Exception as err:  # noqa: BLE001 - logged; closing goes on
                log.error("mqtt_bridge_failed", error=describe_error(err))
            await asyncio.gather(task, return_exceptions=True)
        await self._spill()

    async def connected(self) -> None:
        """Wait until the bridge is connected and subscribed."""
        await self._connected.wait()

    async def disconnected(self) -> None:
        """Wait until the bridge is not connected."""
        await self._disconnected.wait()

    @property
    def is_connected(self) -> bool:
        return self._connected.is_set()

    async def _main(self) -> None:
        async with asyncio.TaskGroup() as tg:
            deadlines = tg.create_task(self._deadlines(), name="mqtt.bridge.deadlines")
            await keep_connected(self._session, stopping=self._stopping, backoff=self._backoff)
            deadlines.cancel()

    async def _session(self) -> None:
        """One connection: subscribe, say online, then receive and publish until it ends."""
        will = aiomqtt.Will(self.topics.status, DAEMON_OFFLINE, qos=1, retain=True)
        client = make_client(self.settings, client_id=self.client_id, will=will, tls=self._tls)
        ack = manual_acks(client)  # before connecting: queued messages arrive at once
        async with client:
            try:
                await client.subscribe(
                    [
                        (self.topics.events(), 1),
                        (self.topics.agent_events(), 1),
                        (self.topics.agent_status(), 1),
                        (self.topics.agent_heartbeat(), 1),
                    ]
                )
                await client.publish(self.topics.status, DAEMON_ONLINE, qos=1, retain=True)
                self.connections += 1
                self._disconnected.clear()
                self._connected.set()
                log.info(
                    "mqtt_connected",
                    url=self.settings.url,
                    client_id=self.client_id,
                    connections=self.connections,
                )
                for name in sorted(self._remote()):
                    await self.publish_bindings(name)
                async with asyncio.TaskGroup() as tg:
                    receiver = tg.create_task(
                        self._receive(client, ack), name="mqtt.bridge.receive"
                    )
                    publisher = tg.create_task(self._publisher(client), name="mqtt.bridge.publish")
                    await self._stopping.wait()
                    receiver.cancel()  # unacknowledged messages come back next time
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._drain_s):
                            await self._drained()
                    publisher.cancel()
                await client.publish(
                    self.topics.status, DAEMON_OFFLINE, qos=1, retain=True, timeout=self._drain_s
                )
            finally:
                self._connected.clear()
                self._disconnected.set()
                await self._spill()

    # ------------------------------------------------------------------ receiving

    async def _receive(
        self, client: aiomqtt.Client, ack: Callable[[aiomqtt.Message], None]
    ) -> None:
        messages = client.messages
        batch_max = self.settings.batch_max
        while True:
            batch = [await anext(messages)]
            while len(messages) and len(batch) < batch_max:
                batch.append(await anext(messages))
            await self._handle(batch)
            for message in batch:  # only now: everything in the batch is committed
                ack(message)
            self.received += len(batch)

    async def _handle(self, batch: Sequence[aiomqtt.Message]) -> None:
        events: list[ValidationEvent] = []
        for message in batch:
            try:
                event = await self._handle_one(message)
            except StorageError:
                raise  # not handled: the whole batch stays unacknowledged, to be redelivered
            except Exception as err:  # a bug must not become a redelivery loop: log, go on
                log.error("mqtt_message_failed", topic=message.topic.value, exc_info=err)
                continue
            if event is not None:
                events.append(event)
        events = await self._bound(events)
        if events:
            await self._commit(events)
        await self._send_resends()

    async def _handle_one(self, message: aiomqtt.Message) -> ValidationEvent | None:
        payload = message.payload if isinstance(message.payload, bytes) else b""
        match self.topics.relative(message.topic.value):
            case ["events", sensor]:
                return await self._parse_event(sensor, payload)
            case ["agents", agent_id, "events", sensor]:
                return await self._parse_event(sensor, payload, agent_id)
            case ["agents", agent_id, "status"] if is_agent_id(agent_id):
                self._agent_status(agent_id, payload)
            case ["agents", agent_id, "heartbeat"] if is_agent_id(agent_id):
                await self._heartbeat(agent_id, payload)
            case _:
                pass
        return None

    async def _parse_event(
        self, sensor: str, payload: bytes, agent_id: str | None = None
    ) -> ValidationEvent | None:
        """The event in a message (capped as its sensor allows), or None when dead-lettered."""
        try:
            event = await self._check_event(sensor, payload, agent_id)
        except _RejectedError as bad:
            shown = payload if len(payload) <= self.settings.max_payload_bytes else payload[:4096]
            where = f"mqtt:{sensor}" if agent_id is None else f"mqtt:{agent_id}:{sensor}"
            await self._reject(where[:200], bad.kind, bad.reason, shown)
            return None
        self.by_sensor[sensor] += 1
        return event

    async def _check_event(
        self, sensor: str, payload: bytes, agent_id: str | None
    ) -> ValidationEvent:
        """Checked in this order: size, JSON, who sent it (the topic's agent, the sensor's
        configuration), the schema, then what it may claim (the event gate)."""
        limit = self.settings.max_payload_bytes
        if len(payload) > limit:
            raise _RejectedError("too_large", f"{len(payload)} bytes (at most {limit})")
        try:
            data = json.loads(payload)
        except ValueError as err:  # not UTF-8 or not JSON
            raise _RejectedError("not_json", str(err)) from None
        if not isinstance(data, dict):
            raise _RejectedError("invalid_event", "not a JSON object")
        if agent_id is not None:
            topic = self.topics.agent_events(agent_id, sensor)
            if not is_agent_id(agent_id):
                raise _RejectedError("invalid_agent", f"{topic}: {agent_id!r} is not an agent id")
            claimed = data.get("agent")
            if claimed is not None and (
                not isinstance(claimed, str) or split_agent(claimed)[0] != agent_id
            ):
                raise _RejectedError(
                    "agent_mismatch",
                    f"event says agent {str(claimed)[:130]!r} but came on {topic}: an agent "
                    "reports only as itself",
                )
            # The broker's ACL lets only this agent publish here: what it sent counts as
            # received whatever else is wrong with it (not a gap to ask for again).
            await self._note_seq(claimed, data.get("seq"))
        try:
            conf = self.gate.sender(sensor, "mqtt")
        except RefusalError as refusal:
            raise _RejectedError(refusal.kind, refusal.reason) from None
        if conf.agents is not None and agent_id not in conf.agents:
            who = "a client that is not an agent" if agent_id is None else f"agent {agent_id!r}"
            raise _RejectedError(
                "agent_not_allowed",
                f"remote sensor {sensor!r} takes events only from agents {conf.agents} on "
                f"{self.topics.agent_events('<agent>', sensor)}; this came from {who}",
            )
        try:
            event = ValidationEvent.model_validate(data)
        except ValidationError as err:
            raise _RejectedError(
                "invalid_event",
                "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'event'}: {e['msg']}"
                    for e in err.errors()
                ),
            ) from None
        if event.sensor != sensor:
            where = self.topics.events(sensor) if agent_id is None else topic
            raise _RejectedError(
                "sensor_mismatch", f"event says sensor {event.sensor!r} but came on {where}"
            )
        event = self._corrected(event, agent_id)
        try:
            event, _ = self.gate.check(
                event, via="mqtt", max_future_skew=self.settings.max_future_skew
            )
        except RefusalError as refusal:
            raise _RejectedError(refusal.kind, refusal.reason) from None
        if agent_id is None:  # no identity but the payload's: followed once all checks passed
            await self._note_seq(event.agent, event.seq)
        return event

    def _corrected(self, event: ValidationEvent, agent_id: str | None) -> ValidationEvent:
        """``observed_at`` moved onto our clock by the agent's estimated offset, so a host
        whose clock runs behind cannot have its refutations ignored as outdated (and one
        ahead is not refused as from the future). Never later than now."""
        who = agent_id or (split_agent(event.agent)[0] if event.agent else None)
        info = self.agents.get(who) if who is not None else None
        offset = info.clock_offset_s if info is not None else None
        if offset is None or abs(offset) < _MIN_CLOCK_CORRECTION_S:
            return event
        now = self.clock.time()
        observed = min(now, event.observed_at.timestamp() + offset)
        return event.model_copy(update={"observed_at": from_ts(observed)})

    async def _bound(self, events: list[ValidationEvent]) -> list[ValidationEvent]:
        """The events that may reach their block: one naming a block_id not bound to its
        sensor is dead-lettered (and the store checks again when it applies them)."""
        while (found := await self.gate.first_unbound(self.store, events)) is not None:
            i, refusal = found
            bad = events.pop(i)
            self.by_sensor[bad.sensor] -= 1
            await self._reject(
                f"mqtt:{bad.sensor}", refusal.kind, refusal.reason, bad.model_dump_json().encode()
            )
        return events

    async def _reject(self, source: str, kind: str, reason: str, payload: bytes) -> None:
        """Dead-letter (and count) a bad message; it is still acknowledged: no redelivery loop."""
        self.rejected[kind] += 1
        await self.bus.reject(source, kind, reason, payload)

    async def _commit(self, events: list[ValidationEvent]) -> None:
        """Store the events; returns only once committed (retrying while the store fails)."""
        delay = 0.05
        while True:
            try:
                result = await self.bus.submit(_SOURCE, events, bound_only=True)
            except ValidationInputError as err:  # the store refused the batch: find the culprit
                if len(events) == 1:
                    payload = events[0].model_dump_json().encode()
                    await self._reject(
                        f"mqtt:{events[0].sensor}", "store_rejected", str(err), payload
                    )
                    return
                for event in events:
                    await self._commit([event])
                return
            except StorageError as err:  # not stored: keep them unacknowledged and retry
                log.error("mqtt_commit_failed", error=str(err), events=len(events), retry_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.accepted += result.accepted
            self.duplicates += result.duplicates
            return

    # ------------------------------------------------------------------ gaps and agents

    async def _note_seq(self, agent: Any, seq: Any) -> None:
        if not isinstance(agent, str) or not agent or isinstance(seq, bool):
            return
        if not isinstance(seq, int) or seq < 0:
            return
        await self._follow(agent)
        gap = self.gaps.seen(agent, seq)
        if gap is not None:
            self._gap(agent, gap, "sequence jump")

    async def _follow(self, agent: str) -> None:
        """First time we hear of a run: start from what the event log already holds."""
        if not self.gaps.known(agent):
            high = (await self.store.agent_high_water([agent])).get(agent, 0)
            self.gaps.begin(agent, high)

    def _gap(self, agent: str, gap: tuple[int, int], why: str) -> None:
        agent_id = split_agent(agent)[0]
        log.warning(
            "mqtt_gap_detected",
            agent=agent,
            from_seq=gap[0],
            to_seq=gap[1],
            missing=gap[1] - gap[0] + 1,
            why=why,
        )
        if self.settings.resend_gaps and is_agent_id(agent_id):
            self._resend_queue.append((agent, gap[0], gap[1]))

    async def _send_resends(self) -> None:
        queued, self._resend_queue = self._resend_queue, []
        for agent, first, last in queued:
            agent_id = split_agent(agent)[0]
            stats = self.gaps.agents.get(agent_id)
            if stats is None:  # forgotten meanwhile (bounded tracking)
                continue
            stats.resends += 1
            await self.publish(
                self.topics.agent_resend(agent_id), resend_request(agent, first, last)
            )

    def _agent_status(self, agent_id: str, payload: bytes) -> None:
        now = self.clock.time()
        if not payload:  # a retained status was cleared
            self.agents.pop(agent_id, None)
            return
        try:
            data = json.loads(payload)
            status = str(data["status"])
        except (ValueError, KeyError, TypeError):
            log.warning("mqtt_agent_status_invalid", agent=agent_id, payload=payload[:200])
            return
        info = self._agent(agent_id)
        info.status = status
        info.since = now
        info.agent = str(data.get("agent") or info.agent)
        sensors = data.get("sensors")
        if isinstance(sensors, list):
            info.sensors = [str(s) for s in sensors]
        beat = data.get("heartbeat_s")
        if isinstance(beat, int | float) and beat > 0:
            info.heartbeat_s = float(beat)
        info.reason = str(data.get("reason") or "")
        info.accepts = _accepts(data.get("accepts"))
        if status == "online":
            info.last_heartbeat = now
        (log.info if status == "online" else log.warning)(
            "mqtt_agent_status",
            agent=agent_id,
            status=status,
            sensors=info.sensors,
            reason=info.reason,
        )

    def _agent(self, agent_id: str) -> _Agent:
        """The agent's entry, most recently heard; bounded (``mqtt.max_agents``, idle ones
        after ``mqtt.agent_idle_timeout``), the least recently heard forgotten first."""
        now = self.clock.time()
        info = self.agents.get(agent_id)
        if info is None:
            info = self.agents[agent_id] = _Agent()
        self.agents.move_to_end(agent_id)
        info.heard = now
        idle = now - self.settings.agent_idle_timeout.total_seconds()
        while len(self.agents) > self.settings.max_agents or (
            len(self.agents) > 1 and next(iter(self.agents.values())).heard < idle
        ):
            self.agents.popitem(last=False)
        return info

    async def _heartbeat(self, agent_id: str, payload: bytes) -> None:
        try:
            data = json.loads(payload)
            agent = str(data["agent"])
            seq = data.get("seq")
        except (ValueError, KeyError, TypeError):
            log.warning("mqtt_heartbeat_invalid", agent=agent_id, payload=payload[:200])
            return
        if split_agent(agent)[0] != agent_id:
            log.warning("mqtt_heartbeat_misplaced", agent=agent_id, says=agent[:200])
            return
        info = self._agent(agent_id)
        info.last_heartbeat = self.clock.time()
        info.agent = agent
        sent = data.get("at")
        if isinstance(sent, str):
            with contextlib.suppress(ValueError):
                info.skew_samples.append(info.last_heartbeat - to_ts(datetime.fromisoformat(sent)))
        if info.status != "online":
            info.status = "online"
            info.reason = "heartbeat"
        if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0:
            await self._follow(agent)
            gap = self.gaps.announced(agent, seq)
            if gap is not None:
                self._gap(agent, gap, "heartbeat is ahead")
        if self.settings.resend_gaps and is_agent_id(agent_id):
            # Still missing (a re-send can be lost too): ask again, once per heartbeat.
            asked = {(a, f, t) for a, f, t in self._resend_queue}
            for first, last in self.gaps.missing_ranges(agent)[:_MAX_RESEND_RANGES]:
                if (agent, first, last) not in asked:
                    self._resend_queue.append((agent, first, last))

    # ------------------------------------------------------------------ publishing

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        """Publish now if connected (in order, QoS 1), else keep it in the outbox."""
        message = _Out(topic, payload, qos, retain)
        if self._connected.is_set() and len(self._live) < self._live_max:
            self._live.append(message)
            self._wake.set()
            return
        await self._to_outbox([message])

    async def _to_outbox(self, messages: Sequence[_Out]) -> None:
        if not messages:
            return
        dropped = await self.store.outbox_put(
            [(m.topic, m.payload, m.qos, m.retain) for m in messages],
            max_rows=self.settings.outbox_max,
        )
        if dropped:
            self.outbox_dropped += dropped
            log.warning("mqtt_outbox_full", dropped=dropped, max_rows=self.settings.outbox_max)
        self._outbox_pending = True
        self._wake.set()

    async def _spill(self) -> None:
        """Whatever was not acknowledged by the broker goes to the outbox (in order)."""
        keep = [self._inflight[k] for k in sorted(self._inflight)] + list(self._live)
        self._inflight.clear()
        self._live.clear()
        if keep:
            try:
                await self._to_outbox(keep)
            except StorageError as err:
                log.error("mqtt_outbox_failed", error=str(err), lost=len(keep))

    async def _publisher(self, client: aiomqtt.Client) -> None:
        window = asyncio.Semaphore(self.settings.inflight_max)
        async with asyncio.TaskGroup() as tg:
            while True:
                if self._outbox_pending:
                    await self._flush_outbox(client, window)
                while self._live:
                    await window.acquire()
                    if not self._live:
                        window.release()
                        break
                    message = self._live.popleft()
                    key = next(self._keys)
                    self._inflight[key] = message
                    tg.create_task(
                        self._send(client, key, message, window), name="mqtt.bridge.send"
                    )
                if not self._live and not self._outbox_pending:
                    self._wake.clear()
                    await self._wake.wait()

    async def _send(
        self, client: aiomqtt.Client, key: int, message: _Out, window: asyncio.Semaphore
    ) -> None:
        try:
            await self._publish_one(client, message)
        finally:
            window.release()
        self._inflight.pop(key, None)
        self._progress.set()

    async def _publish_one(self, client: aiomqtt.Client, message: _Out) -> None:
        """Publish and wait for the PUBACK (cancelled when the connection drops)."""
        await client.publish(
            message.topic, message.payload, qos=message.qos, retain=message.retain, timeout=math.inf
        )
        self.published += 1

    async def _flush_outbox(self, client: aiomqtt.Client, window: asyncio.Semaphore) -> None:
        """Publish the outbox, oldest first; a row leaves it once its PUBACK arrived."""
        while True:
            self._outbox_pending = False  # set again by any put from here on
            rows = await self.store.outbox_peek(limit=500)
            if not rows:
                self._progress.set()
                return

            async def one(message: _Out) -> None:
                async with window:
                    await self._publish_one(client, message)

            await asyncio.gather(*(one(_Out(r.topic, r.payload, r.qos, r.retain)) for r in rows))
            await self.store.outbox_delete([r.id for r in rows])
            log.info("mqtt_outbox_flushed", messages=len(rows))
            self._outbox_pending = True

    async def _drained(self) -> None:
        while self._live or self._inflight or self._outbox_pending:
            self._progress.clear()
            await self._progress.wait()

    # ------------------------------------------------------------------ daemon side

    def sensors(self) -> list[str]:
        """The remote sensors (configured with ``remote = true``)."""
        return sorted(self._remote())

    async def send(self, request: RevalidationRequest) -> None:
        """Route a revalidation request to a remote sensor; an unanswered one becomes an
        ``error`` event after its deadline (plus ``remote_answer_grace``)."""
        conf = self._remote().get(request.sensor)
        timeout_s = request.timeout.total_seconds()
        if conf is not None and conf.revalidate_timeout is not None:
            timeout_s = max(timeout_s, conf.revalidate_timeout.total_seconds())
        deadline = (
            request.created_at.timestamp()
            + timeout_s
            + self.settings.remote_answer_grace.total_seconds()
        )
        self._awaiting[request.id] = (deadline, request)
        self._deadline_wake.set()
        body = revalidation_request(request, queued_at=self.all_accept(request.sensor, QUEUED_AT))
        await self.publish(self.topics.revalidate(request.sensor), body)

    def all_accept(self, sensor: str, addition: str) -> bool:
        """Whether every agent that announced ``sensor`` (online or not: the topic keeps
        what it missed in its session) reads ``addition`` to the wire, and there is one.
        A request goes to all of them on one topic, and an agent of an earlier release
        refuses a request with a field it does not know."""
        announced = [a for a in self.agents.values() if sensor in a.sensors]
        return bool(announced) and all(addition in a.accepts for a in announced)

    async def publish_bindings(self, sensor: str) -> None:
        """Publish (retained) the bindings a remote sensor owns, for its agent."""
        rows = await self.store.bindings_for_sensor(sensor)
        # With each block's window, so the agent's polling sensors renew what they answer
        # for, as local ones do (an older agent ignores the field).
        windows = await self.store.validity_windows(sorted({b for b, _ in rows}))
        body = bindings_message(rows, windows)
        await self.publish(self.topics.bindings(sensor), body, retain=True)

    async def on_applied(self, result: ApplyResult) -> None:
        """After a commit: forget answered requests, publish the state changes."""
        for request_id in result.answered:
            self._awaiting.pop(request_id, None)
        for change in result.changes:
            body = block_state(
                change.block_id,
                state=change.after,
                before=change.before,
                reliability=change.reliability,
                observed_at=change.observed_at,
                event_id=change.event_id,
            )
            await self.publish(self.topics.block_state(change.block_id), body)

    async def expire_overdue(self) -> int:
        """Answer remote requests whose deadline passed with an ``error`` event."""
        now = self.clock.time()
        due = [rid for rid, (deadline, _) in self._awaiting.items() if deadline <= now]
        events = []
        for rid in due:
            _, request = self._awaiting.pop(rid)
            events.append(
                ValidationEvent(
                    sensor=request.sensor,
                    subject=request.subject,
                    outcome=Outcome.ERROR,
                    observed_at=from_ts(now),
                    request_id=request.id,
                    message=f"remote sensor {request.sensor!r} did not answer in time "
                    "(is its agent running?)",
                )
            )
        if events:
            self.expired_requests += len(events)
            log.warning("mqtt_revalidations_unanswered", count=len(events))
            await self._commit(events)
        return len(events)

    async def _deadlines(self) -> None:
        while True:
            await self.expire_overdue()
            now = self.clock.time()
            nearest = min((d for d, _ in self._awaiting.values()), default=None)
            # At most a second: an injected clock may jump forward without waking us.
            wait_s = 1.0 if nearest is None else min(1.0, max(0.0, nearest - now))
            self._deadline_wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._deadline_wake.wait(), timeout=wait_s)

    # ------------------------------------------------------------------ status

    def _agent_for(self, sensor: str) -> tuple[str, _Agent] | None:
        found: tuple[str, _Agent] | None = None
        conf = self._remote().get(sensor)
        allowed = None if conf is None else conf.agents
        for agent_id, info in sorted(self.agents.items()):
            if allowed is not None and agent_id not in allowed:
                continue  # it may announce the sensor, but its events would be refused
            if sensor in info.sensors:
                if info.status == "online":
                    return agent_id, info
                found = found or (agent_id, info)
        return found

    def sensor_status(self) -> list[dict[str, Any]]:
        """One row per remote sensor, as ``GET /v1/sensors`` lists sensors."""
        now = self.clock.time()
        out = []
        for name, conf in sorted(self._remote().items()):
            owner = self._agent_for(name)
            status, reason, agent_id = "unavailable", "no agent has announced it", None
            since: float | None = None  # when it stopped being available, if known
            if owner is not None:
                agent_id, info = owner
                status, reason, since = "unavailable", info.reason or info.status, info.since
                if info.status == "online":
                    status, reason, since = "running", "", None
                    beat = info.heartbeat_s
                    last = info.last_heartbeat
                    if beat is not None and last is not None and now - last > 3 * beat:
                        status, reason = "unavailable", f"no heartbeat for {now - last:.0f}s"
                        since = last + 3 * beat
            out.append(
                {
                    "name": name,
                    "kind": conf.kind or name,
                    "status": status,
                    "ready": status == "running",
                    "remote": True,
                    "agent": agent_id,
                    "reason": reason,
                    "events": self.by_sensor[name],
                    "down_since": since,
                    "clock_offset_s": (
                        None
                        if owner is None or owner[1].clock_offset_s is None
                        else round(owner[1].clock_offset_s, 3)
                    ),
                }
            )
        return out

    async def health(self) -> dict[str, Any]:
        """The bridge's part of ``daemon.health()``."""
        try:
            outbox = await self.store.outbox_stats()
            queued, dropped = outbox.queued, outbox.dropped
        except StorageError:
            queued, dropped = -1, self.outbox_dropped
        agents = {
            agent_id: {
                **stats.as_dict(),
                "status": self.agents[agent_id].status if agent_id in self.agents else "unknown",
            }
            for agent_id, stats in sorted(self.gaps.agents.items())
        }
        for agent_id, info in sorted(self.agents.items()):
            agents.setdefault(agent_id, {**AgentGaps().as_dict(), "status": info.status})
        return {
            "connected": self.is_connected,
            "url": self.settings.url,
            "client_id": self.client_id,
            "connections": self.connections,
            "received": self.received,
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": dict(self.rejected),
            "published": self.published,
            "outbox": {"queued": queued, "dropped": dropped},
            "unanswered_requests": self.expired_requests,
            "gaps_total": sum(s.gaps for s in self.gaps.agents.values()),
            "missing": sum(s.missing for s in self.gaps.agents.values()),
            "agents": agents,
        }

    def metrics(self) -> Iterator[Metric]:
        """The bridge's Prometheus families (``/metrics``)."""
        gaps = CounterMetricFamily(
            "memwarden_mqtt_gaps",
            "Remote events found missing (sequence gaps), by agent.",
            labels=["agent"],
        )
        recovered = CounterMetricFamily(
            "memwarden_mqtt_gaps_recovered",
            "Missing remote events that arrived later (re-sent), by agent.",
            labels=["agent"],
        )
        missing = GaugeMetricFamily(
            "memwarden_mqtt_missing", "Remote events missing now, by agent.", labels=["agent"]
        )
        for agent_id, stats in sorted(self.gaps.agents.items()):
            gaps.add_metric([agent_id], stats.gaps)
            recovered.add_metric([agent_id], stats.recovered)
            missing.add_metric([agent_id], stats.missing)
        yield gaps
        yield recovered
        yield missing
        yield GaugeMetricFamily(
            "memwarden_mqtt_connected",
            "1 while connected to the broker.",
            value=1.0 if self.is_connected else 0.0,
        )
        yield CounterMetricFamily(
            "memwarden_mqtt_received", "MQTT messages received.", value=self.received
        )
        rejected = CounterMetricFamily(
            "memwarden_mqtt_rejected", "MQTT messages dead-lettered, by kind.", labels=["kind"]
        )
        for kind, n in sorted(self.rejected.items()):
            rejected.add_metric([kind], n)
        yield rejected
        yield CounterMetricFamily(
            "memwarden_mqtt_outbox_dropped",
            "Messages dropped from a full outbox (oldest first).",
            value=self.outbox_dropped,
        )


_MAX_ACCEPTS = 32  # an agent's status names a few additions to the wire, never thousands


def _accepts(raw: Any) -> frozenset[str]:
    """The ``accepts`` of an agent's status: short strings in a list, anything else none
    (the status is untrusted: whoever may publish it could send anything)."""
    if not isinstance(raw, list) or len(raw) > _MAX_ACCEPTS:
        return frozenset()
    return frozenset(a for a in raw if isinstance(a, str) and 0 < len(a) <= 64)
