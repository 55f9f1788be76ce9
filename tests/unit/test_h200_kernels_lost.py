"""tools/h200-kernels/lost.py: cases a call's workers began that its records lack, cut by the
deadline or lost, on the committed calls."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.test_h200_kernels_releases import RESULTS
from tests.unit.test_h200_kernels_table import REPO, generated

HEAD = "| humming | events | case | events end in | s before the run's end | |\n"
RULE = "| --- | --- | --- | --- | ---: | --- |\n"


def test_gen7_call_24_lost_four_cases_to_first_calls_outside_any_gpu_turn() -> None:
    # Each went silent after its checks at 512 tokens, in a first call that only launched but
    # was judged as a compile; the other twelve were running when the deadline came.
    lines = generated(RESULTS / "gen7" / "call24", "lost.py").splitlines(keepends=True)
    assert lines[:2] == [HEAD, RULE]
    assert [line for line in lines if line.endswith("| lost |\n")] == [
        "| 0.1.4 | events-2.jsonl | gate-up-fp8-channel-fp8-e4m3-17920x1536 | batch m=512"
        " | 400.7 | lost |\n",
        "| 0.1.4 | events-4.jsonl | gate-up-fp8-channel-bf16-17920x1536 | batch m=512"
        " | 401.8 | lost |\n",
        "| 0.1.5 | events-14.jsonl | o-gptq-int4-g128-fp8-e4m3-2048x4096 | batch m=512"
        " | 65.8 | lost |\n",
        "| 0.1.5 | events-3.jsonl | qkv-fp8-channel-fp8-e4m3-5120x2048 | batch m=512"
        " | 401.6 | lost |\n",
    ]
    assert lines[-1] == "12 cut by the deadline, 4 lost\n"


def test_gen7_call_27_with_the_first_calls_turn_lost_none() -> None:
    # The same four cases hung in their GPU turns instead, and are in the records; what the
    # records lack was running when the deadline came, the furthest 1.0 s before the end.
    lines = generated(RESULTS / "gen7" / "call27", "lost.py").splitlines(keepends=True)
    assert lines[-1] == "10 cut by the deadline, 0 lost\n"
    assert lines[2] == (
        "| 0.1.4 | events-11.jsonl | moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8-wide-scales"
        " | left_gpu m=4096 | 0.1 | cut |\n"
    )
    assert max(float(line.split(" | ")[4]) for line in lines[2:-2]) == 1.0


def test_without_one_call_folder_it_says_how_to_run_it() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "h200-kernels" / "lost.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "python tools/h200-kernels/lost.py results/h200/gen7/call27\n"
