#!/usr/bin/env python3
"""Do two sets of runs of one release give the same output bytes? Per release that both
folders (searched recursively) ran: the (case, batch size) pairs bit-identical on relaunch in
every run of both sides, on the same input bytes, and of those how many gave the same output
bytes on every draw both ran, with the GPU models of each side.

    python tools/h200-kernels/same_bytes.py results/h200/gen5 results/h200/gen6/call23

Gen6 call 23 reran 0.1.17 on an H100 where gen5 had run it on an H200: does `changed` between
releases whose records come from different GPU models say anything about the release?
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from packaging.version import Version
from table import gpu_label, releases_records  # this folder's per-generation tables

# per release, per (case, m): the inputs, the output hash of each draw, whether every relaunch
# was bit-identical
Slots = dict[str, dict[tuple[str, int], dict[str, Any]]]


def _read(folder: Path) -> tuple[Slots, dict[str, set[str]]]:
    slots: Slots = defaultdict(dict)
    gpus: dict[str, set[str]] = defaultdict(set)
    for version, record in releases_records(folder):
        gpus[version].add(gpu_label(record))
        for case in record["cases"]:
            for batch in case.get("batches") or []:
                if not batch.get("output_sha256"):
                    continue
                slot = slots[version].setdefault(
                    (str(case["name"]), int(batch["m"])),
                    {"inputs": set(), "draws": defaultdict(set), "deterministic": True},
                )
                slot["inputs"].add(batch.get("input_sha256"))
                slot["deterministic"] &= all(batch.get("deterministic") or [False])
                for i, digest in enumerate(batch["output_sha256"]):
                    slot["draws"][i].add(digest)
    return slots, gpus


def same_bytes(first: Path, second: Path) -> list[str]:
    (a, a_gpus), (b, b_gpus) = _read(first), _read(second)
    out = [
        "| humming | GPUs | compared | same bytes | different |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for version in sorted(a.keys() & b.keys(), key=Version):
        same = different = 0
        for key in a[version].keys() & b[version].keys():
            x, y = a[version][key], b[version][key]
            if not (x["deterministic"] and y["deterministic"]) or x["inputs"] != y["inputs"]:
                continue
            shared = x["draws"].keys() & y["draws"].keys()
            if all(x["draws"][i] == y["draws"][i] for i in shared):
                same += 1
            else:
                different += 1
        where = f"{', '.join(sorted(a_gpus[version]))} / {', '.join(sorted(b_gpus[version]))}"
        out.append(f"| {version} | {where} | {same + different} | {same} | {different} |")
    return out


if __name__ == "__main__":
    print("\n".join(same_bytes(Path(sys.argv[1]), Path(sys.argv[2]))))
