"""The PostgreSQL parts behind one object, as the store's façade holds them, for the
contract tests of the review queue, proposals and quarantine: a stand-in for
``Store("postgresql://…")`` that answers the calls those scripts make; and those tests'
fixtures (:func:`backend_fixtures`): the same script on the SQLite ``Store`` and on
:class:`PgParts`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from memwarden.memory import Store
from memwarden.memory import _blocks as sqlite_blocks
from memwarden.memory import _dependencies as sqlite_dependencies
from memwarden.memory import _eventbatch as sqlite_eventbatch
from memwarden.memory import _proposals as sqlite_proposals
from memwarden.memory import _reviews as sqlite_reviews
from memwarden.memory._clock import FakeClock
from memwarden.memory._compaction import CompactionConfig
from memwarden.memory.pg import PgDatabase
from memwarden.memory.pg import _blocks as pg_blocks
from memwarden.memory.pg._apply import PgEventLog
from memwarden.memory.pg._blocks import PgBlocks
from memwarden.memory.pg._proposals import PgProposals
from memwarden.memory.pg._quarantine import PgQuarantine
from memwarden.memory.pg._reads import PgReads
from memwarden.memory.pg._reviews import PgReviews
from memwarden.memory.policy import PolicyConfig
from tests.pg.contract import dump_tables, sequential_ids

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
    from pathlib import Path

    from memwarden.memory._clock import Clock
    from memwarden.memory._model import Block, ValidationEvent
    from memwarden.memory._results import ApplyResult
    from tests.pgserver import PgServer

__all__ = ["Backend", "PgParts", "backend_fixtures", "same_ids"]


def same_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids handed out alike from here on (blocks, requests, reviews, decisions, proposals)."""
    new_id = sequential_ids()
    for module in (
        sqlite_blocks,
        sqlite_eventbatch,
        sqlite_dependencies,
        sqlite_reviews,
        sqlite_proposals,
        pg_blocks,
    ):
        monkeypatch.setattr(module, "new_id", new_id)


class PgParts:
    """``PgBlocks``, ``PgReads``, ``PgEventLog``, ``PgReviews``, ``PgProposals`` and
    ``PgQuarantine`` on one database, each call sent to the part that has it."""

    def __init__(self, db: PgDatabase, clock: Clock) -> None:
        cfg = PolicyConfig()  # the Store's default
        self.db = db
        self.clock = clock
        self.blocks = PgBlocks(db, clock, cfg)
        self.reads = PgReads(db, clock, cfg)
        self.events = PgEventLog(db, clock, cfg, CompactionConfig())
        self.reviews = PgReviews(db, self)
        self.proposals = PgProposals(db, clock)
        self.quarantine = PgQuarantine(db, clock, apply=self.apply_events)

    async def get(self, block_id: str) -> Block:
        return await self.reads.get(block_id)

    async def update(
        self,
        block_id: str,
        patch: Mapping[str, Any],
        *,
        actor: str = "agent",
        expected_version: int | None = None,
    ) -> Block:
        await self.blocks.update(block_id, patch, actor=actor, expected_version=expected_version)
        return await self.get(block_id)

    async def apply_events(
        self, events: Sequence[ValidationEvent], *, bound_only: bool = False
    ) -> ApplyResult:
        return await self.events.apply_events(events, bound_only=bound_only)

    def __getattr__(self, name: str) -> Any:
        for part in ("blocks", "reads", "reviews", "proposals", "quarantine"):
            found = getattr(self.__dict__[part], name, None)
            if found is not None:
                return found
        raise AttributeError(name)

    async def rows(self, sql: str) -> list[tuple[Any, ...]]:
        async with self.db.read() as conn:
            return [tuple(r) for r in await conn.fetch(sql)]


class Backend:
    """One backend's store calls (the SQLite ``Store``, or :class:`PgParts`) and its raw
    rows; ``dump`` reads ``tables`` (``{table: (columns, order)}``), normalised."""

    def __init__(
        self,
        api: Any,
        clock: FakeClock,
        rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
        tables: Mapping[str, tuple[str, str]],
    ) -> None:
        self.api = api
        self.clock = clock
        self.rows = rows
        self.tables = tables

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await dump_tables(self.rows, self.tables)


def backend_fixtures(tables: Mapping[str, tuple[str, str]], start: float) -> tuple[Any, Any, Any]:
    """The fixtures ``sqlite_backend``, ``pg_backend`` and ``backend`` (both, by
    parameter) of a contract test module whose rows are ``tables`` and whose clock starts
    at ``start``: ``sqlite_backend, pg_backend, backend = backend_fixtures(TABLES, START)``."""

    @pytest.fixture
    async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
        clock = FakeClock(start)
        async with Store(tmp_path / "m.db", clock=clock) as store:

            async def rows(sql: str) -> list[tuple[Any, ...]]:
                async with store.db.read() as conn:
                    return [tuple(r) for r in await conn.execute_fetchall(sql)]

            yield Backend(store, clock, rows, tables)

    @pytest.fixture
    async def pg_backend(pg_server: PgServer) -> AsyncIterator[Backend]:
        clock = FakeClock(start)
        async with PgDatabase(pg_server.create_database()) as db:
            parts = PgParts(db, clock)
            yield Backend(parts, clock, parts.rows, tables)

    @pytest.fixture(params=["sqlite", "postgresql"])
    def backend(request: pytest.FixtureRequest) -> Backend:
        name = "sqlite_backend" if request.param == "sqlite" else "pg_backend"
        value: Backend = request.getfixturevalue(name)
        return value

    return sqlite_backend, pg_backend, backend
