"""`humming-matrix kernels`: no-GPU exit, records, exit codes (worker replaced by its double)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from humming_matrix.cli import build_parser
from humming_matrix.cli.kernels import _interruption, handle
from humming_matrix.errors import ExitCode, InfrastructureError, UntestableError, UsageError
from humming_matrix.kernels.watchdog import SuiteRun
from humming_matrix.store.results import RecordKind, record_paths

REPO = Path(__file__).resolve().parents[2]
DOUBLES = REPO / "tests" / "doubles"
WORKER = (sys.executable, str(DOUBLES / "kernel_worker_double.py"))
# The four cases `--cases moe-gate-up-mxfp4-*k4 moe-gate-up-mxfp4-*k8` selects, in suite order.
OSS = "moe-gate-up-mxfp4-bf16-5760x2880-e32k4"
OSS_FP8 = "moe-gate-up-mxfp4-fp8-e4m3-5760x2880-e32k4"
QWEN = "moe-gate-up-mxfp4-bf16-1536x2048-e128k8"
QWEN_FP8 = "moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8"


def test_without_a_gpu_kernels_exits_3_with_one_line(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(DOUBLES / "torch_without_cuda"), str(REPO / "src")]),
    )
    done = subprocess.run(
        [sys.executable, "-m", "humming_matrix", "kernels", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3
    assert done.stderr == (
        "humming-matrix: error: kernels needs a CUDA GPU: torch 0.0.0+double sees no CUDA GPU\n"
    )
    assert list(tmp_path.iterdir()) == []


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "kernels",
        "--results",
        str(tmp_path / "store"),
        "--cases",
        "moe-gate-up-mxfp4-*k4",
        "moe-gate-up-mxfp4-*k8",
        "--batch-sizes",
        "1,2048",
        "--draws",
        "2",
        "--repeats",
        "5",
        "--timeout",
        "20",
        "--workdir",
        str(tmp_path / "work"),
        "--jobs",
        "1",
        *extra,
    ]


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: dict[str, object], *extra: str
) -> int:
    monkeypatch.setenv("KERNEL_WORKER_DOUBLE", json.dumps(policy))
    args = build_parser().parse_args(_args(tmp_path, *extra))
    return handle(args, gpu_check=lambda: None, worker=WORKER)


def _record(tmp_path: Path) -> dict[str, Any]:
    """The one kernel record the run wrote."""
    (path,) = record_paths(tmp_path / "store", RecordKind.KERNELS)
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def test_a_clean_run_exits_0_and_writes_one_kernel_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(tmp_path, monkeypatch, {"cases": {QWEN_FP8: "unsupported"}})
    assert code == ExitCode.OK
    (path,) = record_paths(tmp_path / "store", RecordKind.KERNELS)
    record = json.loads(path.read_text())
    assert record["kind"] == "kernels"
    assert record["settings"] == {
        "batch_sizes": [1, 2048],
        "repeats": 5,
        "draws": 2,
        "seed": 0,
        "timeout_s": 20.0,
        "jobs": 1,
        "gpu_timeout_s": 20.0,  # the 30 s default, held to --timeout
        "compile": "used",  # no --full: only the kernels the batch sizes run
    }
    assert [c["name"] for c in record["cases"]] == [OSS, OSS_FP8, QWEN, QWEN_FP8]
    assert [c["state"] for c in record["cases"]] == ["ok", "ok", "ok", "unsupported"]
    assert record["environment"]["worker"]["humming_kernels"] == "0.0.0-double"
    assert record["ceilings"] == {"bf16_tflops": 800.0, "copy_gbps": 4300.0}
    # The double's numbers (rel_err 1e-3, 1 ms a batch), one row for its version.
    assert capsys.readouterr().out.splitlines() == [
        f"| humming | {OSS} | {OSS_FP8} | {QWEN} | {QWEN_FP8} |",
        "| --- | --- | --- | --- | --- |",
        "| 0.0.0-double | ok 1.0e-03 1 ms | ok 1.0e-03 1 ms | ok 1.0e-03 1 ms | unsupported |",
        f"record: {path}",
    ]


@pytest.mark.parametrize(
    ("extra", "compiled"),
    [
        ((), "used"),
        (("--full",), "all"),  # --batch-sizes given: --full still compiles every kernel
        (("--compile", "all"), "all"),
        (("--full", "--compile", "used"), "used"),
    ],
)
def test_full_compiles_every_dense_kernel_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...], compiled: str
) -> None:
    assert _run(tmp_path, monkeypatch, {}, *extra) == ExitCode.OK
    assert _record(tmp_path)["settings"]["compile"] == compiled
    # What the worker was told, from the plan it read.
    plan = json.loads((tmp_path / "work" / "plan-1.json").read_text())
    assert (plan["compile"], plan["batch_sizes"]) == (compiled, [1, 2048])


def test_numerics_out_of_tolerance_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = _run(tmp_path, monkeypatch, {"cases": {QWEN: "fail"}})
    assert code == ExitCode.FAILED
    (path,) = record_paths(tmp_path / "store", RecordKind.KERNELS)
    states = [c["state"] for c in json.loads(path.read_text())["cases"]]
    assert states == ["ok", "ok", "fail", "ok"]


def test_a_hang_is_recorded_and_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The timeout runs from the worker's launch: it must cover a start on a loaded machine.
    code = _run(tmp_path, monkeypatch, {"cases": {OSS_FP8: "hang"}}, "--timeout", "3")
    assert code == ExitCode.FAILED
    record = _record(tmp_path)
    assert [c["state"] for c in record["cases"]] == ["ok", "hang", "ok", "ok"]
    assert record["worker_launches"] == 2


def test_unimportable_humming_is_untestable_125_and_still_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UntestableError) as info:
        _run(tmp_path, monkeypatch, {"import_error": "OSError: undefined symbol: _ZN3c10"})
    assert info.value.exit_code == 125
    (path,) = record_paths(tmp_path / "store", RecordKind.KERNELS)
    assert str(info.value) == (
        f"humming cannot be imported here (OSError: undefined symbol: _ZN3c10); see {path}"
    )
    assert json.loads(path.read_text())["import_error"] == "OSError: undefined symbol: _ZN3c10"


def test_jobs_run_the_cases_on_several_workers_and_the_record_says_how_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = _run(tmp_path, monkeypatch, {"cases": {QWEN: "fail"}}, "--jobs", "3")
    assert code == ExitCode.FAILED
    record = _record(tmp_path)
    assert [c["name"] for c in record["cases"]] == [OSS, OSS_FP8, QWEN, QWEN_FP8]
    assert [c["state"] for c in record["cases"]] == ["ok", "ok", "fail", "ok"]
    assert record["settings"]["jobs"] == 3
    assert record["worker_launches"] == 3


def test_jobs_below_one_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError) as info:
        _run(tmp_path, monkeypatch, {}, "--jobs", "0")
    assert str(info.value) == (
        "--repeats, --draws and --jobs must be >= 1, --timeout and --gpu-timeout > 0"
    )


def test_alone_runs_the_cases_it_names_alone_and_the_record_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QWEN hangs in its check beside other workers and not alone: named, it runs alone only,
    # so its record is that run's, with no hang beside others before it.
    code = _run(
        tmp_path,
        monkeypatch,
        {"cases": {QWEN: "hang-beside-others"}},
        "--jobs",
        "2",
        "--alone",
        "moe-gate-up-mxfp4-bf16-*k8",
    )
    assert code == ExitCode.OK
    record = _record(tmp_path)
    assert [c["name"] for c in record["cases"]] == [OSS, OSS_FP8, QWEN, QWEN_FP8]
    assert [c["state"] for c in record["cases"]] == ["ok"] * 4
    assert [c.get("alone") for c in record["cases"]] == [None, None, True, None]
    assert [c.get("first_attempt") for c in record["cases"]] == [None] * 4
    (alone,) = [json.loads(p.read_text()) for p in (tmp_path / "work" / "alone").glob("plan-*")]
    assert [c["name"] for c in alone["cases"]] == [QWEN]


def test_alone_must_name_a_case_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError) as info:
        _run(tmp_path, monkeypatch, {}, "--alone", OSS, "qkv-*")
    assert str(info.value) == "--alone 'qkv-*' matches none of the cases run"
    assert not (tmp_path / "store").exists()


def test_bad_usage_is_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "humming_matrix", "kernels", "--cases", "nope*"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
    )
    assert done.returncode == 2
    assert done.stderr.startswith("humming-matrix: error: --cases 'nope*' matches no case; ")
    assert done.stderr.count("\n") == 1


def test_sigterm_saves_the_finished_cases_and_leaves_no_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    events = tmp_path / "work" / "events-1.jsonl"

    def third_case_began() -> bool:
        # The worker has begun the hanging case (two cases finished): not a fixed delay that a
        # slow machine could outrun.
        lines = events.read_text().splitlines() if events.exists() else []
        return any(
            json.loads(x).get("event") == "start" and json.loads(x).get("index") == 2
            for x in lines
            if x.endswith("}")
        )

    with _sigterm_once(third_case_began), pytest.raises(InfrastructureError) as info:
        _run(
            tmp_path,
            monkeypatch,
            {"cases": {QWEN: "hang"}, "pids": str(pids)},
            "--timeout",
            "120",
        )
    assert info.value.exit_code == 3
    (path,) = record_paths(tmp_path / "store", RecordKind.KERNELS)
    assert str(info.value) == f"interrupted after 2 of 4 cases; partial record {path}"
    record = json.loads(path.read_text())
    assert record["complete"] is False
    assert [c["state"] for c in record["cases"]] == ["ok", "ok"]
    (worker, child) = map(int, pids.read_text().split())
    assert not _running(worker)
    assert not _running(child)


def test_sigterm_during_the_gpu_check_saves_an_empty_record_and_leaves_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check runs in a child before any case (it imports torch); a deadline's SIGTERM there
    # killed gen7 call 11's CLI silently, with no record and no message.
    pid_file = tmp_path / "check.pid"

    def slow_gpu_check() -> str | None:
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
                "time.sleep(60)",
                str(pid_file),
            ],
            check=False,
        )
        return None

    monkeypatch.setenv("KERNEL_WORKER_DOUBLE", json.dumps({}))
    args = build_parser().parse_args(_args(tmp_path))
    with _sigterm_once(lambda: pid_file.exists()), pytest.raises(InfrastructureError) as info:
        handle(args, gpu_check=slow_gpu_check, worker=WORKER)
    assert info.value.exit_code == 3
    (path,) = record_paths(tmp_path / "store", RecordKind.KERNELS)
    assert str(info.value) == f"interrupted after 0 of 4 cases; partial record {path}"
    record = json.loads(path.read_text())
    assert (record["complete"], record["cases"]) == (False, [])
    assert not _running(int(pid_file.read_text()))


def test_sigterm_while_a_hung_case_reruns_alone_says_so_and_keeps_the_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every case ran once and the one that hung is being rerun alone when the deadline's SIGTERM
    # comes: gen6 call 21 printed "interrupted after 6 of 6 cases" for this.
    rerun_events = tmp_path / "work" / "alone"

    def rerun_began() -> bool:
        return any(
            '"event": "start"' in line
            for path in rerun_events.glob("events-*.jsonl")
            for line in path.read_text().splitlines()
        )

    with _sigterm_once(rerun_began), pytest.raises(InfrastructureError) as info:
        _run(
            tmp_path,
            monkeypatch,
            {"cases": {QWEN: "hang"}, "pids": str(tmp_path / "pids")},
            "--jobs",
            "2",
            "--timeout",
            "3",
        )
    assert info.value.exit_code == 3
    (path,) = record_paths(tmp_path / "store", RecordKind.KERNELS)
    assert str(info.value) == (
        "interrupted after all 4 cases ran, while rerunning alone the 1 that hung (1 not rerun); "
        f"partial record {path}"
    )
    record = json.loads(path.read_text())
    assert record["complete"] is False
    assert [c["state"] for c in record["cases"]] == ["ok", "ok", "hang", "ok"]
    assert "first_attempt" not in record["cases"][2]
    # Every worker (the rerun's too) and its child is gone.
    pids = [int(p) for p in (tmp_path / "pids").read_text().split() if p != "0"]
    assert len(pids) >= 3
    assert not any(_running(pid) for pid in pids)


def test_an_interrupt_message_counts_the_reruns_that_finished_and_those_left() -> None:
    hang = {"state": "hang", "reason": "no progress"}
    again = {**hang, "first_attempt": hang}
    ok = {"state": "ok"}
    assert _interruption(SuiteRun(results=(ok, again, hang)), 3) == (
        "interrupted after all 3 cases ran, while rerunning alone the 2 that hung (1 not rerun)"
    )
    assert _interruption(SuiteRun(results=(ok, ok)), 2) == "interrupted after all 2 cases ran"
    assert _interruption(SuiteRun(results=(ok, hang)), 5) == "interrupted after 2 of 5 cases"


@contextmanager
def _sigterm_once(ready: Callable[[], bool]) -> Iterator[None]:
    """A SIGTERM to this process (the CLI's) from a thread, as soon as `ready()` holds, or after
    60 s so that a run waiting on it never hangs the suite; none once the block has ended."""
    done = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not done.is_set() and not ready() and time.monotonic() < deadline:
            done.wait(0.02)
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init; it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_reader_that_closes_stdout_early_stops_the_command_quietly() -> None:
    # `kernels --list | head`: here a reader that exits at once, long before the CLI has
    # imported what it needs to print its first line.
    done = subprocess.run(
        f"{sys.executable} -m humming_matrix kernels --list | true; "
        'echo "rc=${PIPESTATUS[0]}" >&2',
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stderr == f"rc={int(ExitCode.BROKEN_PIPE)}\n"
    assert int(ExitCode.BROKEN_PIPE) == 141
