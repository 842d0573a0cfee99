"""Namespaces in the store: every scoped read finds only the namespaces asked for, and a
migrated store puts every existing block in ``default``."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import pytest

from memwarden.errors import NotFoundError, ValidationInputError
from memwarden.memory import Store
from memwarden.memory._schema import MIGRATIONS, split_statements
from memwarden.memory.policy import PolicyConfig

if TYPE_CHECKING:
    from pathlib import Path


async def test_scoped_search_is_not_crowded_out_by_another_namespace(make_store):
    """Many better matches in alpha, one in beta: beta's search still finds its own
    (the candidates come from its namespace), alpha's never; unscoped finds both."""
    policy = PolicyConfig.model_validate({"ranking": {"candidates": 10}})
    store: Store = await make_store(policy=policy)
    await store.add_many(
        [{"content": f"kettle kettle kettle {i}", "namespace": "alpha"} for i in range(30)]
    )
    beta = await store.add(
        {"content": "a kettle somewhere in a long sentence", "namespace": "beta"}
    )
    # Unscoped, alpha's ten best matches are all the candidates there are: beta's is not.
    assert beta.id not in {h.id for h in await store.search("kettle", limit=10)}
    scoped = await store.search("kettle", limit=5, namespaces=["beta"])
    assert [h.id for h in scoped] == [beta.id]
    assert all(h.block.namespace == "alpha" for h in await store.search("kettle", limit=5))
    assert await store.search("kettle", namespaces=[]) == []


async def test_scoped_lookups_listing_counts_and_dependencies(store: Store):
    """resolve_id, list_blocks, counts, coverage, health and depends_on honour the scope."""
    a = await store.add({"content": "alpha fact", "namespace": "alpha", "tags": ["t"]})
    b = await store.add({"content": "beta fact", "namespace": "beta", "tags": ["t"]})
    assert await store.resolve_id(a.id, namespaces=["alpha"]) == a.id
    with pytest.raises(NotFoundError):
        await store.resolve_id(a.id, namespaces=["beta"])
    with pytest.raises(NotFoundError):
        await store.resolve_id(a.id[-8:], namespaces=["beta"])
    listed = await store.list_blocks({"tag": "t", "namespaces": ["beta"]})
    assert [x.id for x in listed] == [b.id]
    assert len(await store.list_blocks({"tag": "t"})) == 2
    assert (await store.counts(namespaces=["beta"]))["blocks"] == 1
    assert (await store.counts())["blocks"] == 2
    assert (await store.coverage([], namespaces=["alpha"]))["live"] == 1
    assert (await store.visible_ids([a.id, b.id], ["beta"])) == [b.id]
    with pytest.raises(ValidationInputError) as err:
        await store.add({"content": "leans across", "namespace": "beta", "depends_on": [a.id]})
    assert err.value.errors[0][0] == "depends_on.0"
    leaning = await store.add({"content": "leans", "namespace": "alpha", "depends_on": [a.id]})
    assert leaning.depends_on == [a.id]


async def test_erasure_targets_and_bound_to_stay_in_the_namespace(store: Store):
    """An erasure by tag, words or id selects the caller's namespace only; bound_to (the
    dependency proposals' source) names facts of the namespace asked for only."""
    binding = {"sensor": "fs", "path": "/srv/app.toml"}
    a = await store.add({"content": "zebra alpha", "namespace": "alpha", "bindings": [binding]})
    b = await store.add({"content": "zebra beta", "namespace": "beta", "bindings": [binding]})
    by_words = await store.erasure_targets(query="zebra", namespaces=["beta"])
    assert [t.id for t in by_words] == [b.id]
    with pytest.raises(NotFoundError):
        await store.erasure_targets(ids=[a.id], namespaces=["beta"])
    subject = ("fs", "/srv/app.toml")
    assert (await store.bound_to([subject]))[subject] == [a.id, b.id]
    assert (await store.bound_to([subject], namespace="beta"))[subject] == [b.id]


def test_migration_puts_existing_blocks_in_default(tmp_path: Path):
    """A store of the previous version: its blocks get namespace 'default', indexed."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:-1]:
        for statement in split_statements(script):
            conn.execute(statement)
    conn.execute(
        "INSERT INTO blocks (id, content, source, category, info_type, volatility, tier, state,"
        " reliability, importance, validity_window_s, half_life_s, created_at, updated_at)"
        " VALUES ('b1', 'old', 'agent', 'semantic', 'semi_static', 'medium', 'short_term',"
        " 'unverified', 0.5, 0.5, 60, 60, 0, 0)"
    )
    for statement in split_statements(MIGRATIONS[-1]):
        conn.execute(statement)
    assert conn.execute("SELECT namespace FROM blocks").fetchall() == [("default",)]
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM blocks WHERE namespace = 'x' ORDER BY id"
    ).fetchall()
    assert "blocks_namespace" in str(plan)
    conn.close()
