"""The review page in a real headless Chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):  # noqa: PTH110 - a plain existence check
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but chromium is not installed (scripts/system-deps.sh installs it)")
    pytest.skip(
        "chromium is not installed (make test installs it with CI=true)", allow_module_level=True
    )

from playwright.async_api import async_playwright  # noqa: E402 - after the skip check

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _api(daemon) -> httpx.AsyncClient:
    token = (daemon.settings.home / "token").read_text().strip()
    return httpx.AsyncClient(
        base_url=daemon.api.bound_url(), headers={"Authorization": f"Bearer {token}"}
    )


async def _queue(daemon, text: str) -> tuple[str, str]:
    block = await daemon.add_block({"content": text, "title": text.split(maxsplit=1)[0]})
    review = await daemon.store.request_review(block.id, reason="no sensor can check this")
    return block.id, review["review_id"]


async def test_sign_in_confirm_one_and_reject_another(daemon):
    """A reviewer signs in by link, confirms one fact, rejects another; the API shows both."""
    kept, _ = await _queue(daemon, "Postgres is the primary store")
    dropped, _ = await _queue(daemon, "Redis is the primary store")
    async with _api(daemon) as api:
        link = (await api.post("/v1/review-links", json={"reviewer": "alice"})).json()["url"]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        await page.goto(link)
        assert page.url.endswith("/review")
        assert await page.get_by_text("signed in as alice").count() == 1
        cookie = next(c for c in await page.context.cookies() if c["name"] == "memwarden_review")
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict"

        first = page.locator("section.item", has_text="Postgres is the primary store")
        await first.locator("textarea[name=comment]").fill("checked the config")
        await first.get_by_role("button", name="Confirm").click()
        await page.wait_for_url("**/review?flash=*")
        assert await page.get_by_role("status").count() == 1

        second = page.locator("section.item", has_text="Redis is the primary store")
        await second.get_by_role("button", name="Reject").click()
        await page.wait_for_url("**/review?flash=*")
        assert await page.locator("section.item").count() == 0

        await page.goto(link)  # the link works once only
        assert await page.get_by_text("used or expired").count() == 1
        await browser.close()

    async with _api(daemon) as api:
        assert (await api.get(f"/v1/blocks/{kept}")).json()["state"] == "fresh"
        assert (await api.get(f"/v1/blocks/{dropped}")).json()["state"] == "refuted"
        decided = (await api.get("/v1/reviews", params={"status": "decided"})).json()
    assert {(d["block_id"], d["decision"], d["decided_by"]) for d in decided} == {
        (kept, "confirm", "alice"),
        (dropped, "reject", "alice"),
    }
    assert next(d for d in decided if d["block_id"] == kept)["comment"] == "checked the config"


async def test_a_form_without_its_csrf_token_is_refused(daemon):
    """A signed-in POST without the CSRF token is refused and decides nothing."""
    block_id, review_id = await _queue(daemon, "The cache TTL is 60 s")
    async with _api(daemon) as api:
        link = (await api.post("/v1/review-links", json={"reviewer": "mallory"})).json()["url"]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page()
        await page.goto(link)
        response = await page.request.post(
            f"{daemon.api.bound_url()}/review/{review_id}", form={"action": "confirm"}
        )
        assert response.status == 403
        response = await page.request.post(
            f"{daemon.api.bound_url()}/review/{review_id}",
            form={"action": "confirm", "csrf": "forged"},
        )
        assert response.status == 403
        await page.goto(f"{daemon.api.bound_url()}/review/health")
        assert await page.get_by_text("Health:").count() == 1
        # One unbound live fact: nothing can check it.
        assert await page.get_by_text("0% of live facts can be checked: 0 of 1").count() == 1
        await browser.close()
    assert (await daemon.store.get(block_id)).state == "unverified"
    pending = await daemon.store.list_reviews(status="pending")
    assert [p["id"] for p in pending] == [review_id]


async def test_the_page_needs_a_session(daemon):
    """Without signing in, the queue answers 401 with how to get a link."""
    async with httpx.AsyncClient(base_url=daemon.api.bound_url()) as client:
        response = await client.get("/review")
    assert response.status_code == 401
    assert "memwarden review --open" in response.text
