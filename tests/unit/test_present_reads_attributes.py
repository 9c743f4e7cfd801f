"""Presentation reads the typed report (report.schema.Report) by attribute, never report.json by string key:
a key renamed in the report then fails where it is read, not as a silent '-' in a table. The few reads by
key left are of what is not a report, each named here with why."""

from __future__ import annotations

import ast

from helpers import ROOT

SCANNED = sorted((ROOT / "ckpt_bench" / "present").glob("*.py")) + [ROOT / "ckpt_bench" / "cli" / "report.py"]
# (file, function) -> why it reads a dict by a string key.
ALLOWED = {
    ("summary.py", "print_preview"): "a plan's preview (--plan), written by a backend's preview(): no report",
    ("projection.py", "hosts_rows"): "a plan's hosts (--plan), written by the workload's preview(): no report",
    ("rows.py", "swept"): "the sweep file's `sweep:` lists, an open section of report.sweep_results.SweepResults",
    ("report.py", "_report"): "whether assembly gave one run's report or several runs' (`runs`), before typing",
    ("report.py", "_with_projection"): "a report's run directory, before typing: the projection's inputs are there",
}


def string_key_reads(source: str) -> list[tuple[str, int]]:
    """(enclosing function, line) of every `x["key"]` and `x.get("key", ...)` in `source`."""
    reads = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        constant_key = (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                        and isinstance(node.slice.value, str))
        constant_get = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str))
        if constant_key or constant_get:
            reads.append((function, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return reads


def test_the_scan_finds_both_kinds_of_read():
    source = 'def f(report):\n    return report["saves"], report.get("load"), report.saves, report[0], table.get(key)\n'
    assert string_key_reads(source) == [("f", 2), ("f", 2)]


def test_presentation_reads_the_report_by_attribute():
    found: dict[tuple[str, str], list[int]] = {}
    for path in SCANNED:
        for function, line in string_key_reads(path.read_text()):
            found.setdefault((path.name, function), []).append(line)
    unexpected = {place: lines for place, lines in found.items() if place not in ALLOWED}
    assert not unexpected, f"read the typed report (report.schema.Report) by attribute instead: {unexpected}"
    assert set(found) == set(ALLOWED), f"no longer reads by key, remove from ALLOWED: {set(ALLOWED) - set(found)}"
