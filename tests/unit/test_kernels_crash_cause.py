"""A crashed case: its cause, read from its worker's log tail at record time (the watchdog) and
for records written before the watchdog put it in the reason (`case_reason`); and how the judge
holds it against the batch sizes the other release ran."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from humming_matrix.cli import main
from humming_matrix.kernels.judge import Verdict, compare_kernel_records
from humming_matrix.kernels.record import case_reason
from humming_matrix.kernels.watchdog import crash_cause

RESULTS = Path(__file__).resolve().parents[2] / "results" / "h200"
# 0.1.7's AWQ q/k/v layer on the H200 (sixth generation): the worker died in the case with a
# CUDA error that surfaced at torch.cuda.empty_cache(), outside any batch.
RECORD = RESULTS / "gen6" / "call7" / "kernels__suite__0.1.7__20261206T045559Z-vm-8b3a0e.json"
ILLEGAL_ACCESS = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


def _case(name: str) -> dict[str, object]:
    cases = json.loads(RECORD.read_text(encoding="utf-8"))["cases"]
    return next(c for c in cases if c["name"] == name)


def test_a_real_worker_crash_names_the_cuda_error() -> None:
    case = _case("qkv-awq-int4-bf16-5120x2048")
    assert case["reason"] == "worker exited with status 1 during the case"
    assert crash_cause(str(case["log_tail"])) == ILLEGAL_ACCESS
    assert case_reason(case) == f"worker exited with status 1 during the case: {ILLEGAL_ACCESS}"


def test_the_last_of_chained_tracebacks_is_the_cause() -> None:
    log = (
        "loading\nTraceback (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n    f()\nValueError: first\n\n'
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in <module>\n    g()\n    ^^^\n'
        "RuntimeError: CUDA error: unspecified launch failure\n"
    )
    assert crash_cause(log) == "RuntimeError: CUDA error: unspecified launch failure"


def test_a_log_without_a_traceback_has_no_cause() -> None:
    # A worker killed by a signal prints none; neither does a traceback cut before its last line.
    assert crash_cause("compiling 12 kernels\nSegmentation fault (core dumped)\n") is None
    assert crash_cause('Traceback (most recent call last):\n  File "a.py", line 1\n') is None
    assert crash_cause("") is None


def test_a_reason_that_names_its_cause_is_kept_and_others_pass_through() -> None:
    tail = f'Traceback (most recent call last):\n  File "r.py", line 9\n{ILLEGAL_ACCESS}\n'
    written = f"worker exited with status 1 during the case: {ILLEGAL_ACCESS}"
    assert case_reason({"state": "crash", "reason": written, "log_tail": tail}) == written
    unsupported = {"state": "unsupported", "reason": "build: NotImplementedError: no such thing"}
    assert case_reason(unsupported) == "build: NotImplementedError: no such thing"
    assert case_reason({"state": "ok", "batches": []}) is None


def test_the_junit_report_of_an_old_record_names_the_crash_cause(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(RECORD, store / RECORD.name)
    assert main(["report", str(store), "--junit", str(tmp_path / "r.xml")]) == 0
    [suite] = ET.parse(tmp_path / "r.xml").getroot()
    [case] = [
        c for c in suite.findall("testcase") if c.get("name") == "qkv-awq-int4-bf16-5120x2048"
    ]
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == (
        "qkv-awq-int4-bf16-5120x2048 on humming-kernels 0.1.7 (baseline): crash (worker exited"
        f" with status 1 during the case: {ILLEGAL_ACCESS})"
    )


def test_a_crash_is_judged_at_each_batch_size_the_other_release_ran() -> None:
    # 0.1.7 crashes on the AWQ q/k/v layer; 0.1.8 runs it and gives NaN at every batch size:
    # still broken at each, not a `missing` row beside four `new` ones.
    nan_release = (
        RESULTS / "gen6" / "call6" / "kernels__suite__0.1.8__20261206T044739Z-vm-635b64.json"
    )
    cmp = compare_kernel_records([RECORD], [nan_release])
    rows = [(v.m, v.verdict) for v in cmp.verdicts if v.case == "qkv-awq-int4-bf16-5120x2048"]
    assert rows == [(m, Verdict.STILL_BROKEN) for m in (1, 16, 128, 2048)]
    # ... and the other way round, 0.1.8's NaN before 0.1.7's crash is still broken too.
    back = compare_kernel_records([nan_release], [RECORD])
    rows = [(v.m, v.verdict) for v in back.verdicts if v.case == "o-awq-int4-bf16-2048x4096"]
    assert rows == [(m, Verdict.STILL_BROKEN) for m in (1, 16, 128, 2048)]
