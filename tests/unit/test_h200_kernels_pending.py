"""tools/h200-kernels/pending.py: the `sweep.sh` tags that complete a generation, from its
records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from humming_matrix.kernels.models import SUITE
from tests.unit.test_h200_kernels_releases import RESULTS, _record
from tests.unit.test_h200_kernels_table import REPO, generated


def test_the_committed_seventh_generation_lacks_what_the_last_calls_left() -> None:
    # Gen7 calls 14 - 15 ran 0.1.7's and 0.1.6's full sweeps whole; calls 15 - 28 ran 0.1.5's
    # and 0.1.4's whole (call 27 reran alone the four first calls that once never returned:
    # each hung there again). A hang beside other workers the deadline left without its rerun
    # alone counts as not run and is to run alone (after the "!"): the spans are not a prefix.
    # Calls 29 - 30 cut 0.1.3 and 0.1.2 after case 33 (0.1.3's case 39 recorded, its 34 and 40
    # hangs beside others; 0.1.2's 34, 39 and 40). 0.1.0 - 0.1.1 not begun.
    assert generated(RESULTS / "gen7", "pending.py") == (
        "0.1.3@35-38,41-84!34,40 0.1.2@35-38,41-84!34,39-40 0.1.1 0.1.0\n"
    )


def test_releases_given_are_taken_newest_first(tmp_path: Path) -> None:
    record = _record("0.1.20", "a")
    # The record holds 8 cases of the suite, its MXFP4 ones at the end: places 77 - 84.
    held = {c["name"] for c in record["cases"]}
    assert [i for i, c in enumerate(SUITE, 1) if c.name in held] == list(range(77, 85))
    gen = tmp_path / "gen9"
    (gen / "call1").mkdir(parents=True)
    (gen / "call1" / "kernels__suite__a.json").write_text(json.dumps(record))
    script = REPO / "tools" / "h200-kernels" / "pending.py"
    done = subprocess.run(
        [sys.executable, str(script), str(gen), "0.1.9", "0.1.20", "0.1.10"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout == "0.1.20@1-76 0.1.10 0.1.9\n"
    # A release with every case is done: nothing for it.
    (gen / "call1" / "kernels__suite__a.json").unlink()
    whole = {**record, "cases": [{**record["cases"][0], "name": c.name} for c in SUITE]}
    (gen / "call1" / "kernels__suite__b.json").write_text(json.dumps(whole))
    assert generated(gen, "pending.py") == "\n"


def test_a_hang_never_rerun_alone_is_still_to_run(tmp_path: Path) -> None:
    record = _record("0.1.20", "a")
    first = record["cases"][0]
    hung = {"name": first["name"], "state": "hang", "reason": "no progress", "batches": []}
    gen = tmp_path / "gen9"
    (gen / "call1").mkdir(parents=True)
    whole = {**record, "cases": [{**first, "name": c.name} for c in SUITE]}
    # Case 77 hung and the deadline came before the watchdog's rerun alone: it is to run alone.
    whole["cases"][76] = hung
    (gen / "call1" / "kernels__suite__a.json").write_text(json.dumps(whole))
    assert generated(gen, "pending.py") == "0.1.20!77\n"
    # Beside a case never run, which is not.
    whole["cases"].pop(0)
    (gen / "call1" / "kernels__suite__a.json").write_text(json.dumps(whole))
    assert generated(gen, "pending.py") == "0.1.20@1!77\n"
    # Rerun alone (and hung again there), or run alone from the start: a verdict, nothing left
    # but case 1.
    for decided in ({"first_attempt": hung}, {"alone": True}):
        whole["cases"][75] = {**hung, **decided}
        (gen / "call1" / "kernels__suite__a.json").write_text(json.dumps(whole))
        assert generated(gen, "pending.py") == "0.1.20@1\n"
