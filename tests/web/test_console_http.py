"""The console pages over plain HTTP: hostile input is escaped or refused, an unknown
id is a 404 page, no traceback ever reaches the browser, and nothing changes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import httpx

from memwarden.memory import SERIES_STEP_S, ValidationEvent, from_ts
from memwarden.memory._series import slot_of
from tests.web.console_support import CSRF, block_with_history, link, signed_in

SCRIPT = '<script>alert("x")</script>'


async def test_pages_need_a_session(daemon):
    """Without a session every console page answers 401 with how to sign in."""
    async with httpx.AsyncClient(base_url=daemon.api.bound_url()) as client:
        for path in ("/review/search", "/review/stale", "/review/blocks/abc"):
            answer = await client.get(path)
            assert answer.status_code == 401, path
            assert "memwarden review --open" in answer.text


async def test_a_query_with_markup_is_escaped(daemon):
    """A query and filters carrying HTML come back as text, never as markup."""
    await block_with_history(daemon)
    async with signed_in(daemon) as client:
        answer = await client.get("/review/search", params={"q": SCRIPT, "tag": SCRIPT})
    assert answer.status_code == 200
    assert SCRIPT not in answer.text
    assert "&lt;script&gt;alert(" in answer.text


async def test_bad_filters_are_refused_naming_the_field(daemon):
    """A state that is not a state, or a query too long, is a 422 page naming the field."""
    async with signed_in(daemon) as client:
        bad_state = await client.get("/review/search", params={"state": SCRIPT})
        too_long = await client.get("/review/search", params={"q": "x" * 1001})
    assert bad_state.status_code == 422
    assert "state: " in bad_state.text
    assert SCRIPT not in bad_state.text
    assert too_long.status_code == 422
    assert "q: 1001 characters" in too_long.text
    for answer in (bad_state, too_long):
        assert "Traceback" not in answer.text


async def test_unknown_or_hostile_ids_are_a_404_page(daemon):
    """An unknown id, an id with markup, and an absurdly long id: a 404 page, escaped."""
    async with signed_in(daemon) as client:
        for ref in ("0123456789abcdef", SCRIPT, "f" * 5000, "..%2F..%2Fetc"):
            answer = await client.get(f"/review/blocks/{ref}")
            assert answer.status_code in (404, 422), (ref[:20], answer.status_code)
            assert "Traceback" not in answer.text
            assert SCRIPT not in answer.text
    assert await daemon.store.list_blocks() == []


async def test_empty_query_lists_the_newest_blocks_with_filters(daemon):
    """No query: the newest facts first; a tag filter keeps only those with the tag."""
    await daemon.add_block({"title": "older", "content": "first fact"})
    await daemon.add_block({"title": "newer", "content": "second fact", "tags": ["t1"]})
    async with signed_in(daemon) as client:
        everything = await client.get("/review/search")
        tagged = await client.get("/review/search", params={"tag": "t1"})
    assert everything.text.index(">newer<") < everything.text.index(">older<")
    assert ">newer<" in tagged.text
    assert ">older<" not in tagged.text


async def test_actions_refuse_a_form_without_csrf_and_change_nothing(daemon):
    """Archive and ask-review without the session's CSRF token: 403, nothing changes."""
    block_id, _ = await block_with_history(daemon)
    async with signed_in(daemon) as client:
        page = await client.get(f"/review/blocks/{block_id}")
        assert CSRF.search(page.text)
        for action in ("archive", "ask-review", "revalidate"):
            answer = await client.post(
                f"/review/blocks/{block_id}/{action}", data={"reason": "x", "csrf": "forged"}
            )
            assert answer.status_code == 403, action
    assert (await daemon.store.get(block_id)).state != "archived"
    assert await daemon.store.list_reviews(status="pending") == []


async def test_archive_and_ask_review_from_the_page(daemon):
    """With the token, ask-review queues the block (who asked is recorded) and archive
    archives it with the reason and the reviewer as actor."""
    block_id, _ = await block_with_history(daemon)
    async with signed_in(daemon) as client:
        token = CSRF.search((await client.get(f"/review/blocks/{block_id}")).text)
        assert token is not None
        form = {"csrf": token.group(1)}
        empty = await client.post(f"/review/blocks/{block_id}/ask-review", data=form)
        assert empty.status_code == 422
        asked = await client.post(
            f"/review/blocks/{block_id}/ask-review", data={**form, "reason": "looks odd"}
        )
        assert asked.status_code == 303
        archived = await client.post(
            f"/review/blocks/{block_id}/archive", data={**form, "reason": "moved"}
        )
        assert archived.status_code == 303
    [pending] = await daemon.store.list_reviews(status="pending")
    assert pending["reason"] == "looks odd (asked by alice)"
    block = await daemon.store.get(block_id)
    assert block.state == "archived"
    assert block.archive_reason == "moved"


async def test_the_sign_in_link_goes_only_to_a_console_page(daemon):
    """``next`` sends the browser to a /review page; anything else falls back to /review."""
    async with httpx.AsyncClient(base_url=daemon.api.bound_url()) as client:
        good = await client.get(await link(daemon) + "&next=/review/blocks/abc")
        evil = await client.get(await link(daemon) + "&next=//evil.example/review")
        other = await client.get(await link(daemon) + "&next=https://evil.example/")
    assert good.headers["location"] == "/review/blocks/abc"
    assert evil.headers["location"] == "/review"
    assert other.headers["location"] == "/review"


async def test_edit_from_the_page_makes_a_version_with_a_diff(daemon):
    """An edit saves a new version by the reviewer; the page diffs it against the old
    text; a form made from an older version is refused (409) and changes nothing."""
    block_id, _ = await block_with_history(daemon)
    async with signed_in(daemon) as client:
        token = CSRF.search((await client.get(f"/review/blocks/{block_id}")).text)
        assert token is not None
        form = {"csrf": token.group(1), "title": "cache ttl", "version": "1"}
        saved = await client.post(
            f"/review/blocks/{block_id}/edit", data={**form, "content": "The cache TTL is 90 s"}
        )
        assert saved.status_code == 303
        stale_form = await client.post(
            f"/review/blocks/{block_id}/edit", data={**form, "content": "The cache TTL is 1 s"}
        )
        assert stale_form.status_code == 409
        page = await client.get(f"/review/blocks/{block_id}")
    assert "<del>60</del>" in page.text
    assert "<ins>90</ins>" in page.text
    block = await daemon.store.get(block_id)
    assert (block.version, block.content) == (2, "The cache TTL is 90 s")
    [old] = await daemon.store.versions(block_id)
    assert (old["version"], old["content"], old["replaced_by"]) == (
        1,
        "The cache TTL is 60 s",
        "alice",
    )


async def test_a_change_of_bindings_is_a_version_the_page_names(daemon):
    """Unbinding a block is a new version with the same text: the page says so, and a
    form made from the version before is refused (409) instead of undoing it."""
    block_id, _ = await block_with_history(daemon)
    await daemon.edit_block(block_id, {"bindings": []}, actor="bob")
    async with signed_in(daemon) as client:
        page = await client.get(f"/review/blocks/{block_id}")
        token = CSRF.search(page.text)
        assert token is not None
        form = {"csrf": token.group(1), "title": "cache ttl", "version": "1"}
        stale_form = await client.post(
            f"/review/blocks/{block_id}/edit", data={**form, "content": "The cache TTL is 1 s"}
        )
    assert stale_form.status_code == 409
    assert "(the same text: its bindings changed)" in page.text
    block = await daemon.store.get(block_id)
    assert (block.version, block.content, block.bindings) == (2, "The cache TTL is 60 s", [])


async def test_hostile_edits_are_refused_or_escaped(daemon):
    """Content with markup is stored and shown as text; empty or oversized content and a
    bad version are refused naming the field, and change nothing."""
    block_id, _ = await block_with_history(daemon)
    async with signed_in(daemon) as client:
        token = CSRF.search((await client.get(f"/review/blocks/{block_id}")).text)
        assert token is not None
        form = {"csrf": token.group(1), "title": "t"}
        for content, version in (
            ("", "1"),
            ("x" * (256 * 1024 + 1), "1"),
            ("ok", "1; DROP"),
            ("ok", ""),
        ):
            answer = await client.post(
                f"/review/blocks/{block_id}/edit",
                data={**form, "content": content, "version": version},
            )
            assert answer.status_code in (413, 422), (content[:5], version, answer.status_code)
            assert "Traceback" not in answer.text
        assert (await daemon.store.get(block_id)).version == 1
        marked = await client.post(
            f"/review/blocks/{block_id}/edit", data={**form, "content": SCRIPT, "version": "1"}
        )
        assert marked.status_code == 303
        page = await client.get(f"/review/blocks/{block_id}")
    assert SCRIPT not in page.text
    assert "&lt;script&gt;" in page.text


async def test_the_health_page_charts_blocks_by_state_and_retention(daemon):
    """Bars for each state (the counts the API reports) and ten retention bins adding up
    to the live blocks."""
    await block_with_history(daemon)
    await daemon.add_block({"title": "second", "content": "another fact"})
    async with signed_in(daemon) as client:
        page = await client.get("/review/health")
    assert page.status_code == 200
    states = dict(re.findall(r'data-label="(\w+)" data-value="(\d+)"', page.text)[:5])
    assert states == {
        "fresh": "1",
        "unverified": "1",
        "stale": "0",
        "refuted": "0",
        "archived": "0",
    }
    bins = re.findall(r'data-label="(\d\.\d-\d\.\d)" data-value="(\d+)"', page.text)
    assert len(bins) == 10
    assert sum(int(n) for _, n in bins) == 2


async def test_the_review_queue_groups_evidence_and_names_the_bound_sensor(daemon):
    """A queued fact's evidence: repeated identical events as one row (x5, x2, x3), and
    the sensor that checks it."""
    block_id, _ = await block_with_history(daemon)
    await daemon.store.request_review(block_id, reason="odd history")
    async with signed_in(daemon) as client:
        page = await client.get("/review")
    rows = re.findall(r"<td>world</td><td>([^<]*)</td>", page.text)
    times = "\u00d7"  # the page writes counts with the multiplication sign
    assert rows == [
        f"confirmed {times}3 (stale → fresh)",
        f"refuted {times}2 (fresh → stale)",
        f"confirmed {times}5 (unverified → fresh)",
    ]
    assert "checked by: world (<code>ttl</code>)" in page.text


async def test_the_health_page_charts_the_series_over_time(daemon):
    """Blocks by state and tier and the backlog over the last 24 hours, from the time
    series: one line per key, broken where a slot has no sample, titled and described,
    with the values (the last sample of each hour) in a table behind a disclosure."""
    slot = slot_of(daemon.clock.time())
    rows = [("state", "fresh", slot - i * SERIES_STEP_S, 10 + i) for i in (1, 2, 3, 6, 7)]
    rows += [("state", "stale", slot - SERIES_STEP_S, 4), ("tier", "core", slot, 2)]
    rows += [("backlog", "", slot - 25 * 3600, 99)]  # older than the window: not drawn

    async def insert(conn: Any) -> None:
        await conn.executemany(
            "INSERT INTO metric_series (metric, key, at, value) VALUES (?, ?, ?, ?)", rows
        )

    await daemon.store.db.write(insert)
    async with signed_in(daemon) as client:
        page = await client.get("/review/health")
    assert page.status_code == 200
    html = page.text
    states = html[html.index('<svg class="states-over-time"') :]
    states = states[: states.index("</svg>")]
    assert "<title" in states
    assert "<desc" in states
    assert "Blocks by state over the last 24 hours" in states
    # fresh: slots 7, 6 then a gap then 3, 2, 1 slots ago: two lines; stale: one point
    assert states.count('<polyline class="line" data-key="fresh"') == 2
    assert states.count('<circle class="point" data-key="stale"') == 1
    assert 'data-key="core"' in html[html.index('<svg class="tiers-over-time"') :]
    backlog = html[html.index('<svg class="backlog-over-time"') :]
    assert "<polyline" not in backlog[: backlog.index("</svg>")]
    table = html[html.index('<table class="states-over-time-values">') :]
    table = table[: table.index("</table>")]
    assert "<th>fresh</th><th>stale</th>" in table
    assert "<td>11</td><td>4</td>" in table  # the last sample of its hour


async def test_the_sensors_page_sums_the_last_day_from_the_series(daemon):
    """Each sensor's events and errors over the last 24 hours are the time series'
    5-minute counts added up (older ones and other sensors' not counted)."""
    slot = slot_of(daemon.clock.time())
    rows = [("events", "world", slot - i * SERIES_STEP_S, 3) for i in range(1, 5)]
    rows += [("errors", "world", slot - SERIES_STEP_S, 2), ("events", "other", slot, 50)]
    rows += [("events", "world", slot - 25 * 3600, 100)]  # more than a day ago

    async def insert(conn: Any) -> None:
        await conn.executemany(
            "INSERT OR REPLACE INTO metric_series (metric, key, at, value) VALUES (?, ?, ?, ?)",
            rows,
        )

    await daemon.store.db.write(insert)
    async with signed_in(daemon) as client:
        page = await client.get("/review/sensors")
    assert page.status_code == 200
    world = page.text[page.text.index('id="sensor-world"') :]
    assert "Last 24 hours: 12 event(s), 2 error(s) (as of" in world[: world.index("</section>")]


async def test_the_sensors_page_bars_come_from_the_series_and_the_last_minutes(daemon):
    """The 6-hour bars by outcome add up the series' outcome counts of completed slots
    (an hour ago: 4 confirmed, 1 error; nothing of it in the event log) and the event
    log's events of the last minutes (2 refuted, not yet in the series)."""
    now = daemon.clock.time()
    hour_ago = slot_of(now - 3600)
    rows = [
        ("outcome", "world confirmed", hour_ago, 4),
        ("outcome", "world error", hour_ago, 1),
        ("outcome", "world confirmed", hour_ago - 7 * 3600, 100),  # older than 6 hours
    ]

    async def insert(conn: Any) -> None:
        await conn.executemany(
            "INSERT OR REPLACE INTO metric_series (metric, key, at, value) VALUES (?, ?, ?, ?)",
            rows,
        )

    await daemon.store.db.write(insert)
    await daemon.store.apply_events(
        [
            ValidationEvent(
                sensor="world", subject="ttl", outcome="refuted", observed_at=from_ts(now)
            )
            for _ in range(2)
        ]
    )
    async with signed_in(daemon) as client:
        page = await client.get("/review/sensors")
    assert page.status_code == 200
    world = page.text[page.text.index('id="sensor-world"') :]
    world = world[: world.index("</section>")]
    assert "Last 6 hours: 7 event(s), 1 error(s)." in world
    bars = re.findall(r'class="bar" data-outcome="(\w+)" data-count="(\d+)"', world)
    assert sorted(bars) == [("confirmed", "4"), ("error", "1"), ("refuted", "2")]


async def test_a_block_with_a_shorter_retention_history_says_from_when(shifted_daemon):
    """A block whose retention history starts after it was created (one from before
    schema 13, or one trimmed to its newest points) still gets its chart: the retention
    line from its first point and "no retention history before" that point's time; one
    with no point at all says it has none."""
    daemon = shifted_daemon  # it lives through the 20 minutes of evidence
    block_id, _ = await block_with_history(daemon)
    created = (await daemon.store.get(block_id)).created_at.timestamp()
    later = created + 4.5 * 60.0  # the events came a minute apart for 10 minutes

    async def keep_one_later(conn: Any) -> None:
        await conn.execute(
            "DELETE FROM retention_points WHERE at < ? AND block_rid ="
            " (SELECT rid FROM blocks WHERE id = ?)",
            (later, block_id),
        )

    await daemon.store.db.write(keep_one_later)
    first = (await daemon.store.retention_points(block_id))[0].at
    async with signed_in(daemon) as client:
        page = await client.get(f"/review/blocks/{block_id}")
    assert page.status_code == 200
    since = datetime.fromtimestamp(first, UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert f"no retention history before {since}" in page.text  # in the chart
    assert "No retention history before" in page.text  # and under it
    assert 'class="retention-line"' in page.text

    async def drop_all(conn: Any) -> None:
        await conn.execute("DELETE FROM retention_points")

    await daemon.store.db.write(drop_all)
    async with signed_in(daemon) as client:
        page = await client.get(f"/review/blocks/{block_id}")
    assert page.status_code == 200
    assert "No retention history is stored for this fact." in page.text
    assert 'class="retention-line"' not in page.text
    assert 'class="mark"' in page.text  # the evidence is still drawn
