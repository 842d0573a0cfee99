"""The memory console in a real headless Chromium: sign in by a one-time link, search,
open a block, read its evidence timeline, revalidate from the page, keyboard use,
CSRF refusal, and every page at phone width without horizontal scroll."""

from __future__ import annotations

from datetime import UTC, datetime

from playwright.async_api import async_playwright

from memwarden.memory import ValidationEvent
from tests.support import WorldSensor
from tests.web.console_support import block_with_history, link
from tests.web.test_review_page import ARGS, CHROMIUM

PAGES = ("/review/search", "/review/stale", "/review/sensors", "/review", "/review/health")


async def test_search_open_a_block_read_its_timeline_and_revalidate(shifted_daemon):
    """Search finds the fact; its page draws one mark per group of identical events
    (confirmed x5, refuted x2, confirmed x3) over shaded state bands, the reliability
    line and the retention line (from when the block was added, 20 minutes ago);
    revalidating from the page adds the sensor's new event to the timeline."""
    daemon = shifted_daemon
    block_id, _ = await block_with_history(daemon)
    await daemon.add_block({"title": "unrelated", "content": "The sky is blue"})
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        await page.goto(await link(daemon, "alice"))
        await page.get_by_role("link", name="Search").click()
        await page.get_by_label("Query").fill("cache TTL")
        await page.get_by_label("Query").press("Enter")
        await page.wait_for_url("**/review/search?q=cache+TTL*")
        results = page.locator("li.result")
        assert await results.count() == 1
        assert await results.locator(".factors").count() == 1
        await results.get_by_role("link", name="cache ttl").click()
        await page.wait_for_url(f"**/review/blocks/{block_id}")

        svg = page.locator("svg.timeline")
        assert await svg.locator("title").first.text_content() == "Evidence timeline: cache ttl"
        marks = svg.locator("g.mark")
        assert [await m.get_attribute("data-count") for m in await marks.all()] == ["5", "2", "3"]
        assert [await m.get_attribute("data-outcome") for m in await marks.all()] == [
            "confirmed",
            "refuted",
            "confirmed",
        ]
        bands = [await b.get_attribute("data-state") for b in await svg.locator("rect.band").all()]
        assert bands == ["fresh", "stale", "fresh"]
        retention = svg.locator("path.retention-line")  # level here: a 14-day half-life
        assert await retention.count() == 1
        box = await retention.bounding_box()
        plot = await svg.bounding_box()
        assert box is not None
        assert plot is not None
        assert box["width"] > plot["width"] / 2  # drawn across the 20 minutes, not a dot
        assert await svg.locator("text.no-history").count() == 0  # history from the start
        points = await daemon.store.retention_points(block_id)
        rows = page.locator("table.retention-values tbody tr")
        assert await rows.count() == len(points) > 1
        newest = points[-1].retention(points[-1].at, daemon.store.policy)
        assert await rows.first.locator("td").nth(1).text_content() == f"{newest:.3f}"
        table = page.locator("table.evidence tbody tr")
        assert await table.count() == await marks.count()  # the values behind the chart
        assert await page.get_by_text("(3 group(s) of 10 event(s))").count() == 1
        assert await page.locator("li.binding", has_text="last observation").count() == 1

        await page.get_by_role("button", name="Revalidate now").click()
        await page.wait_for_url(f"**/review/blocks/{block_id}?flash=*")
        assert await page.get_by_role("status").get_by_text("1 answered").count() == 1
        assert await page.get_by_text("(3 group(s) of 11 event(s))").count() == 1
        assert await svg.locator("g.mark").last.get_attribute("data-count") == "4"
        await browser.close()
    events = await daemon.store.events_for(block_id, limit=20)
    assert len(events) == 11


async def test_the_block_page_works_from_the_keyboard(daemon):
    """Tabbing from the top reaches the navigation and then the Revalidate button;
    Enter on it revalidates."""
    block_id, _ = await block_with_history(daemon)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        await page.goto(await link(daemon) + f"&next=/review/blocks/{block_id}")
        await page.wait_for_url(f"**/review/blocks/{block_id}")
        seen = []
        for _ in range(20):
            await page.keyboard.press("Tab")
            seen.append(await page.evaluate("document.activeElement.textContent.trim()"))
            if seen[-1] == "Revalidate now":
                break
        assert seen[:5] == ["Search", "Stale & failing", "Sensors", "Review", "Health"]
        assert seen[-1] == "Revalidate now"
        await page.keyboard.press("Enter")
        await page.wait_for_url(f"**/review/blocks/{block_id}?flash=*")
        await browser.close()
    assert len(await daemon.store.events_for(block_id, limit=20)) == 11


async def test_a_console_form_without_its_csrf_token_is_refused(daemon):
    """A signed-in browser POST to revalidate or archive without the token: 403, no change."""
    block_id, _ = await block_with_history(daemon)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        await page.goto(await link(daemon, "mallory"))
        base = daemon.api.bound_url()
        for action in ("revalidate", "archive"):
            answer = await page.request.post(
                f"{base}/review/blocks/{block_id}/{action}", form={"reason": "x"}
            )
            assert answer.status == 403
        await browser.close()
    assert len(await daemon.store.events_for(block_id, limit=20)) == 10
    assert (await daemon.store.get(block_id)).state == "fresh"


async def test_stale_and_failing_names_what_is_stale_with_why(daemon):
    """A block gone stale is named on the Stale & failing page with its reason."""
    block_id, _ = await block_with_history(daemon, title="feature flag")
    await daemon.store.apply_events(
        [
            ValidationEvent(
                event_id="late-refutation",
                sensor="world",
                subject="ttl",
                outcome="refuted",
                observed_at=datetime.now(UTC),
                block_id=block_id,
            )
        ]
    )
    block = await daemon.store.get(block_id)
    assert block.state == "stale"
    reasons = [r.value for r in block.stale_reasons]
    assert reasons
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        await page.goto(await link(daemon))
        await page.get_by_role("link", name="Stale & failing").click()
        stale = page.locator("section", has=page.get_by_role("heading", name="Stale (1)"))
        assert await stale.get_by_role("link", name="feature flag").count() == 1
        why = stale.locator(".reason")
        assert (await why.text_content() or "").startswith("why: ")
        for reason in reasons:  # each reason, in words and by name
            assert f"({reason})" in (await why.text_content() or "")
        await browser.close()


async def test_every_page_fits_a_phone_without_horizontal_scroll(daemon):
    """At 375 px wide, no console page scrolls sideways (long ids wrap, the timeline
    scrolls inside its own box, from the keyboard too)."""
    WorldSensor.world.clear()
    block_id, _ = await block_with_history(daemon, title="x" * 120)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page(viewport={"width": 375, "height": 800})
        await page.goto(await link(daemon))
        base = daemon.api.bound_url()
        for path in (*PAGES, f"/review/blocks/{block_id}", "/review/search?q=cache"):
            await page.goto(f"{base}{path}")
            widths = await page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert widths[0] <= widths[1], (path, widths)
        # The timeline keeps a readable size in its own box, which scrolls sideways
        # from the keyboard: focus it and press the right arrow.
        await page.goto(f"{base}/review/blocks/{block_id}")
        box = page.locator("div.chart-scroll")
        size = await page.locator("svg.timeline").bounding_box()
        assert size is not None
        assert size["width"] > 375  # not shrunk to unreadable text
        await box.focus()
        await page.keyboard.press("ArrowRight")
        handle = await box.element_handle()
        await page.wait_for_function("el => el.scrollLeft > 0", arg=handle, timeout=5000)
        await browser.close()


async def test_the_sensors_page_charts_each_sensors_recent_events(daemon):
    """The world sensor's card: running, its bound fact, and bars that add up to the
    events it reported (confirmed and refuted) in the last hours, values in a table."""
    await block_with_history(daemon)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        await page.goto(await link(daemon))
        await page.get_by_role("link", name="Sensors").click()
        card = page.locator("section.sensor", has=page.get_by_role("heading", name="world"))
        assert await card.get_by_text("running").count() == 1
        assert await card.get_by_role("link", name="1 bound fact(s)").count() == 1
        assert await card.get_by_text("Last 6 hours: 10 event(s), 0 error(s).").count() == 1
        bars = card.locator("svg.activity rect.bar")
        counts = {
            await b.get_attribute("data-outcome"): int(await b.get_attribute("data-count") or 0)
            for b in await bars.all()
        }
        assert counts == {"confirmed": 8, "refuted": 2}
        await browser.close()
