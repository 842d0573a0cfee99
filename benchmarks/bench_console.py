"""``console_block_page``: the console's block page of a fact with 1 000 events; and
``console_health_page``: the Health page with the time series full (below).

A daemon runs in this process on a throwaway home with one sensor. One block gets 1 000
validation events, five minutes apart (about 3.5 days): mostly confirmations in runs,
an error pair every 40 events and a refutation pair every 150 (so its timeline has state
changes and about 70 groups of identical events). A second block gets the worst case for
the timeline: 1 000 events alternating confirmed and error (1 000 groups, one mark each).
The daemon's clock is shifted so each event is applied when it was observed: each block
has the retention history it would have (a point per confirmation, the newest 500
kept), and its page draws the retention line from them.

Measured over loopback HTTP with a signed-in session, interleaved, per request:

- **memwarden**: ``GET /review/blocks/{id}`` (the whole page: block, receipt, versions,
  bindings, dependencies, the timeline SVG drawn from the 1 000 events, the values table);
- **baseline**: ``GET /v1/blocks/{id}/events?limit=1000`` (the API's JSON of the same
  events, with no page around them: what reading the evidence costs by itself).

Figures: p95 of the page (target 50 ms) and its weight in bytes (target 100 KB); also
the worst case's p95 and weight, and the CPU time of the loop's thread per page request
(server and client share it: this process runs both), which a busy machine inflates far
less than the wall-clock p95.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import httpx

from benchmarks._harness import Context, Result, benchmark, percentiles_ms
from memwarden.daemon import Daemon, load_settings
from memwarden.memory import SERIES_KEEP_S, SERIES_STEP_S, BlockState, Tier, ValidationEvent
from memwarden.plugins import BaseBinding, BaseSensorConfig, Outcome, Registry

TARGET_P95_MS = 50.0
TARGET_BYTES = 100_000
STATES = [s.value for s in BlockState]
TIERS = [t.value for t in Tier]
EVENTS = 1000


class _Config(BaseSensorConfig):
    pass


class _Binding(BaseBinding):
    path: str
    equals: Any = None


class _Sensor:
    api_version = 2
    kind = "bench"
    quick_check = True
    Config = _Config
    Binding = _Binding
    values: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: _Config) -> None:
        self.config = config

    async def setup(self, ctx: Any) -> None:
        pass

    async def run(self, ctx: Any) -> None:
        ctx.ready()
        await asyncio.Event().wait()

    async def revalidate(self, request: Any, ctx: Any) -> Any:
        return ctx.event(request.subject, Outcome.CONFIRMED)

    async def teardown(self) -> None:
        pass


def realistic(i: int) -> str:
    if i % 150 in (100, 101):
        return "refuted"
    if i % 40 in (20, 21):
        return "error"
    return "confirmed"


def alternating(i: int) -> str:
    return "confirmed" if i % 2 == 0 else "error"


class _ShiftedClock:
    """The real clock moved by ``offset_s``: the daemon lives through each block's
    past (each event applied when it was observed), so the block's retention history
    is as long as it would be (one point per confirmation, 500 kept)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def time(self) -> float:
        return time.time() + self.offset_s


async def _fill(d: Daemon, title: str, outcome_of: Any) -> str:
    clock = d.clock
    assert isinstance(clock, _ShiftedClock)
    clock.offset_s = -(5 * EVENTS + 6) * 60.0
    block = await d.add_block(
        {
            "title": title,
            "content": f"{title}: the value the sensor checks is 30",
            "bindings": [{"sensor": "bench", "path": title, "equals": 30}],
        }
    )
    start = datetime.now(UTC) - timedelta(minutes=5 * EVENTS + 5)
    batch = [
        ValidationEvent(
            event_id=f"{title}-{i}",
            sensor="bench",
            subject=title,
            outcome=outcome_of(i),
            observed_at=start + timedelta(minutes=5 * i),
            block_id=block.id,
            message="" if outcome_of(i) == "confirmed" else f"check {i}: {outcome_of(i)}",
        )
        for i in range(EVENTS)
    ]
    for event in batch:  # one effect each, as they would arrive, when they would
        clock.offset_s = event.observed_at.timestamp() - time.time()
        await d.store.apply_events([event])
    clock.offset_s = 0.0
    return block.id


async def _measure(
    client: httpx.AsyncClient, api: httpx.AsyncClient, block_id: str, rounds: int
) -> tuple[list[int], list[int], int, list[int]]:
    page_ns: list[int] = []
    base_ns: list[int] = []
    cpu_ns: list[int] = []
    size = 0
    for _ in range(rounds):
        t, cpu = time.perf_counter_ns(), time.thread_time_ns()
        page = await client.get(f"/review/blocks/{block_id}")
        page_ns.append(time.perf_counter_ns() - t)
        cpu_ns.append(time.thread_time_ns() - cpu)
        assert page.status_code == 200, page.status_code
        size = len(page.content)
        t = time.perf_counter_ns()
        answer = await api.get(f"/v1/blocks/{block_id}/events", params={"limit": EVENTS})
        base_ns.append(time.perf_counter_ns() - t)
        assert answer.status_code == 200, answer.status_code
    return page_ns, base_ns, size, cpu_ns


@benchmark("console_block_page", position=32)
async def console_block_page(ctx: Context) -> list[Result]:
    settings = load_settings(
        None, env={}, home=ctx.workdir / "home", api={"port": 0}, sensors={"bench": {}}
    )
    d = Daemon(settings, registry=Registry.from_classes({"bench": _Sensor}), clock=_ShiftedClock())
    task = asyncio.create_task(d.run(), name="bench.console.daemon")
    try:
        await asyncio.wait_for(d.ready(), timeout=60)
        typical = await _fill(d, "typical", realistic)
        worst = await _fill(d, "worst", alternating)
        ctx.progress(f"2 blocks x {EVENTS} events")
        token = (d.settings.home / "token").read_text().strip()
        base = d.api.bound_url()
        async with (
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as api,
            httpx.AsyncClient(base_url=base) as client,
        ):
            link = (await api.post("/v1/review-links", json={"reviewer": "bench"})).json()["url"]
            assert (await client.get(link)).status_code == 303
            rounds = ctx.n(200, 20)
            await _measure(client, api, typical, 5)  # warm up
            page_ns, base_ns, size, cpu_ns = await _measure(client, api, typical, rounds)
            worst_ns, _, worst_size, _ = await _measure(client, api, worst, ctx.n(50, 10))
    finally:
        d.request_stop()
        await asyncio.wait_for(task, timeout=60)
    ours, raw, bad = percentiles_ms(page_ns), percentiles_ms(base_ns), percentiles_ms(worst_ns)
    cpu = percentiles_ms(cpu_ns)
    return [
        Result(
            name="console_block_page",
            value=round(ours["p95"], 2),
            unit=f"ms p95 per block page, {EVENTS} events",
            baseline=round(raw["p95"], 2),
            ratio=round(ours["p95"] / raw["p95"], 2) if raw["p95"] else 0.0,
            target=f"p95 < {TARGET_P95_MS:g} ms, < {TARGET_BYTES // 1000} KB",
            ok=ours["p95"] < TARGET_P95_MS and size < TARGET_BYTES,
            extra={
                "p50_ms": round(ours["p50"], 2),
                "cpu_p50_ms": round(cpu["p50"], 2),
                "cpu_p95_ms": round(cpu["p95"], 2),
                "page_bytes": size,
                "worst_case_p95_ms": round(bad["p95"], 2),
                "worst_case_page_bytes": worst_size,
                "rounds": rounds,
            },
        )
    ]


HEALTH_TARGET_P95_MS = 50.0
SERIES_SENSORS = ("fs", "git", "http", "tests")


async def _fill_series(d: Daemon) -> int:
    """14 days of the time series at steady state (its whole retention): every 5-minute
    slot with 5 states, 3 tiers, the backlog and 4 sensors' events and errors."""
    step, slots = SERIES_STEP_S, int(SERIES_KEEP_S / SERIES_STEP_S)
    now = d.clock.time() // step * step
    rows: list[tuple[str, str, float, int]] = []
    for i in range(slots):
        at = now - i * step
        rows += [("state", s, at, 1000 + (i * 7 + n) % 50) for n, s in enumerate(STATES)]
        rows += [("tier", t, at, 500 + (i * 3 + n) % 30) for n, t in enumerate(TIERS)]
        rows.append(("backlog", "", at, i % 40))
        for sensor in SERIES_SENSORS:
            rows += [("events", sensor, at, i % 9), ("errors", sensor, at, i % 2)]

    async def insert(conn: Any) -> None:
        await conn.executemany(
            "INSERT OR REPLACE INTO metric_series (metric, key, at, value) VALUES (?, ?, ?, ?)",
            rows,
        )

    await d.store.db.write(insert, weight=len(rows))
    return len(rows)


@benchmark("console_health_page", position=33)
async def console_health_page(ctx: Context) -> list[Result]:
    """``GET /review/health`` with the time series full (14 days: its whole retention),
    against ``GET /v1/health`` (the same report as JSON, no charts), interleaved."""
    settings = load_settings(
        None, env={}, home=ctx.workdir / "home-health", api={"port": 0}, sensors={"bench": {}}
    )
    d = Daemon(settings, registry=Registry.from_classes({"bench": _Sensor}))
    task = asyncio.create_task(d.run(), name="bench.console.health")
    page_ns: list[int] = []
    base_ns: list[int] = []
    size = 0
    try:
        await asyncio.wait_for(d.ready(), timeout=60)
        rows = await _fill_series(d)
        ctx.progress(f"{rows} series rows")
        token = (d.settings.home / "token").read_text().strip()
        base = d.api.bound_url()
        async with (
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as api,
            httpx.AsyncClient(base_url=base) as client,
        ):
            link = (await api.post("/v1/review-links", json={"reviewer": "bench"})).json()["url"]
            assert (await client.get(link)).status_code == 303
            rounds = ctx.n(200, 20)
            for i in range(rounds + 5):  # the first 5: warm-up
                t = time.perf_counter_ns()
                page = await client.get("/review/health")
                took = time.perf_counter_ns() - t
                assert page.status_code == 200, page.status_code
                t = time.perf_counter_ns()
                answer = await api.get("/v1/health")
                base_took = time.perf_counter_ns() - t
                assert answer.status_code == 200, answer.status_code
                if i >= 5:
                    page_ns.append(took)
                    base_ns.append(base_took)
                    size = len(page.content)
            t = time.perf_counter_ns()
            await d.store.record_series()
            pass_ms = (time.perf_counter_ns() - t) / 1e6
    finally:
        d.request_stop()
        await asyncio.wait_for(task, timeout=60)
    ours, raw = percentiles_ms(page_ns), percentiles_ms(base_ns)
    return [
        Result(
            name="console_health_page",
            value=round(ours["p95"], 2),
            unit="ms p95 per health page, 14 days of series",
            baseline=round(raw["p95"], 2),
            ratio=round(ours["p95"] / raw["p95"], 2) if raw["p95"] else 0.0,
            target=f"p95 < {HEALTH_TARGET_P95_MS:g} ms, < {TARGET_BYTES // 1000} KB",
            ok=ours["p95"] < HEALTH_TARGET_P95_MS and size < TARGET_BYTES,
            extra={
                "p50_ms": round(ours["p50"], 2),
                "page_bytes": size,
                "series_rows": rows,
                "series_pass_ms": round(pass_ms, 2),
                "rounds": rounds,
            },
        )
    ]
