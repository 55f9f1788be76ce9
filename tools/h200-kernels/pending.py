#!/usr/bin/env python3
"""What a generation still lacks, as the tags `sweep.sh` takes: per release, the cases of the
current suite that no record under GEN holds, newest release first. A hang that was never rerun
alone counts as not run: until 2026-12-07 the watchdog reran hung cases alone only once every
case had run, so a deadline that cut the run first left each hang a single attempt beside seven
other workers (gen7 call 10's 0.1.10 AWQ q/k/v, which gen6's two runs of 0.1.10 passed; calls
15 - 16's 17 hangs of 0.1.4 and 0.1.5). It now reruns each as soon as it is seen.

    python tools/h200-kernels/pending.py results/h200/gen7 [VERSION ...]

prints e.g. `0.1.13@27-84 0.1.12@29-33,35-84!34 0.1.11 0.1.10`: a release GEN has not run at
all is its bare version (the whole suite), one it ran in part `VERSION@SPANS` (1-based, suite
order), one it ran whole nothing; `!SPANS` names the cases whose only records are hangs beside
other workers never rerun alone, which the sweep then runs alone from the start (`kernels
--alone`): beside the others, gen7 calls 15 - 20 met the same hangs again and again (0.1.4's
case 9 four times) while the deadline left their reruns alone undone. The releases are those
given, else every release with records anywhere beside GEN (its parent folder). A cut run's
cases are not a prefix (eight workers finish them out of order: gen7 call 8 left 0.1.12 with
cases 1 - 28 and 34), so the spans come from the records, not from where the last call stopped.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.version import Version
from releases import spans  # this folder's index
from table import releases_records  # this folder's per-generation tables

from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.record import hang_not_rerun


def _cases_by_release(folder: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per release, the cases its records decided, and those that only hung beside others and
    were never rerun alone: one pass over the records."""
    decided: dict[str, set[str]] = {}
    undecided: dict[str, set[str]] = {}
    for version, record in releases_records(folder):
        for case in record["cases"]:
            into = undecided if hang_not_rerun(case) else decided
            into.setdefault(version, set()).add(str(case["name"]))
        decided.setdefault(version, set())
    return decided, undecided


def pending(generation: Path, versions: list[str]) -> list[str]:
    """The `sweep.sh` tags that would complete `generation` for `versions`, newest first."""
    ran, hung = _cases_by_release(generation)
    tags = []
    for version in sorted(versions, key=Version, reverse=True):
        have = ran.get(version, set())
        missing = [i for i, case in enumerate(SUITE, 1) if case.name not in have]
        alone = [i for i in missing if SUITE[i - 1].name in hung.get(version, set())]
        rest = [i for i in missing if i not in alone]
        if len(rest) == len(SUITE):
            tags.append(version)
        elif missing:
            tags.append(
                version
                + (f"@{spans(rest).replace(' ', '')}" if rest else "")
                + (f"!{spans(alone).replace(' ', '')}" if alone else "")
            )
    return tags


def main(argv: list[str]) -> int:
    generation = Path(argv[0])
    versions = argv[1:] or sorted(_cases_by_release(generation.parent)[0])
    print(" ".join(pending(generation, versions)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
