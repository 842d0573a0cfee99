"""memwarden.plugins.testing: what sensor authors test their sensors with."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

import pytest

import memwarden.plugins
import memwarden.plugins.testing
from memwarden.errors import ConfigError, NotFoundError, PluginError, ValidationInputError
from memwarden.memory import Outcome, ValidationEvent
from memwarden.plugins import BaseBinding, BaseSensorConfig
from memwarden.plugins.testing import FakeClock, SensorHarness

NOT_AN_INT = "Input should be a valid integer, unable to parse string as an integer"


class Cfg(BaseSensorConfig):
    value: int = 30
    crash: bool = False
    fail_setup: bool = False
    impostor: bool = False


class Sel(BaseBinding):
    path: str
    equals: int | None = None

    def subject_of(self) -> str:
        return self.path


class Thermo:
    """Emits one event per binding it learns; checks compare ``value`` with ``equals``."""

    api_version: ClassVar[int] = 2
    kind: ClassVar[str] = "thermo"
    Config: ClassVar[type[Cfg]] = Cfg
    Binding: ClassVar[type[Sel]] = Sel

    def __init__(self, config: Cfg) -> None:
        self.config = config
        self.runs = 0

    def validate_binding(self, selector: Sel) -> None:
        if selector.path.startswith("/"):
            raise ValueError("path: must be relative")

    async def setup(self, ctx):
        if self.config.fail_setup:
            raise OSError("no sensor attached")
        self.ctx = ctx

    async def run(self, ctx):
        self.runs += 1
        ctx.ready()
        if self.config.crash:
            raise RuntimeError("probe fell off")
        while True:
            for bound in await ctx.wait_bindings_changed():
                await ctx.emit(self._check(bound.subject, bound.selector.equals, bound.block_id))

    async def revalidate(self, request, ctx):
        selector = self.ctx.parse_binding(request.binding)
        if selector.path == "slow":
            await asyncio.Event().wait()
        return self._check(request.subject, selector.equals, request.block_id)

    async def teardown(self):
        pass

    def _check(self, subject, equals, block_id) -> ValidationEvent:
        ok = equals is None or equals == self.config.value
        if self.config.impostor:
            return ValidationEvent(
                sensor="someone-else",
                subject=subject,
                outcome=Outcome.CONFIRMED,
                observed_at=self.ctx.now(),
            )
        return self.ctx.event(
            subject,
            Outcome.CONFIRMED if ok else Outcome.REFUTED,
            observed=self.config.value,
            block_id=block_id,
        )


async def test_collects_what_the_sensor_emits(tmp_path):
    """Events emitted for the bindings are collected in order and applied to the store."""
    clock = FakeClock()
    start = clock.time()
    async with SensorHarness(
        Thermo,
        config={"value": 30},
        bindings=[{"path": "a", "equals": 30}, {"path": "b", "equals": 31}],
        clock=clock,
        tmp_path=tmp_path,
    ) as h:
        await h.wait_ready()
        first, second = await h.wait_for_events(2)
        assert (first.subject, first.outcome) == ("a", Outcome.CONFIRMED)
        assert (second.subject, second.outcome) == ("b", Outcome.REFUTED)
        assert first.observed_at.timestamp() == start
        # The harness clock moves 1ms after each emit: no two events share observed_at.
        assert second.observed_at.timestamp() == pytest.approx(start + 0.001)
        assert clock.time() == pytest.approx(start + 0.002)
        assert (await h.block("a")).state == "fresh"
        assert (await h.block("b")).state != "fresh"
        assert h.ctx.state_dir == tmp_path / "sensors" / "thermo"
        assert h.status == "running"


async def test_wait_for_events_says_what_it_got(tmp_path):
    """Waiting for more events than come fails after the deadline, saying how many came."""
    async with SensorHarness(Thermo, bindings=[{"path": "a"}], tmp_path=tmp_path) as h:
        with pytest.raises(TimeoutError, match=r"emitted 1 of 2 events within 0\.05s"):
            await h.wait_for_events(2, timeout_s=0.05)


async def test_revalidate_builds_the_request(tmp_path):
    """revalidate(subject) asks the sensor as the scheduler would and returns its answer."""
    async with SensorHarness(
        Thermo, config={"value": 7}, bindings=[{"path": "a", "equals": 7}], tmp_path=tmp_path
    ) as h:
        [answer] = await h.revalidate("a")
        assert answer.outcome == Outcome.CONFIRMED
        assert answer.request_id is not None
        assert answer.block_id == h.bindings[0].block_id
        assert h.counters.revalidations == 1
        with pytest.raises(LookupError, match=r"no binding for subject 'zz' \(bound: 'a'\)"):
            await h.revalidate("zz")


async def test_revalidate_deadline_applies(tmp_path):
    """A check that hangs comes back as an error event at the harness's deadline."""
    async with SensorHarness(
        Thermo, bindings=[{"path": "slow"}], tmp_path=tmp_path, revalidate_timeout_s=0.05
    ) as h:
        [answer] = await h.revalidate("slow")
        assert answer.outcome == Outcome.ERROR
        assert h.counters.timeouts == 1


async def test_set_bindings_validates_like_the_daemon(tmp_path):
    """Bindings are checked by the Binding model and validate_binding, errors naming each."""
    async with SensorHarness(Thermo, bindings=[{"path": "a"}], tmp_path=tmp_path) as h:
        with pytest.raises(ValidationInputError) as err:
            await h.set_bindings([{"path": "/etc/x"}, {"equals": 1}, {"path": "ok"}])
        assert err.value.errors == [
            ("bindings.0", "path: must be relative"),
            ("bindings.1.path", "Field required"),
        ]
        assert [b.subject for b in h.bindings] == ["a"]  # unchanged on error
        old_block = h.bindings[0].block_id
        await h.set_bindings([{"path": "c"}])
        await h.wait_for_events(2)
        assert [b.subject for b in h.bindings] == ["c"]
        with pytest.raises(NotFoundError):
            await h.store.get(old_block)  # the replaced binding's block is gone


async def test_events_naming_another_sensor_are_rejected(tmp_path):
    """What the daemon would dead-let is kept apart, with the reason."""
    async with SensorHarness(
        Thermo, config={"impostor": True}, bindings=[{"path": "a"}], tmp_path=tmp_path
    ) as h:
        await h.wait_ready()
        await h.revalidate("a")
        assert h.emitted == []
        [(_, reason), *_] = h.rejected
        assert reason == "event says sensor 'someone-else' but came from 'thermo'"


async def test_supervision_applies(tmp_path):
    """A crashing run is restarted with backoff and marked failed after a crash loop."""
    async with SensorHarness(
        Thermo, config={"crash": True}, tmp_path=tmp_path, crash_loop_restarts=2
    ) as h:
        with pytest.raises(PluginError, match=r"stopped \(failed\) while waiting for 1 events"):
            await h.wait_for_events(1)
        assert h.counters.restarts == 2
        assert h.sensor.runs == 3


async def test_failing_setup_fails_the_async_with(tmp_path):
    """By default (startup = error) a setup that raises fails the `async with` and cleans up."""
    with pytest.raises(PluginError, match="sensor 'thermo' failed to start: setup: OSError"):
        async with SensorHarness(Thermo, config={"fail_setup": True}, tmp_path=tmp_path):
            pass  # pragma: no cover - never entered
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("sensor[")]


async def test_wait_ready_fails_fast_when_the_sensor_cannot_start(tmp_path):
    """Under startup = ignore a failed setup makes wait_ready() fail at once, saying why."""
    async with SensorHarness(
        Thermo, config={"fail_setup": True}, startup="ignore", tmp_path=tmp_path
    ) as h:
        with pytest.raises(PluginError, match="stopped \\(disabled\\) while waiting for ready"):
            await h.wait_ready(timeout_s=5)


async def test_bad_config_names_the_option(tmp_path):
    """A config the sensor's model refuses is a ConfigError naming sensors.<name>.<key>."""
    with pytest.raises(ConfigError) as err:
        async with SensorHarness(Thermo, config={"value": "hot", "colour": 1}, tmp_path=tmp_path):
            pass  # pragma: no cover - never entered
    assert err.value.problems == [
        f"sensors.thermo.value: {NOT_AN_INT}",
        "sensors.thermo.colour: unknown setting",
    ]


async def test_works_without_tmp_path():
    """Without tmp_path the harness makes (and removes) its own temporary directory."""
    async with SensorHarness(Thermo, bindings=[{"path": "a"}]) as h:
        await h.wait_for_events(1)
        state_dir = h.ctx.state_dir
        assert state_dir.is_dir()
    assert not state_dir.exists()


def test_ships_in_the_package():
    """The helpers are part of the installed package, not of the test suite."""
    assert (
        Path(memwarden.plugins.testing.__file__).parent == Path(memwarden.plugins.__file__).parent
    )
