"""Review sign-in: malformed one-time tokens get a plain 400, never a 500 or a traceback."""

from __future__ import annotations

import httpx
import pytest

MALFORMED = [
    "",
    "é" * 32,
    "\u202etoken-with-bidi-override-0000000",
    "\x00" * 32,
    "short",
    "a" * 129,
    "../../../../etc/passwd-0000000000",
    "tok en with spaces and more chars",
    "\ud7ff" * 20,
]


@pytest.fixture
def link(live) -> str:
    """A real one-time sign-in link (its token must survive the hostile attempts)."""
    response = httpx.post(
        f"{live.url}/v1/review-links", json={"reviewer": "mallory-check"}, headers=live.auth
    )
    response.raise_for_status()
    return str(response.json()["url"])


@pytest.mark.parametrize("token", MALFORMED)
def test_a_malformed_login_token_is_a_400_with_a_plain_message(live, health_watch, link, token):
    """Non-ASCII, control, too short/long, path-like tokens: 400 naming the expectation;
    the real link still signs in afterwards (nothing consumed)."""
    with health_watch(live.url), httpx.Client(follow_redirects=False, timeout=5) as web:
        response = web.get(f"{live.url}/review/login", params={"token": token})
        assert response.status_code == 400, response.text
        assert "malformed" in response.text
        assert "Traceback" not in response.text
        assert "memwarden_review" not in response.headers.get("set-cookie", "")
        assert web.get(link).status_code == 303  # the genuine link was not used up


def test_raw_undecodable_query_bytes_are_a_400(live, health_watch):
    """Percent-encoded bytes that are not UTF-8 (%ff%fe) are refused like any malformed token."""
    with health_watch(live.url):
        response = httpx.get(f"{live.url}/review/login?token=%ff%fe%80" + "A" * 30, timeout=5)
    assert response.status_code == 400
    assert "Traceback" not in response.text


def test_a_well_formed_unknown_token_is_401_signed_out(live):
    """A token of the right shape that was never issued (or already used): 401, signed out."""
    response = httpx.get(f"{live.url}/review/login", params={"token": "A" * 32}, timeout=5)
    assert response.status_code == 401
    assert "memwarden review --open" in response.text


def test_a_non_ascii_csrf_value_is_403_not_500(live, health_watch, link):
    """A forged form with a non-ASCII CSRF value is refused 403 and decides nothing."""
    before = live.counts()
    with health_watch(live.url), httpx.Client(follow_redirects=False, timeout=5) as web:
        assert web.get(link).status_code == 303
        response = web.post(
            f"{live.url}/review/r-unknown", data={"action": "confirm", "csrf": "é" * 24}
        )
    assert response.status_code == 403
    assert "Traceback" not in response.text
    assert live.counts() == before
