"""Coverage: the share of live facts with a binding whose sensor is alive, by source and
tier — the store's one grouped query checked against the rule stated in Python."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwarden.memory.policy import coverage_of

if TYPE_CHECKING:
    from memwarden.memory import Block, Store


def _expected(blocks: list[Block], alive: set[str], quarantined: set[str]) -> dict[str, Any]:
    """The rule, independently: a live block counts when one of its bindings (not
    quarantined) names an alive sensor."""
    rows: dict[tuple[str, str], list[int]] = {}
    for b in blocks:
        if b.state.value == "archived":
            continue
        ok = any(x.sensor in alive for x in b.bindings if b.id not in quarantined)
        counts = rows.setdefault((b.source, b.tier.value), [0, 0])
        counts[0] += 1
        counts[1] += int(ok)
    return dict(coverage_of((s, t, n, c) for (s, t), (n, c) in rows.items()))


async def test_coverage_counts_live_facts_bound_to_alive_sensors(store: Store):
    """Unbound, bound to a dead sensor, archived and quarantined facts do not count."""
    made = []
    for i, (source, sensors) in enumerate(
        [
            ("agent", ["fs"]),
            ("agent", ["fs", "tests"]),
            ("agent", []),
            ("agent", ["tests"]),  # its sensor is down
            ("user", ["fs"]),
            ("user", []),
            ("import", ["http"]),
        ]
    ):
        bindings = [{"sensor": s, "path": f"f{i}"} for s in sensors]
        made.append(
            await store.add({"content": f"fact {i}", "source": source, "bindings": bindings})
        )
    archived = await store.add({"content": "gone", "bindings": [{"sensor": "fs", "path": "x"}]})
    await store.archive(archived.id, reason="test")
    quarantined = await store.add(
        {"content": "held", "source": "user", "bindings": [{"sensor": "fs", "path": "q"}]}
    )
    [held] = [b for b in await store.stored_bindings(["fs"]) if b.block_id == quarantined.id]
    await store.set_quarantine([(held, "a rule refuses it")])
    alive = {"fs", "http"}
    cov = await store.coverage(sorted(alive))
    blocks = [await store.get(b.id) for b in [*made, archived, quarantined]]
    assert cov == _expected(blocks, alive, {quarantined.id})
    assert (cov["live"], cov["checkable"]) == (8, 4)
    assert cov["share"] == 0.5
    assert cov["by_source"]["agent"] == {"live": 4, "checkable": 2, "share": 0.5}
    assert cov["by_source"]["user"] == {"live": 3, "checkable": 1, "share": 0.3333}
    assert cov["by_source"]["import"]["share"] == 1.0
    assert cov["by_tier"] == {"short_term": {"live": 8, "checkable": 4, "share": 0.5}}
    nothing = await store.coverage([])
    assert (nothing["checkable"], nothing["share"]) == (0, 0.0)


async def test_an_empty_memory_has_no_share(store: Store):
    assert await store.coverage(["fs"]) == {
        "live": 0,
        "checkable": 0,
        "share": None,
        "by_source": {},
        "by_tier": {},
    }


def test_many_sources_are_bounded_under_other():
    """Callers write any source: past the 20 biggest, the rest are summed as "(other)"."""
    rows = [(f"s{i:02}", "short_term", 100 - i, i % 2) for i in range(30)]
    cov = coverage_of(rows)
    assert len(cov["by_source"]) == 21
    assert "s19" in cov["by_source"]
    assert "s20" not in cov["by_source"]
    other = cov["by_source"]["(other)"]
    assert other["live"] == sum(100 - i for i in range(20, 30))
    assert other["checkable"] == 5
    assert cov["live"] == sum(100 - i for i in range(30))
