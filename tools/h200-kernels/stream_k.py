#!/usr/bin/env python3
"""Is a GEMM that is not bit-identical on relaunch one that humming ran with stream-K? Per
release under a folder (searched recursively): the timed batches by the kernel config's
`use_stream_k` and by whether every relaunch of every draw gave the same bytes.

    python tools/h200-kernels/stream_k.py results/h200/gen7

Stream-K splits a tile's K loop over several thread blocks and adds their partial sums in the
order they finish, so its output bytes may differ between launches; a kernel without it sums in
one order. Batches whose record names no config (a release that does not report it) are left
out.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

from packaging.version import Version
from table import releases_records  # this folder's per-generation tables

COLUMNS = (
    (True, True),
    (True, False),
    (False, True),
    (False, False),
)


def counts(folder: Path) -> dict[str, Counter[tuple[bool, bool]]]:
    """Per release, (stream-K, bit-identical on relaunch) -> batches."""
    out: dict[str, Counter[tuple[bool, bool]]] = defaultdict(Counter)
    for version, record in releases_records(folder):
        for case in record["cases"]:
            for batch in case.get("batches") or []:
                config = batch.get("kernel_config") or {}
                relaunches = batch.get("deterministic") or []
                if "use_stream_k" not in config or not relaunches:
                    continue
                out[version][(bool(config["use_stream_k"]), all(relaunches))] += 1
    return out


def table(folder: Path) -> list[str]:
    per_release = counts(folder)
    lines = [
        "| humming | stream-K, bit-identical | stream-K, not | no stream-K, bit-identical"
        " | no stream-K, not |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    total: Counter[tuple[bool, bool]] = Counter()
    for version in sorted(per_release, key=Version):
        total += per_release[version]
        lines.append(
            f"| {version} | " + " | ".join(str(per_release[version][k]) for k in COLUMNS) + " |"
        )
    lines.append("| all | " + " | ".join(str(total[k]) for k in COLUMNS) + " |")
    return lines


if __name__ == "__main__":
    print("\n".join(table(Path(sys.argv[1]))))
