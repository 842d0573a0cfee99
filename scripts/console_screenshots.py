# A script, not a package module.
# ruff: noqa: INP001
"""Screenshots of the memory console's pages, for docs/CONSOLE.md.

``python scripts/console_screenshots.py [OUT_DIR]`` (default ``docs/images``) starts a
daemon in this process on a throwaway home, fills it with a few facts (one with a
history of checks and an edit, one stale, one bound to a sensor that keeps failing, one
waiting for review), signs in through a one-time link in headless Chromium and saves
one PNG per page, plus the block page at phone width. tests/web runs it.

The Health page's charts over time need a history the throwaway daemon has not lived:
after each step of the filling, the time series is sampled as the series pass would
have, every 5 minutes over an hour of the past (the first step five hours ago, the last
one this past hour), so the charts show the store growing step by step.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import httpx
from playwright.async_api import async_playwright

from memwarden.daemon import Daemon, load_settings
from memwarden.memory import SERIES_STEP_S, FakeClock, ValidationEvent
from memwarden.memory._series import record
from memwarden.plugins import BaseBinding, BaseSensorConfig, Outcome, Registry

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
PAGES = {
    "console-search": "/review/search?q=timeout",
    "console-block": "/review/blocks/{block}",
    "console-stale": "/review/stale",
    "console-sensors": "/review/sensors",
    "console-review": "/review",
    "console-health": "/review/health",
}


class _Config(BaseSensorConfig):
    pass


class _Binding(BaseBinding):
    path: str
    equals: Any = None


class ConfigSensor:
    """Answers from a dict: the config file the facts are about."""

    api_version = 2
    kind = "config"
    quick_check = True
    Config = _Config
    Binding = _Binding
    values: ClassVar[dict[str, Any]] = {"http.timeout": 30, "db.host": "db.internal"}

    def __init__(self, config: _Config) -> None:
        self.config = config
        self.ctx: Any = None

    async def setup(self, ctx: Any) -> None:
        self.ctx = ctx

    async def run(self, ctx: Any) -> None:
        ctx.ready()
        await asyncio.Event().wait()

    async def revalidate(self, request: Any, ctx: Any) -> Any:
        value = self.values.get(request.subject)
        ok = value == request.binding.selector.get("equals")
        return ctx.event(request.subject, Outcome.CONFIRMED if ok else Outcome.REFUTED)

    async def teardown(self) -> None:
        self.ctx = None


class CiSensor(ConfigSensor):
    """A sensor whose service is down: its run fails, so it backs off."""

    kind = "ci"

    async def run(self, ctx: Any) -> None:
        ctx.ready()
        message = "ci.example answered 503 Service Unavailable"
        raise RuntimeError(message)


class ShiftedClock:
    """The real clock moved by ``offset_s``: the daemon lives through the past hours
    of the history block (added then, each event applied when it was observed), so
    its retention has a history to draw."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def time(self) -> float:
        return time.time() + self.offset_s


HISTORY_START = timedelta(hours=3)  # the history block's events: from 3 hours ago


def _events(block_id: str, sensor: str, subject: str, outcomes: list[str]) -> list[Any]:
    start = datetime.now(UTC) - HISTORY_START
    return [
        ValidationEvent(
            event_id=f"{block_id[-8:]}-{i}",
            sensor=sensor,
            subject=subject,
            outcome=outcome,
            observed_at=start + timedelta(minutes=7 * i),
            block_id=block_id,
            message="value changed to 45" if outcome == "refuted" else "",
        )
        for i, outcome in enumerate(outcomes)
    ]


async def _sampled(d: Daemon, hours_ago: int) -> None:
    """Sample the time series every 5 minutes over the hour that ended ``hours_ago - 1``
    hours ago, as the series pass would have (the store as it is now)."""
    clock = FakeClock(d.clock.time() - hours_ago * 3600.0)
    for _ in range(int(3600 / SERIES_STEP_S)):
        await record(d.store.db, clock)
        clock.advance(SERIES_STEP_S)


async def _seed(d: Daemon) -> str:
    """Facts worth looking at; returns the id of the one with a history."""
    clock = d.clock
    assert isinstance(clock, ShiftedClock)  # noqa: S101 - take() made it so
    clock.offset_s = -HISTORY_START.total_seconds() - 60
    timeout = await d.add_block(
        {
            "title": "HTTP timeout",
            "content": "The HTTP client timeout is 45 seconds",
            "tags": ["http", "config"],
            "volatility": "high",  # a 12-hour half-life: its retention visibly decays
            "importance": 0.8,
            "bindings": [{"sensor": "config", "path": "http.timeout", "equals": 30}],
        }
    )
    history = ["confirmed"] * 8 + ["refuted"] * 2 + ["error"] + ["confirmed"] * 6
    for event in _events(timeout.id, "config", "http.timeout", history):
        clock.offset_s = event.observed_at.timestamp() - time.time()
        await d.store.apply_events([event])
    clock.offset_s = 0.0
    await d.edit_block(
        timeout.id, {"content": "The HTTP client timeout is 30 seconds"}, actor="alice"
    )
    await d.revalidate(timeout.id, wait_s=2.0)
    await _sampled(d, 5)
    await d.add_block(
        {
            "title": "retry policy",
            "content": "Requests are retried 3 times before the timeout applies",
            "tags": ["http"],
            "depends_on": [timeout.id],
        }
    )
    await _sampled(d, 4)
    db = await d.add_block(
        {
            "title": "database host",
            "content": "The database host is db.internal",
            "bindings": [{"sensor": "config", "path": "db.host", "equals": "db.internal"}],
        }
    )
    await d.store.apply_events(_events(db.id, "config", "db.host", ["confirmed", "refuted"])[1:])
    await d.store.request_review(db.id, reason="a sensor refuted it: is it still true?")
    await _sampled(d, 3)
    await d.add_block(
        {
            "title": "CI is green on main",
            "content": "The main branch builds and its tests pass",
            "bindings": [{"sensor": "ci", "path": "main"}],
        }
    )
    await _sampled(d, 2)
    review = await d.add_block(
        {"title": "deploy window", "content": "Deploys happen at 02:00 UTC on weekdays"}
    )
    await d.store.request_review(review.id, reason="no sensor can check this")
    await _sampled(d, 1)
    await d.store.record_series()  # this slot, as the series pass would sample it now
    return timeout.id


async def take(out_dir: Path) -> list[Path]:
    """Start a daemon, fill it, and save one screenshot per page into ``out_dir``
    (which must exist)."""
    with tempfile.TemporaryDirectory(prefix="memwarden-shots-") as tmp:
        settings = load_settings(
            None,
            env={},
            home=Path(tmp) / "home",
            api={"port": 0},
            sensors={"config": {}, "ci": {}},
        )
        registry = Registry.from_classes({"config": ConfigSensor, "ci": CiSensor})
        d = Daemon(settings, registry=registry, clock=ShiftedClock())
        task = asyncio.create_task(d.run(), name="screenshots.daemon")
        try:
            await asyncio.wait_for(d.ready(), timeout=30)
            return await _shoot(d, out_dir, await _seed(d))
        finally:
            d.request_stop()
            await asyncio.wait_for(task, timeout=30)


async def _shoot(d: Daemon, out_dir: Path, block_id: str) -> list[Path]:
    token = (d.settings.home / "token").read_text().strip()
    base = d.api.bound_url()
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {token}"}
    ) as api:
        link = (await api.post("/v1/review-links", json={"reviewer": "alice"})).json()["url"]
    saved: list[Path] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = await browser.new_context(viewport={"width": 1000, "height": 700})
        page = await context.new_page()
        await page.goto(link)
        for name, path in PAGES.items():
            await page.goto(base + path.format(block=block_id))
            if name == "console-block":
                await page.locator("details", has_text="The values (").evaluate(
                    "el => el.open = true"
                )
            target = out_dir / f"{name}.png"
            await page.screenshot(path=str(target), full_page=True)
            saved.append(target)
        await page.set_viewport_size({"width": 375, "height": 800})
        await page.goto(f"{base}/review/blocks/{block_id}")
        target = out_dir / "console-block-phone.png"
        await page.screenshot(path=str(target), full_page=False)
        saved.append(target)
        await browser.close()
    return saved


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/images")
    out.mkdir(parents=True, exist_ok=True)
    for shot in asyncio.run(take(out)):
        print(shot)  # noqa: T201 - the script says what it wrote
