#!/usr/bin/env python3
"""The time spread between calls of one warm machine: the same (release, case, batch size) timed
in two of the CALL folders given, which the A/A table of `table.py` (runs of one call) leaves out.

    python tools/h200-kernels/across_calls.py results/h200/gen6/call20 ... call22

Per release and pair of calls: the timed batches both calls ran (a batch a call timed in several
runs takes their mean), their time ratios' median and the widest (the larger of the ratio and
its inverse). Gen6 calls 20 - 22 ran 0.1.0 and 0.1.1 on one H100, kept warm between calls, each
case's second run in a later call than its first: is that as good as an A/A pair of one call?
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from packaging.version import Version
from table import spread_cells, timed_batches  # this folder's per-generation tables

from humming_matrix.kernels.record import humming_version, load_kernel_record


def spreads(calls: list[Path]) -> list[str]:
    # times[version][call][(case, m)]: the times of that slot's runs in that call.
    times: dict[str, dict[str, dict[tuple[str, int], list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for call in calls:
        for path in sorted(call.glob("kernels__*.json")):
            record = load_kernel_record(path)
            for slot, ms in timed_batches(record).items():
                times[str(humming_version(record))][call.name][slot].append(ms)
    out = [
        "| humming | calls | timed batches | median ratio | widest |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for version in sorted(times, key=Version):
        by_call = times[version]
        for first, second in combinations([c.name for c in calls if c.name in by_call], 2):
            a, b = by_call[first], by_call[second]
            ratios = [statistics.fmean(b[s]) / statistics.fmean(a[s]) for s in a if s in b]
            if ratios:
                out.append(f"| {version} | {first} / {second} | {spread_cells(ratios)} |")
    return out


if __name__ == "__main__":
    print("\n".join(spreads([Path(a) for a in sys.argv[1:]])))
