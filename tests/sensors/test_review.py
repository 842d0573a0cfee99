"""The human review queue: store operations, the review sensor, the API routes and the CLI."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import structlog
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.errors import PluginError, ValidationInputError
from memwarden.memory import FakeClock, Store, ValidationEvent, from_ts
from memwarden.memory._reviews import queue_review
from memwarden.plugins import NeedsReviews
from memwarden.plugins.testing import SensorHarness
from memwarden.sensors.review import ReviewConfig, ReviewSensor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

DAY = 86400.0

# ---------------------------------------------------------------------- store fixtures


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    async with Store(tmp_path / "memory.db", clock=clock) as s:
        yield s


def event(sensor: str, outcome: str, clock: FakeClock, **fields: Any) -> ValidationEvent:
    return ValidationEvent.model_validate(
        {"sensor": sensor, "outcome": outcome, "observed_at": from_ts(clock.time()), **fields}
    )


async def queued_block(store: Store, clock: FakeClock, text: str = "We chose SQLite") -> Any:
    block = await store.add({"content": text, "volatility": "low"}, actor="agent")
    review = await queue_review(store, block.id, reason="asked by a test")
    clock.advance(60)  # the decision is observed after the block was made
    return block, review


# ---------------------------------------------------------------------- decisions


async def test_confirm_records_the_reviewer_and_confirms_the_block(store, clock):
    """confirm: the block is fresh at 0.95 from `review`; the item names who decided and why."""
    block, review = await queued_block(store, clock)
    out = await store.decide_review(review.id, "confirm", reviewer="alice", comment="still true")
    assert out["review"]["status"] == "decided"
    assert out["review"]["decision"] == "confirm"
    assert out["review"]["decided_by"] == "alice"
    assert out["review"]["comment"] == "still true"
    assert out["event"]["applied"] is True
    after = await store.get(block.id)
    assert after.state == "fresh"
    assert after.validation.validated_by == "review"
    assert after.validation.reliability == 0.95
    [last] = await store.events_for(block.id, limit=1)
    assert (last.sensor, last.outcome, last.message) == ("review", "confirmed", "still true")
    assert last.observed == {"decision": "confirm", "decided_by": "alice"}
    assert await store.list_reviews() == []


async def test_reject_refutes_at_once_and_does_not_queue_the_block_again(store, clock):
    """reject: a human refutation is hard at once, and the unbound block is not requeued."""
    _, review = await queued_block(store, clock)
    out = await store.decide_review(review.id, "reject", reviewer="bob", comment="we moved")
    assert out["block"]["state"] == "refuted"
    assert out["review"]["decided_by"] == "bob"
    assert await store.list_reviews(status="pending") == []
    [decided] = await store.list_reviews(status="decided")
    assert decided["decision"] == "reject"


async def test_edit_supersedes_the_text_and_keeps_the_old_version(store, clock):
    """edit: new content, version 2, the old text in block_history (replaced by the reviewer)."""
    block, review = await queued_block(store, clock, "The API timeout is 30 s")
    out = await store.decide_review(
        review.id, "edit", reviewer="carol", new_content="The API timeout is 45 s"
    )
    after = await store.get(block.id)
    assert after.content == "The API timeout is 45 s"
    assert after.version == 2
    assert after.state == "fresh"
    assert out["review"]["decision"] == "edit"
    async with (
        store.db.read() as conn,
        conn.execute(
            "SELECT version, content, replaced_by FROM block_history WHERE block_id = ?",
            (block.id,),
        ) as cur,
    ):
        history = await cur.fetchall()
    assert [tuple(r) for r in history] == [(1, "The API timeout is 30 s", "carol")]


async def test_bad_decisions_are_refused_and_change_nothing(store, clock):
    """Unknown decisions, no reviewer, an edit without text and a second decision: refused."""
    block, review = await queued_block(store, clock)
    for decision, kwargs, field in [
        ("maybe", {"reviewer": "a"}, "decision"),
        ("confirm", {"reviewer": " "}, "decided_by"),
        ("edit", {"reviewer": "a"}, "content"),
        ("confirm", {"reviewer": "a", "new_content": "x"}, "content"),
    ]:
        with pytest.raises(ValidationInputError) as info:
            await store.decide_review(review.id, decision, **kwargs)
        assert info.value.field == field
    assert (await store.get(block.id)).state == "unverified"
    await store.decide_review(review.id, "confirm", reviewer="alice")
    with pytest.raises(ValidationInputError, match="already decided"):
        await store.decide_review(review.id, "reject", reviewer="mallory")


async def test_show_gives_the_block_the_reason_and_the_evidence(store, clock):
    """get_review returns the block, the reason and its last events, newest first."""
    block = await store.add(
        {"content": "payments pass", "bindings": [{"sensor": "tests", "test": "t::pay"}]}
    )
    for _ in range(3):
        await store.apply_events([event("tests", "error", clock, subject="t::pay", message="boom")])
    [item] = await store.list_reviews()
    assert item["reason"] == "3 consecutive check errors"
    assert item["block"]["id"] == block.id
    shown = await store.get_review(item["id"], events=2)
    assert shown["block"]["content"] == "payments pass"
    assert [e["message"] for e in shown["events"]] == ["boom", "boom"]


async def test_the_rules_escalate_a_hard_refutation_no_bound_sensor_can_settle(store, clock):
    """Three refutations from a sensor the block is not bound to queue a review item."""
    block = await store.add({"content": "the cache is warm"})
    for _ in range(3):
        clock.advance(1)
        await store.apply_events([event("probe", "refuted", clock, block_id=block.id)])
    [item] = await store.list_reviews()
    assert item["reason"] == "refuted by a sensor not bound to the block"


async def test_a_decision_answers_the_review_sensors_open_revalidation(store, clock):
    """The decision event carries the pending request's id and closes it."""
    block = await store.add(
        {"content": "x", "bindings": [{"sensor": "review", "subject": "human"}]}
    )
    [request_id] = await store.request_revalidation(block.id)
    review = await queue_review(store, block.id, reason="revalidation")
    clock.advance(1)
    await store.decide_review(review.id, "confirm", reviewer="alice")
    async with (
        store.db.read() as conn,
        conn.execute(
            "SELECT status, outcome FROM revalidations WHERE id = ?", (request_id,)
        ) as cur,
    ):
        assert tuple(await cur.fetchone()) == ("done", "confirmed")
    [last] = await store.events_for(block.id, limit=1)
    assert last.request_id == request_id


# ---------------------------------------------------------------------- the sensor


def review_harness(tmp_path: Path, clock: FakeClock, **config: Any) -> SensorHarness:
    """The review sensor in the harness: a NeedsReviews sensor, it is handed a review
    queue over the harness's store, as the daemon hands it one over its own."""
    return SensorHarness(ReviewSensor, config=config, bindings=[{}], clock=clock, tmp_path=tmp_path)


async def eventually(check: Callable[[], Awaitable[Any]], *, timeout_s: float = 5.0) -> Any:
    """Deadline-bounded polling of the store (written by the sensor's own task)."""
    deadline = time.monotonic() + timeout_s
    while not (found := await check()):
        if time.monotonic() > deadline:
            raise AssertionError("not found in time")
        await asyncio.sleep(0.01)
    return found


async def test_a_review_binding_names_no_subject_and_revalidation_queues_an_item(tmp_path, clock):
    """{"sensor": "review"} is valid; asking to revalidate it queues the block for a human."""
    async with review_harness(tmp_path, clock, scan_interval="1h") as h:
        await h.wait_ready()
        [bound] = h.bindings
        assert bound.subject == "human"
        assert await h.revalidate("human", reason="expired") == []
        [item] = await eventually(h.store.list_reviews)
        assert item["block_id"] == bound.block_id
        assert item["reason"] == "revalidation: its validity window ran out"


async def test_the_scan_escalates_expired_bound_blocks_and_unbound_old_decisions(tmp_path, clock):
    """Past their window: review-bound blocks, and low-volatility blocks no sensor checks."""
    async with review_harness(tmp_path, clock, scan_interval="1h") as h:
        await h.wait_ready()
        [bound] = h.bindings
        s = h.store
        old = await s.add({"content": "we chose SQLite", "volatility": "low"})
        await s.add({"content": "medium, unbound", "volatility": "medium"})
        await s.add(
            {
                "content": "low, bound elsewhere",
                "volatility": "low",
                "bindings": [{"sensor": "fs", "path": "a"}],
            }
        )
        clock.advance(181 * DAY)
        assert await h.sensor.scan(h.ctx) == 2
        reasons = {i["block_id"]: i["reason"] for i in await s.list_reviews()}
    assert set(reasons) == {bound.block_id, old.id}
    assert reasons[bound.block_id].startswith("validity window ran out")
    assert reasons[old.id].endswith("; no sensor can check it")


async def test_the_scan_queues_a_bound_block_whose_reliability_fell(tmp_path, clock):
    """A review-bound block whose reliability dropped below escalate_below is queued once."""
    async with review_harness(tmp_path, clock, scan_interval="1h", escalate_unbound=False) as h:
        await h.wait_ready()
        [bound] = h.bindings
        for _ in range(2):
            clock.advance(1)
            await h.store.apply_events([event("probe", "changed", clock, block_id=bound.block_id)])
        assert await h.sensor.scan(h.ctx) == 1
        assert await h.sensor.scan(h.ctx) == 0  # one open item per block
        [item] = await h.store.list_reviews()
    assert item["reason"].startswith("reliability 0.29 is below 0.40")


async def test_the_sensor_refuses_to_start_without_the_review_queue():
    """Set up without a review queue handed over (use_reviews), the sensor fails with the
    reason; the daemon and the harness hand one over because it is a NeedsReviews."""
    sensor = ReviewSensor(ReviewConfig())
    assert isinstance(sensor, NeedsReviews)
    with pytest.raises(PluginError, match="has no review queue"):
        await sensor.setup(None)  # type: ignore[arg-type]  # never reached: it fails first


# ---------------------------------------------------------------------- the CLI on a file


@pytest.fixture
def keep_logging() -> Iterator[None]:
    """The CLI configures logging for its process; give later tests theirs back."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_cli_on_a_database_file(tmp_path, monkeypatch, keep_logging):
    """review list/show/confirm/edit/reject with --db, reviewer from --by or $USER."""
    db = tmp_path / "m.db"

    async def seed() -> list[str]:
        async with Store(db) as s:
            out = []
            for text in ("one", "two", "three"):
                block = await s.add({"content": text})
                out.append((await queue_review(s, block.id, reason=f"check {text}")).id)
            return out

    first, second, third = asyncio.run(seed())
    monkeypatch.setenv("USER", "dora")
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(app, ["review", *args, "--db", str(db)])
        assert result.exit_code == code, result.output
        return result

    listed = json.loads(run("list", "--json").stdout)
    assert [i["reason"] for i in listed] == ["check one", "check two", "check three"]
    assert "check one" in run("list").stdout
    shown = json.loads(run("show", first, "--json").stdout)
    assert shown["block"]["content"] == "one"
    assert "reason: check one" in run("show", first).stdout
    assert "confirmed" in run("confirm", first, "-m", "fine").stdout
    edited = json.loads(run("edit", second, "--content", "TWO", "--by", "eve", "--json").stdout)
    assert edited["block"]["content"] == "TWO"
    assert "rejected" in run("reject", third).stdout
    decided = json.loads(run("list", "--status", "decided", "--json").stdout)
    assert {i["decided_by"] for i in decided} == {"dora", "eve"}
    assert "already decided" in run("confirm", first, code=2).output
    assert "no review with id 'no-such-review'" in run("show", "no-such-review", code=1).output


# ---------------------------------------------------------------------- a real daemon


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`memwarden run` with the review sensor, loaded through its entry point."""
    root = tmp_path_factory.mktemp("review-daemon")
    home = root / "home"
    config = root / "memwarden.toml"
    config.write_text('[sensors.review]\nscan_interval = "1h"\n')
    env = {
        **os.environ,
        "MEMWARDEN_HOME": str(home),
        "MEMWARDEN_API__PORT": "0",
        "MEMWARDEN_LOG_LEVEL": "warning",
    }
    exe = Path(sys.executable).with_name("memwarden")
    with (root / "daemon.log").open("wb") as log:
        process = subprocess.Popen(
            [str(exe), "run", "-c", str(config)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 30
            while not (home / "api.json").exists():
                assert process.poll() is None, (root / "daemon.log").read_text()
                assert time.monotonic() < deadline, "the daemon did not start"
                time.sleep(0.02)  # a file appearing is all the daemon says; bounded above
            url = json.loads((home / "api.json").read_text())["url"]
            token = (home / "token").read_text().strip()
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10
            ) as client:
                yield {"home": home, "client": client}
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_the_daemon_queues_and_people_decide_through_the_api_and_the_cli(
    live, monkeypatch, keep_logging
):
    """End to end: bind to review, ask to revalidate, list, show and decide via CLI and API."""
    c: httpx.Client = live["client"]
    made = c.post(
        "/v1/blocks",
        json={"content": "the on-call rota is weekly", "bindings": [{"sensor": "review"}]},
    )
    assert made.status_code == 201, made.text
    block = made.json()
    assert block["bindings"][0]["subject"] == "human"
    assert c.post(f"/v1/blocks/{block['id']}/revalidate").status_code == 200
    deadline = time.monotonic() + 10
    while not (items := c.get("/v1/reviews").json()):
        assert time.monotonic() < deadline, "no review item appeared"
        time.sleep(0.02)  # the sensor writes the item in its own task; bounded above
    [item] = items
    assert item["block"]["id"] == block["id"]
    assert item["reason"] == "revalidation: a check was asked for"

    monkeypatch.setenv("MEMWARDEN_HOME", str(live["home"]))
    monkeypatch.delenv("MEMWARDEN_URL", raising=False)
    monkeypatch.delenv("MEMWARDEN_TOKEN", raising=False)
    monkeypatch.delenv("MEMWARDEN_DB", raising=False)
    runner = CliRunner()
    listed = runner.invoke(app, ["review", "list", "--json"])
    assert [i["id"] for i in json.loads(listed.stdout)] == [item["id"]]
    shown = runner.invoke(app, ["review", "show", item["id"]])
    assert "the on-call rota is weekly" in shown.stdout
    done = runner.invoke(
        app, ["review", "confirm", item["id"], "--by", "frank", "-m", "ok", "--json"]
    )
    assert done.exit_code == 0, done.output
    decided = json.loads(done.stdout)
    assert decided["review"]["decided_by"] == "frank"
    assert decided["block"]["state"] == "fresh"
    assert decided["block"]["validation"]["validated_by"] == "review"

    other = c.post("/v1/blocks", json={"content": "deploys are on Fridays"}).json()
    review = c.post(f"/v1/blocks/{other['id']}/review", json={"reason": "sounds wrong"}).json()
    bad = c.post(
        f"/v1/reviews/{review['review_id']}/decision", json={"decision": "nope", "decided_by": "x"}
    )
    assert bad.status_code == 422
    answer = c.post(
        f"/v1/reviews/{review['review_id']}/decision",
        json={"decision": "edit", "decided_by": "grace", "content": "deploys are on Tuesdays"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["block"]["content"] == "deploys are on Tuesdays"
    assert c.get(f"/v1/reviews/{review['review_id']}").json()["review"]["decided_by"] == "grace"
    assert c.get("/v1/reviews/unknown").status_code == 404
    decided_list = c.get("/v1/reviews", params={"status": "decided"}).json()
    assert {i["decided_by"] for i in decided_list} == {"frank", "grace"}


def test_unknown_review_id_via_the_api_is_404(live):
    """A decision on an unknown item is 404, not a crash."""
    c: httpx.Client = live["client"]
    r = c.post("/v1/reviews/nope/decision", json={"decision": "confirm", "decided_by": "a"})
    assert r.status_code == 404
