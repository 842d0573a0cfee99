"""The review page's suggested bindings: a reviewer accepts one (the fact is bound) and
rejects another in a real headless Chromium; forms without the session's CSRF token, or
without a session, are refused and change nothing."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import httpx
from playwright.async_api import async_playwright

from tests.mcp.conftest import start_demo_daemon
from tests.web.test_review_page import ARGS, CHROMIUM

if TYPE_CHECKING:
    from pathlib import Path

    from memwarden.daemon import Daemon


def _api(d: Daemon) -> httpx.AsyncClient:
    token = (d.settings.home / "token").read_text().strip()
    url = json.loads((d.settings.home / "api.json").read_text())["url"]
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"})


async def _link(d: Daemon, reviewer: str) -> str:
    async with _api(d) as api:
        answer = await api.post("/v1/review-links", json={"reviewer": reviewer})
        return str(answer.json()["url"])


async def test_accept_binds_the_fact_and_reject_is_remembered(tmp_path: Path):
    async with start_demo_daemon(tmp_path) as d:
        host = await d.add_block(
            {"title": "db host", "content": "The database host is db.internal"}
        )
        version = await d.add_block({"title": "web version", "content": "Web is at version 2.4.1"})
        await d.propose_once()
        link = await _link(d, "carol")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = await browser.new_page()
            await page.goto(link)
            assert await page.get_by_text("Suggested bindings for unbound facts (2)").count() == 1
            first = page.locator("section.proposal", has_text="The database host is db.internal")
            offer = first.locator("li", has_text='"key": "/database/host"')
            assert await offer.get_by_text("Why:").count() == 1
            await offer.get_by_role("button", name="Accept").click()
            await page.wait_for_url("**/review?flash=*")
            assert await page.get_by_role("status").get_by_text("accepted").count() == 1

            second = page.locator("section.proposal", has_text="Web is at version 2.4.1")
            await second.locator("li").first.get_by_role("button", name="Reject").click()
            await page.wait_for_url("**/review?flash=*")
            assert await page.get_by_role("status").get_by_text("rejected").count() == 1
            await browser.close()
        [binding] = (await d.store.get(host.id)).bindings
        assert binding.selector["key"] == "/database/host"
        decided = await d.store.list_proposals(status="accepted")
        assert [(p.block_id, p.decided_by) for p in decided] == [(host.id, "carol")]
        rejected = await d.store.list_proposals(status="rejected")
        assert [p.block_id for p in rejected] == [version.id]
        assert (await d.store.get(version.id)).bindings == []


async def test_a_proposal_form_without_its_csrf_token_or_session_is_refused(tmp_path: Path):
    async with start_demo_daemon(tmp_path) as d:
        fact = await d.add_block({"content": "The database host is db.internal"})
        await d.propose_once()
        [proposal, *_] = await d.store.list_proposals(block_id=fact.id)
        base = d.api.bound_url() if d.api else ""
        url = f"{base}/review/proposals/{proposal.id}"
        async with httpx.AsyncClient(timeout=10) as anonymous:
            refused = await anonymous.post(url, data={"action": "accept", "csrf": "x"})
            assert refused.status_code == 401
        async with httpx.AsyncClient(timeout=10) as web:
            assert (await web.get(await _link(d, "mallory"))).status_code == 303
            page = await web.get(f"{base}/review")
            token = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert token is not None
            csrf = token.group(1)
            odd = await web.post(url, data={"action": "merge", "csrf": csrf})
            assert odd.status_code == 422
            assert "accept or reject" in odd.text
            gone = await web.post(
                f"{base}/review/proposals/nope", data={"action": "accept", "csrf": csrf}
            )
            assert gone.status_code == 422
            assert "Traceback" not in gone.text
            assert (await web.post(url, data={"action": "accept"})).status_code == 403
            forged = await web.post(url, data={"action": "accept", "csrf": "forged"})
            assert forged.status_code == 403
            assert "stale or forged" in forged.text
        assert (await d.store.get(fact.id)).bindings == []
        assert (await d.store.get_proposal(proposal.id)).status == "pending"
