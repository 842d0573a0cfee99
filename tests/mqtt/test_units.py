"""The pieces without a broker: gap bookkeeping, settings, the outbox and the agent queue."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from memwarden.agent import AgentQueue
from memwarden.daemon import load_settings
from memwarden.daemon._config import sensor_option_problems
from memwarden.errors import ConfigError
from memwarden.memory import FakeClock, Store
from memwarden.mqtt import GapTracker, Topics, split_agent, tls_context
from memwarden.plugins import Registry


def test_gap_tracker_counts_jumps_and_recoveries():
    """A jump in seq is a gap; a late arrival fills it; duplicates change nothing."""
    gaps = GapTracker()
    assert gaps.seen("a/1", 1) is None
    assert gaps.seen("a/1", 2) is None
    assert gaps.seen("a/1", 6) == (3, 5)
    assert gaps.seen("a/1", 2) is None  # a duplicate
    assert gaps.seen("a/1", 4) is None  # a re-sent one
    stats = gaps.agents["a"]
    assert (stats.gaps, stats.recovered, stats.missing, stats.last_seq) == (3, 1, 2, 6)
    assert gaps.missing_ranges("a/1") == [(3, 3), (5, 5)]


def test_gap_tracker_heartbeat_reveals_a_lost_tail():
    """A heartbeat announcing a higher seq than seen means the tail was lost."""
    gaps = GapTracker()
    gaps.begin("a/1", high_water=10)  # already stored before a restart
    assert gaps.seen("a/1", 11) is None
    assert gaps.announced("a/1", 11) is None
    assert gaps.announced("a/1", 14) == (12, 14)
    assert gaps.seen("a/1", 12) is None
    assert gaps.agents["a"].missing == 2


def test_gap_tracker_is_bounded():
    """Old runs and old ranges are forgotten (still counted as gaps, not as missing)."""
    gaps = GapTracker(max_runs=2, max_ranges=2)
    for run in ("a/1", "a/2", "a/3"):
        gaps.seen(run, 3)
    for seq in (5, 7, 9):
        gaps.seen("a/3", seq)
    assert not gaps.known("a/1")
    assert len(gaps.missing_ranges("a/3")) == 2
    assert gaps.agents["a"].gaps == 2 * 3 + 3
    assert gaps.agents["a"].missing == 2 + 2


def test_split_agent_and_topics():
    """Agent strings split at the last slash; topics sit under the prefix."""
    assert split_agent("edge1/0190-run") == ("edge1", "0190-run")
    assert split_agent("edge1") == ("edge1", "")
    t = Topics("site/memwarden/v1")
    assert t.events("fs") == "site/memwarden/v1/events/fs"
    assert t.relative("site/memwarden/v1/agents/e1/status") == ["agents", "e1", "status"]
    assert t.relative("other/x") is None


@pytest.mark.parametrize(
    ("mqtt", "problem"),
    [
        ({"url": "http://broker"}, "mqtt.url"),
        ({"url": "mqtt://user:pw@broker"}, "credentials in username/password"),
        ({"url": "mqtt://broker:99999"}, "mqtt.url"),
        ({"prefix": "a/+/b"}, "mqtt.prefix"),
        ({"prefix": "a//b"}, "mqtt.prefix"),
        ({"cert_file": "/c.pem"}, "cert_file and key_file go together"),
        ({"batch_max": 0}, "mqtt.batch_max"),
    ],
)
def test_bad_mqtt_settings_are_refused_with_the_field(mqtt, problem):
    """A bad [mqtt] table is a ConfigError naming the field and the value."""
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={}, mqtt=mqtt)
    assert problem in "; ".join(err.value.problems)


def test_mqtt_is_off_by_default_and_remote_sensors_need_no_plugin():
    """No [mqtt] means no bridge; a remote sensor's kind need not be installed here."""
    settings = load_settings(None, env={}, sensors={"far": {"kind": "nope", "remote": True}})
    assert settings.mqtt is None
    assert sensor_option_problems(settings, Registry.from_classes({})) == []
    settings = load_settings(None, env={}, mqtt={}, agent={"id": "edge-1.a"})
    assert settings.mqtt is not None
    assert (settings.mqtt.host, settings.mqtt.port, settings.mqtt.tls) == ("127.0.0.1", 1883, False)
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={}, agent={"id": "bad/id"})
    assert err.value.problems[0].startswith("agent.id: ")


def test_tls_files_that_do_not_load_are_a_config_error(tmp_path):
    """mqtts:// with a CA file that is not there fails at start, naming the problem."""
    settings = load_settings(
        None, env={}, mqtt={"url": "mqtts://broker", "ca_file": str(tmp_path / "nope.pem")}
    )
    assert settings.mqtt is not None
    with pytest.raises(ConfigError, match="cannot load the TLS files"):
        tls_context(settings.mqtt)
    plain = load_settings(None, env={}, mqtt={"url": "mqtts://broker"}).mqtt
    assert plain is not None
    assert tls_context(plain) is not None


async def test_outbox_drops_the_oldest_and_counts(tmp_path):
    """A full outbox keeps the newest messages, in order, and counts what it dropped."""
    async with Store(tmp_path / "s.db", clock=FakeClock()) as store:
        dropped = await store.outbox_put(
            [(f"t/{i}", str(i).encode(), 1, i == 0) for i in range(5)], max_rows=3
        )
        assert dropped == 2
        rows = await store.outbox_peek()
        assert [r.topic for r in rows] == ["t/2", "t/3", "t/4"]
        await store.outbox_delete([rows[0].id])
        stats = await store.outbox_stats()
        assert (stats.queued, stats.dropped) == (2, 2)


async def test_agent_queue_keeps_unsent_bounded_history_and_requeues(tmp_path):
    """Agent queue: oldest unsent dropped when full; sent kept as bounded, re-sendable history."""
    clock = FakeClock()
    async with AgentQueue(tmp_path / "q.db", clock=clock, max_unsent=3, history_max=2) as q:
        for seq in range(1, 5):
            await q.put("a/1", seq, "t", f"{seq}".encode())
        assert (await q.stats()).dropped == 1
        rows = await q.unsent()
        assert [r.seq for r in rows] == [2, 3, 4]
        await q.mark_sent([r.id for r in rows])
        stats = await q.stats()
        assert (stats.unsent, stats.sent_kept) == (0, 2)
        assert await q.requeue("a/1", 1, 4) == 2  # 1 was dropped, 2 fell out of the history
        assert [r.seq for r in await q.unsent()] == [3, 4]
        await q.set_meta("k", "v")
        assert await q.get_meta("k") == "v"


async def test_a_cancelled_read_does_not_leave_the_agent_queue_reading_old_data(tmp_path):
    """A read cancelled mid-query (a dropped connection) never hides rows from the next read."""
    async with AgentQueue(tmp_path / "q.db", clock=FakeClock()) as q:
        for seq in range(1, 1501):
            await q.put("a/1", seq, "t", b"x" * 64)
        for attempt in range(20):
            read = asyncio.create_task(q.unsent(limit=1500))
            for _ in range(1 + attempt % 3):
                await asyncio.sleep(0)  # let the query start in aiosqlite's thread
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await read
            await q.put("a/1", 2000 + attempt, "t", b"y")
            assert len(await q.unsent(limit=10_000)) == 1500 + attempt + 1
