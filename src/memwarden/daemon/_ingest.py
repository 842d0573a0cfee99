"""Who may report what: the checks every event from outside passes (HTTP and MQTT).

An event that arrives over ``POST /v1/events`` or the MQTT bridge speaks for a sensor.
Only a sensor the configuration declares remote (``remote = true``) may be spoken for
that way, and only over the transports it allows (``report_via``); never ``review``
(people's decisions) and never a sensor this daemon runs itself (``fs``, ``tests``, ...):
their evidence comes from here or from nowhere. Then:

- an event that names a ``block_id`` reaches that block only if the block has a binding
  for the event's sensor (an event by ``subject`` reaches only blocks bound to that
  sensor and subject anyway); checked here for a clear refusal, and again inside the
  transaction that applies it (:meth:`Store.apply_events` with ``bound_only``);
- ``observed_at`` more than the transport's ``max_future_skew`` ahead of our clock is
  refused, and one ahead by less is stored as observed now: an observation is never
  stored as if from the future;
- ``reliability`` and ``validity_window`` are **clamped** to the sensor's
  ``max_reliability`` / ``max_validity_window``: the observation is kept (a remote
  plugin's default may simply be higher than this daemon grants), with the cap noted in
  the event's ``message`` and counted (``memwarden_events_capped_total``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from memwarden.memory import format_duration, from_ts

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import timedelta

    from memwarden.daemon._config import SensorSettings
    from memwarden.memory import Clock, Store, ValidationEvent
    from memwarden.memory.policy import PolicyConfig

__all__ = ["Capped", "EventGate", "RefusalError", "Transport"]

Transport = Literal["mqtt", "http"]


class RefusalError(Exception):  # a refusal to report, answered like the HTTP errors
    """An event this sender may not report; ``kind`` is the metric label."""

    def __init__(self, kind: str, field: str, reason: str, *, forbidden: bool) -> None:
        super().__init__(f"{field}: {reason}")
        self.kind = kind
        self.field = field
        self.reason = reason
        self.forbidden = forbidden  # 403 (who) rather than 422 (what)


@dataclass(frozen=True, slots=True)
class Capped:
    """One value an event carried above its sensor's cap, and what was stored instead."""

    field: str
    given: str
    stored: str


class EventGate:
    """The sender-side checks shared by the HTTP route and the MQTT bridge."""

    def __init__(
        self,
        *,
        remote_sensors: Callable[[], Mapping[str, SensorSettings]],
        local_sensors: Callable[[], Sequence[str]],
        policy: Callable[[], PolicyConfig],
        clock: Clock,
    ) -> None:
        self._remote = remote_sensors
        self._local = local_sensors
        self._policy = policy
        self._clock = clock
        self.capped: Counter[tuple[str, str]] = Counter()  # (sensor, field)
        self.refused: Counter[str] = Counter()  # kind

    def sender(self, sensor: str, via: Transport) -> SensorSettings:
        """The configuration of the remote sensor ``sensor``; :class:`RefusalError` otherwise."""
        remote = self._remote()
        conf = remote.get(sensor)
        if conf is None:
            if sensor in self._local():
                why = "it runs in this daemon and only this daemon reports for it"
            elif sensor == "review":
                why = "it records people's decisions, made on the review page or API"
            else:
                why = "it is not configured"
            known = ", ".join(sorted(remote)) or "none configured"
            raise self._refuse(
                "not_remote_sensor",
                "sensor",
                f"{sensor!r} may not report from outside ({why}); only sensors configured "
                f"with remote = true may (remote sensors: {known})",
                forbidden=True,
            )
        if via not in conf.report_via:
            raise self._refuse(
                "transport_not_allowed",
                "sensor",
                f"remote sensor {sensor!r} does not report over {via} "
                f"(sensors.{sensor}.report_via = {list(conf.report_via)})",
                forbidden=True,
            )
        return conf

    def check(
        self, event: ValidationEvent, *, via: Transport, max_future_skew: timedelta
    ) -> tuple[ValidationEvent, list[Capped]]:
        """The event as it may be stored (caps applied), and what was capped.

        Raises :class:`RefusalError` for a sensor that may not report this way or an
        ``observed_at`` too far ahead. The binding of a ``block_id`` is checked by
        :meth:`first_unbound` (it needs the store).
        """
        conf = self.sender(event.sensor, via)
        if via == "http" and (event.agent is not None or event.seq is not None):
            # Sequence numbers are an MQTT agent's, checked against its topic; over HTTP
            # they could only fake the high-water mark that gap detection starts from.
            raise self._refuse(
                "agent_over_http",
                "agent" if event.agent is not None else "seq",
                "agent and seq are set by a memwarden agent over MQTT, not over HTTP",
                forbidden=False,
            )
        now = self._clock.time()
        ahead = event.observed_at.timestamp() - now
        skew = max_future_skew.total_seconds()
        if ahead > skew:
            raise self._refuse(
                "future_timestamp",
                "observed_at",
                f"{event.observed_at.isoformat()} is {ahead:.1f}s ahead of the daemon's clock "
                f"(at most {skew:g}s allowed): an observation cannot come from the future",
                forbidden=False,
            )
        capped: list[Capped] = []
        update: dict[str, object] = {}
        if ahead > 0:  # within the skew: a clock slightly ahead, stored as observed now
            update["observed_at"] = from_ts(now)
        if event.reliability is not None and event.reliability > (
            max_rel := self.max_reliability(event.sensor, conf)
        ):
            capped.append(Capped("reliability", f"{event.reliability:g}", f"{max_rel:g}"))
            update["reliability"] = max_rel
        if event.validity_window is not None and event.validity_window > (
            max_window := self.max_validity_window(conf)
        ):
            capped.append(
                Capped(
                    "validity_window",
                    format_duration(event.validity_window),
                    format_duration(max_window),
                )
            )
            update["validity_window"] = max_window
        if capped:
            where = f"sensors.{event.sensor}"
            note = "; ".join(f"{c.field} {c.given} capped to {c.stored} by {where}" for c in capped)
            message = f"{event.message} [{note}]" if event.message else f"[{note}]"
            update["message"] = message[:4096]
            for c in capped:
                self.capped[(event.sensor, c.field)] += 1
        if update:
            event = event.model_copy(update=update)
        return event, capped

    async def first_unbound(
        self, store: Store, events: Sequence[ValidationEvent]
    ) -> tuple[int, RefusalError] | None:
        """The first event naming a block_id not bound to its sensor (position, refusal)."""
        direct = sorted({e.block_id for e in events if e.block_id is not None})
        if not direct:
            return None
        bound = await store.sensors_bound(direct)
        for i, event in enumerate(events):
            if event.block_id is not None and event.sensor not in bound.get(event.block_id, ()):
                return i, self._refuse(
                    "block_not_bound",
                    "block_id",
                    f"block {event.block_id!r} has no binding for sensor {event.sensor!r} "
                    "(or does not exist): a sensor reports only about blocks bound to it",
                    forbidden=True,
                )
        return None

    def max_reliability(self, sensor: str, conf: SensorSettings) -> float:
        if conf.max_reliability is not None:
            return conf.max_reliability
        policy = self._policy()
        table = policy.evidence.sensor_reliability
        if sensor in table:
            return table[sensor]
        return table.get(conf.kind or sensor, policy.sensor_reliability(sensor))

    def max_validity_window(self, conf: SensorSettings) -> timedelta:
        if conf.max_validity_window is not None:
            return conf.max_validity_window
        return max(self._policy().staleness.validity_window.values())

    def _refuse(self, kind: str, field: str, reason: str, *, forbidden: bool) -> RefusalError:
        self.refused[kind] += 1
        return RefusalError(kind, field, reason, forbidden=forbidden)
