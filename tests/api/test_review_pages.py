"""The review pages over plain HTTP (the browser test in tests/web needs Chromium)."""

from __future__ import annotations

import re

import httpx

from memwarden.client import Client


def test_sign_in_see_the_queue_decide_and_see_health_without_a_browser(live_daemon):
    """A one-time link opens a session; the queue lists the item; the form (with its CSRF
    token) records the decision as the signed-in reviewer; the health page renders; a
    request without the cookie is signed out."""
    with Client(live_daemon.url, live_daemon.token) as client:
        block = client.add({"content": "The review pages render without JavaScript"})
        review = client.request_review(block.id, "is this so, dora?")
        link = client.review_link("dora")
        with httpx.Client(timeout=10) as web:
            assert web.get(link).status_code == 303  # the link, exchanged for a cookie
            page = web.get(f"{live_daemon.url}/review")
            assert page.status_code == 200
            assert "is this so, dora?" in page.text
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            decided = web.post(
                f"{live_daemon.url}/review/{review['review_id']}",
                data={"action": "confirm", "csrf": csrf.group(1)},
            )
            assert decided.status_code == 303
            health = web.get(f"{live_daemon.url}/review/health")
            assert health.status_code == 200
            assert re.search(r"Health: \d+/100 \((green|amber|red)\)", health.text)
        assert client.review(review["review_id"])["review"]["decided_by"] == "dora"
    assert httpx.get(f"{live_daemon.url}/review", timeout=10).status_code == 401
