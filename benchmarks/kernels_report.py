"""Markdown summary of kernel records of many humming versions (the tables in docs/kernels.md).

    python benchmarks/kernels_report.py results/h200 > /tmp/kernels.md

Prints: one table of versions x cases (state, mean relative error and median time at the largest
batch size), the time table at every batch size, and each release judged against the release
before it by `compare_kernel_records` (only the verdicts that are not `same`; time verdicts only
where both releases have several runs).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from humming_matrix.kernels.judge import TimeVerdict, Verdict, compare_kernel_records
from humming_matrix.kernels.record import humming_version, load_kernel_record, versions_table
from humming_matrix.results import RecordKind, record_paths


def _load(store: Path) -> list[dict[str, Any]]:
    records = [load_kernel_record(p) for p in record_paths(store, RecordKind.KERNELS)]
    return sorted(records, key=lambda r: Version(humming_version(r) or "0"))


def _by_version(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        grouped.setdefault(humming_version(r) or "?", []).append(r)
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
    store = Path(argv[0]) if argv else Path("results/h200")
    records = _load(store)
    grouped = _by_version(records)
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
            v for v in cmp.verdicts
            if v.verdict is not Verdict.SAME or (v.time not in quiet and v.time_runs_measured)
        ]
        if not changed:
            print(f"- {cur} vs {prev}: no change beyond the noise")
            continue
        print(f"- {cur} vs {prev}: " + "; ".join(
            f"{v.case} m={v.m}: {v.verdict.value}"
            + ("" if v.time in quiet or not v.time_runs_measured
               else f", {v.time.value} {v.time_ratio:.2f}x")
            + (f" ({v.note[:120]})" if v.note else "")
            for v in changed
        ))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
