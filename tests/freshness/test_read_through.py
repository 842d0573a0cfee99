"""max_age / fresh on reads: quick checks measured per binding, shared, floored; receipts."""

from __future__ import annotations

import asyncio

from memwarden.daemon._answers import SearchAnswerDict, SearchResultDict
from memwarden.daemon._routes.search import SearchAnswer, SearchResult
from tests.freshness.conftest import Probe, bound, eventually


def _by_id(answer):
    return {r["block"]["id"]: r for r in answer["results"]}


async def test_fresh_rechecks_a_fact_validated_moments_before_the_world_moved(make_daemon, clock):
    """The measured miss: a fact confirmed 3 s before a change was served as fresh. With
    fresh=true it is checked now: the changed one is not verified, the control one is,
    checked now, with the observation that confirmed it."""
    d = await make_daemon()
    changed = await bound(d, "service port 8080", "svc/port", 8080, info_type="semi_static")
    control = await bound(d, "service name alpha", "svc/name", "alpha", info_type="semi_static")
    clock.advance(3)
    Probe.world["svc/port"] = 9090
    plain = await d.search("service", limit=10)
    assert {r["receipt"]["verdict"] for r in plain["results"]} == {"verified"}  # not asked
    assert plain["checked"] == []
    answer = await d.search("service", limit=10, fresh=True)
    got = _by_id(answer)
    assert sorted(answer["checked"]) == sorted([changed, control])
    assert got[changed]["receipt"]["verdict"] == "checking"  # soft refutation, retry pending
    assert got[changed]["receipt"]["checked_now"] is True
    ok = got[control]["receipt"]
    assert (ok["verdict"], ok["checked_now"], ok["verified_by"], ok["age_s"]) == (
        "verified",
        True,
        "probe",
        0.0,
    )
    assert ok["observation"]["observed"] == "alpha"
    assert 0.0 <= got[changed]["rank"] <= got[control]["rank"] <= 1.0


async def test_max_age_rechecks_only_older_facts(make_daemon, clock):
    """max_age=10s: a fact validated 5 s ago is served as is; at 11 s it is checked."""
    d = await make_daemon()
    block = await bound(d, "queue limit 100", "q/limit", 100, info_type="semi_static")
    before = Probe.checks["q/limit"]
    clock.advance(5)
    answer = await d.search("queue", max_age_s=10)
    assert answer["checked"] == []
    assert answer["results"][0]["receipt"]["age_s"] == 5.0
    clock.advance(6)
    answer = await d.search("queue", max_age_s=10)
    assert answer["checked"] == [block]
    assert Probe.checks["q/limit"] == before + 1
    read = await d.read_block(block, max_age_s=10)
    assert read["receipt"]["verdict"] == "verified"
    assert read["receipt"]["checked_now"] is False  # checked by the search a moment ago


async def test_quick_is_measured_per_binding_not_declared(make_daemon, clock):
    """A binding whose checks take longer than [read_through] quick (50 ms here) is not
    re-run on read: the fact carries its age. A quick binding of the same sensor is."""
    d = await make_daemon()
    Probe.slow.add("suite")
    slow = await bound(d, "suite passes", "suite", "green", info_type="semi_static")
    fast = await bound(d, "suite owner bob", "owner", "bob", info_type="semi_static")
    assert d.scheduler.stats.median_s("probe", "suite") >= Probe.delay_s
    clock.advance(60)
    checks = Probe.checks["suite"]
    answer = await d.search("suite", limit=10, fresh=True)
    got = _by_id(answer)
    assert answer["checked"] == [fast]
    assert Probe.checks["suite"] == checks  # not re-run on read
    assert (got[slow]["receipt"]["verdict"], got[slow]["receipt"]["age_s"]) == ("verified", 60.0)


async def test_concurrent_reads_share_one_check(make_daemon, clock):
    """Five fresh reads at once of one fact make one check, and all see its answer."""
    d = await make_daemon()
    block = await bound(d, "cache size 512", "cache/size", 512, info_type="semi_static")
    clock.advance(10)
    before = Probe.checks["cache/size"]
    Probe.gate = asyncio.Event()
    reads = [asyncio.create_task(d.search("cache", fresh=True)) for _ in range(5)]
    await asyncio.sleep(0)
    Probe.gate.set()
    answers = await asyncio.gather(*reads)
    assert Probe.checks["cache/size"] == before + 1
    assert all(a["results"][0]["receipt"]["verdict"] == "verified" for a in answers)
    assert sum(block in a["checked"] for a in answers) >= 1


async def test_the_recheck_floor_stops_readers_from_loading_a_sensor(make_daemon, clock):
    """Reads within the floor (1 s) of a read's check do not check again; after it, they do."""
    d = await make_daemon()
    await bound(d, "disk quota 10G", "quota", "10G", info_type="semi_static")
    clock.advance(10)
    before = Probe.checks["quota"]
    for _ in range(20):
        await d.search("quota", fresh=True)
        clock.advance(0.04)  # 20 reads within 0.8 s
    assert Probe.checks["quota"] == before + 1
    clock.advance(0.3)
    answer = await d.search("quota", fresh=True)
    assert Probe.checks["quota"] == before + 2
    assert answer["results"][0]["receipt"]["checked_now"] is True


async def test_an_unreachable_source_shows_and_counts(make_daemon, clock):
    """Two consecutive check errors: verdict unreachable (since, why), rank lowered,
    the sensor's error counter counts them."""
    d = await make_daemon()
    block = await bound(d, "api version 1.2", "api/version", "1.2", info_type="semi_static")
    other = await bound(d, "api owner team-a", "api/owner", "team-a", info_type="semi_static")
    Probe.down.add("api/version")
    clock.advance(2)
    await d.revalidate(block, wait_s=5)
    clock.advance(2)
    answer = await d.search("api", limit=10, fresh=True)
    got = _by_id(answer)
    receipt = got[block]["receipt"]
    assert receipt["verdict"] == "unreachable"
    assert "2 consecutive check errors" in receipt["why"]
    assert "connection refused" in receipt["why"]
    assert receipt["since"] is not None
    assert d.runners["probe"].counters.errors == 2
    assert d.runners["probe"].counters.last_error == "connection refused"
    assert got[block]["rank"] < got[other]["rank"]
    assert [r["block"]["id"] for r in answer["results"]][-1] == block


async def test_a_stopped_sensor_makes_its_facts_unreachable_after_the_grace(make_daemon, clock):
    """A sensor that is no longer running: its facts turn unreachable once the grace
    period (10 s) has passed since it went down."""
    d = await make_daemon()
    block = await bound(d, "build is green", "build", "green", info_type="semi_static")
    runner = d.runners["probe"]
    runner.stop()
    await asyncio.wait_for(d._runner_tasks["probe"], timeout=10)
    assert runner.status == "stopped"
    read = await d.read_block(block)
    assert read["receipt"]["verdict"] == "verified"  # within the grace
    clock.advance(11)
    read = await d.read_block(block)
    assert read["receipt"]["verdict"] == "unreachable"
    assert "sensor 'probe' is down: stopped" in read["receipt"]["why"]


async def test_hidden_refuted_and_the_rank_scale(make_daemon, clock):
    """Refuted matches left out are counted; every rank is in 0..1, the best match 1.0
    times its trust."""
    d = await make_daemon()
    block = await bound(d, "region is eu-west", "region", "eu-west", info_type="semi_static")
    await bound(d, "region backup is eu-north", "region/backup", "eu-north")
    Probe.world["region"] = "us-east"
    for _ in range(3):
        clock.advance(1)
        await d.revalidate(block, wait_s=5)
    assert (await d.store.get(block)).state == "refuted"
    answer = await d.search("region")
    assert answer["hidden_refuted"] == 1
    assert all(0.0 <= r["rank"] <= 1.0 for r in answer["results"])
    shown = await d.search("region", include_refuted=True)
    assert shown["hidden_refuted"] == 0
    assert {r["receipt"]["verdict"] for r in shown["results"]} == {"verified", "refuted"}


async def test_the_typed_search_answer_is_what_the_api_edge_builds_its_model_from(make_daemon):
    """Daemon.search answers exactly the keys its TypedDicts name, and the API's response
    models take every one of them (nothing the daemon computes is dropped at the edge)."""
    d = await make_daemon()
    await bound(d, "typed answer port 8080", "typed/port", 8080)
    answer = await d.search("typed answer", limit=10)
    assert set(answer) == set(SearchAnswerDict.__annotations__)
    [result] = answer["results"]
    assert set(result) == set(SearchResultDict.__annotations__)
    assert set(SearchAnswerDict.__annotations__) <= set(SearchAnswer.model_fields)
    assert set(SearchResultDict.__annotations__) <= set(SearchResult.model_fields)
    built = SearchAnswer.model_validate(answer).model_dump(mode="json", exclude_none=True)
    assert built["results"][0]["block"]["id"] == result["block"]["id"]
    assert built["results"][0]["rank"] == result["rank"]


async def test_a_poll_of_the_binding_serves_a_read_waiting_on_its_check(make_daemon, clock):
    """A fresh read waits for its check; the sensor's own poll of that binding (an event
    naming no request) lands first, observed after the read asked: the read is served
    with the poll's answer at once, while the check it asked for still hangs."""
    d = await make_daemon()
    block = await bound(d, "disk quota 10", "disk/quota", 10, info_type="semi_static")
    clock.advance(10)
    Probe.gate = asyncio.Event()  # the read's own check hangs
    before = Probe.checks["disk/quota"]
    read = asyncio.create_task(d.read_block(block, fresh=True, wait_s=30))
    await eventually(lambda: Probe.checks["disk/quota"] == before + 1)
    clock.advance(1)
    ctx = d.runners["probe"].ctx
    await ctx.emit(ctx.event("disk/quota", "confirmed", observed=10, block_id=block))
    answer = await read
    assert not Probe.gate.is_set()  # its own check never answered
    receipt = answer["receipt"]
    assert (receipt["verdict"], receipt["checked_now"], receipt["age_s"]) == ("verified", True, 0.0)
    Probe.gate.set()
