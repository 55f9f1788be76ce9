#!/usr/bin/env python3
"""Cases a call's workers began that its records lack, from a call folder as `ingest.sh` and the
events copy leave it (CALL/kernels__suite__VERSION__*.json beside CALL/events/VERSION/):

    python tools/h200-kernels/lost.py results/h200/gen7/call27

One line a case: the release, its events file, the case, the stage its events end in, and the
seconds from there to the last event of the release's run. A case still running when the
deadline stopped the run ends a few seconds before the run does: `cut`, to run again. One whose
worker went silent long before, with neither a result nor a hang or crash in the records, was
`lost`: the watchdog never judged it, and `pending.py` sees it as not run (gen7 calls 24 - 25
lost 0.1.4's cases 11 and 15 and 0.1.5's 39 and 52, silent 66 - 522 s each, to first calls
outside any GPU turn, judged on the 600 s limit). A live worker is silent at most through a
compile outside a turn (gen7's longest MoE first call, 35 s), so `CUT_S` tells the two apart.
The last line counts them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from table import releases_records  # this folder's per-generation tables
from timeline import ENDED, spans  # this folder's: a worker's events, case by case

CUT_S = 60.0


@dataclass(frozen=True)
class Unrecorded:
    """A case begun in a worker's events with no case of that name in the call's records."""

    version: str
    source: str
    case: str
    last_stage: str
    before_end: float

    @property
    def lost(self) -> bool:
        return self.before_end > CUT_S


def unrecorded(call: Path) -> list[Unrecorded]:
    """Every case begun under CALL/events/ that the call's records lack, release by release."""
    recorded: dict[str, set[str]] = {}
    for version, record in releases_records(call):
        recorded.setdefault(version, set()).update(case["name"] for case in record["cases"])
    found: list[Unrecorded] = []
    for run in sorted(p for p in (call / "events").iterdir() if p.is_dir()):
        begun = [
            span
            for path in sorted(run.rglob("events-*.jsonl"))
            for span in spans(path, str(path.relative_to(run)))
        ]
        last = max((span.until for span in begun), default=0.0)
        found += [
            Unrecorded(run.name, s.source, s.case, s.end.removeprefix(ENDED), last - s.until)
            for s in begun
            if s.case not in recorded.get(run.name, set())
        ]
    return found


def main(arguments: list[str]) -> int:
    if len(arguments) != 1:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    found = unrecorded(Path(arguments[0]))
    print("| humming | events | case | events end in | s before the run's end | |")
    print("| --- | --- | --- | --- | ---: | --- |")
    for u in found:
        verdict = "lost" if u.lost else "cut"
        row = (u.version, u.source, u.case, u.last_stage, f"{u.before_end:.1f}", verdict)
        print("| " + " | ".join(row) + " |")
    lost = sum(u.lost for u in found)
    print(f"\n{len(found) - lost} cut by the deadline, {lost} lost")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
