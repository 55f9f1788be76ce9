"""The watchdog against a stand-in worker: real subprocesses, process groups, event files."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.record import hang_not_rerun
from humming_matrix.kernels.watchdog import SuiteRun, Watchdog

DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "kernel_worker_double.py"
WORKER = (sys.executable, str(DOUBLE))
CASES = [c.to_json() for c in SUITE[:4]]
NAMES = [c["name"] for c in CASES]


def _plan() -> dict[str, Any]:
    return {
        "cases": CASES,
        "batch_sizes": [1, 2048],
        "draws": 2,
        "repeats": 5,
        "seed": 0,
        "ceilings": True,
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is not running.
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _policy(monkeypatch: pytest.MonkeyPatch, **policy: Any) -> None:
    monkeypatch.setenv("KERNEL_WORKER_DOUBLE", json.dumps(policy))


def _interrupted(
    work: Path, when: Callable[[], bool], timeout_s: float
) -> tuple[dict[str, Any], ...]:
    """What two workers (1 s GPU limit) kept of the plan once a Ctrl-C came as soon as `when()`
    held (the sleep of the watchdog's poll raises it)."""

    def sleep(seconds: float) -> None:
        if when():
            raise KeyboardInterrupt
        time.sleep(seconds)

    dog = Watchdog(
        timeout_s=timeout_s, worker=WORKER, poll_s=0.05, jobs=2, gpu_timeout_s=1, sleep=sleep
    )
    with pytest.raises(KeyboardInterrupt):
        dog.run(_plan(), work)
    return dog.progress.snapshot().results


def _a_rerun_finished(work: Path) -> bool:
    """A worker rerunning a hang alone has reported its case."""
    events = (work / "alone").glob("events-*.jsonl")
    return any('"event": "case"' in p.read_text() for p in events)


def test_every_case_runs_in_one_worker_when_nothing_goes_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _policy(monkeypatch)
    run = Watchdog(timeout_s=30, worker=WORKER).run(_plan(), tmp_path)
    assert run.launches == 1
    assert [r["case"]["name"] for r in run.results] == NAMES
    assert [len(r["batches"]) for r in run.results] == [2, 2, 2, 2]
    assert run.ceilings == {"bf16_tflops": 800.0, "copy_gbps": 4300.0}
    assert run.env["humming_kernels"] == "0.0.0-double"


def test_a_reused_workdir_reads_none_of_the_earlier_runs_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep reruns a release in the --workdir of an earlier run (one a deadline cut, or one of
    # a release that could not import humming): none of that run's events count for this one.
    stale = [
        {"event": "import_error", "message": "ImportError: an earlier run's"},
        {"event": "case", "index": 0, "result": {"case": CASES[0], "batches": [], "stale": 1}},
    ]
    lines = "".join(json.dumps(e) + "\n" for e in stale)
    (tmp_path / "events-1.jsonl").write_text(lines, encoding="utf-8")
    _policy(monkeypatch)
    run = Watchdog(timeout_s=30, worker=WORKER).run(_plan(), tmp_path)
    assert run.import_error is None
    assert [r["case"]["name"] for r in run.results] == NAMES
    assert [len(r["batches"]) for r in run.results] == [2, 2, 2, 2]
    assert not any("stale" in r for r in run.results)


def test_a_hung_case_is_a_result_and_the_next_case_runs_in_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    _policy(monkeypatch, cases={NAMES[1]: "hang"}, pids=str(pids))
    began = time.monotonic()
    # The watchdog's clock runs from the launch, so the timeout must cover a worker's start on
    # a loaded machine, or a healthy first case would read as a hang.
    run = Watchdog(timeout_s=3, worker=WORKER, poll_s=0.05).run(_plan(), tmp_path / "w")
    assert time.monotonic() - began < 30
    states = [r.get("state") for r in run.results]
    assert states == [None, "hang", None, None]
    assert run.results[1]["reason"] == (
        "no progress for 3 s after start; worker process group killed, next case runs in a "
        "fresh process"
    )
    assert run.launches == 2
    # One worker, no lock shared with other runs: it hung alone, so nothing is rerun.
    assert "first_attempt" not in run.results[1]
    assert not (tmp_path / "w" / "alone").exists()
    launched = [tuple(map(int, line.split())) for line in pids.read_text().splitlines()]
    assert len(launched) == 2
    hung_pid, hung_child = launched[0]
    # The whole group of the hung worker is gone, its child included: nothing is orphaned.
    assert not _alive(hung_pid)
    assert not _alive(hung_child)
    # Ceilings are measured by the first worker only.
    plans = sorted((tmp_path / "w").glob("plan-*.json"))
    assert [json.loads(p.read_text())["ceilings"] for p in plans] == [True, False]
    # Both workers claimed from one queue: the second began at the case after the hung one.
    assert {json.loads(p.read_text())["queue"] for p in plans} == {str(tmp_path / "w" / "queue")}
    assert (tmp_path / "w" / "queue").read_text() == "4"


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        # Killed without a traceback: the exit status alone.
        ("crash", "worker exited with status 7 during the case"),
        # An uncaught CUDA error: the exception the log ends on names the cause.
        (
            "raise",
            "worker exited with status 1 during the case: "
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ),
    ],
)
def test_a_crash_mid_case_is_recorded_with_status_cause_and_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str, reason: str
) -> None:
    _policy(monkeypatch, cases={NAMES[0]: behaviour})
    run = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05).run(_plan(), tmp_path)
    assert run.results[0]["state"] == "crash"
    assert run.results[0]["reason"] == reason
    traceback = run.results[0]["log_tail"].startswith("Traceback (most recent call last):")
    assert traceback is (behaviour == "raise")
    # The other cases ran, in a fresh worker.
    assert [r.get("state") for r in run.results[1:]] == [None, None, None]
    assert [len(r["batches"]) for r in run.results[1:]] == [2, 2, 2]
    assert run.launches == 2


def test_after_a_case_that_raised_a_fresh_worker_takes_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _policy(monkeypatch, cases={NAMES[2]: "error"})
    run = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05).run(_plan(), tmp_path)
    assert run.launches == 2
    assert [b["error"] for b in run.results[2]["batches"]] == [
        "RuntimeError: CUDA error: an illegal memory access"
    ] * 2
    assert run.results[3]["batches"][0]["rel_err"] == [1e-3, 1e-3]


def test_an_unimportable_humming_makes_every_case_unsupported_with_the_loader_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = "OSError: libhumming_launcher.so: undefined symbol: _ZN3c104cuda"
    _policy(monkeypatch, import_error=message)
    run = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05).run(_plan(), tmp_path)
    assert run.import_error == message
    assert {r["state"] for r in run.results} == {"unsupported"}
    assert run.results[0]["reason"] == f"import humming: {message}"
    assert run.launches == 1


def _spans(workdir: Path) -> dict[int, tuple[float, float, str]]:
    """Case index -> (start time, end time, events file) from the workers' event files."""
    began: dict[int, tuple[float, str]] = {}
    spans: dict[int, tuple[float, float, str]] = {}
    for path in sorted(workdir.glob("events-*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "start":
                began[event["index"]] = (event["time"], path.name)
            elif event["event"] == "case":
                start, name = began[event["index"]]
                spans[event["index"]] = (start, event["time"], name)
    return spans


def test_with_jobs_the_workers_share_the_queue_run_at_once_and_take_turns_on_one_gpu_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _policy(monkeypatch, case_seconds=2.0)
    work = tmp_path / "w"
    run = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05, jobs=3).run(_plan(), work)
    assert [r["case"]["name"] for r in run.results] == NAMES
    assert [r["batches"][0]["rel_err"] for r in run.results] == [[1e-3, 1e-3]] * 4
    assert run.launches == 3
    spans = _spans(work)
    assert sorted(spans) == [0, 1, 2, 3]  # every case ran exactly once
    assert len({name for _, _, name in spans.values()}) == 3  # on three workers
    # Three cases ran at the same time: each began before the others ended.
    first_three = sorted(spans.values())[:3]
    assert max(start for start, _, _ in first_three) < min(end for _, end, _ in first_three)
    plans = [json.loads(p.read_text()) for p in sorted(work.glob("plan-*.json"))]
    # No lock of the caller's: the watchdog gives them one, and only the first measures ceilings.
    assert {p["gpu_lock"] for p in plans} == {str(work / "gpu.lock")}
    assert sorted(p["ceilings"] for p in plans) == [False, False, True]


def test_with_jobs_a_hang_in_one_worker_leaves_the_others_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _policy(monkeypatch, cases={NAMES[0]: "hang", NAMES[2]: "crash"})
    run = Watchdog(timeout_s=3, worker=WORKER, poll_s=0.05, jobs=2).run(_plan(), tmp_path)
    assert [r.get("state") for r in run.results] == ["hang", None, "crash", None]
    assert run.results[2]["reason"] == "worker exited with status 7 during the case"
    # It hangs alone too: the rerun's hang, with the first one kept.
    assert run.results[0]["reason"] == (
        "no progress for 3 s after start, rerun alone; worker process group killed, next case "
        "runs in a fresh process"
    )
    assert run.results[0]["first_attempt"] == {
        "state": "hang",
        "reason": "no progress for 3 s after start; worker process group killed, next case runs "
        "in a fresh process",
    }
    assert "first_attempt" not in run.results[2]  # a crash is its own worker's, never rerun
    # Two first workers; a fresh one after the crash (the hung worker's lane finds nothing left
    # or takes the last case, depending on which ends first); one for the rerun.
    assert run.launches in (4, 5)


def test_a_kernel_hung_in_its_gpu_turn_is_the_one_hang_not_the_workers_queued_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Case 0 hangs holding the GPU lock; case 1's worker waits for its timing turn past the
    # timeout. Before the waiting pulse both were killed as hung (a sweep's cascade of hangs).
    _policy(monkeypatch, cases={NAMES[0]: "hang-in-turn"}, pulse_s=0.2)
    work = tmp_path / "w"
    run = Watchdog(timeout_s=3, worker=WORKER, poll_s=0.05, jobs=2).run(_plan(), work)
    assert [r.get("state") for r in run.results] == ["hang", None, None, None]
    assert run.results[0]["first_attempt"]["reason"] == (
        "no progress for 3 s in its GPU turn (gpu_check m=1); worker process group killed, next "
        "case runs in a fresh process"
    )
    assert [r["batches"][0]["rel_err"] for r in run.results[1:]] == [[1e-3, 1e-3]] * 3
    # Case 1 did wait: its worker's pulses came while case 0 held the lock.
    spans = _spans(work)
    waits = [
        json.loads(line)
        for path in work.glob("events-*.jsonl")
        for line in path.read_text().splitlines()
        if '"gpu_wait"' in line
    ]
    assert {w["index"] for w in waits} == {1}
    assert spans[1][1] - spans[1][0] > 3  # longer than the timeout
    assert len(waits) >= 10


def test_a_kernel_stuck_in_its_gpu_turn_is_hung_after_the_gpu_limit_work_outside_a_turn_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every other case spends 2 s outside any turn (a compile), longer than the 1 s GPU limit,
    # and takes a timing turn that ends at once: the short limit holds inside a turn only.
    _policy(monkeypatch, cases={NAMES[0]: "hang-in-turn"}, pulse_s=0.2, case_seconds=2.0)
    work = tmp_path / "w"
    dog = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05, jobs=2, gpu_timeout_s=1)
    run = dog.run(_plan(), work)
    assert [r.get("state") for r in run.results] == ["hang", None, None, None]
    assert run.results[0]["reason"] == (
        "no progress for 1 s in its GPU turn (gpu_check m=1), rerun alone; worker process group "
        "killed, next case runs in a fresh process"
    )
    assert [r["batches"][0]["rel_err"] for r in run.results[1:]] == [[1e-3, 1e-3]] * 3
    # Each of them entered and left its timing turn; the hung one never left its check.
    turns = [
        (event["index"], event["stage"], event.get("on_gpu"))
        for path in work.glob("events-*.jsonl")
        for event in map(json.loads, path.read_text().splitlines())
        if event.get("stage") in ("gpu_check", "gpu_timing", "left_gpu")
    ]
    assert sorted(turns) == [
        (0, "gpu_check", True),
        *(
            (i, stage, on)
            for i in (1, 2, 3)
            for stage, on in (("gpu_timing", True), ("left_gpu", None))
        ),
    ]


def test_a_case_that_hung_beside_other_workers_is_rerun_alone_and_judged_by_that(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Case 0 sticks in its check beside the other workers and runs through once alone (a kernel
    # starved while another one hung): the record says both.
    _policy(monkeypatch, cases={NAMES[0]: "hang-beside-others"}, pulse_s=0.2)
    work = tmp_path / "w"
    dog = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05, jobs=2, gpu_timeout_s=1)
    run = dog.run(_plan(), work)
    assert [r.get("state") for r in run.results] == [None, None, None, None]
    assert [r["batches"][0]["rel_err"] for r in run.results] == [[1e-3, 1e-3]] * 4
    assert run.results[0]["first_attempt"] == {
        "state": "hang",
        "reason": "no progress for 1 s in its GPU turn (gpu_check m=1); worker process group "
        "killed, next case runs in a fresh process",
    }
    assert ["first_attempt" in r for r in run.results] == [True, False, False, False]
    # The rerun: the hung case alone, on one worker, under the run's GPU lock, no ceilings.
    (rerun,) = [json.loads(p.read_text()) for p in (work / "alone").glob("plan-*.json")]
    assert rerun["cases"] == [CASES[0]]
    assert rerun["alone"] is True
    assert rerun["ceilings"] is False
    assert rerun["gpu_lock"] == str(work / "gpu.lock")
    assert rerun["queue"] == str(work / "alone" / "queue-1")
    # Two workers, a fresh one after the hang (or not, as the queue empties), one for the rerun.
    assert run.launches in (3, 4)
    assert sorted(p.name for p in (work / "alone").glob("plan-*.json")) == [
        f"plan-{run.launches}.json"
    ]


def _named_alone(
    work: Path, monkeypatch: pytest.MonkeyPatch, index: int, behaviour: str
) -> SuiteRun:
    """The plan on two workers (1 s GPU limit), case `index` (of the double's `behaviour`)
    named to run alone."""
    _policy(monkeypatch, cases={NAMES[index]: behaviour}, pulse_s=0.2)
    dog = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05, jobs=2, gpu_timeout_s=1)
    return dog.run({**_plan(), "alone_cases": [index]}, work)


def test_cases_the_plan_names_run_alone_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Case 1 would stick beside the other workers; named to run alone (a sweep resuming a hang
    # an earlier call never reran), it runs alone only: no attempt beside the others to cut.
    work = tmp_path / "w"
    run = _named_alone(work, monkeypatch, 1, "hang-beside-others")
    assert [r["case"]["name"] for r in run.results] == NAMES
    assert [r.get("state") for r in run.results] == [None] * 4
    assert [r.get("alone") for r in run.results] == [None, True, None, None]
    assert ["first_attempt" in r for r in run.results] == [False] * 4
    # The workers beside share the other three; case 1 has a worker and plan of its own.
    shared = [json.loads(p.read_text()) for p in work.glob("plan-*.json")]
    assert {tuple(c["name"] for c in plan["cases"]) for plan in shared} == {
        (NAMES[0], NAMES[2], NAMES[3])
    }
    (alone,) = [json.loads(p.read_text()) for p in (work / "alone").glob("plan-*.json")]
    assert (alone["cases"], alone["alone"]) == ([CASES[1]], True)


def test_a_hang_of_a_case_run_alone_is_its_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Case 2 hangs in its check alone too: that hang decides it, and nothing reruns it.
    work = tmp_path / "w"
    run = _named_alone(work, monkeypatch, 2, "hang-in-turn")
    assert [r.get("state") for r in run.results] == [None, None, "hang", None]
    assert run.results[2]["reason"] == (
        "no progress for 1 s in its GPU turn (gpu_check m=1), run alone; worker process group "
        "killed, next case runs in a fresh process"
    )
    assert run.results[2]["alone"] is True
    assert not hang_not_rerun(run.results[2])
    assert len(list((work / "alone").glob("plan-*.json"))) == 1


def test_without_a_gpu_lock_nothing_is_beside_a_case_and_it_runs_as_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _policy(monkeypatch)
    work = tmp_path / "w"
    run = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05).run(
        {**_plan(), "alone_cases": [1]}, work
    )
    assert [r.get("state") for r in run.results] == [None] * 4
    assert [r.get("alone") for r in run.results] == [None] * 4
    assert not (work / "alone").exists()
    assert run.launches == 1


def _timed_turns(
    work: Path,
    monkeypatch: pytest.MonkeyPatch,
    turns: dict[int, list[float | None]],
    jobs: int,
    floor_s: float,
) -> SuiteRun:
    """The plan on `jobs` workers (20 s GPU limit, a floor of `floor_s` beside others), case i
    taking check turns of `turns[i]` seconds per batch size (None: hangs unless alone)."""
    _policy(
        monkeypatch,
        cases={NAMES[i]: "timed-turns" for i in turns},
        turn_seconds={NAMES[i]: seconds for i, seconds in turns.items()},
        pulse_s=0.2,
    )
    dog = Watchdog(
        timeout_s=60, worker=WORKER, poll_s=0.05, jobs=jobs, gpu_timeout_s=20, gpu_floor_s=floor_s
    )
    return dog.run(_plan(), work)


def test_beside_other_workers_a_turn_is_hung_sooner_once_its_case_finished_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Case 0's check at 1 token takes 0.01 s, its check at 2048 hangs beside the other worker
    # (and goes through alone): 8x its longest turn is under the 0.5 s floor, so the hang is
    # cut at 0.5 s, not at the 20 s GPU limit, which the rerun alone keeps.
    run = _timed_turns(tmp_path / "w", monkeypatch, {0: [0.01, None]}, jobs=2, floor_s=0.5)
    assert [r.get("state") for r in run.results] == [None, None, None, None]
    assert run.results[0]["first_attempt"] == {
        "state": "hang",
        "reason": "no progress for 0.5 s in its GPU turn (gpu_check m=2048), beside other "
        "workers; worker process group killed, next case runs in a fresh process",
    }
    assert ["first_attempt" in r for r in run.results] == [True, False, False, False]


def test_beside_other_workers_the_limit_is_eight_times_the_cases_longest_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both cases check 1 token in 0.3 s: at 2048 a turn may then take 8 x 0.3 = 2.4 s. Case 0's
    # 1.2 s goes through; case 1's 3 s is cut beside the other worker and goes through when
    # rerun alone, under the whole 20 s GPU limit.
    turns: dict[int, list[float | None]] = {0: [0.3, 1.2], 1: [0.3, 3.0]}
    run = _timed_turns(tmp_path / "w", monkeypatch, turns, jobs=2, floor_s=0.1)
    assert [r.get("state") for r in run.results] == [None, None, None, None]
    assert ["first_attempt" in r for r in run.results] == [False, True, False, False]
    # The limit, 8x the measured 0.3 s turn, to a tenth of a second.
    assert re.fullmatch(
        r"no progress for 2\.[45] s in its GPU turn \(gpu_check m=2048\), beside other workers;"
        r" worker process group killed, next case runs in a fresh process",
        run.results[1]["first_attempt"]["reason"],
    )


def test_alone_a_turn_has_the_whole_gpu_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One worker and no lock of another run's: nothing shares the GPU and nothing is rerun, so a
    # 3 s turn after a 0.01 s one is no hang (beside others it would be cut at the 0.5 s floor).
    run = _timed_turns(tmp_path / "w", monkeypatch, {0: [0.01, 3.0]}, jobs=1, floor_s=0.5)
    assert [r.get("state") for r in run.results] == [None, None, None, None]
    assert ["first_attempt" in r for r in run.results] == [False] * 4
    assert [r["batches"][1]["m"] for r in run.results] == [2048] * 4


def test_an_interrupt_during_the_rerun_keeps_the_hang_and_what_the_rerun_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cases 0 and 1 hang beside others; the rerun of case 0 finishes, then a Ctrl-C comes while
    # case 1 reruns (the sleep of the watchdog's poll raises it).
    _policy(
        monkeypatch,
        cases={NAMES[0]: "hang-beside-others", NAMES[1]: "hang"},
        pulse_s=0.2,
    )
    work = tmp_path / "w"

    def second_rerun_began() -> bool:
        # Case 1's rerun (two go at once, oldest hang first) has claimed its case.
        second = work / "alone" / "queue-2"
        return second.exists() and second.read_text() == "1" and _a_rerun_finished(work)

    results = _interrupted(work, second_rerun_began, timeout_s=3)
    assert [r.get("state") for r in results] == [None, "hang", None, None]
    assert results[0]["first_attempt"]["state"] == "hang"
    assert results[0]["batches"][0]["rel_err"] == [1e-3, 1e-3]
    # Case 1's rerun never finished: its first hang stands, as it was.
    assert results[1]["reason"] == (
        "no progress for 3 s after start; worker process group killed, next case runs in a "
        "fresh process"
    )
    assert "first_attempt" not in results[1]


def test_a_hang_is_rerun_alone_while_the_other_cases_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Case 0 sticks beside the others and comes back alone; case 3 never ends (its limit is far
    # off). The rerun does not wait for the last case: an interrupt (a sweep's deadline) once it
    # finished keeps it, where reruns after the last case left every hang a single attempt
    # (gen7 call 16 met 17 hangs of 0.1.4 and 0.1.5 and decided none).
    _policy(monkeypatch, cases={NAMES[0]: "hang-beside-others", NAMES[3]: "hang"}, pulse_s=0.2)
    work = tmp_path / "w"

    results = _interrupted(work, lambda: _a_rerun_finished(work), timeout_s=30)
    assert [r["case"]["name"] for r in results] == NAMES[:3]
    assert [r.get("state") for r in results] == [None, None, None]
    assert [r["batches"][0]["rel_err"] for r in results] == [[1e-3, 1e-3]] * 3
    assert results[0]["first_attempt"] == {
        "state": "hang",
        "reason": "no progress for 1 s in its GPU turn (gpu_check m=1); worker process group "
        "killed, next case runs in a fresh process",
    }
    assert ["first_attempt" in r for r in results] == [True, False, False]


def test_the_gpu_limit_never_exceeds_the_limit_outside_a_turn() -> None:
    assert Watchdog(timeout_s=3, gpu_timeout_s=30).gpu_timeout_s == 3
    assert Watchdog(timeout_s=600, gpu_timeout_s=30).gpu_timeout_s == 30
    assert Watchdog(timeout_s=600).gpu_timeout_s == 600


def test_a_worker_that_dies_before_claiming_is_charged_to_the_next_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "died-once"
    _policy(monkeypatch, die_before_claiming=str(marker))
    run = Watchdog(timeout_s=30, worker=WORKER, poll_s=0.05, jobs=1).run(_plan(), tmp_path / "w")
    assert run.results[0]["state"] == "crash"
    assert run.results[0]["reason"] == "worker exited with status 9 before the case began"
    assert [r.get("state") for r in run.results[1:]] == [None, None, None]
    assert run.launches == 2
