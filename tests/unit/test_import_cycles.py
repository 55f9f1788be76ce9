"""The judging and report modules import each other without a cycle (issue 15: compare_lm_eval ->
report_markdown -> report -> report_lm_eval -> compare_lm_eval was one), counting the imports
made for type checking only, since they still tie the modules together."""

from __future__ import annotations

import ast
from pathlib import Path

import humming_matrix

PACKAGE = Path(humming_matrix.__file__).parent
JUDGING = {"stats", "family", "paired_judge", "compare", "compare_lm_eval", "bisect_report",
           "report", "report_rows", "report_text", "report_markdown", "report_junit",
           "report_html", "report_lm_eval", "report_kernels"}


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name.removeprefix("humming_matrix.") for name in found
            if name.startswith("humming_matrix.")}


def test_no_import_cycle_among_the_judging_and_report_modules() -> None:
    graph = {name: imports_of(PACKAGE / f"{name}.py") & JUDGING for name in JUDGING}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(JUDGING):
        if name not in state:
            visit(name, [name])
    assert cycles == []
