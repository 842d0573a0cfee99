"""A search runs on the loop when it fits its budget, and on a reader when it does not."""

from __future__ import annotations

import sqlite3

from memwarden.memory import _database


async def _three_blocks(store):
    for i in range(3):
        await store.add({"title": f"gateway {i}", "content": f"the gateway listens on port {i}"})


async def _gateways(make_store):
    """A store of 300 blocks that all match "gateway port"."""
    store = await make_store()
    await store.add_many(
        [{"title": f"gateway {i}", "content": f"gateway port {i}"} for i in range(300)]
    )
    return store


async def test_a_small_search_is_answered_on_the_loop(make_store):
    """Within the budget the rows come from the loop's own connection: no reader used."""
    store = await make_store()
    await _three_blocks(store)
    hits = await store.search("gateway port")
    assert len(hits) == 3
    assert (store.db.inline_reads, store.db.inline_overruns) == (1, 0)


async def test_a_search_past_its_budget_goes_to_a_reader_with_the_same_answer(make_store):
    """An interrupted inline read is run again on a reader: same hits, same order."""
    roomy = await make_store()
    # Enough matches that the statement runs past the progress handler's first look.
    await roomy.add_many(
        [{"title": f"gateway {i}", "content": f"gateway port {i}"} for i in range(300)]
    )
    tight = await make_store(roomy.path, inline_read_ms=1e-9)  # spent before it starts
    expected = [(h.id, h.score) for h in await roomy.search("gateway port", limit=50)]
    got = [(h.id, h.score) for h in await tight.search("gateway port", limit=50)]
    assert len(got) == 50
    assert got == expected
    assert (tight.db.inline_reads, tight.db.inline_overruns) == (0, 1)


async def test_no_budget_means_every_search_uses_a_reader(make_store):
    """``inline_read_ms=0`` turns the loop's connection off."""
    store = await make_store(inline_read_ms=0)
    await _three_blocks(store)
    assert len(await store.search("gateway")) == 3
    assert (store.db.inline_reads, store.db.inline_overruns) == (0, 0)


async def test_an_inline_search_sees_every_committed_write(make_store):
    """The loop's connection holds no snapshot between reads: each search sees the
    latest commit."""
    store = await make_store()
    await _three_blocks(store)
    assert len(await store.search("gateway")) == 3
    await store.add({"title": "gateway 4", "content": "a fourth gateway"})
    assert len(await store.search("gateway")) == 4
    assert store.db.inline_reads == 2


class _Clock:
    """A stand-in clock for the inline budget: 0 at the first reading (when the read
    starts), ``later`` at every reading after it."""

    def __init__(self, later: float) -> None:
        self.readings = 0
        self.later = later

    def __call__(self) -> float:
        self.readings += 1
        return 0.0 if self.readings == 1 else self.later


async def _paused_search(make_store, monkeypatch, *, wall_s: float) -> object:
    """A search of 300 matches (past the progress handler's first look) while the loop's
    CPU clock stands still and its wall clock is ``wall_s`` past the start."""
    store = await _gateways(make_store)
    cpu, wall = _Clock(0.0), _Clock(wall_s)
    monkeypatch.setattr(_database, "_cpu_clock", cpu)
    monkeypatch.setattr(_database, "_wall_clock", wall)
    assert len(await store.search("gateway port", limit=50)) == 50
    assert wall.readings > 1  # the progress handler did look
    return store


async def test_the_cpu_clock_is_not_read_while_the_wall_time_is_within_the_budget(
    make_store, monkeypatch
):
    """The thread cannot have used more CPU than the wall time that passed: while that is
    within the budget, the progress handler reads only the wall clock (the CPU clock is a
    system call), once when the read starts and never in the handler."""
    store = await _gateways(make_store)
    cpu, wall = _Advancing(0.0), _Advancing(0.0)
    monkeypatch.setattr(_database, "_cpu_clock", cpu)
    monkeypatch.setattr(_database, "_wall_clock", wall)
    assert len(await store.search("gateway port", limit=50)) == 50
    assert wall.readings > 1  # the progress handler did look
    assert cpu.readings == 1  # at the start only
    assert (store.db.inline_reads, store.db.inline_overruns) == (1, 0)


async def test_a_read_the_os_paused_is_not_redone(make_store, monkeypatch):
    """The budget is the loop thread's CPU time: wall time that passed while the thread
    did not run (past the budget, within the wall cap) does not interrupt the read."""
    store = await _paused_search(make_store, monkeypatch, wall_s=0.001)  # 2x the budget
    assert (store.db.inline_reads, store.db.inline_overruns) == (1, 0)


async def test_a_read_past_the_wall_cap_is_tried_once_more_inline(make_store, monkeypatch):
    """A read stopped by the wall-time cap (ten times its budget) with its CPU budget
    unspent (the OS paused the thread, or it waited for the disk) is run once more on
    the loop, not sent to a reader."""
    store = await _paused_search(make_store, monkeypatch, wall_s=0.01)  # 20x the budget
    assert (store.db.inline_reads, store.db.inline_overruns) == (1, 0)
    assert store.db.inline_retries == 1


class _Advancing:
    """A stand-in clock that moves ``step`` seconds at every reading."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        self.now += self.step
        return self.now


async def test_a_read_past_the_wall_cap_twice_goes_to_a_reader(make_store, monkeypatch):
    """In wall time an inline read gets ten times its budget at most, twice: stopped by
    the cap again, it goes to a reader, whatever CPU it used."""
    store = await _gateways(make_store)
    monkeypatch.setattr(_database, "_cpu_clock", _Clock(0.0))
    monkeypatch.setattr(_database, "_wall_clock", _Advancing(0.01))  # 20x the budget a look
    assert len(await store.search("gateway port", limit=50)) == 50
    assert (store.db.inline_reads, store.db.inline_overruns) == (0, 1)
    assert store.db.inline_retries == 1


async def test_a_read_past_its_cpu_budget_is_not_tried_again_inline(make_store, monkeypatch):
    """A read that spent its CPU budget goes to a reader at once (no second try here)."""
    store = await _gateways(make_store)
    # 2x the budget a look on both clocks (a thread's CPU time cannot run ahead of the wall
    # time), within the wall cap of the second look.
    monkeypatch.setattr(_database, "_cpu_clock", _Advancing(0.001))
    monkeypatch.setattr(_database, "_wall_clock", _Advancing(0.001))
    assert len(await store.search("gateway port", limit=50)) == 50
    assert (store.db.inline_reads, store.db.inline_overruns) == (0, 1)
    assert store.db.inline_retries == 0


async def test_an_interrupted_statement_is_prepared_once_more_not_at_every_search(
    make_store, monkeypatch
):
    """The ``sqlite3`` module can leave a statement whose run was interrupted marked "in
    use" in its cache, and then prepares its text anew at every later run. After an
    interrupted read the statement runs under a new text: prepared once, then cached.
    (The authorizer is called while a statement is prepared, never when a cached one runs;
    it makes preparing slow, hence the roomy budget.)"""
    store = await make_store(inline_read_ms=200)
    await store.add_many(
        [{"title": f"gateway {i}", "content": f"gateway port {i}"} for i in range(300)]
    )
    prepared: list[int] = []
    store.db._inline.set_authorizer(lambda *_: prepared.append(1) or sqlite3.SQLITE_OK)

    async def prepares() -> int:
        prepared.clear()
        assert len(await store.search("gateway port", limit=50)) == 50
        return len(prepared)

    assert await prepares() > 0  # the first run prepares the statement
    assert await prepares() == 0  # the next one finds it cached
    with monkeypatch.context() as patched:  # past the CPU budget at the first look
        patched.setattr(_database, "_cpu_clock", _Advancing(0.4))
        patched.setattr(_database, "_wall_clock", _Advancing(0.4))
        await prepares()
    assert (store.db.inline_reads, store.db.inline_overruns) == (2, 1)
    assert await prepares() > 0  # under its new text
    assert await prepares() == 0  # cached again
    assert await prepares() == 0
    assert store.db.inline_reads == 5


async def test_preparing_a_statement_does_not_count_against_the_budget(make_store, monkeypatch):
    """The budget runs from the progress handler's first look, once the statement is
    prepared: a preparation that took longer than the budget (here the clocks jump a
    second at every authorizer call, which SQLite makes only while preparing) does not
    send a small search to a reader."""
    store = await _gateways(make_store)
    cpu, wall = _Advancing(0.0), _Advancing(0.0)
    monkeypatch.setattr(_database, "_cpu_clock", cpu)
    monkeypatch.setattr(_database, "_wall_clock", wall)

    def preparing(*_: object) -> int:
        cpu.now += 1.0
        wall.now += 1.0
        return sqlite3.SQLITE_OK

    store.db._inline.set_authorizer(preparing)
    assert len(await store.search("gateway port", limit=50)) == 50
    assert cpu.now > 1.0  # the statement was prepared under the authorizer
    assert (store.db.inline_reads, store.db.inline_overruns) == (1, 0)
