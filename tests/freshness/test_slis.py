"""The freshness promise in /metrics: served-fact age by verdict, invalidation latency,
check durations, sensor errors and last success."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from memwarden.daemon._metrics import render
from tests.freshness.conftest import Probe, bound


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_slis_are_exported(make_daemon, clock):
    d = await make_daemon()
    ok = await bound(d, "gateway port 443", "gw/port", 443, info_type="semi_static")
    await bound(d, "gateway name edge", "gw/name", "edge", info_type="semi_static")
    clock.advance(30)
    await d.search("gateway", limit=10)  # served: two verified facts, 30 s old
    Probe.down.add("gw/name")
    Probe.world["gw/port"] = 8443
    await d.search("gateway", limit=10, fresh=True)  # one refuted (soft), one error
    body, _ = await render(d)
    got = _samples(body.decode())
    verified = (("verdict", "verified"),)
    assert got[("memwarden_served_fact_age_seconds_count", verified)] >= 2
    assert got[("memwarden_served_fact_age_seconds_bucket", (("le", "60.0"), *verified))] >= 2
    assert got[("memwarden_invalidation_latency_seconds_count", (("sensor", "probe"),))] == 1
    assert got[("memwarden_sensor_check_duration_seconds_count", (("sensor", "probe"),))] >= 4
    assert got[("memwarden_sensor_errors_total", (("sensor", "probe"),))] == 1
    last = got[("memwarden_sensor_last_success_timestamp_seconds", (("sensor", "probe"),))]
    assert last == clock.time()
    assert (await d.store.get(ok)).state == "stale"
