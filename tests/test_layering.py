"""Imports flow one way: daemon -> sensors -> plugins -> memory, and no package reaches
into another one's private modules where those are the package's own business."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "src" / "memwarden"

# What each part of the package may import of the other parts (``memwarden.errors``,
# ``memwarden.jsonpointer`` and the top-level ``memwarden`` are open to all). Parts not
# listed (cli, demo) may import anything.
ALLOWED: dict[str, set[str]] = {
    "memory": set(),
    "embedders": set(),  # embedder plugins: the daemon loads one, the store takes it
    "plugins": {"memory"},
    "sensors": {"plugins", "memory"},
    "hosting": {"plugins", "memory"},  # building sensor runners: daemon and agent
    "mqtt": {"plugins", "memory"},  # the wire: daemon and agent; never the daemon
    # daemon answers with the API's documented answer types, which live with the client
    # (TypedDicts the client returns); the client never imports the daemon
    # and, on PostgreSQL, runs as a node of a cluster (leader lease, node registry, spool)
    "daemon": {
        "sensors",
        "hosting",
        "mqtt",
        "plugins",
        "memory",
        "client",
        "privacy",
        "embedders",
        "cluster",
    },
    "privacy": set(),  # detectors and the policy: the daemon applies them at its doors
    "agent": {"daemon", "hosting", "mqtt", "plugins", "memory"},
    "client": {"memory"},
    "mcp": {"client", "memory"},
    # several daemons on one PostgreSQL database: the clock and sleep_on, the backoff
    "cluster": {"memory", "plugins"},
}
# Open to all: errors, the top level, and neutral modules that import nothing of memwarden
# (jsonpointer: RFC 6901 pointers and JSON equality, for sensors and binding suggestions;
# _lazy: package attributes loaded on first use; _files: private state files, 0600).
OPEN = {"errors", "__init__", "jsonpointer", "_lazy", "_files"}
PARTS = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}

# Packages whose ``_private`` modules no module outside them may import (memory: what
# other parts use of the store is exported by ``memwarden.memory``).
CLOSED = ("daemon", "hosting", "mqtt", "memory")


def imported(source: str) -> set[str]:
    """Every ``memwarden...`` module a source imports (anywhere: functions, TYPE_CHECKING);
    ``from memwarden.daemon import _config`` counts as ``memwarden.daemon._config``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module.count(".") < 2:  # memwarden[.<package>]: names may be modules
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name == "memwarden" or name.startswith("memwarden.")}


def part(module: str) -> str:
    """``memwarden.daemon._mqtt`` -> ``daemon``; ``memwarden.errors`` -> ``errors``;
    ``memwarden`` and a name of its own (``memwarden.__version__``) -> ``__init__``."""
    levels = module.split(".")
    return levels[1] if len(levels) > 1 and levels[1] in PARTS else "__init__"


def problems(module: str, source: str) -> list[str]:
    """What ``module`` (whose text is ``source``) imports against the rules."""
    own = part(module)
    names = imported(source)
    out = []
    if own in ALLOWED:
        for other in sorted({part(n) for n in names} - {own, *OPEN} - ALLOWED[own]):
            out.append(
                f"{module} imports memwarden.{other}: {own} may import only {sorted(ALLOWED[own])}"
            )
    for name in sorted(names):
        levels = name.split(".")
        if (
            levels[1:2] != [own]
            and len(levels) > 2
            and levels[1] in CLOSED
            and levels[2].startswith("_")
        ):
            out.append(f"{module} imports {'.'.join(levels[:3])}: private to memwarden.{levels[1]}")
    return sorted(set(out))


def modules() -> dict[str, str]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        levels = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(levels)] = path.read_text(encoding="utf-8")
    return out


def test_imports_follow_the_layers():
    """No module imports a part of the package it sits above, or another's private module."""
    found = modules()
    assert "memwarden.mqtt._gaps" in found  # the walk sees the package
    assert [p for module, source in found.items() for p in problems(module, source)] == []


def test_the_check_catches_what_it_forbids():
    """A planted upward import and a private daemon import are both reported."""
    agent = "from memwarden.daemon._mqtt import Topics\nfrom memwarden.mqtt import Topics\n"
    assert problems("memwarden.agent._agent", agent) == [
        "memwarden.agent._agent imports memwarden.daemon._mqtt: private to memwarden.daemon"
    ]
    lazy = "def f():\n    from memwarden.daemon import _config\n"
    assert problems("memwarden.cli._app", lazy) == [
        "memwarden.cli._app imports memwarden.daemon._config: private to memwarden.daemon"
    ]
    store = "from memwarden.memory._store import Store\n"
    assert problems("memwarden.plugins.testing", store) == [
        "memwarden.plugins.testing imports memwarden.memory._store: private to memwarden.memory"
    ]
    assert problems("memwarden.memory.pg._reads", "from memwarden.memory._answers import x\n") == []
    wire = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import memwarden.daemon\n"
    only = "['memory', 'plugins']"
    assert problems("memwarden.mqtt._client", wire) == [
        f"memwarden.mqtt._client imports memwarden.daemon: mqtt may import only {only}"
    ]
    assert problems("memwarden.daemon._app", "from memwarden.daemon._mqtt import X\n") == []


def test_open_modules_import_nothing_of_memwarden():
    """What every part may import must not pull another part in behind it."""
    found = modules()
    for name in OPEN - {"__init__"}:
        assert imported(found[f"memwarden.{name}"]) == set(), name
