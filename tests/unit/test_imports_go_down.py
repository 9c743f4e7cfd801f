"""Imports go down (docs/architecture.md, "The layers"): every import of the package, at module level or
inside a function, read from the source, against the layer table the docs draw."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ckpt_bench"


def layers() -> dict[str, int]:
    """The docs' table: each top-level package and its layer (0 at the bottom)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = re.search(r"<!-- layers:.*?-->\n```\n(.*?)```\n<!-- /layers -->", text, re.S)
    assert table, "docs/architecture.md lost its layer table"
    layer_of = {}
    for line in table.group(1).splitlines():
        number, packages = re.match(r"(\d+)  (.*?)   ", line).groups()  # three spaces before the words
        layer_of.update({package: int(number) for package in packages.split()})
    return layer_of


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every ckpt_bench module `path` imports, relative imports resolved, `from X import name` counting
    X.name where that is a module."""
    own = module_name(path, root).split(".")
    package = own if path.name == "__init__.py" else own[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if (root / Path(*f"{base}.{alias.name}".split("."))).with_suffix(".py").exists()
                         or (root / Path(*f"{base}.{alias.name}".split("."))).is_dir())
    return {name for name in found if name.startswith("ckpt_bench.")}


def package_of(module: str, depth: int, root: Path = ROOT) -> str | None:
    """The package `module` belongs to, `depth` levels below ckpt_bench (None: a module at a shallower level)."""
    parts = module.split(".")
    if len(parts) == 1:  # the package's own __init__, run before any of its modules: above every layer
        return None
    if len(parts) <= depth + 1 and not (root / Path(*parts)).is_dir():
        return None
    return ".".join(parts[:depth + 1])


def package_imports(depth: int, root: Path = ROOT) -> dict[tuple[str, str], set[str]]:
    """(importing package, imported package) -> the importing files, between packages `depth` levels deep."""
    edges = defaultdict(set)
    for path in (root / "ckpt_bench").rglob("*.py"):
        source = package_of(module_name(path, root), depth, root)
        for module in imported_modules(path, root):
            target = package_of(module, depth, root)
            if source and target and source != target:
                edges[source, target].add(str(path.relative_to(root)))
    return edges


def test_every_package_has_a_layer():
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    layer_of = layers()
    assert packages == set(layer_of), (f"in the code, not the docs' table: {sorted(packages - set(layer_of))}; "
                                       f"in the table, not the code: {sorted(set(layer_of) - packages)}")


def test_imports_go_down():
    layer_of = layers()
    upward = {f"{source} (layer {layer_of[source[11:]]}) imports {target} (layer {layer_of[target[11:]]}): "
              f"{sorted(files)}"
              for (source, target), files in package_imports(1).items()
              if layer_of[target[11:]] >= layer_of[source[11:]]}
    assert not upward, "\n".join(sorted(upward))


def test_no_two_packages_import_each_other():
    """Sub-packages included (backends.megatron and backends.workload, projection.rank_costs ...)."""
    both_ways = set()
    for depth in (1, 2, 3):
        edges = package_imports(depth)
        both_ways |= {f"{a} <-> {b}: {sorted(files)} / {sorted(edges[b, a])}"
                      for (a, b), files in edges.items() if (b, a) in edges and a < b}
    assert not both_ways, "\n".join(sorted(both_ways))


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """What the checks above read: a function-level import, relative ones, `from package import module`."""
    for folder in ("core", "present", "present/one", "present/two"):
        (tmp_path / "ckpt_bench" / folder).mkdir(parents=True)
        (tmp_path / "ckpt_bench" / folder / "__init__.py").write_text("")
    (tmp_path / "ckpt_bench" / "present" / "one" / "rows.py").write_text("from ..two import html\n")
    (tmp_path / "ckpt_bench" / "present" / "two" / "html.py").write_text("from ..one.rows import x\n")
    (tmp_path / "ckpt_bench" / "core" / "probe.py").write_text(
        "def late():\n    from ckpt_bench.present import one\n")
    assert imported_modules(tmp_path / "ckpt_bench" / "core" / "probe.py", tmp_path) == {
        "ckpt_bench.present", "ckpt_bench.present.one"}
    assert imported_modules(tmp_path / "ckpt_bench" / "present" / "one" / "rows.py", tmp_path) == {
        "ckpt_bench.present.two", "ckpt_bench.present.two.html"}
    assert set(package_imports(1, tmp_path)) == {("ckpt_bench.core", "ckpt_bench.present")}
    assert set(package_imports(2, tmp_path)) == {("ckpt_bench.present.one", "ckpt_bench.present.two"),
                                                 ("ckpt_bench.present.two", "ckpt_bench.present.one")}
