"""The rest of the store's everyday calls as a contract both backends keep, through the one
façade: ``Store(path)`` and ``Store("postgresql://…")`` run the same script (same ids,
same clock): meta, dead letters, records, bindings, validity windows, history, dependents,
event counts, counts, coverage, health, the outbox, agents' high-water marks, retrievals
(core promotion) and the refuted matches a search hides. Each answer and the rows left
(outbox, dead letters, accesses, sessions, audit, meta) are equal on both; a last group
checks what only the façade decides (the backend, the URL forms, an embedder's index,
the SQLite-only parts)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel

from memwarden.embedders import StubEmbedder
from memwarden.errors import ConfigError, MemwardenError, StorageError
from memwarden.memory import Store
from memwarden.memory import _blocks as sqlite_blocks
from memwarden.memory import _dependencies as sqlite_dependencies
from memwarden.memory import _eventbatch as sqlite_eventbatch
from memwarden.memory._clock import FakeClock, from_ts
from memwarden.memory._location import shown_location, store_location
from memwarden.memory._model import ValidationEvent
from memwarden.memory.pg import _blocks as pg_blocks
from memwarden.memory.pg._vectors import PgVectorIndex
from tests.pg.contract import dump_tables, sequential_ids

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from tests.pgserver import PgServer

START = 1_767_225_600.0  # 2026-01-01Z
TABLES = {
    "outbox": ("created_at, topic, qos, retain", "id"),  # payloads: in the answers
    "dead_letters": ("received_at, source, reason, payload", "id"),
    "accesses": ("block_id, session_id, at", "id"),
    "sessions": ("block_id, session_id, first_at, last_at, count", "1, 2"),
    "audit": ("at, actor, action, block_id, detail", "id"),
    "meta": ("key, value", "key"),
    "blocks": (
        "id, tier, access_count, recent_access_count, session_count, stability, last_accessed_at",
        "rid",
    ),
}


@dataclasses.dataclass
class Backend:
    store: Store
    clock: FakeClock
    rows: Callable[[str], Awaitable[list[tuple[Any, ...]]]]

    async def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return await dump_tables(self.rows, TABLES)


def _same_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids handed out alike from here on (blocks, requests, reviews)."""
    new_id = sequential_ids()
    for module in (sqlite_blocks, sqlite_eventbatch, sqlite_dependencies, pg_blocks):
        monkeypatch.setattr(module, "new_id", new_id)


@pytest.fixture
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    async with Store(f"sqlite:///{tmp_path.relative_to('/')}/m.db", clock=clock) as store:

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with store.db.read() as conn:
                return [tuple(r) for r in await conn.execute_fetchall(sql)]

        yield Backend(store, clock, rows)


@pytest.fixture
async def pg_backend(pg_server: PgServer) -> AsyncIterator[Backend]:
    clock = FakeClock(START)
    async with Store(pg_server.create_database(), clock=clock) as store:
        db = store.pg_db
        assert db is not None

        async def rows(sql: str) -> list[tuple[Any, ...]]:
            async with db.read() as conn:
                return [tuple(r) for r in await conn.fetch(sql)]

        yield Backend(store, clock, rows)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    name = "sqlite_backend" if request.param == "sqlite" else "pg_backend"
    value: Backend = request.getfixturevalue(name)
    return value


def _plain(value: Any) -> Any:  # noqa: PLR0911
    """An answer as plain data (floats rounded: the two engines may sum in another order)."""
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, float):
        return round(value, 9)
    return value


def _ev(clock: FakeClock, event_id: str, subject: str, outcome: str, **kw: Any) -> ValidationEvent:
    return ValidationEvent(
        event_id=event_id,
        sensor=kw.pop("sensor", "fs"),
        subject=subject,
        outcome=outcome,
        observed_at=from_ts(clock.time() - kw.pop("ago", 1)),
        **kw,
    )


async def script(b: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Any]:  # noqa: PLR0915
    """Every call of the contract, with hostile inputs among them; the answers in order."""
    _same_ids(monkeypatch)
    s, clock, log = b.store, b.clock, []

    async def step(call: Awaitable[Any]) -> Any:
        try:
            result = _plain(await call)
        except MemwardenError as err:
            result = (type(err).__name__, str(err))
        log.append(result)
        clock.advance(7)
        return result

    ids = await s.add_many(
        [
            {
                "title": "Deploy",
                "content": "The deploy config lives in config/a.yaml",
                "bindings": [{"sensor": "fs", "subject": "a.yaml"}],
                "volatility": "high",
                "source": "docs",
                "tier": "long_term",
            },
            {
                "title": "Port",
                "content": "The API listens on port 8080 ünïcode",
                "bindings": [
                    {"sensor": "fs", "subject": "b.yaml"},
                    {"sensor": "http", "subject": "http://x/health"},
                ],
                "namespace": "other",
            },
            {"content": "'; DROP TABLE blocks; -- the deploy runbook", "tags": ["t'1"]},
        ]
    )
    dependent = await s.add({"content": "Depends on the deploy", "depends_on": [ids[0]]})
    await s.update(ids[2], {"content": "The deploy runbook, edited"})
    await s.set_meta("alive", "123.5")
    await step(s.get_meta("alive"))
    await step(s.get_meta("no such key"))
    await step(s.get_meta("'; DROP TABLE meta; --"))
    await s.apply_events([_ev(clock, "e1", "a.yaml", "confirmed")])
    clock.advance(30)
    await s.apply_events(
        [
            _ev(clock, "e2", "b.yaml", "refuted", message="gone"),
            _ev(clock, "e3", "http://x/health", "error", sensor="http"),
            _ev(clock, "e4", "unbound.yaml", "confirmed"),
        ]
    )
    await step(s.dead_letter(source="mqtt", reason="bad json", payload=b"{\xff\x00 nope"))
    await step(s.dead_letter(source="api", reason="too big", payload="é" * 70_000))
    await step(s.get_record(ids[1]))
    await step(s.get_record("0190a0b0-0000-7000-8000-0000000000ff"))
    await step(s.sensors_bound([*ids, "nope", ids[1]]))
    await step(s.sensors_bound([]))
    await step(s.validity_windows([*ids, "nope"]))
    await step(s.bindings_for_sensor("fs"))
    await step(s.bindings_for_sensor("no such sensor"))
    await step(s.versions(ids[2]))
    await step(s.versions("nope"))
    await step(s.dependents(ids[0]))
    await step(s.dependents(dependent.id))
    await step(s.event_counts(since=START, bucket_s=10))
    await step(s.event_counts(since=START + 30, bucket_s=7.5, scan=2))
    await step(s.recent_event_counts(since=START, bucket_s=10))
    await step(s.recent_event_counts(since=START + 35, bucket_s=3))
    await step(s.recent_event_counts(since=START + 10**6, bucket_s=3))
    await step(s.counts())
    await step(s.counts(namespaces=["other"]))
    await step(s.counts(namespaces=[]))
    await step(s.coverage(["fs"]))
    await step(s.coverage(["http", "fs"], namespaces=["default"]))
    await step(s.coverage([]))
    await step(s.health())
    await step(s.health(failing_sensors=["http"], sensors_total=2, namespaces=["other"]))
    clock.advance(10**7)  # long after: retention decays, windows ran out (stale)
    await step(s.health())
    await step(s.counts())
    await step(s.outbox_put([], max_rows=3))
    await step(
        s.outbox_put(
            [("t/a", b"\x00\xff", 1, False), ("t/b", b"two", 0, True), ("t/é", b"", 2, False)],
            max_rows=3,
        )
    )
    await step(s.outbox_put([("t/c", b"4", 1, True), ("t/d", b"5", 1, False)], max_rows=3))
    await step(s.outbox_stats())
    peeked = await step(s.outbox_peek(limit=2))
    await step(s.outbox_delete([m["id"] for m in peeked] + [10**9]))
    await step(s.outbox_delete([]))
    await step(s.outbox_peek())
    await step(s.outbox_stats())
    await step(s.agent_high_water([]))
    await step(s.agent_high_water(["a1", "nobody", "a1"]))
    for _ in range(8):  # spaced retrievals in several sessions: core (docs/RULES.md)
        await step(s.record_access([ids[0], ids[0], "nope"], session="s1"))
        await step(s.record_access([ids[0]], session=f"s{clock.time()}"))
        clock.advance(3700)
    await step(s.record_access([]))
    await step(s.record_access([ids[2]]))
    await step(s.count_refuted_matches("listens port"))
    await step(s.count_refuted_matches("listens port", namespaces=["default"]))
    await step(s.count_refuted_matches("port nothing-matches"))
    await step(s.count_refuted_matches("'; -- \"", mode="hybrid"))
    await step(s.count_refuted_matches("port", mode="vector"))
    # A NUL (which PostgreSQL text cannot hold) names nothing stored, on both backends.
    nul = "a\x00b"
    await step(s.get_meta(nul))
    await step(s.get_record(nul))
    await step(s.sensors_bound([nul, ids[0]]))
    await step(s.validity_windows([nul]))
    await step(s.bindings_for_sensor(nul))
    await step(s.versions(nul))
    await step(s.dependents(nul))
    await step(s.agent_high_water([nul]))
    await step(s.coverage([nul, "fs"]))
    await step(s.counts(namespaces=[nul]))
    await step(s.health(namespaces=[nul, "default"]))
    await step(s.record_access([nul, ids[1]], session=nul))
    await step(s.count_refuted_matches(nul))
    await step(s.get(nul))
    await step(s.find_by_subject(nul, "a.yaml"))
    await step(s.find_by_subject("fs", nul))
    await step(s.events_for(nul))
    return log


async def test_misc_answers_as_specified(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each answer on one backend, where the contract says what it must be."""
    log = await script(backend, monkeypatch)
    assert log[0] == "123.5"
    assert log[1] is None
    assert log[2] is None
    assert log[5]["id"].endswith("02")  # get_record
    assert log[6][0] == "NotFoundError"
    assert log[7] == {
        "0190a0b0-0000-7000-8000-000000000001": ["fs"],
        "0190a0b0-0000-7000-8000-000000000002": ["fs", "http"],
    }
    rows = await backend.dump()
    assert [r[:2] for r in rows["dead_letters"]][-2:] == [
        (rows["dead_letters"][-2][0], "mqtt"),
        (rows["dead_letters"][-1][0], "api"),
    ]
    assert len(rows["outbox"]) == 1  # 5 put, capped at 3, 2 delivered
    assert rows["meta"][0] == ("alive", "123.5")
    assert log[-6] == ("ValidationInputError", "session: must not contain a NUL character")
    assert log[-17] is None  # get_meta of a key with a NUL
    assert log[-4][0] == "NotFoundError"


async def test_both_backends_answer_alike(
    sqlite_backend: Backend, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same script: equal answers, call by call, and equal rows, table by table."""
    sqlite_log = await script(sqlite_backend, monkeypatch)
    pg_log = await script(pg_backend, monkeypatch)
    for i, (s, p) in enumerate(zip(sqlite_log, pg_log, strict=True)):
        assert p == s, i
    sqlite_rows, pg_rows = await sqlite_backend.dump(), await pg_backend.dump()
    for table in TABLES:
        assert pg_rows[table] == sqlite_rows[table], table
    assert any(r[1] == "core" for r in sqlite_rows["blocks"]), "the script promotes to core"


# ---------------------------------------------------------------------- the façade


async def test_the_facade_says_its_backend(sqlite_backend: Backend, pg_backend: Backend) -> None:
    assert sqlite_backend.store.backend == "sqlite"
    assert pg_backend.store.backend == "postgresql"
    assert pg_backend.store.location.startswith("postgresql://")
    assert sqlite_backend.store.location.endswith("m.db")
    assert pg_backend.store.default_search_mode == "keyword"


async def test_what_is_sqlites_alone_says_so_on_postgresql(pg_backend: Backend) -> None:
    s = pg_backend.store
    # Every method runs on PostgreSQL (tests/pg/test_store_facade.py); what is SQLite's
    # alone (its Database, its file) says so, without a traceback from deep inside.
    with pytest.raises(StorageError, match="on PostgreSQL"):
        _ = s.db
    with pytest.raises(StorageError, match="no file"):
        _ = s.path


async def test_a_store_on_postgresql_keeps_blocks_across_reopen(pg_server: PgServer) -> None:
    dsn = pg_server.create_database()
    async with Store(dsn) as store:
        block = await store.add({"content": "kept across a reopen"})
    async with Store(dsn.replace("postgresql://", "postgres://", 1)) as store:
        assert (await store.get(block.id)).content == "kept across a reopen"
        hits = await store.search("reopen")
        assert [h.id for h in hits] == [block.id]


def test_an_embedder_on_postgresql_gets_its_vector_index() -> None:
    """Search by meaning on PostgreSQL: the store's vectors are a PgVectorIndex (built
    without connecting), hybrid is the default mode."""
    store = Store("postgresql://u@localhost/db", embedder=StubEmbedder())
    assert isinstance(store.vectors, PgVectorIndex)
    assert store.default_search_mode == "hybrid"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("memwarden.db", "memwarden.db"),
        ("sqlite:///var/lib/m.db", "/var/lib/m.db"),
        ("sqlite://localhost/var/lib/m%20x.db", "/var/lib/m x.db"),
        ("SQLITE:///a.db", "/a.db"),
    ],
)
def test_sqlite_locations(value: str, expected: str) -> None:
    assert str(store_location(value)) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "mysql://root:hunter2@db/x",
        "sqlite://otherhost/a.db",
        "sqlite:///a.db?mode=ro",
        "sqlite:///",
        "sqlite:///dir/",
        "sqlite:///a\x00b",
        "postgresql://u:hunter2@h/db#frag",
        "postgresql://u:hunter2@h/db\n",
        "postgresql://" + "x" * 5000,
    ],
)
def test_bad_locations_are_config_errors_without_the_password(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        store_location(value)
    assert "hunter2" not in str(err.value)


def test_shown_location_hides_the_password() -> None:
    assert shown_location("postgresql://u:hunter2@h:5/db") == "postgresql://u:***@h:5/db"
    assert shown_location("/a/b.db") == "/a/b.db"


def test_postgresql_store_needs_no_connection_to_be_built() -> None:
    store = Store("postgresql://u:hunter2@127.0.0.1:1/db")
    assert store.backend == "postgresql"
    assert "hunter2" not in store.location


async def test_an_unreachable_server_is_one_storage_error_without_the_password() -> None:
    store = Store("postgresql://u:hunter2@127.0.0.1:1/db")
    with pytest.raises(StorageError) as err:
        await store.open()
    assert "hunter2" not in str(err.value)
    assert "cannot connect" in str(err.value)


def test_a_sqlite_store_never_imports_the_postgresql_driver(tmp_path: Path) -> None:
    """asyncpg is the ``postgres`` extra: a SQLite store (and its URL form, and the
    settings) work without it."""
    code = (
        "import sys\n"
        "from memwarden.memory import Store, store_location\n"
        "from memwarden.daemon import load_settings\n"
        f"Store({str(tmp_path / 'a.db')!r}); Store('sqlite:///x.db'); store_location('b.db')\n"
        f"load_settings(None, env={{}}, home={str(tmp_path)!r})\n"
        "assert 'asyncpg' not in sys.modules, 'asyncpg imported'\n"
        "assert 'memwarden.memory.pg' not in sys.modules, 'memory.pg imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
