"""``redact``: events per second through the bus with the privacy policy on, against off.

Setup (not timed): 20 000 blocks, each bound to one file subject, stored once and the
database copied, so both runs start from the very same file. 60 000 events (subjects
uniform over the blocks, 90 % confirmed) carry what sensors really report: short config
values, SHA-256 digests and git commit ids (which must come through untouched), URLs,
small JSON objects, and a few e-mail addresses, public IP addresses and ``token=``
secrets; a third have a message.

Six rounds (off then on, then on then off, ...), each side from a fresh copy of the file;
the best round of each side counts, measured in CPU seconds of the process (the event loop
and SQLite's thread: on a shared machine wall-clock time measures the neighbours; the
wall-clock figures are reported too). Both runs take the daemon's ingest path for events
from outside: ``Bus.submit`` in chunks of 1 000, all chunks gathered, into
``Store.apply_events``. **Baseline**: the bus
without a screen (redaction off). **Measured**: the bus with the daemon's screen
(``PrivacyDoors.screen_events``) under a policy that redacts every kind, IP addresses
included (the heaviest): each event's ``observed`` and ``message`` are scanned by every
detector and redacted before they are applied. The ratio is on / off; issue 19 asks for
at least 0.8. The screen's own time is reported too (``screen_events_per_s``: the
detectors alone, no store), and the run checks that the digests arrived intact and that
no raw e-mail address was stored.
"""

from __future__ import annotations

import asyncio
import gc
import random
import shutil
import sqlite3
import string
import time
from typing import TYPE_CHECKING

from benchmarks import _sqlite
from benchmarks._harness import Context, Result, benchmark
from memwarden.daemon._bus import Bus
from memwarden.daemon._privacy import PrivacyDoors
from memwarden.memory import Binding, FakeClock, NewBlock, Outcome, Store, ValidationEvent, from_ts
from memwarden.privacy import PrivacySettings

if TYPE_CHECKING:
    from pathlib import Path

SEED = 20261124
T0 = 1_767_225_600.0
ADD_CHUNK = 5000
CHUNK = 1000
TARGET_RATIO = 0.8  # issue 19
ROUNDS = 6
KEY = bytes(range(32))
# Stored observations that are a 64-hex digest: the same count on and off.
DIGESTS = "SELECT count(*) FROM events WHERE length(observed) = 66 AND observed GLOB '\"[0-9a-f]*'"


def _observed(rng: random.Random, i: int) -> object:  # noqa: PLR0911 - one return per kind
    """What a sensor reports, in the mix the module docstring gives."""
    x = rng.random()
    if x < 0.40:
        return rng.choice(["30", "true", "v2.3.1", "info", "8080", "/var/lib/app", 42, None])
    if x < 0.60:
        return "".join(rng.choices("0123456789abcdef", k=64))  # sha256
    if x < 0.70:
        return "".join(rng.choices("0123456789abcdef", k=40))  # a git commit
    if x < 0.80:
        return f"https://api.example.com/v1/items?page={i % 50}&sort=name"
    if x < 0.88:
        return {"host": "db.internal", "port": 5432, "user": "app", "pool": i % 20}
    if x < 0.93:
        return f"owner is user{i}@example.com"
    if x < 0.97:
        return f"{rng.randrange(11, 200)}.{rng.randrange(256)}.{rng.randrange(256)}.7"
    secret = "".join(rng.choices(string.ascii_letters + string.digits, k=24))
    return f"token={secret}"


def _events(n_blocks: int, n_events: int) -> list[ValidationEvent]:
    rng = random.Random(SEED)
    start = T0 + 3600.0
    out = []
    for i in range(n_events):
        outcome = Outcome.CONFIRMED if rng.random() < 0.9 else Outcome.CHANGED
        message = f"value changed after deploy {i % 97}" if rng.random() < 0.33 else ""
        out.append(
            ValidationEvent(
                sensor="fs",
                subject=f"f/{rng.randrange(n_blocks)}.txt",
                outcome=outcome,
                observed_at=from_ts(start + i * 0.01),
                observed=_observed(rng, i),  # type: ignore[arg-type]
                message=message,
            )
        )
    return out


async def _preload(path: Path, n_blocks: int, clock: FakeClock) -> None:
    async with Store(path, clock=clock) as store:
        for start in range(0, n_blocks, ADD_CHUNK):
            await store.add_many(
                [
                    NewBlock(
                        content=f"f/{i}.txt holds the settings of component {i}",
                        bindings=[Binding(sensor="fs", path=f"f/{i}.txt")],
                    )
                    for i in range(start, min(n_blocks, start + ADD_CHUNK))
                ]
            )


async def _through_bus(
    path: Path, events: list[ValidationEvent], doors: PrivacyDoors | None, clock: FakeClock
) -> tuple[float, float]:
    async with Store(path, clock=clock) as store:
        screen = None
        if doors is not None:

            async def screen(_source: str, evs):  # the daemon's: every event is a sensor's
                return await doors.screen_events(evs, "sensor")

        bus = Bus(store, screen=screen)
        chunks = [events[i : i + CHUNK] for i in range(0, len(events), CHUNK)]
        gc.collect()
        t = time.perf_counter()
        cpu = time.process_time()
        results = await asyncio.gather(*(bus.submit("fs", c) for c in chunks))
        cpu = time.process_time() - cpu
        elapsed = time.perf_counter() - t
    accepted = sum(r.accepted for r in results)
    assert accepted == len(events), (accepted, len(events))
    return elapsed, cpu


def _check_stored(on_path: Path, off_path: Path) -> int:
    """No raw e-mail address stored, placeholders are, and every digest came through
    as it was; returns the digests counted."""
    conn = _sqlite.connect(on_path)
    try:
        raw_emails = conn.execute(
            "SELECT count(*) FROM events WHERE observed LIKE '%@example.com%'"
        ).fetchone()[0]
        placeholders = conn.execute(
            "SELECT count(*) FROM events WHERE observed LIKE '%[email:%'"
        ).fetchone()[0]
        digests_on = conn.execute(DIGESTS).fetchone()[0]
    finally:
        conn.close()
    off = sqlite3.connect(off_path)
    try:
        digests_off = off.execute(DIGESTS).fetchone()[0]
    finally:
        off.close()
    assert raw_emails == 0, raw_emails
    assert placeholders > 0
    assert digests_on == digests_off, (digests_on, digests_off)
    return int(digests_on)


@benchmark("redact", position=7)
async def redact(ctx: Context) -> list[Result]:
    n_blocks = ctx.n(20_000, 200)
    n_events = ctx.n(60_000, 1000)
    seed_path = ctx.workdir / "redact-seed.db"
    on_path = ctx.workdir / "redact-on.db"
    off_path = ctx.workdir / "redact-off.db"
    for p in (seed_path, on_path, off_path):
        _sqlite.remove(p)
    clock = FakeClock(T0)
    ctx.progress(f"preloading {n_blocks:,} bound blocks")
    await _preload(seed_path, n_blocks, clock)
    _sqlite.checkpoint(seed_path)
    ctx.progress(f"building {n_events:,} events with realistic observations")
    events = _events(n_blocks, n_events)
    clock.set(T0 + 3600.0 + n_events * 0.01 + 60.0)
    policy = PrivacySettings(rules={"ip": "redact"})  # every kind redacted: the heaviest
    doors = PrivacyDoors(policy, KEY)

    ctx.progress("the screen alone (detectors, no store)")
    t = time.perf_counter()
    for i in range(0, n_events, CHUNK):
        await doors.screen_events(events[i : i + CHUNK], "sensor")
    screen_s = time.perf_counter() - t

    # Alternating rounds, each from a fresh copy of the preloaded file; the best of each
    # side counts (a shared machine's noise only ever slows a round down).
    off_s = on_s = off_cpu = on_cpu = float("inf")
    for r in range(ROUNDS):
        for path in (off_path, on_path):
            _sqlite.remove(path)
            shutil.copyfile(seed_path, path)
        order = ("off", "on") if r % 2 == 0 else ("on", "off")
        for side in order:
            ctx.progress(f"round {r + 1}/{ROUNDS}: {side}")
            if side == "off":  # Bus.submit -> apply_events, no screen
                wall, cpu = await _through_bus(off_path, events, None, clock)
                off_s, off_cpu = min(off_s, wall), min(off_cpu, cpu)
            else:  # Bus.submit -> screen -> apply_events; the last round's counters reported
                doors = PrivacyDoors(policy, KEY)
                wall, cpu = await _through_bus(on_path, events, doors, clock)
                on_s, on_cpu = min(on_s, wall), min(on_cpu, cpu)

    digests = _check_stored(on_path, off_path)
    for p in (seed_path, on_path, off_path):
        _sqlite.remove(p)

    # The figure is events per CPU second of the process (the loop and SQLite's thread):
    # on a shared machine wall-clock time measures the neighbours; both are reported.
    value = n_events / on_cpu
    baseline = n_events / off_cpu
    ratio = value / baseline
    stats = doors.redactor.stats
    return [
        Result(
            name="redact",
            value=value,
            unit="events/cpu-s",
            baseline=baseline,
            ratio=ratio,
            target=f"ratio >= {TARGET_RATIO}",
            ok=ratio >= TARGET_RATIO,
            extra={
                "blocks": n_blocks,
                "events": n_events,
                "chunk": CHUNK,
                "rounds": ROUNDS,
                "on_cpu_s": on_cpu,
                "off_cpu_s": off_cpu,
                "on_wall_s": on_s,
                "off_wall_s": off_s,
                "wall_ratio": off_s / on_s,
                "screen_events_per_s": n_events / screen_s,
                "screen_us_per_event": screen_s / n_events * 1e6,
                "redacted": dict(stats.redacted),
                "digests_intact": digests,
            },
        )
    ]
