"""Export and import as a contract both backends keep: a lived-in store is built through
the SQLite Store and copied to PostgreSQL (``copy_to_postgres``); both export it page by
page, and an empty store of each backend imports the export (hostile objects among
them), with the same clock: every page, answer, error and row is equal, and what an
import wrote exports again as it was."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memwarden.errors import MemwardenError, ValidationInputError
from memwarden.memory import Store, ValidationEvent, from_ts
from memwarden.memory._clock import FakeClock
from memwarden.memory.pg import PgDatabase, copy_to_postgres
from memwarden.memory.pg._transfer import PgTransfer
from memwarden.memory.policy import PolicyConfig
from tests.pg.contract import database_copy, every_row, pg_tables

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from tests.pgserver import PgServer

START = 1_767_225_600.0  # 2026-01-01Z
APP = "config/app.yaml"


async def _world(path: Path, clock: FakeClock) -> None:
    """Blocks with bindings, a shared event, a compacted history, an edit, a dependency,
    an archived and a refuted block, awkward text."""
    async with Store(path, clock=clock) as store:
        timeout = await store.add(
            {
                "title": "Café «naïve» 🐘",
                "content": "The timeout is 30 s; '\"quoted\"' \\ back",
                "tags": ["deploy", "ünïcode"],
                "bindings": [{"sensor": "fs", "path": APP, "key": "/http/timeout", "equals": 30}],
            }
        )
        await store.add(
            {"content": "Timeouts are set in app.yaml", "bindings": [{"sensor": "fs", "path": APP}]}
        )
        base = await store.add({"content": "The service reads its config at start", "tags": ["x"]})
        await store.add({"content": "A restart applies config changes", "depends_on": [base.id]})
        gone = await store.add({"content": "An old fact", "namespace": "elsewhere"})
        for outcome in ("confirmed", "confirmed", "confirmed", "refuted"):
            await store.apply_events(
                [
                    ValidationEvent(
                        sensor="fs",
                        subject=APP,
                        outcome=outcome,
                        observed_at=from_ts(clock.time()),
                        observed="30",
                        message=f"{outcome} \u2028",
                    )
                ]
            )
            clock.advance(60)
        await store.update(base.id, {"content": "The service reads its config at each start"})
        await store.archive(gone.id, reason="obsolete")
        await store.update(timeout.id, {"importance": 0.9})
        clock.advance(60)


@dataclass(frozen=True)
class World:
    base: Path
    database: str
    tables: dict[str, list[str]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pg_server: PgServer) -> Iterator[World]:
    """The lived-in store, built once, and the PostgreSQL database it was copied to."""
    base = tmp_path_factory.mktemp("transfer")
    asyncio.run(_world(base / "m.db", FakeClock(START)))
    dsn = pg_server.create_database("transfer")
    asyncio.run(copy_to_postgres(base / "m.db", dsn))

    async def tables() -> dict[str, list[str]]:
        async with PgDatabase(dsn) as db, db.read() as conn:
            return await pg_tables(conn)

    name = dsn.rsplit("/", 1)[-1]
    yield World(base, name, asyncio.run(tables()))
    pg_server.psql(f'DROP DATABASE "{name}" WITH (FORCE)')


class Backend:
    """One backend's transfer: the lived-in store (``full``), an empty one (``empty``),
    and the empty one's rows."""

    def __init__(
        self,
        full: Any,
        empty: Any,
        clock: FakeClock,
        rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
        tables: dict[str, list[str]],
    ) -> None:
        self.full = full
        self.empty = empty
        self.clock = clock
        self.rows = rows
        self.tables = tables

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await every_row(self.rows, self.tables)


@pytest.fixture
async def sqlite_backend(tmp_path: Path, world: World) -> AsyncIterator[Backend]:
    clock = FakeClock(START + 600)
    async with (
        Store(world.base / "m.db", clock=clock) as full,
        Store(tmp_path / "empty.db", clock=clock) as empty,
    ):

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with empty.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        yield Backend(full, empty, clock, rows, world.tables)


@pytest.fixture
async def pg_backend(pg_server: PgServer, world: World) -> AsyncIterator[Backend]:
    clock = FakeClock(START + 600)
    policy = PolicyConfig()
    with (
        database_copy(pg_server, world.database) as full_name,
        database_copy(pg_server, "template1") as empty_name,
    ):
        async with (
            PgDatabase(pg_server.dsn(full_name)) as full,
            PgDatabase(pg_server.dsn(empty_name)) as empty,
        ):

            async def rows(sql: str) -> list[tuple[Any, ...]]:
                async with empty.read() as conn:
                    return [tuple(r) for r in await conn.fetch(sql)]

            yield Backend(
                PgTransfer(full, clock, policy),
                PgTransfer(empty, clock, policy),
                clock,
                rows,
                world.tables,
            )


async def _outcome(call: Awaitable[Any], *, exact: bool = True) -> Any:
    """A call's answer (an import's report as its ids), or its error: (type, message,
    field errors), or without the message where the backends' drivers word it."""
    try:
        answer = await call
    except MemwardenError as err:
        fields = err.errors if isinstance(err, ValidationInputError) else None
        if not exact and fields is not None:
            return (type(err).__name__, [f for f, _ in fields])
        return (type(err).__name__, str(err), fields)
    if hasattr(answer, "added"):
        return (answer.added, answer.existing, sorted(answer.sensors))
    return answer


async def _pages(store: Any, limit: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after = None
    while page := await store.export_blocks(after=after, limit=limit):
        rows.extend(page)
        after = page[-1]["id"]
    return rows


def _hostile(exported: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Batches an import must refuse whole (each holds a good object first)."""
    good = exported[0]

    def changed(**record: Any) -> dict[str, Any]:
        return {**exported[1], "record": {**exported[1]["record"], **record}}

    return [
        [good, {"format": "memwarden.export/1", "record": {}}],
        [good, changed(content="nul \x00 inside")],
        [good, changed(title="\ud800")],
        [good, {**exported[1], "bindings": [{"sensor": "fs"}]}],
        [good, {**exported[1], "history": [{"event": {"event_id": "e"}}]}],
        [good, {**exported[1], "depends_on": "not a list"}],
        [good, changed(id="another")],
    ]


async def script(b: Backend) -> list[Any]:
    """Exports of the lived-in store, imports into the empty one; answers and rows."""
    log: list[Any] = []

    async def step(call: Awaitable[Any], *, exact: bool = True) -> Any:
        result = await _outcome(call, exact=exact)
        log.append(result)
        b.clock.advance(7)
        return result

    exported = await _pages(b.full, 2)
    log.append(exported)
    log.append(await _pages(b.full, 500) == exported)
    await step(b.full.export_blocks(after=exported[2]["id"], limit=1))
    await step(b.full.export_blocks(limit=0))
    await step(b.full.export_blocks(after="not-an-id"))
    for batch in _hostile(exported):
        await step(b.empty.import_blocks(batch))
    await step(  # a value of the wrong kind: both refuse it, by the same check
        b.empty.import_blocks(
            [{**exported[1], "record": {**exported[1]["record"], "importance": "high"}}]
        )
    )
    await step(  # a column's value PostgreSQL cannot take: refused, each driver's words
        b.empty.import_blocks(
            [{**exported[1], "record": {**exported[1]["record"], "access_count": 2**70}}]
        ),
        exact=False,
    )
    log.append(await b.dump())  # nothing written by the refused batches
    await step(b.empty.import_blocks(exported[:2], quarantine={(0, 0): "rule"}))
    await step(b.empty.import_blocks(exported))  # the first two are there already
    await step(b.empty.import_blocks(exported, actor="again"))  # all there: no audit row
    # An older or newer schema: unknown columns dropped, missing ones take defaults.
    renamed = {**exported[0], "id": "0190a0b0-0000-7000-8000-0000000000aa"}
    record = {k: v for k, v in exported[0]["record"].items() if k != "signals"}
    renamed["record"] = {**record, "id": renamed["id"], "future_column": 1}
    await step(b.empty.import_blocks([renamed]))
    log.append(await b.dump())
    again = await _pages(b.empty, 3)
    log.append(again)
    originals = {r["id"]: r for r in exported}
    for row in again:  # what was imported exports as it was (bar the quarantine)
        if row["id"] in originals and row["id"] != exported[0]["id"]:
            assert row == originals[row["id"]]
    return log


async def test_transfer_answers_and_rows_are_the_same_on_both_backends(
    sqlite_backend: Backend, pg_backend: Backend
) -> None:
    """Every page, answer, error and row of the transfer script is equal on SQLite and
    PostgreSQL."""
    theirs = await script(sqlite_backend)
    ours = await script(pg_backend)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        assert a == b, f"step {i}"
    assert len(ours[0]) == 5


async def test_a_large_import_is_all_or_nothing(pg_backend: Backend) -> None:
    """500 objects import in one call; with one bad object at the end, none of them do."""
    exported = await _pages(pg_backend.full, 500)
    many = []
    for i in range(500):
        obj = exported[i % len(exported)]
        block_id = f"0190a0b0-0000-7000-8000-{i:012x}"
        many.append({**obj, "id": block_id, "record": {**obj["record"], "id": block_id}})
    bad = {**many[-1], "record": {**many[-1]["record"], "content": "\x00"}}
    with pytest.raises(ValidationInputError):
        await pg_backend.empty.import_blocks([*many[:-1], bad])
    assert (await pg_backend.dump())["blocks"] == []
    report = await pg_backend.empty.import_blocks(many)
    assert len(report.added) == 500
    assert len(await _pages(pg_backend.empty, 500)) == 500
