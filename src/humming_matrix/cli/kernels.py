"""`humming-matrix kernels`: the GEMM numerics and speed probe of the installed humming version.

Exit 0 when every case that this release can build is within tolerance (unsupported cases do not
fail the run), 1 when a case is out of tolerance, non-finite, errored, hung or crashed, 3 when no
CUDA GPU is usable or the run was interrupted (SIGTERM, Ctrl-C: the cases that finished are saved
in a record marked `"complete": false`), 125 when humming cannot even be imported (a bisect skips
such a version). The record is written in every case but the no-GPU one.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from humming_matrix.environment import capture
from humming_matrix.errors import (
    ExitCode,
    InfrastructureError,
    NoGPUError,
    UntestableError,
    UsageError,
)
from humming_matrix.kernels.cases import (
    DEFAULT_BATCH_SIZES,
    FULL_BATCH_SIZES,
    CompiledKernels,
    parse_batch_sizes,
    select_cases,
)
from humming_matrix.kernels.judge import CaseState
from humming_matrix.kernels.models import SUITE, UNMODELLED, USES, suite_from
from humming_matrix.kernels.record import (
    build_record,
    hang_not_rerun,
    overall_state,
    versions_table,
    write_record,
)
from humming_matrix.kernels.watchdog import (
    DEFAULT_GPU_TIMEOUT_S,
    DEFAULT_WORKER,
    SuiteRun,
    Watchdog,
)
from humming_matrix.store.kernels import Settings
from humming_matrix.store.results import new_run_id, utc_now_iso

_GPU_CHECK = (
    "import sys\n"
    "try:\n"
    "    import torch\n"
    "except Exception as exc:\n"
    "    sys.exit(f'torch cannot be imported: {type(exc).__name__}: {exc}')\n"
    "if not torch.cuda.is_available():\n"
    "    sys.exit(f'torch {torch.__version__} sees no CUDA GPU')\n"
)


MAX_DEFAULT_JOBS = 8
DEFAULT_JOBS = min(MAX_DEFAULT_JOBS, os.cpu_count() or 1)


class _Terminated(Exception):
    """SIGTERM (a CI job's timeout, nox's interrupt): stop, but save what finished."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


def gpu_problem() -> str | None:
    """Why no CUDA GPU is usable here, or None. Runs in a child so the CLI never holds CUDA."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _GPU_CHECK], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return "checking for a CUDA GPU timed out after 120 s"
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"GPU check exited with status {done.returncode}"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "kernels",
        help="check humming's quantised GEMMs on this GPU (numerics and speed), no model needed",
        description=__doc__,
    )
    p.add_argument(
        "--results",
        type=Path,
        default=Path("results/local"),
        metavar="DIR",
        help="the result store (default: results/local)",
    )
    p.add_argument(
        "--cases",
        nargs="+",
        metavar="PATTERN",
        help="shell-style patterns of case names (default: every case)",
    )
    p.add_argument(
        "--alone",
        nargs="+",
        metavar="PATTERN",
        help="of the cases run, those to run alone from the start (shell-style patterns): "
        "each holds the GPU to itself from its checks to its timing, beside the other "
        "workers' builds, and a hang there decides it; for cases that hung beside others "
        "in an earlier run (the watchdog reruns such a hang alone in any case)",
    )
    p.add_argument(
        "--batch-sizes",
        nargs="+",
        metavar="M",
        help="token counts to run (default: "
        f"{','.join(map(str, DEFAULT_BATCH_SIZES))}: decode, mid, prefill)",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="every batch size from 1 to 4096 (powers of two) unless --batch-sizes, and "
        "every dense kernel compiled unless --compile",
    )
    p.add_argument(
        "--compile",
        choices=[c.value for c in CompiledKernels],
        help="which of each dense layer's heuristic kernels (one per token-count range) to "
        "compile: 'all', as vLLM's first call does, catches a kernel that fails to build in a "
        "range no batch size runs; 'used' compiles only those the batch sizes run, the same "
        "kernels (default: 'all' with --full, else 'used')",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="print the cases (derived from vLLM's humming config lists) and the "
        "listed configs no case covers, with why; run nothing",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=20,
        metavar="N",
        help="timed launches per batch size; the median is reported (default: 20)",
    )
    p.add_argument(
        "--draws",
        type=int,
        default=3,
        metavar="N",
        help="independent activation draws per batch size, whose spread is the "
        "numerics noise the comparison uses (default: 3)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds without progress before a case counts as hung (default: 600)",
    )
    p.add_argument(
        "--gpu-timeout",
        type=float,
        default=DEFAULT_GPU_TIMEOUT_S,
        metavar="S",
        help="seconds a case's check or timing may hold the GPU before its kernel counts as "
        "hung; never more than --timeout (default: %(default)g; the longest such turn "
        "recorded on an H100/H200 took 7.3 s). Beside other workers a case that finished a turn "
        "gets 8x its longest, at least 10 s: a hang there is rerun alone under this limit",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help="cases run by N workers at once (humming's JIT compiles are CPU work); their "
        "checks share the GPU, each timing loop has it alone "
        f"(default: min({MAX_DEFAULT_JOBS}, CPU cores) = {DEFAULT_JOBS})",
    )
    p.add_argument("--seed", type=int, default=0, help="input seed (default: 0)")
    p.add_argument(
        "--input-cache",
        type=Path,
        metavar="DIR",
        help="keep generated weights here, shared by runs of other versions",
    )
    p.add_argument(
        "--gpu-lock",
        type=Path,
        metavar="FILE",
        help="share the GPU with other `kernels` runs using the same lock file: "
        "timing loops run alone, checks run beside each other, compiles "
        "and CPU work overlap",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="keep the worker's plans, events and logs here (default: a temp dir)",
    )
    p.set_defaults(handler=handle)


def handle(
    args: argparse.Namespace,
    gpu_check: Callable[[], str | None] = gpu_problem,
    worker: Sequence[str] = DEFAULT_WORKER,
) -> int:
    cases = select_cases(args.cases, SUITE)
    alone = _alone(args.alone, cases)
    if args.list:
        for case in cases:
            print(f"{case.name}\t{case.model}\t{case.layer}")
        for skipped in (*UNMODELLED, *suite_from(USES)[1]):
            print(f"not covered: {skipped.config}: {skipped.reason}")
        return int(ExitCode.OK)
    default = FULL_BATCH_SIZES if args.full else DEFAULT_BATCH_SIZES
    sizes = parse_batch_sizes(args.batch_sizes or [",".join(map(str, default))])
    if args.compile:
        compiled = CompiledKernels(args.compile)
    else:
        compiled = CompiledKernels.ALL if args.full else CompiledKernels.USED
    if (
        args.repeats < 1
        or args.draws < 1
        or args.jobs < 1
        or min(args.timeout, args.gpu_timeout) <= 0
    ):
        raise UsageError(
            "--repeats, --draws and --jobs must be >= 1, --timeout and --gpu-timeout > 0"
        )
    watchdog = Watchdog(
        timeout_s=args.timeout, worker=worker, jobs=args.jobs, gpu_timeout_s=args.gpu_timeout
    )
    settings = Settings(
        sizes,
        args.repeats,
        args.draws,
        args.seed,
        args.timeout,
        args.jobs,
        watchdog.gpu_timeout_s,
        compiled,
    )
    plan = {
        "cases": [c.to_json() for c in cases],
        "batch_sizes": list(sizes),
        "compile": compiled.value,
        "repeats": args.repeats,
        "draws": args.draws,
        "seed": args.seed,
        "cache_dir": str(args.input_cache) if args.input_cache else None,
        "ceilings": True,
        "gpu_lock": str(args.gpu_lock) if args.gpu_lock else None,
        "alone_cases": alone,
    }
    complete = True
    # From before the GPU check (its child imports torch: seconds, more on a loaded machine): a
    # SIGTERM there once killed the CLI with no record and no message (gen7 call 11's 0.1.11).
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        problem = gpu_check()
        if problem is not None:
            raise NoGPUError(f"kernels needs a CUDA GPU: {problem}")
        if args.workdir is not None:
            run = watchdog.run(plan, args.workdir)
        else:
            with tempfile.TemporaryDirectory(prefix="humming-kernels-") as work:
                run = watchdog.run(plan, Path(work))
    except (_Terminated, KeyboardInterrupt):
        # The worker's process group is already gone (the watchdog's context manager); keep
        # what finished.
        run, complete = watchdog.progress.snapshot(), False
    finally:
        signal.signal(signal.SIGTERM, previous)
    record = build_record(run, settings, capture(), new_run_id(), utc_now_iso(), complete)
    path = write_record(args.results, record)
    print(versions_table([record]))
    print(f"record: {path}")
    if not complete:
        raise InfrastructureError(f"{_interruption(run, len(cases))}; partial record {path}")
    if run.import_error is not None:
        raise UntestableError(f"humming cannot be imported here ({run.import_error}); see {path}")
    state = overall_state(record)
    if state in (CaseState.OK, CaseState.UNSUPPORTED):
        return int(ExitCode.OK)
    return int(ExitCode.FAILED)


def _alone(patterns: Sequence[str] | None, cases: Sequence[Any]) -> list[int]:
    """The indices of the cases `--alone` names; each pattern must match a case run."""
    chosen: set[int] = set()
    for pattern in patterns or []:
        matched = {i for i, c in enumerate(cases) if fnmatch.fnmatchcase(c.name, pattern)}
        if not matched:
            raise UsageError(f"--alone {pattern!r} matches none of the cases run")
        chosen |= matched
    return sorted(chosen)


def _interruption(run: SuiteRun, total: int) -> str:
    """Where the interrupt came. Once every case ran, only the watchdog's reruns alone of the
    hung cases are left: "interrupted after 6 of 6 cases" (gen6 call 21) read as a contradiction."""
    if len(run.results) < total:
        return f"interrupted after {len(run.results)} of {total} cases"
    rerun = sum(1 for r in run.results if r.get("first_attempt"))
    left = sum(1 for r in run.results if hang_not_rerun(r))
    if rerun + left == 0:
        return f"interrupted after all {total} cases ran"
    return (
        f"interrupted after all {total} cases ran, while rerunning alone the {rerun + left} "
        f"that hung ({left} not rerun)"
    )
