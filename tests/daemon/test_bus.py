"""The bus: validated at the boundary, bounded per source, bad events dead-lettered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from datetime import UTC, datetime

import mw_test_sensors
import pytest
import structlog

from memwarden.daemon import Bus
from memwarden.errors import StorageError, ValidationInputError
from memwarden.memory import Outcome, Store, ValidationEvent


def _event(sensor: str, subject: str = "s", **fields) -> ValidationEvent:
    return ValidationEvent(
        sensor=sensor,
        subject=subject,
        outcome=Outcome.CONFIRMED,
        observed_at=datetime.now(UTC),
        **fields,
    )


async def _dead_letters(store):
    return (await store.counts())["dead_letters"]


async def test_event_naming_another_sensor_is_dead_lettered(
    running_daemon, make_settings, eventually
):
    """An event naming another sensor is counted and dead-lettered with why, never applied."""

    class Impostor(mw_test_sensors.EchoSensor):
        async def run(self, ctx):
            ctx.ready()
            while True:
                for bound in await ctx.wait_bindings_changed():
                    await ctx.emit(_event("echo", bound.subject))  # claims to be echo

    settings = make_settings(sensors={"impostor": {}, "echo": {}})
    sensors = {"impostor": Impostor, "echo": mw_test_sensors.EchoSensor}
    with structlog.testing.capture_logs() as logs:
        daemon = (await running_daemon(settings, sensors=sensors)).daemon
        block = await daemon.add_block(
            {"content": "x", "bindings": [{"sensor": "impostor", "path": "p"}]}
        )
        await eventually(lambda: daemon.bus.rejected["sensor_mismatch"] == 1)
    assert await _dead_letters(daemon.store) == 1
    with sqlite3.connect(daemon.settings.db_path) as db:
        [(source, reason, payload)] = db.execute(
            "SELECT source, reason, payload FROM dead_letters"
        ).fetchall()
    assert (source, reason) == (
        "impostor",
        "sensor_mismatch: event says sensor 'echo' but came from 'impostor'",
    )
    assert json.loads(payload)["sensor"] == "echo"  # the event itself is kept
    assert await daemon.store.events_for(block.id) == []
    assert (await daemon.store.get(block.id)).state == "unverified"
    assert daemon.runners["impostor"].status == "running"
    [rejected] = [e for e in logs if e["event"] == "event_rejected"]
    assert rejected["reason"] == "event says sensor 'echo' but came from 'impostor'"


async def test_submit_validates_raw_payloads(running_daemon, make_settings):
    """submit() validates raw dicts: good ones commit, bad ones are dead-lettered with why."""
    daemon = (await running_daemon(make_settings(sensors={"echo": {}}))).daemon
    block = await daemon.add_block({"content": "x", "bindings": [{"sensor": "echo", "path": "p"}]})
    good = {
        "sensor": "echo",
        "subject": "p",
        "outcome": "confirmed",
        "observed_at": datetime.now(UTC).isoformat(),
    }
    bad = {"sensor": "echo", "subject": "p", "outcome": "maybe"}
    result = await daemon.bus.submit("remote:http", [good, bad, "not an event"])
    assert result.accepted == 1
    reasons = dict(result.rejected)
    assert reasons["1"].startswith("outcome: Input should be 'confirmed'")
    assert "observed_at: Field required" in reasons["1"]
    assert reasons["2"].startswith("event: Input should be a valid dictionary")
    assert daemon.bus.rejected["invalid_event"] == 2
    assert await _dead_letters(daemon.store) == 2
    assert any(e.sensor == "echo" for e in await daemon.store.events_for(block.id))


async def test_queue_per_source_applies_back_pressure(tmp_path):
    """A full queue makes only its own source wait; another source's put goes through."""
    async with Store(tmp_path / "bus.db") as store:
        bus = Bus(store, queue_per_source=2)
        await bus.put("a", _event("a"))
        await bus.put("a", _event("a"))
        third = asyncio.get_running_loop().create_task(bus.put("a", _event("a")))
        for _ in range(10):
            await asyncio.sleep(0)  # let it run as far as it can: it must block
        assert not third.done()
        await bus.put("b", _event("b"))  # not held up by a's full queue
        consumer = asyncio.get_running_loop().create_task(bus.run())
        try:
            await asyncio.wait_for(third, timeout=5)  # the consumer frees a's queue
            await asyncio.wait_for(bus.drain(), timeout=5)
        finally:
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        assert bus.by_source == {"a": 3, "b": 1}
        assert (await store.counts())["events"] == 4


async def test_closed_bus_refuses_new_events(tmp_path):
    """After close() a put is refused with a clear error; what was queued still drains."""
    async with Store(tmp_path / "bus.db") as store:
        bus = Bus(store)
        await bus.put("a", _event("a"))
        bus.close()
        with pytest.raises(StorageError, match="the bus is closed"):
            await bus.put("a", _event("a"))
        consumer = asyncio.get_running_loop().create_task(bus.run())
        try:
            await asyncio.wait_for(bus.drain(), timeout=5)
        finally:
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        assert (await store.counts())["events"] == 1


async def test_batch_the_store_refuses_is_dead_lettered_not_dropped(tmp_path, monkeypatch):
    """If the store refuses a batch, each event is dead-lettered with the reason."""
    async with Store(tmp_path / "bus.db") as store:

        async def refuse(events):
            raise ValidationInputError([("events.0.subject", "too long")])

        monkeypatch.setattr(store, "apply_events", refuse)
        bus = Bus(store)
        consumer = asyncio.get_running_loop().create_task(bus.run())
        try:
            await bus.put("a", _event("a"))
            await bus.put("a", _event("a"))
            await asyncio.wait_for(bus.drain(), timeout=5)
        finally:
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        assert bus.rejected["store_rejected"] == 2
        assert await _dead_letters(store) == 2


async def test_failing_listener_does_not_stop_the_bus(tmp_path):
    """An on_applied callback that raises is logged; later events still flow."""
    seen = []

    def listener(result):
        seen.append(result.accepted)
        raise RuntimeError("listener bug")

    async with Store(tmp_path / "bus.db") as store:
        bus = Bus(store, on_applied=listener)
        consumer = asyncio.get_running_loop().create_task(bus.run())
        try:
            with structlog.testing.capture_logs() as logs:
                await bus.put("a", _event("a"))
                await asyncio.wait_for(bus.drain(), timeout=5)
                await bus.put("a", _event("a"))
                await asyncio.wait_for(bus.drain(), timeout=5)
        finally:
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        assert seen == [1, 1]
        assert [e["event"] for e in logs].count("on_applied_failed") == 2


class _FakeIngest:
    """A node's spool in front of the store (``SpoolingIngest``'s shape): ``away``
    spools, otherwise the store applies."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.away = False
        self.spooled: list[ValidationEvent] = []

    async def apply_events(self, events, *, bound_only=False):
        from memwarden.cluster import Ingested  # noqa: PLC0415 - the postgres extra

        if self.away:
            self.spooled.extend(events)
            return Ingested(None, spooled=True)
        return Ingested(await self.store.apply_events(events, bound_only=bound_only))


async def test_with_a_spool_events_are_spooled_not_applied_then_told_once_delivered(tmp_path):
    """With an ingest in front of the store: a spooled submit answers ``spooled`` (not
    accepted) and tells no one; a sensor's batch spooled is not retried or counted; a
    delivered batch is counted and told like any other."""
    pytest.importorskip("asyncpg")
    told = []

    async def on_applied(result):
        told.append(result)

    async with Store(tmp_path / "m.db") as store:
        ingest = _FakeIngest(store)
        bus = Bus(store, on_applied=on_applied, ingest=ingest)
        assert (await bus.submit("remote:http", [_event("x")])).accepted == 1
        assert len(told) == 1
        ingest.away = True
        result = await bus.submit("remote:http", [_event("x"), _event("x")])
        assert (result.accepted, result.spooled) == (0, 2)
        assert len(told) == 1  # nothing committed: nobody told
        runner = asyncio.create_task(bus.run())
        await bus.put("s", _event("s"))
        await bus.drain()
        assert len(ingest.spooled) == 3
        assert (bus.accepted, bus.spooled) == (1, 3)
        delivered = await store.apply_events(ingest.spooled)
        await bus.delivered(delivered)
        assert bus.accepted == 4
        assert told[-1] is delivered
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
