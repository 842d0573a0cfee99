"""No import cycles inside memwarden: the imports between its modules form a DAG.

Imports inside functions (the CLI's lazy imports) count: a lazy import back into a module
that imports you is still a cycle, hidden. Imports under ``if TYPE_CHECKING:`` do not.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import memwarden

ROOT = Path(memwarden.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["memwarden", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, *, lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported (not under TYPE_CHECKING); with ``lazy``,
    those inside functions too."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                stack.extend(node.body)
            stack.extend(node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend([*node.body, *node.orelse, *node.finalbody])
            for handler in node.handlers:
                stack.extend(handler.body)
        elif isinstance(node, ast.ClassDef) or (
            lazy and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ):
            stack.extend(node.body)
        elif lazy and isinstance(node, ast.With | ast.AsyncWith | ast.For | ast.While):
            stack.extend([*node.body, *getattr(node, "orelse", [])])
    return found


def import_graph(*, lazy: bool = False) -> dict[str, set[str]]:
    """Each memwarden module and the memwarden modules it imports when it is imported
    (``lazy``: or when any of its functions runs)."""
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), lazy=lazy):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            edges.update(t for t in targets if t in files and t != name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle (its modules in import order, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_memwarden_has_no_import_cycle():
    """A cycle works only by import order, and breaks when someone imports the other side
    first: the imports, lazy ones in functions included, must form a DAG."""
    cycle = find_cycle(import_graph(lazy=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_check_sees_a_cycle():
    """The checker itself: a two-module cycle and a longer one are found; a DAG is not."""
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_cli_modules_are_in_the_graph():
    """The graph reads the CLI: the command modules import the shared one, not each other."""
    graph = import_graph()
    assert "memwarden.cli._common" in graph["memwarden.cli._review"]
    assert "memwarden.cli._app" not in graph["memwarden.cli._review"]
