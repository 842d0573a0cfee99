"""``/metrics`` in the Prometheus text format, collected from the daemon at scrape time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from prometheus_client.core import Metric

    from memwarden.daemon._app import Daemon
    from memwarden.memory.policy import CoverageDict

__all__ = ["DaemonMetrics", "render"]


class DaemonMetrics:
    """The metrics a daemon owns (one registry per daemon, so tests stay independent)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.revalidation_latency = Histogram(
            "memwarden_revalidation_latency_seconds",
            "From a revalidation request sent to its answer committed.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.served_age = Histogram(
            "memwarden_served_fact_age_seconds",
            "Age of the validation behind each fact served by a read, by its verdict.",
            labelnames=["verdict"],
            buckets=(1, 5, 15, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400),
            registry=self.registry,
        )
        self.invalidation_latency = Histogram(
            "memwarden_invalidation_latency_seconds",
            "From a change observed (observed_at) to the fact's fall (stale or refuted) "
            "committed, by the sensor that reported it.",
            labelnames=["sensor"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.check_duration = Histogram(
            "memwarden_sensor_check_duration_seconds",
            "How long a sensor's check (a revalidation) took, by sensor.",
            labelnames=["sensor"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self._snapshot: dict[str, object] = {}

    def observe_check(self, sensor: str, seconds: float) -> None:
        self.check_duration.labels(sensor).observe(seconds)

    def set_snapshot(self, counts: dict[str, object]) -> None:
        self._snapshot = counts


class _DaemonCollector(Collector):
    def __init__(self, daemon: Daemon, counts: dict[str, object], coverage: CoverageDict) -> None:
        self.daemon = daemon
        self.counts = counts
        self.coverage = coverage

    def _section(self, key: str) -> dict[str, Any]:
        """A nested part of the counts (absent: empty); another shape is a bug upstream."""
        value = self.counts.get(key, {})
        if not isinstance(value, dict):
            raise TypeError(f"counts[{key!r}] is a {type(value).__name__}, not a dict")
        return value

    def _number(self, key: str) -> float:
        """A count (absent: 0); another shape is a bug upstream."""
        value = self.counts.get(key, 0)
        if not isinstance(value, int | float):
            raise TypeError(f"counts[{key!r}] is a {type(value).__name__}, not a number")
        return float(value)

    def _cluster(self) -> Iterator[Metric]:
        """On PostgreSQL: whether this node leads, whether its database answers, and
        its local spool (docs/SCALE.md)."""
        cluster = self.counts.get("cluster")
        if not isinstance(cluster, dict):
            return
        yield GaugeMetricFamily(
            "memwarden_cluster_leader",
            "1 while this node holds the leader's lease (runs the singleton passes).",
            value=1.0 if cluster["leader"] else 0.0,
        )
        yield GaugeMetricFamily(
            "memwarden_storage_up",
            "1 when the PostgreSQL database answered this scrape, 0 while it cannot be reached.",
            value=0.0 if self.counts.get("storage_unavailable") else 1.0,
        )
        spool = cluster["spool"]
        yield GaugeMetricFamily(
            "memwarden_spool_unsent",
            "Events in this node's local spool, waiting for the database.",
            value=float(spool["unsent"]),
        )
        yield CounterMetricFamily(
            "memwarden_spool_dropped",
            "Spooled events dropped (oldest first) past [cluster] spool_max_unsent.",
            value=float(spool["dropped"]),
        )
        yield CounterMetricFamily(
            "memwarden_spool_delivered",
            "Spooled events delivered to the database.",
            value=float(spool["delivered"]),
        )

    def _coverage(self) -> Iterator[Metric]:
        """The share of live facts a running sensor can check (omitted while none live)."""
        cov = self.coverage
        yield GaugeMetricFamily(
            "memwarden_facts_live", "Facts not archived.", value=float(cov["live"])
        )
        yield GaugeMetricFamily(
            "memwarden_facts_checkable",
            "Live facts with a binding whose sensor is alive.",
            value=float(cov["checkable"]),
        )
        if cov["share"] is not None:
            yield GaugeMetricFamily(
                "memwarden_coverage_ratio",
                "Share of live facts with a binding whose sensor is alive.",
                value=cov["share"],
            )
        for label, key, parts in (
            ("source", "by_source", cov["by_source"]),
            ("tier", "by_tier", cov["by_tier"]),
        ):
            family = GaugeMetricFamily(
                f"memwarden_coverage_{key}_ratio",
                f"Share of live facts with a binding whose sensor is alive, by {label}.",
                labels=[label],
            )
            for name, part in parts.items():
                if part["share"] is not None:
                    family.add_metric([name], part["share"])
            yield family

    def collect(self) -> Iterator[Metric]:
        bus = self.daemon.bus
        yield _counters(
            "memwarden_events",
            "Validation events stored, by sensor and outcome.",
            bus.by_outcome,
            labels=["sensor", "outcome"],
        )
        yield _counters(
            "memwarden_events_rejected",
            "Inputs dead-lettered, by kind.",
            bus.rejected,
            labels=["kind"],
        )
        gate = self.daemon.gate
        yield _counters(
            "memwarden_events_refused",
            "Events from outside (HTTP, MQTT) refused for who sent them or what they claim.",
            gate.refused,
            labels=["kind"],
        )
        yield _counters(
            "memwarden_events_capped",
            "Remote events stored with reliability or validity_window clamped to the cap.",
            gate.capped,
            labels=["sensor", "field"],
        )
        stats = self.daemon.privacy.redactor.stats
        yield _counters(
            "memwarden_privacy_redacted",
            "Values replaced by a placeholder, by kind ([privacy]; docs/PRIVACY.md).",
            stats.redacted,
            labels=["kind"],
        )
        yield _counters(
            "memwarden_privacy_rejected",
            "Inputs refused by a privacy rule set to reject, by the kind that refused.",
            stats.rejected,
            labels=["kind"],
        )
        yield CounterMetricFamily(
            "memwarden_blocks_erased",
            "Blocks erased (memwarden forget) since the daemon started.",
            value=self.daemon.erased,
        )
        yield _counters(
            "memwarden_retention_removed",
            "What the retention pass removed since start, by kind.",
            self.daemon.scheduler.retention_removed,
            labels=["kind"],
        )
        yield CounterMetricFamily(
            "memwarden_events_duplicate",
            "Events received twice (stored once).",
            value=bus.duplicates,
        )
        by_state = GaugeMetricFamily("memwarden_blocks", "Blocks by state.", labels=["state"])
        states = self._section("by_state")  # built by Store.counts
        for state in ("unverified", "fresh", "stale", "refuted", "archived"):
            by_state.add_metric([state], float(states.get(state, 0)))
        yield by_state
        yield GaugeMetricFamily(
            "memwarden_revalidation_backlog",
            "Revalidation requests pending or sent.",
            value=self._number("revalidation_backlog"),
        )
        search = self._section("search")  # built by Daemon.search_health
        yield GaugeMetricFamily(
            "memwarden_vectors",
            "Block vectors held for search by meaning (0 without an embedder).",
            value=float(search.get("vectors", 0)),
        )
        yield GaugeMetricFamily(
            "memwarden_embedding_backlog",
            "Blocks waiting for a vector (found by their words alone meanwhile).",
            value=float(search.get("embedding_backlog", 0)),
        )
        yield GaugeMetricFamily(
            "memwarden_reviews_pending",
            "Blocks waiting for a human review.",
            value=self._number("pending_reviews"),
        )
        restarts = CounterMetricFamily(
            "memwarden_sensor_restarts", "Sensor restarts after a crash.", labels=["sensor"]
        )
        timeouts = CounterMetricFamily(
            "memwarden_sensor_timeouts", "Revalidations that ran out of time.", labels=["sensor"]
        )
        up = GaugeMetricFamily(
            "memwarden_sensor_up", "1 when the sensor is running.", labels=["sensor", "status"]
        )
        errors = CounterMetricFamily(
            "memwarden_sensor_errors",
            "Checks that could not run (source unreachable, timeout, crash).",
            labels=["sensor"],
        )
        success = GaugeMetricFamily(
            "memwarden_sensor_last_success_timestamp_seconds",
            "When the sensor last answered a check (not an error), POSIX seconds.",
            labels=["sensor"],
        )
        for name, runner in sorted(self.daemon.runners.items()):
            restarts.add_metric([name], runner.counters.restarts)
            timeouts.add_metric([name], runner.counters.timeouts)
            up.add_metric([name, runner.status], 1.0 if runner.available else 0.0)
            errors.add_metric([name], runner.counters.errors)
            if runner.counters.last_success is not None:
                success.add_metric([name], runner.counters.last_success)
        yield restarts
        yield timeouts
        yield up
        yield errors
        yield success
        yield from self._coverage()
        yield from self._cluster()
        if self.daemon.mqtt is not None:  # memwarden_mqtt_gaps_total{agent} and friends
            yield from self.daemon.mqtt.metrics()


async def render(daemon: Daemon) -> tuple[bytes, str]:
    """The exposition text and its content type."""
    try:
        counts: dict[str, Any] = dict(await daemon.store.counts())
        coverage = await daemon.coverage()
        counts["search"] = await daemon.search_health()
    except Exception as err:
        if not daemon.store_unavailable(err):
            raise
        # Cut off from the database: what the node itself knows (the bus, its sensors,
        # its spool), without the store's counts.
        counts = {"storage_unavailable": True}
        coverage = {"live": 0, "checkable": 0, "share": None, "by_source": {}, "by_tier": {}}
    if daemon.cluster is not None:
        counts["cluster"] = await daemon.cluster.health()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_DaemonCollector(daemon, counts, coverage))
    body = generate_latest(registry) + generate_latest(daemon.metrics.registry)
    return body, CONTENT_TYPE_LATEST


def _counters(
    name: str, doc: str, values: Mapping[Any, int], *, labels: list[str]
) -> CounterMetricFamily:
    """A counter family with one sample per key of ``values`` (a label value, or a tuple
    of them), in key order."""
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, n in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], n)
    return family
