"""Markdown summary of kernel records of many humming versions (the tables in docs/kernels.md).

    python benchmarks/kernels_report.py results/h200/gen1 > /tmp/kernels.md

Prints: one table of versions x cases (state, mean relative error and median time at the largest
batch size), the time table at every batch size, and each release judged against the release
before it by `compare_kernel_records` (only the verdicts that are not `same`; time verdicts only
where both releases have several runs). The records are read and grouped per environment as
`humming-matrix report` reads them (`report_kernels.load_kernel_runs`); `report` judges every
release against one baseline instead, and renders Markdown, JUnit and HTML.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from humming_matrix.kernels.judge import TimeVerdict, Verdict, compare_kernel_records
from humming_matrix.kernels.record import humming_version, versions_table
from humming_matrix.report.kernels import load_kernel_runs


def _by_version(store: Path) -> dict[str, list[Mapping[str, Any]]]:
    """Records per humming version in version order (environments of one version pooled), each
    environment's oldest run first."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for cell, runs in load_kernel_runs(store).items():
        grouped.setdefault(cell.humming or "?", []).extend(run.record for run in runs)
    return grouped


def _times(records: Sequence[Mapping[str, Any]]) -> str:
    cols: list[tuple[str, int]] = []
    for r in records:
        for c in r["cases"]:
            for b in c["batches"]:
                key = (c["name"], int(b["m"]))
                if key not in cols:
                    cols.append(key)
    lines = [
        "| humming | " + " | ".join(f"{n} m={m}" for n, m in cols) + " |",
        "| --- |" + " ---: |" * len(cols),
    ]
    for r in records:
        cells = []
        for name, m in cols:
            cell = "-"
            for c in r["cases"]:
                for b in c["batches"] if c["name"] == name else []:
                    if int(b["m"]) == m and isinstance(b.get("time"), dict):
                        cell = f"{float(b['time']['median_ms']) * 1000:.0f}"
            cells.append(cell)
        lines.append(f"| {humming_version(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    store = Path(argv[0]) if argv else Path("results/h200/gen1")
    grouped = _by_version(store)
    firsts = [runs[0] for runs in grouped.values()]
    print("### States, mean relative error and median time at the largest batch\n")
    print(versions_table(firsts))
    print("\n### Median kernel time (microseconds) per batch size\n")
    print(_times(firsts))
    print("\n### Each release against the one before\n")
    versions = list(grouped)
    for prev, cur in itertools.pairwise(versions):
        cmp = compare_kernel_records(grouped[prev], grouped[cur])
        quiet = (TimeVerdict.SAME, TimeVerdict.UNKNOWN)
        # Time verdicts count only where both sides have several runs (see judge.CaseVerdict).
        changed = [
            v
            for v in cmp.verdicts
            if v.verdict is not Verdict.SAME or (v.time not in quiet and v.time_runs_measured)
        ]
        if not changed:
            print(f"- {cur} vs {prev}: no change beyond the noise")
            continue
        print(
            f"- {cur} vs {prev}: "
            + "; ".join(
                f"{v.case} m={v.m}: {v.verdict.value}"
                + (
                    ""
                    if v.time in quiet or not v.time_runs_measured
                    else f", {v.time.value} {v.time_ratio:.2f}x"
                )
                + (f" ({v.note[:120]})" if v.note else "")
                for v in changed
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
