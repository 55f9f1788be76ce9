"""tools/h200-kernels/timeline.py: where a sweep's time went, case by case, from its workers'
event files."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.test_h200_kernels_releases import RESULTS
from tests.unit.test_h200_kernels_table import generated

HEAD = "| events | case | from (s) | build | wait | on GPU | first call | end |\n"
RULE = "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n"


def test_gen7_call_21s_reruns_alone_waited_behind_a_first_call_that_never_returned() -> None:
    # The o_proj compiled its whole table in its first call at 1 token (19 s), checked 1 - 512
    # tokens, and its first call at 1024 never returned; the q/k/v waited for the lock the
    # whole time, until `timeout` stopped the run.
    assert generated(RESULTS / "gen7" / "call21", "timeline.py") == (
        HEAD + RULE + "| events-alone-o-fp8-channel-fp8-e4m3-1536x1536.jsonl"
        " | o-fp8-channel-fp8-e4m3-1536x1536 | 1.0 | 3.3 | 0.0 | 0.5 | 19.5"
        " | events end in first_call m=1024 |\n"
        "| events-alone-qkv-fp8-channel-fp8-e4m3-2048x1536.jsonl"
        " | qkv-fp8-channel-fp8-e4m3-2048x1536 | 1.0 | 3.1 | 144.6 | 0.0 | 0.0"
        " | events end in first_call m=1 |\n"
    )


def test_each_case_of_a_worker_has_its_seconds_by_stage_and_its_outcome(tmp_path: Path) -> None:
    events = [
        {"event": "env", "time": 100.0},
        {"event": "start", "time": 100.5, "index": 0, "case": "a"},
        {"event": "progress", "time": 101.0, "stage": "built", "seconds": 0.4},
        {"event": "progress", "time": 101.0, "stage": "gpu_wait"},
        {"event": "progress", "time": 106.0, "stage": "gpu_wait"},
        {"event": "progress", "time": 108.0, "stage": "first_call", "m": 1},
        {"event": "progress", "time": 110.0, "stage": "gpu_check", "m": 1, "on_gpu": True},
        {"event": "progress", "time": 110.25, "stage": "left_gpu", "m": 1},
        {"event": "progress", "time": 110.5, "stage": "timed"},
        # A case the release cannot build: the worker names the state itself.
        {"event": "case", "time": 111.0, "index": 0, "result": {"state": "unsupported"}},
        {"event": "start", "time": 111.0, "index": 1, "case": "b"},
        {"event": "progress", "time": 112.0, "stage": "gpu_check", "m": 16, "on_gpu": True},
        {"event": "progress", "time": 115.0, "stage": "gpu_check", "m": 16, "on_gpu": True},
    ]
    folder = tmp_path / "work-0.1.4@2"
    folder.mkdir()
    # The worker killed mid-write: its last line half there, and not an event.
    torn = '{"event": "progress", "time": 11'
    (folder / "events-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + torn)
    assert generated(tmp_path, "timeline.py") == (
        HEAD
        + RULE
        + "| work-0.1.4@2/events-1.jsonl | a | 0.5 | 0.4 | 7.0 | 0.2 | 2.0 | unsupported |\n"
        "| work-0.1.4@2/events-1.jsonl | b | 11.0 | 0.0 | 0.0 | 3.0 | 0.0"
        " | events end in gpu_check m=16 |\n"
    )


def test_a_finished_case_ends_in_the_state_its_numbers_give() -> None:
    # A worker's result holds its batches' numbers, not a state: the state is assessed from
    # them, as the record's is. Gen7 call 28 finished 0.1.4's last four cases (MXFP4 MoE with
    # FP8 activations): the two with wide scales out of tolerance, the others not bit-identical
    # on relaunch, as the call's record says.
    assert generated(RESULTS / "gen7" / "call28" / "events" / "0.1.4", "timeline.py") == (
        HEAD + RULE + "| events-1.jsonl | moe-down-mxfp4-fp8-e4m3-2048x768-e128k8-wide-scales"
        " | 1.5 | 0.7 | 0.0 | 15.6 | 0.0 | fail |\n"
        "| events-2.jsonl | moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8"
        " | 0.5 | 1.2 | 0.0 | 14.4 | 0.0 | nondeterministic |\n"
        "| events-3.jsonl | moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8-wide-scales"
        " | 0.5 | 1.4 | 0.0 | 14.1 | 0.0 | fail |\n"
        "| events-4.jsonl | moe-down-mxfp4-fp8-e4m3-2048x768-e128k8"
        " | 0.5 | 1.2 | 0.0 | 14.4 | 0.0 | nondeterministic |\n"
    )
    states = {
        c["name"]: c["state"]
        for record in (RESULTS / "gen7" / "call28").glob("*__0.1.4__*.json")
        for c in json.loads(record.read_text())["cases"]
    }
    assert states == {
        "moe-down-mxfp4-fp8-e4m3-2048x768-e128k8-wide-scales": "fail",
        "moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8": "nondeterministic",
        "moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8-wide-scales": "fail",
        "moe-down-mxfp4-fp8-e4m3-2048x768-e128k8": "nondeterministic",
    }
