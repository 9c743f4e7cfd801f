"""No import cycles among ckpt_bench's modules.

A cycle works only while every module in it happens to be imported in a lucky order, and an import
inside a function just postpones the failure to the first call, so those count too. Read with `ast`
(nothing is imported): `import a.b`, `from a import b` (an edge to `a.b` when it is a module, else to
`a`), relative imports, at module level, inside functions and classes, and under `if TYPE_CHECKING:`
(never run, but a circle to a reader and to a type checker all the same). Not counted: the implicit
import of a module's parent packages (Python runs a package's `__init__` before its modules, whatever
those import).
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "ckpt_bench"


def module_names() -> dict[str, Path]:
    """Dotted name -> file, for every module under ckpt_bench/ (a package's `__init__` is the package)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _import_nodes(tree: ast.AST):
    """Every import statement, however deeply nested."""
    return (node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The bench modules `name` imports."""

    def known(dotted: str) -> str | None:  # the module itself, else its closest package we have
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(known(alias.name) for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            found.add(submodule if submodule in modules else known(base))
    return {target for target in found if target is not None and target != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def loops(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module: each holds a cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def cycle_in(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first inside the component)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def test_the_graph_sees_every_kind_of_import(tmp_path):
    modules = {name: tmp_path / f"{name}.py" for name in ("bench", "bench.a", "bench.b", "bench.c", "bench.d")}
    source = (
        "from typing import TYPE_CHECKING\n"
        "import bench.b\n"
        "from bench import c\n"
        "from . import d\n"
        "if TYPE_CHECKING:\n"
        "    from bench import e\n"
        "def later():\n"
        "    from bench.parsers import x\n"
    )
    modules["bench.a"].write_text(source)
    modules["bench.e"] = tmp_path / "bench.e.py"
    assert imports_of("bench.a", modules["bench.a"], modules) == {"bench.b", "bench.c", "bench.d", "bench.e",
                                                                  "bench"}


def test_cycles_are_found_and_shown():
    graph = {"a": {"b", "e"}, "b": {"c"}, "c": {"a", "e"}, "d": {"a"}, "e": {"b"}}
    assert loops(graph) == [{"a", "b", "c", "e"}]
    assert cycle_in({"a", "b", "c", "e"}, graph) == ["a", "b", "c", "a"]  # the shortest one
    assert loops({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_among_bench_modules():
    graph = import_graph()
    shown = []
    for component in loops(graph):
        cycle = cycle_in(component, graph)
        others = sorted(component - set(cycle))
        shown.append(" -> ".join(cycle) + (f"  (same loop: {', '.join(others)})" if others else ""))
    assert not shown, "import cycles:\n" + "\n".join(shown)
